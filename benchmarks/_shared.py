"""Where the shared data lives: ``$PROCEDURE_SHARED_DIR``, else ``shared/`` beside the repository (``../shared``) or
beside one of its ancestors (git worktrees)."""

import os
from pathlib import Path


def shared_dir() -> Path:
    """The nearest ``shared`` directory with a ``data`` subdirectory among the repository's ancestors."""
    if os.environ.get("PROCEDURE_SHARED_DIR"):
        return Path(os.environ["PROCEDURE_SHARED_DIR"])
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "shared" / "data").is_dir():
            return parent / "shared"
    return here.parent.parent.parent / "shared"  # the documented place, for the error message
