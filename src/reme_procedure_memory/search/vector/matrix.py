"""Exact cosine top-k over float16 vectors, screened by an int8 scan: the vector index of one view.

Contract of ``VectorMatrix``:

* it holds one float16 vector per id (the exact values the file store persists; ``view(id)`` is the stored row,
  without a copy), in blocks of ``BLOCK_ROWS`` rows (growth never copies the whole matrix; a removed row is filled
  by the last one);
* ``search(query, k)`` returns the ``k`` ids of highest cosine similarity, best first, with their similarity computed
  in float64 from the stored float16 values; ties are ordered by row. The result equals a brute-force float64 scan of
  all rows (the tests check it), except among scores equal within about 1e-12.

How: every row is also kept as int8 codes (``quantization.py`` states the codes and the proven bound of their
error). faiss scans each block's codes for its best approximate scores; the candidates are scored in float32 by
faiss's float16 kernel (``blocks.Float16Rows``: numpy widens float16 one value at a time, ten times slower),
within a proven error (``float32_error``); a block whose weakest returned candidate could still beat the k-th score
(its approximate score plus the bound) is screened again, deeper, until its weakest candidate cannot, so no row that
belongs in the top k is ever missed. Only the candidates within twice the float32 error of the k-th float32 score
are scored in float64, and the top k is taken from those exact scores. A row whose codes clip badly (a vector unlike
those the scale was measured on) is left out of the int8 bound and always scored; the scale is re-measured when
such rows pass 2%. The scan reads 1 byte per dimension instead of 4; ``ProcedureFileStore`` runs it in a worker
thread, never on the event loop, and the blocks are screened on all cores at once (one faiss thread each).

The search path has no per-row Python: each block's screen comes back as arrays, the first k candidates are found
by ``argpartition`` and the rest by a vectorised ``approx >= cut``; the outliers' float16 rows are kept gathered for
the float32 kernel between searches (dropped by any change that touches an outlier). Products use faiss or
``einsum``, not BLAS, so a search starts no BLAS threads.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable

import numpy as np

from .blocks import Block, Float16Rows, Screened, float32_error, screen, screen_all
from .quantization import FLOAT_SLACK, Quantizer

BLOCK_ROWS = 16_384
CANDIDATES_PER_BLOCK = 16  # screened per block beyond its share of the adaptive depth
# the adaptive depth: this many times the candidates the last query needed (docs/decisions.md#vector-screen)
DEPTH_FACTOR = 5


class VectorMatrix:
    """float16 vectors by id with exact cosine top-k (see the module docstring)."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self._blocks: list[Block] = []
        self._ids: list[str] = []
        self._row_of: dict[str, int] = {}
        self._norms = np.zeros(0, dtype=np.float64)  # per row; 0 for a zero vector
        self._outlier = np.zeros(0, dtype=bool)  # per row: outside the bounds, always rescored exactly
        self._outliers: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # their rows, float64 vectors, norms
        self._quantizer = Quantizer(dimensions)
        self._depth = 0  # rows to screen per query (adapts to how many lie within the bound of the k-th score)

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, item: str) -> bool:
        return item in self._row_of

    # -- rows -----------------------------------------------------------------------------------------------------

    def _locate(self, row: int) -> tuple[Block, int]:
        return self._blocks[row // BLOCK_ROWS], row % BLOCK_ROWS

    def view(self, item: str) -> np.ndarray:
        """The stored float16 vector of ``item`` (a view: valid until ``item`` moves, see ``remove``)."""
        block, offset = self._locate(self._row_of[item])
        return block.rows[offset]

    def ids(self) -> list[str]:
        return list(self._ids)

    def _maybe_reencode(self) -> None:
        """Re-measure the scale and re-encode every row when the first scale was measured on few rows (the set has
        doubled since) or more than 2% of the rows are outliers: the bounds stay tight, the cost amortised."""
        n, quantizer = len(self._ids), self._quantizer
        if not quantizer.reencode_due(n, int(self._outlier[:n].sum())):
            return
        vectors = np.concatenate([b.rows[: b.n] for b in self._blocks])
        quantizer.measure(vectors)
        quantizer.error_bound = quantizer.code_bound = 0.0
        norms, codes, code_norms, errors = quantizer.encode(vectors)
        self._norms[:n] = norms
        quantizer.set_limits(code_norms, errors)
        self._outlier[:n] = quantizer.fold(code_norms, errors)
        self._outliers = None
        for number, block in enumerate(self._blocks):
            start = number * BLOCK_ROWS
            block.set_codes(codes[start : start + block.n])

    def set_many(self, items: Iterable[tuple[str, np.ndarray]]) -> None:
        """Insert or replace vectors (any float dtype, ``dimensions`` long; stored as float16)."""
        items = list(items)
        if not items:
            return
        vectors = np.stack([np.asarray(v, dtype=np.float16).reshape(-1) for _, v in items])
        if vectors.shape[1] != self.dimensions:
            raise ValueError(f"vector of {vectors.shape[1]} dimensions, expected {self.dimensions}")
        quantizer = self._quantizer
        first = quantizer.scale_rows == 0
        if first:
            quantizer.measure(vectors)
        norms, codes, code_norms, errors = quantizer.encode(vectors)
        if first:
            quantizer.set_limits(code_norms, errors)
        outlier = quantizer.fold(code_norms, errors)
        fresh: list[int] = []
        for position, (item, _) in enumerate(items):
            row = self._row_of.get(item)
            if row is None:
                row = len(self._ids)
                self._ids.append(item)
                self._row_of[item] = row
                fresh.append(position)
            elif row < len(self._ids) - len(fresh):  # a row stored before this batch: rewritten in place
                block, offset = self._locate(row)
                block.write(offset, vectors[position], codes[position])
        rows = np.array([self._row_of[item] for item, _ in items], dtype=np.int64)
        self._grow(len(self._ids))
        if outlier.any() or self._outlier[rows].any():  # an outlier's vector or status changes
            self._outliers = None
        self._norms[rows] = norms
        self._outlier[rows] = outlier
        # appended rows: the last value given for each new id, added block by block
        last = {item: position for position, (item, _) in enumerate(items)}
        chosen = np.array([last[items[position][0]] for position in fresh], dtype=np.int64)
        row, start = len(self._ids) - len(fresh), 0
        while start < len(chosen):
            if row // BLOCK_ROWS == len(self._blocks):
                self._blocks.append(Block(self.dimensions, BLOCK_ROWS))
            block = self._blocks[row // BLOCK_ROWS]
            take = chosen[start : start + BLOCK_ROWS - row % BLOCK_ROWS]
            block.append(vectors[take], codes[take])
            start, row = start + len(take), row + len(take)
        self._maybe_reencode()

    def _grow(self, n: int) -> None:
        """Room for ``n`` rows in the per-row arrays (grown by a quarter at a time)."""
        if n > self._norms.shape[0]:
            grow = max(n, int(self._norms.shape[0] * 1.25) + 64) - self._norms.shape[0]
            self._norms = np.concatenate([self._norms, np.zeros(grow)])
            self._outlier = np.concatenate([self._outlier, np.zeros(grow, dtype=bool)])

    def set(self, item: str, vector) -> None:
        self.set_many([(item, vector)])

    def remove(self, item: str) -> str | None:
        """Drop ``item`` if present; returns the id whose row moved into its place (its ``view`` changed), if any."""
        row = self._row_of.pop(item, None)
        if row is None:
            return None
        last = len(self._ids) - 1
        moved = None
        if self._outlier[row] or self._outlier[last]:
            self._outliers = None
        if row != last:
            moved = self._ids[last]
            src_block, src = self._locate(last)
            dst_block, dst = self._locate(row)
            dst_block.move(src_block, src, dst)
            self._norms[row] = self._norms[last]
            self._outlier[row] = self._outlier[last]
            self._ids[row] = moved
            self._row_of[moved] = row
        self._ids.pop()
        self._outlier[last] = False
        block, _ = self._locate(last)
        block.drop_last()
        if block.n == 0:
            self._blocks.pop()
        return moved

    def clear(self) -> None:
        self.__init__(self.dimensions)

    # -- persistence -----------------------------------------------------------------------------------------------

    def export(self) -> dict[str, np.ndarray]:
        """Everything, as arrays in row order (copies), for ``restore``: a load needs no re-encoding."""
        outliers = sorted(self._ids[row] for row in np.flatnonzero(self._outlier[: len(self._ids)]).tolist())
        meta = {"ids": self._ids, "outliers": outliers, **self._quantizer.meta()}
        empty = np.zeros((0, self.dimensions), dtype=np.float16)
        return {
            "meta": np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8),
            "vectors": np.concatenate([b.rows[: b.n] for b in self._blocks]) if self._blocks else empty,
            "codes": np.concatenate([b.codes() for b in self._blocks]) if self._blocks else empty.astype(np.int8),
            "norms": self._norms[: len(self._ids)].copy(),
            "scale": self._quantizer.scale.copy(),
        }

    @classmethod
    def restore(cls, dimensions: int, arrays: dict[str, np.ndarray]) -> "VectorMatrix":
        """The matrix ``export`` described (raises ValueError when the arrays do not fit together). The arrays may be
        read-only page-cache views: they are copied."""
        meta = json.loads(bytes(arrays["meta"]).decode("utf-8"))
        vectors, codes = arrays["vectors"], arrays["codes"]
        ids = [sys.intern(item) for item in meta["ids"]]  # the store's chunk ids: one string object each
        if (
            vectors.shape != (len(ids), dimensions)
            or codes.shape != vectors.shape
            or vectors.dtype != np.float16
            or codes.dtype != np.int8
            or arrays["norms"].shape != (len(ids),)
            or len(set(ids)) != len(ids)
        ):
            raise ValueError("the vector index arrays do not fit together")
        matrix = cls(dimensions)
        matrix._ids, matrix._row_of = ids, {item: row for row, item in enumerate(ids)}
        matrix._norms = arrays["norms"].astype(np.float64)
        matrix._outlier = np.zeros(len(ids), dtype=bool)
        matrix._outlier[[matrix._row_of[item] for item in meta["outliers"]]] = True
        matrix._quantizer = Quantizer.restore(dimensions, meta, arrays["scale"].astype(np.float64))
        matrix._blocks = [
            Block.restore(vectors[start : start + BLOCK_ROWS], codes[start : start + BLOCK_ROWS], BLOCK_ROWS)
            for start in range(0, len(ids), BLOCK_ROWS)
        ]
        return matrix

    # -- search ---------------------------------------------------------------------------------------------------

    def _gather(self, rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The float16 vectors of ``rows`` (into ``out`` when given), one gather per block."""
        vectors = np.empty((rows.size, self.dimensions), dtype=np.float16) if out is None else out
        blocks = rows // BLOCK_ROWS
        for number in np.unique(blocks).tolist():
            chosen = blocks == number
            vectors[chosen] = self._blocks[number].rows[rows[chosen] - number * BLOCK_ROWS]
        return vectors

    def _exact(self, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
        """float64 cosine similarities of ``rows`` with the unit ``query``."""
        if rows.size == 0:
            return np.zeros(0)
        return _cosines(self._gather(rows).astype(np.float64), self._norms[rows], query)

    def _float16_rows(self, rows: np.ndarray) -> Float16Rows:
        """The float16 vectors of ``rows``, gathered into a faiss buffer for ``Float16Rows.products``."""
        gathered = Float16Rows(rows.size, self.dimensions)
        self._gather(rows, gathered.rows)
        return gathered

    def _fast(self, rows: np.ndarray, query32: np.ndarray) -> np.ndarray:
        """Cosine similarities of ``rows`` with the unit query (``query32``: it as float32), computed in float32:
        within ``float32_error(dimensions) + FLOAT_SLACK`` of the exact ones."""
        if rows.size == 0:
            return np.zeros(0)
        return _scaled(self._float16_rows(rows).products(query32), self._norms[rows])

    def _outlier_rows(self) -> tuple[np.ndarray, Float16Rows, np.ndarray]:
        """The outliers' rows, float16 vectors (as ``Float16Rows``) and norms: kept between searches (dropped by
        any change to them; two searches under the read lock may both build it, and one whole tuple replaces the
        other)."""
        if self._outliers is None:
            rows = np.flatnonzero(self._outlier[: len(self._ids)])
            self._outliers = rows, self._float16_rows(rows), self._norms[rows]
        return self._outliers

    def search(self, query, limit: int) -> list[tuple[str, float]]:
        """The ``limit`` ids of highest cosine similarity, best first (see the module docstring)."""
        n = len(self._ids)
        q = np.asarray(query, dtype=np.float64).reshape(-1)
        if n == 0 or limit <= 0 or q.shape[0] != self.dimensions:
            return []
        screened = self._quantizer.screen(q)
        if screened is None:
            return []
        unit, codes, factor, margin = screened
        rows, scores = self._search(unit, codes, factor, margin, min(limit, n))
        return [(self._ids[row], score) for row, score in zip(rows.tolist(), scores.tolist())]

    def _search(
        self, unit: np.ndarray, codes: np.ndarray, factor: float, margin: float, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The top ``k`` rows and their exact scores, best first (ties by row)."""
        n = len(self._ids)
        jobs = [(block.index, block.n, number * BLOCK_ROWS) for number, block in enumerate(self._blocks)]
        depth = min(n, max(self._depth, k)) // len(jobs) + CANDIDATES_PER_BLOCK
        screens = screen_all(jobs, codes, factor, depth)
        rows, approx = self._candidates(screens)
        first = rows[_best(approx, k)]  # the k best by the screen: scored at once
        query32 = unit.astype(np.float32)[None, :]
        error = float32_error(self.dimensions) + FLOAT_SLACK  # of a float32 cosine (``_fast``)
        outliers, outlier_vectors, outlier_norms = self._outlier_rows()
        scored_rows = np.concatenate([outliers, first])
        scored = np.concatenate([_scaled(outlier_vectors.products(query32), outlier_norms), self._fast(first, query32)])
        # below the k-th exact score of these rows by more than the screen's margin: never in the top k
        cut = (_kth_largest(scored, k) - error - margin) if scored.size >= k else -math.inf
        deeper = False
        for number, screened in enumerate(screens):
            block_depth = depth
            while math.isfinite(screened.weakest) and screened.weakest >= cut:  # unreturned rows may beat the cut
                block_depth *= 4
                screened = screens[number] = screen(*jobs[number], codes, factor, block_depth)
                deeper = True
        if deeper:
            rows, approx = self._candidates(screens)
        rest = rows[approx >= cut]
        rest = rest[~np.isin(rest, first, assume_unique=True)]
        scored_rows = np.concatenate([scored_rows, rest])
        scored = np.concatenate([scored, self._fast(rest, query32)])
        # next time screen DEPTH_FACTOR times as deep as this query needed at once (slowly forgetting deeper needs):
        # a block screened again costs a full pass, a deeper heap far less (2x and 3x measured slower at 100k)
        self._depth = max(2 * k, DEPTH_FACTOR * (rest.size + k), int(0.9 * self._depth))
        # a row more than twice the float32 error below the k-th float32 score has k rows above it for sure: only
        # the others are scored exactly
        if scored.size > k:
            near = scored >= _kth_largest(scored, k) - 2 * error
            scored_rows = scored_rows[near]
        exact = self._exact(scored_rows, unit)
        order = np.lexsort((scored_rows, -exact))[:k]
        return scored_rows[order], exact[order]

    def cosine(self, query, item: str) -> float | None:
        """The exact cosine similarity of ``item``'s vector with ``query``, computed as ``search`` scores its
        results (float64 from the stored float16 values); None when ``item`` has no vector here or ``query`` is
        not of this matrix's dimensions or is zero."""
        row = self._row_of.get(item)
        q = np.asarray(query, dtype=np.float64).reshape(-1)
        norm = float(np.sqrt(q @ q)) if q.shape[0] == self.dimensions else 0.0
        if row is None or norm == 0.0:
            return None
        return float(self._exact(np.array([row]), q / norm)[0])

    def _candidates(self, screens: list[Screened]) -> tuple[np.ndarray, np.ndarray]:
        """The screened rows that are not outliers (those are rescored anyway) and their approximate scores."""
        rows = np.concatenate([screened.rows for screened in screens])
        approx = np.concatenate([screened.scores for screened in screens])
        kept = ~self._outlier[rows]
        return rows[kept], approx[kept]


def _best(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` highest ``scores`` (all of them when there are fewer), in no order."""
    return np.argpartition(-scores, k - 1)[:k] if scores.size > k else np.arange(scores.size)


def _kth_largest(values: np.ndarray, k: int) -> float:
    """The ``k``-th largest of ``values`` (at least ``k`` of them)."""
    return float(-np.partition(-values, k - 1)[k - 1])


def _cosines(vectors: np.ndarray, norms: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """float64 cosine similarities of float64 ``vectors`` (with these norms; 0 for a zero vector) with ``unit``."""
    # einsum, not BLAS: no BLAS threads on the search path (the caller's thread does all the work)
    return _scaled(np.einsum("ij,j->i", vectors, unit), norms)


def _scaled(products: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """Inner products with a unit query divided by the rows' norms: cosines (0 for a zero vector)."""
    return products / np.where(norms > 0, norms, np.inf)
