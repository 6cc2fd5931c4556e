"""Where an export may write, and what is there: the checked destination, its lock and the files found in it.

Contract: ``resolve_destination`` answers the real path of the export directory (every symbolic link of its
existing part followed) or refuses — ``destination_not_allowed`` when that is the workspace or inside it (a link
into the workspace included; the export never writes there) or when it, or the first existing directory above it,
is not a directory. ``DestinationLock`` holds an exclusive ``flock`` on the directory itself while one export writes
it (a second export, of any process, is refused: no lock file is left behind). ``probe`` says what is at each path
without following any link, and never reads below a folder that is not a real directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
from pathlib import Path

from ..errors import ErrorCode, ProcedureError
from .plan import Found

EXAMPLE = "dest=/home/me/.claude/skills"


def resolve_destination(raw: str, workspace: Path) -> Path:
    """The real path of the export directory ``raw`` (absolute, checked by the job's arguments); see the module
    docstring for what is refused. It need not exist yet."""
    try:
        real = Path(raw).resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # a loop of links, a name the file system refuses
        raise ProcedureError(
            ErrorCode.INVALID_ARGUMENT,
            f"`dest` {raw!r} is not a usable path ({exc}); give an "
            f"absolute directory path, e.g. {EXAMPLE}. Nothing was written.",
        ) from None
    root = workspace.resolve()
    if real == root or real.is_relative_to(root):
        via = "" if real == Path(os.path.abspath(raw)) else f" (through symbolic links it is {real})"
        raise ProcedureError(
            ErrorCode.DESTINATION_NOT_ALLOWED,
            (
                f"`dest` {raw}{via} is inside the workspace {root}: the export never writes into the workspace. Give a "
                f"directory outside it, e.g. {EXAMPLE}. Nothing was written."
            ),
        )
    existing = real  # the first part of it that exists ("/" does)
    while True:
        try:
            mode = os.stat(existing).st_mode
            break
        except (FileNotFoundError, NotADirectoryError):  # missing, or below a file (refused just below)
            existing = existing.parent
        except OSError as exc:  # e.g. a name too long
            raise ProcedureError(
                ErrorCode.INVALID_ARGUMENT, f"`dest` {raw!r} is not usable: {exc.strerror}. Nothing was written."
            ) from None
    if not stat.S_ISDIR(mode):
        what = "`dest`" if existing == real else f"{existing}, above `dest`,"
        raise ProcedureError(
            ErrorCode.DESTINATION_NOT_ALLOWED,
            (
                f"{what} {existing} is a file, not a directory: the export writes a folder per skill into a directory. "
                f"Give a directory (it is created when missing), e.g. {EXAMPLE}. Nothing was written."
            ),
        )
    return real


class DestinationLock:
    """An exclusive, non-blocking ``flock`` on the export directory (``with``); a busy one answers export_conflict."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd: int | None = None

    def __enter__(self) -> "DestinationLock":
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ProcedureError(
                ErrorCode.EXPORT_CONFLICT,
                (
                    f"Another export is writing {self.directory} right now. Run this one again once it has finished; "
                    "nothing was written."
                ),
            ) from None
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def probe(directory: Path, paths: list[str]) -> dict[str, Found]:
    """What is at each dest-relative path (``dir/name`` or ``name``), without following links; missing paths are left
    out. A file below a folder that is not a real directory is reported as that folder is (never looked into)."""
    found: dict[str, Found] = {}
    for path in sorted(set(paths), key=lambda p: p.count("/")):  # folders before the files in them
        folder = path.rpartition("/")[0]
        if folder and folder in found and found[folder].kind != "dir":
            found[path] = found[folder]
            continue
        try:
            mode = os.lstat(directory / path).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        if stat.S_ISLNK(mode):
            found[path] = Found("link")
        elif stat.S_ISDIR(mode):
            found[path] = Found("dir")
        elif stat.S_ISREG(mode):
            digest = file_sha256(directory / path)
            found[path] = Found("file", digest) if digest is not None else Found("unreadable")
        else:
            found[path] = Found("other")
    return found


def file_sha256(path: Path) -> str | None:
    """The SHA-256 of a regular file's bytes, read without following a link; None when this process cannot read it
    (then the export cannot tell whose it is, and treats it as someone else's)."""
    digest = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()
