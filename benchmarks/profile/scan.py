"""Time ``ExperienceDirectory.scan()`` (start-up reconciliation's read of every experience file) of two source trees
side by side. Usage, from the repository root::

    python benchmarks/profile/scan.py --trees /work/main/src src [--n 20000] [--rounds 3] [--cold]

Builds once ``/tmp/scan-ws-N``: N experience files of the benchmark corpus (``search.Corpus``, written as the plugin
writes them, ``search.experience_bytes``) citing one trajectory copy. Each round times one full scan per tree, each in
a fresh process that imports the plugin from that tree (``PYTHONPATH``), trees alternating. ``--cold`` evicts the
experience files' pages from the page cache before every scan (``posix_fadvise(DONTNEED)`` per file: unlike
``/proc/sys/vm/drop_caches`` it leaves other processes' caches alone; inodes and directory entries stay cached, as
with ``drop_caches`` = 1). Prints seconds per scan and the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROCEDURES, TRAJECTORIES = "procedures", "session/trajectories"

ONE_SCAN = """
import sys, time
from pathlib import Path
from reme_procedure_memory.experiences import ExperienceDirectory
start = time.perf_counter()
count = sum(1 for _ in ExperienceDirectory(Path(sys.argv[1]), sys.argv[2], sys.argv[3]).scan())
print(time.perf_counter() - start, count)
"""


def build(ws: Path, n: int) -> None:
    """The N-file experience directory (kept between runs: it is deterministic)."""
    done = ws / "complete"
    if done.exists():
        return
    sys.path.insert(0, str(HERE.parent))
    from search import Corpus, experience_bytes

    corpus = Corpus()
    (ws / TRAJECTORIES).mkdir(parents=True, exist_ok=True)
    (ws / TRAJECTORIES / "run.jsonl").write_text('{"role": "user", "content": "benchmark trajectory"}\n')
    (ws / PROCEDURES).mkdir(exist_ok=True)
    for i in range(n):
        exp = corpus.experience(i)
        (ws / PROCEDURES / exp["filename"]).write_bytes(experience_bytes(exp, f"{TRAJECTORIES}/run.jsonl"))
    done.touch()


def evict(directory: Path) -> None:
    """Drop the (clean) cached pages of every file in ``directory``."""
    for entry in os.scandir(directory):
        fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def scan_seconds(tree: str, ws: Path, n: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    out = subprocess.run([sys.executable, "-c", ONE_SCAN, str(ws), PROCEDURES, TRAJECTORIES], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    assert int(out[1]) == n, out
    return float(out[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trees", nargs="+", required=True, help="src directories to compare (first is the base)")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="drop the page cache before each scan")
    args = parser.parse_args()
    ws = Path(f"/tmp/scan-ws-{args.n}")
    build(ws, args.n)
    times: dict[str, list[float]] = {tree: [] for tree in args.trees}
    for tree in args.trees:
        scan_seconds(tree, ws, args.n)  # warm the page cache and the imports' byte code
    for round_ in range(args.rounds):
        for tree in args.trees:
            if args.cold:
                evict(ws / PROCEDURES)
            times[tree].append(scan_seconds(tree, ws, args.n))
            print(f"round {round_ + 1} {tree}: {times[tree][-1]:.3f} s", flush=True)
    base = statistics.median(times[args.trees[0]])
    for tree, seconds in times.items():
        median = statistics.median(seconds)
        print(f"{tree}: median {median:.3f} s of {args.n} files ({'cold' if args.cold else 'warm'} cache), "
              f"{median / base:.2f}x the first; runs {', '.join(f'{s:.3f}' for s in seconds)}")
    print(f"load: {os.getloadavg()}")


if __name__ == "__main__":
    main()
