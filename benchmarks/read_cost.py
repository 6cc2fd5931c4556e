"""Cost of the file reads of one search answer: the shared validation of experience files (``ExperienceFiles``).

One ``ExperienceFiles`` per answer, as ``ProcedureMemory.search`` uses it; 5 result files citing one trajectory copy.
Compare revisions by running it under each one's source tree, alternating, on the same machine state::

    PYTHONPATH=/path/to/revision-a/src python benchmarks/read_cost.py a
    PYTHONPATH=/path/to/revision-b/src python benchmarks/read_cost.py b

Prints the median over 7 rounds of 1,000 answers. Nothing asserts on time.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from reme_procedure_memory.storage.experiences import ExperienceFiles


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "installed"
    ws = Path(tempfile.mkdtemp(prefix="procedure-read-cost-"))
    try:
        (ws / "procedures").mkdir()
        (ws / "session/trajectories").mkdir(parents=True)
        (ws / "session/trajectories/run.jsonl").write_text('{"a": 1}\n')
        record = {"description": "d" * 100, "when-to-use": "w " * 200, "content": "c " * 1000,
                  "sources": ["session/trajectories/run.jsonl"]}
        for i in range(5):
            (ws / f"procedures/rebuild-search-{i}.json").write_text(json.dumps(record, indent=2))
        args = [ws, "procedures", "session/trajectories"]
        try:
            ExperienceFiles(*args)
        except TypeError:  # revisions before the shared validation took no trajectory directory
            args = args[:2]
        samples = []
        for _ in range(7):
            started = time.perf_counter()
            for _ in range(1000):
                files = ExperienceFiles(*args)
                for i in range(5):
                    files.read(f"procedures/rebuild-search-{i}.json")
            samples.append((time.perf_counter() - started) / 1000 * 1e6)
        print(f"{label}: {statistics.median(samples):.0f} us per 5-result answer (median of 7 x 1000)")
    finally:
        shutil.rmtree(ws)


if __name__ == "__main__":
    main()
