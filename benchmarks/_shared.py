"""Where the shared data lives: ``shared/`` beside the repository (``../shared``) or beside its parent (worktrees)."""

from pathlib import Path


def shared_dir() -> Path:
    """The nearest ``shared`` directory with a ``data`` subdirectory among the repository's ancestors."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "shared" / "data").is_dir():
            return parent / "shared"
    return here.parent.parent.parent / "shared"  # the documented place, for the error message
