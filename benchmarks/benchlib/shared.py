"""Where the benchmarks find the shared data and tools: ``--shared`` (``find_shared``), else ``$PROCEDURE_SHARED_DIR``,
else ``shared/`` beside the repository or beside one of its ancestors (git worktrees). Smoke runs (``--smoke``) fall
back to what a fresh clone has: ``tests/fixtures`` (``smoke_data``, ``smoke_library``) and the test doubles and
builders of ``tests/helpers`` (``load_test_helpers``)."""

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # benchmarks/benchlib/shared.py -> the repository
FIXTURES = REPO / "tests" / "fixtures"  # real data shipped with the repository (tests/fixtures/README.md)
LIBRARY = "data/experience-library/bfcl_qwen3_8b.jsonl"  # ReMe's released library, inside the shared directory


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


def smoke_data(needs: str, fixture: Path) -> Path:
    """A smoke run's data: ``needs`` inside the shared directory when there is one, else ``fixture`` (a fresh clone)."""
    for candidate in _candidates():
        if (candidate / needs).exists():
            return candidate / needs
    return fixture


def smoke_library() -> Path:
    """The released experience library (96 lines) or, without ``../shared``, its first 40 in ``tests/fixtures``."""
    return smoke_data(LIBRARY, FIXTURES / "experiences.jsonl")


def load_test_helpers():
    """``tests/helpers`` on ``sys.path`` and imported: the word-level tokenizer, the fake embedding model and local
    endpoints of the tests, the Qwen3 tokenizer's locator (``qwen3_tokenizer_dir``)."""
    tests = str(REPO / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import helpers

    return helpers
