import numpy as np, faiss, time
X = np.load("/tmp/profile-work/X.npy").astype(np.float32); Q = np.load("/tmp/profile-work/Q.npy").astype(np.float32)
X /= np.linalg.norm(X, axis=1, keepdims=True)
faiss.omp_set_num_threads(1)
for d in (128, 256):
    P = X[:, :d]; s = np.abs(P).max(0) * 1.05
    ix = faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_8bit_direct_signed, faiss.METRIC_INNER_PRODUCT)
    ix.add(np.clip(np.rint(P * 127 / s), -127, 127).astype(np.float32))
    for k in (256, 1024):
        ts = []
        for i in range(40):
            t = time.perf_counter(); ix.search(Q[i % 60:i % 60 + 1, :d], k); ts.append((time.perf_counter() - t) * 1e3)
        ts.sort(); print(f"SQ8 prefix d'={d} 100k rows, k={k}: min {ts[0]:.2f} p50 {ts[20]:.2f} ms")
