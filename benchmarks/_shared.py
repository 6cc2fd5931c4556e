"""Where the benchmarks find ``../shared`` (data, tools): ``--shared``, else next to the repository or its parent."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def find_shared(explicit: Path | None, needs: str = "data/trajectories") -> Path:
    """The shared directory holding ``needs``; exits with the fix when there is none."""
    for candidate in ([explicit] if explicit else [REPO.parent / "shared", REPO.parent.parent / "shared"]):
        if candidate and (candidate / needs).exists():
            return candidate
    raise SystemExit("shared data not found: pass --shared /path/to/shared")
