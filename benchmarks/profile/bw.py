import numpy as np, faiss, time
from concurrent.futures import ThreadPoolExecutor
X = np.load("/tmp/profile-work/X.npy").astype(np.float32); Q = np.load("/tmp/profile-work/Q.npy").astype(np.float32)
N, D = X.shape; X /= np.linalg.norm(X, axis=1, keepdims=True)
s = np.abs(X).max(0) * 1.05; C = np.clip(np.rint(X * 127 / s), -127, 127).astype(np.float32); del X
faiss.omp_set_num_threads(1)
def mk(a, b):
    ix = faiss.IndexScalarQuantizer(D, faiss.ScalarQuantizer.QT_8bit_direct_signed, faiss.METRIC_INNER_PRODUCT); ix.add(C[a:b]); return ix
full = mk(0, N); halves = [mk(0, N // 2), mk(N // 2, N)]
pool = ThreadPoolExecutor(1, initializer=lambda: faiss.omp_set_num_threads(1))
def t(fn, reps=60):
    fn(0); ts = []
    for i in range(reps):
        a = time.perf_counter(); fn(i % len(Q)); ts.append((time.perf_counter() - a) * 1e3)
    ts.sort(); return f"min {ts[0]:.2f} p25 {ts[len(ts)//4]:.2f} p50 {ts[len(ts)//2]:.2f}"
print("SQ8 full 100k, 1 thread      ", t(lambda i: full.search(Q[i:i+1], 64)))
print("SQ8 half 50k, 1 thread       ", t(lambda i: halves[0].search(Q[i:i+1], 64)))
def two(i):
    f = pool.submit(halves[1].search, Q[i:i+1], 64); halves[0].search(Q[i:i+1], 64); f.result()
print("SQ8 2 halves on 2 threads    ", t(two))
faiss.omp_set_num_threads(2)
print("SQ8 full, faiss OpenMP 2 thr ", t(lambda i: full.search(Q[i:i+1], 64)))
