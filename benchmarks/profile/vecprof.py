import sys, time, os, statistics
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)), "..", "..", "src"))
import numpy as np
from reme_procedure_memory.search.vector import matrix as V
X = np.load("/tmp/profile-work/X.npy"); Q = np.load("/tmp/profile-work/Q.npy")
N, D = X.shape
threads = int(os.environ.get("SCREEN", V.SCREEN_THREADS)); V.SCREEN_THREADS = threads
t = time.perf_counter()
m = V.VectorMatrix(D)
for s in range(0, N, 8192):
    m.set_many([(f"id{i}", X[i]) for i in range(s, min(N, s + 8192))])
print(f"matrix built {time.perf_counter()-t:.1f}s; blocks={len(m._blocks)} outliers={len(m._outliers)} "
      f"code_bound={m._code_bound:.1f} error_bound={m._error_bound:.2f}", flush=True)
stats = {}
def add(k, v): stats.setdefault(k, []).append(v)
orig_sb, orig_exact, orig_screen = V.VectorMatrix._screen_blocks, V.VectorMatrix._exact, V.VectorMatrix._screen
def screen_blocks(self, numbers, *a):
    t0 = time.perf_counter(); add("sb_start_abs", t0)
    r = orig_sb(self, numbers, *a); add("screen_blocks_ms", (time.perf_counter()-t0)*1e3); add("sb_end_abs", time.perf_counter()); return r
def exact(self, rows, q):
    t0 = time.perf_counter(); r = orig_exact(self, rows, q); add("exact_ms", (time.perf_counter()-t0)*1e3); add("exact_rows", rows.size); return r
def screen(self, number, s, f, depth, approx):
    t0 = time.perf_counter(); r = orig_screen(self, number, s, f, depth, approx)
    add("screen_one_ms", (time.perf_counter()-t0)*1e3); add("depth", depth); return r
V.VectorMatrix._screen_blocks, V.VectorMatrix._exact, V.VectorMatrix._screen = screen_blocks, exact, screen
totals = []; per = []
for rep in range(3):
    for i, q in enumerate(Q):
        stats.clear()
        t0 = time.perf_counter(); res = m.search(q, 50); el = (time.perf_counter()-t0)*1e3
        if rep == 0 and i < 3: continue
        totals.append(el)
        per.append({k: (sum(v) if k not in ("sb_start_abs","sb_end_abs","depth") else v) for k, v in stats.items()} | {"t0": t0, "total": el})
def p50(xs): return statistics.median(xs)
print(f"SCREEN_THREADS={threads}  search p50 {p50(totals):.2f} ms  p90 {np.percentile(totals,90):.2f}")
for k in ("screen_blocks_ms", "screen_one_ms", "exact_ms", "exact_rows"):
    print(f"  {k:18s} p50 {p50([p[k] for p in per]):9.2f}")
print("  depth per block first screen p50", p50([p["depth"][0] for p in per]), " screens per query p50", p50([len(p["depth"]) for p in per]))
print("  final self._depth", m._depth)
# split of total: screening wall (first pass) = max(end) - t0 ; python rest
walls = [ (max(p["sb_end_abs"]) - p["t0"])*1e3 for p in per]
print(f"  first-pass screening wall p50 {p50(walls):.2f} ms; exact p50 {p50([p['exact_ms'] for p in per]):.2f}; rest {p50([p['total']-w-p['exact_ms'] for p,w in zip(per,walls)]):.2f}")
# handoff: worker start delay
if threads > 1:
    delays = [ (sorted(p["sb_start_abs"])[-1]-sorted(p["sb_start_abs"])[0])*1e3 for p in per]
    print(f"  worker start skew p50 {p50(delays):.3f} ms")
# exactness check vs brute force float64
ok = 0
U = X.astype(np.float64); norms = np.linalg.norm(U, axis=1)
for q in Q[:20]:
    u = q/np.linalg.norm(q); s = (U @ u)/norms; top = np.argsort(-s, kind="stable")[:50]
    got = [int(i[2:]) for i, _ in m.search(q, 50)]
    ok += got == top.tolist()
print("  exact-equal top50 on 20 queries:", ok)
