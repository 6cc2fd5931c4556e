"""Blocks of the vector index and their screening: float16 rows beside a faiss index of their int8 codes.

Contract: a ``Block`` holds up to ``capacity`` rows (the matrix's block size; row ``r`` of the matrix is row
``r % capacity`` of block ``r // capacity``) and the codes of ``quantization.py`` in faiss's own buffer (code + 128).
``screen`` returns a block's ``depth`` best rows by the exact integer products of the query's codes with theirs
(scaled by ``1 / factor``) and the weakest score it returned (-inf when it returned all its rows), as arrays;
``screen_all`` screens every block on all cores at once (faiss releases the GIL; one faiss thread per block screen)
and equals screening them one by one. Codes are written straight into faiss's buffer (no float round trip).
"""

from __future__ import annotations

import functools
import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def faiss_module():
    """faiss, imported on first use."""
    import faiss  # a dependency of reme-ai[core]; imported lazily

    return faiss


SCREEN_THREADS = os.cpu_count() or 1


@functools.cache
def _screen_pool() -> ThreadPoolExecutor:
    """Threads that screen blocks beside the searching thread (their OpenMP setting is made per call)."""
    return ThreadPoolExecutor(max_workers=max(1, SCREEN_THREADS - 1), thread_name_prefix="procedure-screen")


def _index(dimensions: int):
    """An empty faiss index of int8 codes (``8bit_direct_signed``: stored as code + 128), inner product."""
    faiss = faiss_module()
    return faiss.IndexScalarQuantizer(
        dimensions, faiss.ScalarQuantizer.QT_8bit_direct_signed, faiss.METRIC_INNER_PRODUCT
    )


def codes_view(index, n: int) -> np.ndarray:
    """The first ``n`` rows of ``index``'s codes as a writable uint8 view of faiss's own buffer (code + 128)."""
    return faiss_module().rev_swig_ptr(index.codes.data(), n * index.d).reshape(n, index.d)


def set_rows(index, n: int) -> None:
    """Make ``index`` hold ``n`` rows (new rows' codes to be written through ``codes_view``)."""
    index.codes.resize(n * index.d)
    index.ntotal = n


def append_codes(index, codes: np.ndarray) -> None:
    """Append int8 ``codes`` to ``index`` (written straight into its buffer: no float round trip)."""
    start = index.ntotal
    set_rows(index, start + len(codes))
    # code + 128 is the int8 code's byte with its top bit flipped
    np.bitwise_xor(codes.view(np.uint8), 0x80, out=codes_view(index, start + len(codes))[start:])


class Block:
    """``capacity`` float16 rows and the faiss index of their int8 codes (rows ``[0, n)`` used)."""

    def __init__(self, dimensions: int, capacity: int) -> None:
        self.rows = np.empty((capacity, dimensions), dtype=np.float16)  # untouched pages cost no memory
        self.index = _index(dimensions)
        self.n = 0

    @classmethod
    def restore(cls, vectors: np.ndarray, codes: np.ndarray, capacity: int) -> "Block":
        """A block holding these float16 rows and their int8 codes (at most ``capacity``), without re-encoding."""
        block = cls(vectors.shape[1], capacity)
        block.n = len(vectors)
        block.rows[: block.n] = vectors
        block.set_codes(codes)
        return block

    def set_codes(self, codes: np.ndarray) -> None:
        """Replace the codes of all the block's rows (int8, one row each)."""
        set_rows(self.index, 0)
        append_codes(self.index, codes)

    def append(self, vectors: np.ndarray, codes: np.ndarray) -> None:
        """Add rows at the end, with their codes."""
        self.rows[self.n : self.n + len(vectors)] = vectors
        append_codes(self.index, codes)
        self.n += len(vectors)

    def write(self, offset: int, vector: np.ndarray, codes: np.ndarray) -> None:
        """Replace row ``offset`` and its codes."""
        self.rows[offset] = vector
        np.bitwise_xor(codes.view(np.uint8), 0x80, out=self.codes_view()[offset])

    def move(self, source: "Block", src: int, offset: int) -> None:
        """Copy row ``src`` of ``source`` and its codes over row ``offset``."""
        self.rows[offset] = source.rows[src]
        self.codes_view()[offset] = source.codes_view()[src]

    def drop_last(self) -> None:
        """Forget the last row."""
        self.n -= 1
        set_rows(self.index, self.n)

    def codes(self) -> np.ndarray:
        """A copy of the used rows' int8 codes."""
        return np.bitwise_xor(self.codes_view(), 0x80).view(np.int8)

    def codes_view(self) -> np.ndarray:
        """The block's codes as a writable uint8 view of faiss's own buffer (code + 128)."""
        return codes_view(self.index, self.n)


# -- float32 scores of float16 rows (faiss's fp16 kernel) ------------------------------------------------------------


def _fp16_index(dimensions: int):
    """An empty faiss index of float16 rows (its codes are the rows' bytes), inner product."""
    faiss = faiss_module()
    return faiss.IndexScalarQuantizer(dimensions, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)


class Float16Rows:
    """``n`` float16 rows in faiss's own buffer, for ``products``: faiss widens float16 to float32 with SIMD, which
    numpy does one value at a time (about 1 ns per value: 1 ms for a thousand 1,024-d rows)."""

    __slots__ = ("index", "rows")

    def __init__(self, n: int, dimensions: int) -> None:
        self.index = _fp16_index(dimensions)
        self.index.codes.resize(n * self.index.code_size)  # 2 bytes per dimension: ``rows`` views them as float16
        self.index.ntotal = n
        buffer = faiss_module().rev_swig_ptr(self.index.codes.data(), n * self.index.code_size)
        self.rows = buffer.view(np.float16).reshape(n, dimensions)  # written by the caller

    def products(self, query: np.ndarray) -> np.ndarray:
        """float64 copies of the float32 inner products of float32 ``query`` (one row) with every row, in row
        order, computed on one faiss thread. Error: at most ``float32_error(dimensions) * sum_i |q_i x_i|``."""
        n = self.rows.shape[0]
        if n == 0:
            return np.zeros(0)
        faiss = faiss_module()
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)  # this thread only
        try:
            scores, order = self.index.search(query, n)
        finally:
            faiss.omp_set_num_threads(threads)
        products = np.empty(n)
        products[order[0]] = scores[0]
        return products


def float32_error(dimensions: int) -> float:
    """The relative error bound of a float32 inner product of ``dimensions`` terms whose query was rounded from
    float64 to float32: ``gamma(d + 1) = (d + 1) u / (1 - (d + 1) u)`` with ``u = 2**-24``, in any summation order,
    with or without fused multiply-adds (Higham, Accuracy and Stability of Numerical Algorithms, 3.1); float16
    values widen to float32 exactly."""
    unit_roundoff = 2.0**-24
    terms = (dimensions + 1) * unit_roundoff
    return terms / (1.0 - terms)


class Screened:
    """One block's screen: its ``depth`` best rows (matrix rows) with their approximate scores ``(h . c) / t``
    (float64), best first, and the weakest score it returned (-inf when it returned all its rows)."""

    __slots__ = ("rows", "scores", "weakest")

    def __init__(self, rows: np.ndarray, scores: np.ndarray, weakest: float) -> None:
        self.rows, self.scores, self.weakest = rows, scores, weakest


def screen(index, n: int, first_row: int, codes: np.ndarray, factor: float, depth: int) -> Screened:
    """Screen one block's faiss ``index`` (``n`` rows, the first of them matrix row ``first_row``) for its ``depth``
    best rows."""
    scores, rows = index.search(codes, min(depth, n))  # exact integers h . c (float32 holds them exactly)
    kept = rows[0] >= 0
    approx = scores[0][kept].astype(np.float64) / factor  # float64: the bound's arithmetic
    weakest = float(approx[-1]) if depth < n and approx.size else -math.inf
    return Screened(rows[0][kept] + first_row, approx, weakest)


def _screen_blocks(jobs: list[tuple], codes: np.ndarray, factor: float, depth: int) -> list[Screened]:
    """``screen`` of several blocks (``(index, n, first_row)`` each), on one faiss thread."""
    faiss = faiss_module()
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # this thread only (an OpenMP setting per thread): one core per block screen
    try:
        return [screen(index, n, first, codes, factor, depth) for index, n, first in jobs]
    finally:
        faiss.omp_set_num_threads(threads)


def screen_all(jobs: list[tuple], codes: np.ndarray, factor: float, depth: int) -> list[Screened]:
    """Every block (``(index, n, first_row)`` each) screened on all cores at once (faiss releases the GIL; this thread
    takes one share), in block order."""
    shares = [list(range(i, len(jobs), SCREEN_THREADS)) for i in range(SCREEN_THREADS)]
    others = [
        (share, _screen_pool().submit(_screen_blocks, [jobs[j] for j in share], codes, factor, depth))
        for share in shares[1:]
        if share
    ]
    result: list[Screened | None] = [None] * len(jobs)
    for number, screened in zip(shares[0], _screen_blocks([jobs[j] for j in shares[0]], codes, factor, depth)):
        result[number] = screened
    for share, future in others:
        for number, screened in zip(share, future.result()):
            result[number] = screened
    return result
