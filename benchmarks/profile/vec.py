# Investigation scripts of the issue-9 profile (FINDINGS.md): run from the repository root with its venv; data in /tmp/profile-work/.
"""Vector search micro-profile at 100k x 1024 (investigation; no repo files changed)."""
import sys, time, os
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)), "..", "..", "src")); sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)), ".."))
import numpy as np
import search as B  # benchmarks/search.py

N = int(os.environ.get("N", 100_000)); D = 1024
t = time.perf_counter()
corpus = B.Corpus(seed=1)
model = B.HashedProjectionEmbedding(D, seed=7)
exps = [corpus.experience(i) for i in range(N)]
texts = [B.view_texts(e)[0] for e in exps]
X = np.stack([model.vector(s) for s in texts]).astype(np.float16)
queries = [corpus.query(exps) for _ in range(200)]
Q = np.stack([model.vector(q) for q in queries]).astype(np.float64)
print(f"built {N} vectors in {time.perf_counter()-t:.1f}s", flush=True)
np.save("/tmp/profile-work/X.npy", X); np.save("/tmp/profile-work/Q.npy", Q)
