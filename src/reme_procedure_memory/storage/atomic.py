"""The one atomic writer of every durable file, and the durable directory operations.

``atomic_write`` publishes bytes (or a function that writes them) through a temporary file in the same directory
(``format.temp_name``): fsync, ``os.replace``, fsync of the directory. A reader sees the old bytes or the new bytes,
never a mix; a failed write raises ``StorageError`` naming the destination and leaves no temporary file; a kill may
leave one, which ``remove_temp_files`` (every start) removes. Callers outside this module call
``atomic.atomic_write`` through the module, so one patch point sees every durable write (the fault matrix).
"""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path
from typing import Any, BinaryIO, Callable

from ..errors import StorageError
from .format import TEMP_FILE, temp_name


def fsync_dir(directory: Path) -> None:
    """Make a rename or create inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(directory: Path) -> None:
    """Create ``directory`` and its missing parents durably: the parent of each new directory is fsynced."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for new in reversed(missing):
        new.mkdir(exist_ok=True)
        fsync_dir(new.parent)


def atomic_write(path: Path, data: bytes | Callable[[BinaryIO], None], *, sync_dir: bool = True) -> None:
    """Replace ``path`` with ``data`` (bytes, or a function that writes them to a binary file) atomically and
    durably (creates parent directories durably). The one writer of every durable file of the plugin.

    The new file gets the mode of the file it replaces, else the process umask's default (like ReMe's own files).
    ``sync_dir=False`` skips the directory fsync after the rename: only for replacing a record whose old content is
    an acceptable state after a power loss (the data itself is always fsynced first, so either version is complete),
    or for files a later write in the same directory makes durable together (a view snapshot's parts).
    Raises StorageError naming ``path``; the temporary file is removed on any failure.
    """
    tmp: Path | None = None
    try:
        ensure_dir(path.parent)
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = None
        tmp = temp_name(path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666 minus the umask
        with os.fdopen(fd, "wb") as handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            if callable(data):
                data(handle)
            else:
                handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        tmp = None
        if sync_dir:
            fsync_dir(path.parent)
    except OSError as exc:
        raise StorageError(exc.errno, exc.strerror or str(exc), str(path)) from exc
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def write_json(path: Path, obj: Any, *, sync_dir: bool = True) -> None:
    """Atomically write a JSON record (``sync_dir``: see ``atomic_write``)."""
    atomic_write(
        path, (json.dumps(obj, ensure_ascii=False, indent=1, sort_keys=True) + "\n").encode("utf-8"), sync_dir=sync_dir
    )


def remove_temp_files(
    directories: list[Path],
    pattern: re.Pattern = TEMP_FILE,
    keep: frozenset[Path] = frozenset(),
    older_than: float | None = None,
) -> list[Path]:
    """Remove leftover temporary files matching ``pattern`` directly in ``directories`` (a kill during an atomic
    write leaves them), except the paths in ``keep`` and, with ``older_than`` (a time), files modified since then;
    the caller holds the workspace lock, so no write of ours is in progress. Returns the removed paths."""
    removed = []
    for directory in directories:
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if (
                pattern.match(entry.name)
                and entry.is_file(follow_symlinks=False)
                and Path(entry.path) not in keep
                and (older_than is None or entry.stat(follow_symlinks=False).st_mtime < older_than)
            ):
                Path(entry.path).unlink(missing_ok=True)
                removed.append(Path(entry.path))
    return removed


def remove_file(path: Path) -> None:
    """Remove the file ``path`` durably (its directory is fsynced); nothing when it is already gone. Raises
    StorageError naming ``path``."""
    try:
        os.unlink(path)
        fsync_dir(path.parent)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StorageError(exc.errno, exc.strerror or str(exc), str(path)) from exc


def remove_empty_dir(path: Path) -> bool:
    """Remove the directory ``path`` durably when it is empty; False (and nothing removed) when it is not, or is
    gone. Raises StorageError naming ``path`` for any other failure."""
    try:
        os.rmdir(path)
        fsync_dir(path.parent)
        return True
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise StorageError(exc.errno, exc.strerror or str(exc), str(path)) from exc
