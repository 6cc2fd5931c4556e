"""Containment: every directory the plugin writes or reads, and every path a caller gives, stays inside the workspace.

One check, ``check_directory``, decides whether a configured directory is usable: it and each of its parents below
the workspace must be a real directory (or not exist yet) and lie inside the workspace. A symbolic link among them is
refused, also one that resolves inside the workspace: workspace-relative paths are the identities of experiences and
sources, and a link would give one file two names. The component runs the check on all its directories before it
starts anything (nothing is copied or indexed before), ``resolve_inside`` runs it on its base directory for every
caller-given path, and the publishers run it on their destination before every write.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from ..errors import ContainmentError, ErrorCode, ProcedureError


def check_directory(workspace: Path, rel_dir: str, *, setting: str, root: str | None = None) -> Path:
    """Return ``workspace/rel_dir`` resolved, after checking it and each of its parents below the workspace.

    ``setting`` names where the directory comes from (e.g. ``components.procedure_memory.default.procedure_dir``).
    Raises ContainmentError for an absolute or ``..`` path, a symbolic link (naming the link and its target), or a
    path element that exists but is not a directory. Missing elements are fine: the caller creates them.
    ``root`` is the workspace's real path when the caller already has it.
    """
    parts = rel_dir.split("/")
    if not rel_dir or rel_dir.startswith("/") or ".." in parts or "\\" in rel_dir:
        raise ContainmentError(
            f"{setting} = {rel_dir!r} must be a directory relative to the workspace {workspace}, without '..'.",
        )
    root = root or os.path.realpath(workspace)  # the workspace itself may be a link; nothing below it may
    current = root
    for part in parts:  # plain strings and one lstat per element: reads call this on every request
        if part in ("", "."):
            continue
        current = f"{current}/{part}"
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            break  # not created yet, nor anything below it
        if stat.S_ISLNK(mode):
            shown = os.path.relpath(current, root)
            target = os.readlink(current)
            resolved = Path(current).resolve()
            where = (
                f"to {resolved.relative_to(root).as_posix()} inside the workspace"
                if resolved.is_relative_to(root)
                else f"outside the workspace {root}"
            )
            raise ContainmentError(
                f"The procedure-memory directory {rel_dir} ({setting}) goes through the symbolic link {shown} -> "
                f"{target}, which leads {where}. Configured directories must be real directories inside the "
                f"workspace: replace the link {workspace / shown} with a directory (move the files into it), or "
                "configure another directory. Nothing was copied or indexed.",
            )
        if not stat.S_ISDIR(mode):
            raise ContainmentError(
                f"The procedure-memory directory {rel_dir} ({setting}): {os.path.relpath(current, root)} exists but "
                "is not a directory. Move that file away or configure another directory.",
            )
    return Path(f"{root}/{rel_dir}")


def check_disjoint(directories: dict[str, str]) -> None:
    """Refuse configured directories that are the same or nested (experiences, copies and metadata never mix)."""
    items = [(setting, PurePosixPath(rel)) for setting, rel in directories.items()]
    for i, (first, a) in enumerate(items):
        for second, b in items[i + 1 :]:
            if a == b or a.is_relative_to(b) or b.is_relative_to(a):
                raise ContainmentError(
                    f"The procedure-memory directories {a.as_posix()} ({first}) and {b.as_posix()} ({second}) "
                    "overlap; configure separate directories.",
                )


def resolve_inside(workspace: Path, base_rel: str, raw, *, what: str) -> tuple[str, Path]:
    """Resolve a workspace-relative ``raw`` path that must lie strictly inside ``workspace/base_rel``.

    Returns ``(workspace-relative POSIX path, absolute resolved path)``. Absolute paths, ``..``, backslashes,
    control characters and symlinks leading out of the base directory are rejected with PATH_OUTSIDE; so is any
    path while the base directory itself is not a real directory inside the workspace (``check_directory``).
    """
    if not isinstance(raw, str) or not raw.strip():
        raise ProcedureError(
            ErrorCode.INVALID_ARGUMENT, f"`path` must be a non-empty {what} path such as {base_rel}/..."
        )
    text = raw.strip()
    if text.startswith(("/", "~")) or "\\" in text or any(ord(ch) < 32 for ch in text) or ".." in text.split("/"):
        raise ProcedureError(
            ErrorCode.PATH_OUTSIDE,
            f"`path` must be a workspace-relative path inside {base_rel}/ (got {raw!r})",
        )
    base = check_directory(workspace, base_rel, setting=f"the {what} directory")
    root = workspace.resolve()
    try:
        target = (root / text).resolve()
        target.is_file()  # surfaces a name the file system refuses (e.g. too long) as bad input here
    except OSError as exc:
        raise ProcedureError(ErrorCode.INVALID_ARGUMENT, f"`path` {text!r} is not usable: {exc.strerror}") from None
    if target == base or not target.is_relative_to(base):
        raise ProcedureError(
            ErrorCode.PATH_OUTSIDE,
            f"`path` must stay inside {base_rel}/ (got {raw!r})",
        )
    return target.relative_to(root).as_posix(), target


def source_problem(workspace: Path, trajectory_dir: str, source: str, *, root: str | None = None) -> str | None:
    """Why ``source`` is not an existing trajectory copy ``<trajectory_dir>/<file>``, or None when it is.

    A copy is a regular file directly in the trajectory directory, named exactly as listed (no ``./``, no
    subdirectory, no link); the directory itself must pass ``check_directory``.
    """
    fix = f"`sources` may list only copied trajectories, e.g. {trajectory_dir}/run.jsonl"
    prefix = f"{trajectory_dir}/"
    name = source[len(prefix) :] if source.startswith(prefix) else ""
    if not name or "/" in name or "\\" in name or "\x00" in name or name in (".", ".."):
        return f"source {source!r} is not a trajectory copy in {trajectory_dir}/; {fix}"
    directory = check_directory(workspace, trajectory_dir, setting="the trajectory directory", root=root)
    try:
        mode = os.lstat(f"{directory}/{name}").st_mode
    except (FileNotFoundError, NotADirectoryError):
        return f"source {source} does not exist; restore the copy or remove it from `sources`"
    except (OSError, ValueError):  # a name the file system refuses
        return f"source {source!r} is not a trajectory copy in {trajectory_dir}/; {fix}"
    if not stat.S_ISREG(mode):
        what = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
        return f"source {source} is {what}, not a trajectory copy; {fix}"
    return None
