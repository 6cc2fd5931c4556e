"""Containment of caller-given paths: every path stays inside its configured directory, symlinks included."""

from __future__ import annotations

from pathlib import Path

from .schema import ErrorCode, ProcedureError


def resolve_inside(workspace: Path, base_rel: str, raw, *, what: str) -> tuple[str, Path]:
    """Resolve a workspace-relative ``raw`` path that must lie strictly inside ``workspace/base_rel``.

    Returns ``(workspace-relative POSIX path, absolute resolved path)``. Absolute paths, ``..``, backslashes,
    control characters and symlinks leading out of the base directory are rejected with PATH_OUTSIDE.
    """
    if not isinstance(raw, str) or not raw.strip():
        raise ProcedureError(ErrorCode.INVALID_ARGUMENT, f"`path` must be a non-empty {what} path such as {base_rel}/...")
    text = raw.strip()
    if text.startswith(("/", "~")) or "\\" in text or any(ord(ch) < 32 for ch in text) or ".." in text.split("/"):
        raise ProcedureError(
            ErrorCode.PATH_OUTSIDE,
            f"`path` must be a workspace-relative path inside {base_rel}/ (got {raw!r})",
        )
    root = workspace.resolve()
    base = (root / base_rel).resolve()
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
