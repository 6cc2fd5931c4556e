"""Where the benchmarks find the shared data and tools: ``--shared`` (``find_shared``), else ``$PROCEDURE_SHARED_DIR``,
else ``shared/`` beside the repository or beside one of its ancestors (git worktrees)."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # benchmarks/benchlib/shared.py -> the repository


def _candidates() -> list[Path]:
    if os.environ.get("PROCEDURE_SHARED_DIR"):
        return [Path(os.environ["PROCEDURE_SHARED_DIR"])]
    return [parent / "shared" for parent in REPO.parents]


def shared_dir() -> Path:
    """The nearest ``shared`` directory with a ``data`` subdirectory (or the documented place, for the error)."""
    for candidate in _candidates():
        if (candidate / "data").is_dir():
            return candidate
    return REPO.parent / "shared"


def find_shared(explicit: Path | None, needs: str = "data/trajectories") -> Path:
    """The shared directory holding ``needs``; exits with the fix when there is none."""
    for candidate in [explicit] if explicit else _candidates():
        if candidate and (candidate / needs).exists():
            return candidate
    raise SystemExit("shared data not found: pass --shared /path/to/shared or set PROCEDURE_SHARED_DIR")
