import numpy as np
X = np.load("/tmp/profile-work/X.npy").astype(np.float32); X /= np.linalg.norm(X, axis=1, keepdims=True)
Q = np.load("/tmp/profile-work/Q.npy").astype(np.float32); Q /= np.linalg.norm(Q, axis=1, keepdims=True)
rng = np.random.default_rng(0)
C = np.cov(X[rng.choice(len(X), 20000, replace=False)].T); w, P = np.linalg.eigh(C); P = P[:, ::-1].astype(np.float32)
Y = X @ P; QY = Q @ P
R, _ = np.linalg.qr(rng.standard_normal((1024, 1024))); R = R.astype(np.float32)
for name, Yr, Qr in (("PCA rotation", Y, QY), ("random rotation", X @ R, Q @ R)):
    for d in (64, 128, 256):
        tail = np.linalg.norm(Yr[:, d:], axis=1)
        surv = []
        for q in Qr[:30]:
            exact = Yr @ q; kth = np.partition(exact, -50)[-50]
            part = Yr[:, :d] @ q[:d]; bound = np.linalg.norm(q[d:]) * tail
            surv.append(int((part + bound >= kth).sum()))
        print(f"{name:16s} d={d:4d}: rows surviving the bound (k=50) median {int(np.median(surv))} of {len(X)}; mean tail norm {tail.mean():.3f}")
