# Investigation script of the issue-9 profile (FINDINGS.md §1; benchmarks/README "Vector search (branch vsearch)").
"""VectorMatrix at 100k x 1,024 under one source tree: build via set_many in batches of 200 (as reindex does), a restore
from its export (read-only arrays, cold then warm), and search p50/p99 (k=50) over the corpus queries.

    python benchmarks/profile/vec.py                      # once: /tmp/profile-work/X.npy, Q.npy (200 queries)
    git archive main src | tar -x -C /tmp/main-tree       # the tree to compare with
    python benchmarks/profile/vsearch.py /tmp/main-tree/src build   # alternate with ... src build
    python benchmarks/profile/vsearch.py src search                   # restores the export written by "build"

Prints one JSON line (with the load average). Alternate the two trees' runs: the machine is shared.
"""
import json
import os
import statistics
import sys
import time
import zlib

src, what = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.abspath(src))  # before the installed package
import numpy as np  # noqa: E402

from reme_procedure_memory.search.vector import matrix as V  # noqa: E402

work = os.environ.get("PROFILE_WORK", "/tmp/profile-work")  # where vec.py saved the vectors
X, Q = np.load(f"{work}/X.npy"), np.load(f"{work}/Q.npy")
export = f"{work}/export-{zlib.crc32(os.path.abspath(src).encode()):08x}.npz"
out = {"src": V.__file__, "load_start": os.getloadavg()[0]}
if what == "build":
    ids = [f"id{i}" for i in range(len(X))]
    started = time.perf_counter()
    matrix = V.VectorMatrix(X.shape[1])
    for start in range(0, len(X), 200):
        matrix.set_many(zip(ids[start:start + 200], X[start:start + 200]))
    out["build_s"] = round(time.perf_counter() - started, 2)
    np.savez(export, **matrix.export())
else:
    arrays = dict(np.load(export))
    for array in arrays.values():
        array.flags.writeable = False  # as the page-cache views of a view load
    times = []
    for _ in range(2):
        started = time.perf_counter()
        matrix = V.VectorMatrix.restore(X.shape[1], arrays)
        times.append(round(time.perf_counter() - started, 3))
    out["restore_cold_warm_s"] = times
    for q in Q[:10]:
        matrix.search(q, 50)
    ms = []
    for _ in range(3):
        for q in Q:
            started = time.perf_counter()
            matrix.search(q, 50)
            ms.append((time.perf_counter() - started) * 1e3)
    ms.sort()
    out.update(queries=len(ms), search_p50_ms=round(statistics.median(ms), 2),
               search_p99_ms=round(ms[int(0.99 * len(ms))], 2))
out["load_end"] = os.getloadavg()[0]
print(json.dumps(out))
