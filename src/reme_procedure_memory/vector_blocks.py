"""Blocks of the vector index and their screening: float16 rows beside a faiss index of their int8 codes.

Contract: a ``Block`` holds up to ``capacity`` rows (the matrix's block size; row ``r`` of the matrix is row
``r % capacity`` of block ``r // capacity``) and the codes of ``quantization.py`` in faiss's own buffer (code + 128).
``screen`` returns a block's ``depth`` best rows by the exact integer products of the query's codes with theirs
(scaled by ``1 / factor``) and the weakest score it returned (-inf when it returned all its rows); ``screen_all``
screens every block on all cores at once (faiss releases the GIL; one faiss thread per block screen) and equals
screening them one by one.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def faiss_module():
    """faiss, imported on first use."""
    import faiss  # a dependency of reme-ai[core]; imported lazily

    return faiss


SCREEN_THREADS = os.cpu_count() or 1
_pool: ThreadPoolExecutor | None = None


def _screen_pool() -> ThreadPoolExecutor:
    """Threads that screen blocks beside the searching thread (their OpenMP setting is made per call)."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=max(1, SCREEN_THREADS - 1), thread_name_prefix="procedure-screen")
    return _pool


class Block:
    """``capacity`` float16 rows and the faiss index of their int8 codes (rows ``[0, n)`` used)."""

    def __init__(self, dimensions: int, capacity: int) -> None:
        faiss = faiss_module()
        self.rows = np.empty((capacity, dimensions), dtype=np.float16)  # untouched pages cost no memory
        self.index = faiss.IndexScalarQuantizer(
            dimensions, faiss.ScalarQuantizer.QT_8bit_direct_signed, faiss.METRIC_INNER_PRODUCT,
        )
        self.n = 0

    @classmethod
    def restore(cls, vectors: np.ndarray, codes: np.ndarray, capacity: int) -> "Block":
        """A block holding these float16 rows and their int8 codes (at most ``capacity``), without re-encoding."""
        block = cls(vectors.shape[1], capacity)
        block.n = len(vectors)
        block.rows[: block.n] = vectors
        block.index.codes.resize(block.n * vectors.shape[1])  # the codes as faiss stores them (code + 128)
        block.codes_view()[:] = codes.astype(np.int16) + 128
        block.index.ntotal = block.n
        return block

    def codes_view(self) -> np.ndarray:
        """The block's codes as a writable uint8 view of faiss's own buffer (code + 128)."""
        faiss = faiss_module()
        d = self.rows.shape[1]
        return faiss.rev_swig_ptr(self.index.codes.data(), self.n * d).reshape(self.n, d)


def screen(blocks: list[Block], number: int, codes: np.ndarray, factor: float, depth: int,
           approx: dict[int, float]) -> float:
    """Screen block ``number`` for its ``depth`` best rows into ``approx`` (row -> approximate score); returns the
    lowest screened score returned, or -inf when the block returned all its rows."""
    block = blocks[number]
    scores, rows = block.index.search(codes, min(depth, block.n))  # exact integers h . c
    kept = rows[0] >= 0
    approx.update(zip((number * len(block.rows) + rows[0][kept]).tolist(), (scores[0][kept] / factor).tolist()))
    return float(scores[0][kept][-1]) / factor if depth < block.n else -math.inf


def _screen_blocks(blocks: list[Block], numbers: list[int], codes: np.ndarray, factor: float,
                   depth: int) -> tuple[dict[int, float], dict[int, float]]:
    """``screen`` of several blocks: (screened scores by row, weakest score by block)."""
    faiss = faiss_module()
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # this thread only (an OpenMP setting per thread): one core per block screen
    try:
        approx: dict[int, float] = {}
        return approx, {number: screen(blocks, number, codes, factor, depth, approx) for number in numbers}
    finally:
        faiss.omp_set_num_threads(threads)


def screen_all(blocks: list[Block], codes: np.ndarray, factor: float,
               depth: int) -> tuple[dict[int, float], list[float]]:
    """Every block screened on all cores at once (faiss releases the GIL; this thread takes one share): (screened
    scores by row, the lowest score each block returned, -inf when it returned all its rows)."""
    shares = [list(range(i, len(blocks), SCREEN_THREADS)) for i in range(SCREEN_THREADS)]
    others = [_screen_pool().submit(_screen_blocks, blocks, share, codes, factor, depth) for share in shares[1:]
              if share]
    approx, by_block = _screen_blocks(blocks, shares[0], codes, factor, depth)  # row -> (h . c) / t
    for future in others:
        more, weakest = future.result()
        approx.update(more)
        by_block.update(weakest)
    return approx, [by_block[number] for number in range(len(blocks))]
