"""Cost of the file reads of one search answer: the shared validation of experience files (``ExperienceFiles``).

One ``ExperienceFiles`` per answer, as ``Reads.search`` uses it; 5 result files citing one trajectory copy.
Compare revisions by running it under each one's source tree, alternating, on the same machine state::

    PYTHONPATH=/path/to/revision-a/src python benchmarks/read_cost.py a
    PYTHONPATH=/path/to/revision-b/src python benchmarks/read_cost.py b

Prints the median over 7 rounds of 1,000 answers. Nothing asserts on time; the run stops unless every file reads back
as a valid experience.

    python benchmarks/read_cost.py --smoke      # CI: 1 round of 20 answers (well under a second of reading)

``--smoke`` (CI, ``tests/benchmarks/test_smokes.py``) runs the same reads, 1 round of 20 answers: it shows that the
installed revision's ``ExperienceFiles`` still reads and validates the files; its figure is noise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from reme_procedure_memory.storage.experiences import ExperienceFiles


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("label", nargs="?", default="installed", help="the name printed before the figure")
    p.add_argument("--rounds", type=int, default=7, help="rounds; the median is printed (7)")
    p.add_argument("--answers", type=int, default=1000, help="answers per round (1000)")
    p.add_argument("--smoke", action="store_true", help="CI smoke run: 1 round of 20 answers")
    opts = p.parse_args(argv)
    if opts.smoke:
        opts.rounds, opts.answers = 1, 20
    label = opts.label
    ws = Path(tempfile.mkdtemp(prefix="procedure-read-cost-"))
    try:
        (ws / "procedures").mkdir()
        (ws / "session/trajectories").mkdir(parents=True)
        (ws / "session/trajectories/run.jsonl").write_text('{"a": 1}\n')
        record = {
            "description": "d" * 100,
            "when-to-use": "w " * 200,
            "content": "c " * 1000,
            "sources": ["session/trajectories/run.jsonl"],
        }
        for i in range(5):
            (ws / f"procedures/rebuild-search-{i}.json").write_text(json.dumps(record, indent=2))
        args = [ws, "procedures", "session/trajectories"]
        try:
            ExperienceFiles(*args)
        except TypeError:  # revisions before the shared validation took no trajectory directory
            args = args[:2]
        files = ExperienceFiles(*args)
        for i in range(5):  # outside the timed rounds: every file reads back as a valid experience
            read = files.read(f"procedures/rebuild-search-{i}.json")
            if read is None or getattr(read, "error", None):
                raise SystemExit(f"procedures/rebuild-search-{i}.json did not read back as an experience: {read!r}")
        samples = []
        for _ in range(opts.rounds):
            started = time.perf_counter()
            for _ in range(opts.answers):
                files = ExperienceFiles(*args)
                for i in range(5):
                    files.read(f"procedures/rebuild-search-{i}.json")
            samples.append((time.perf_counter() - started) / opts.answers * 1e6)
        print(
            f"{label}: {statistics.median(samples):.0f} us per 5-result answer "
            f"(median of {opts.rounds} x {opts.answers})"
        )
    finally:
        shutil.rmtree(ws)


if __name__ == "__main__":
    main()
