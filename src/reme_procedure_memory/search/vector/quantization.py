"""The int8 screening codes of the vector index and the bound that makes their scan exact.

Every row is kept as int8 codes of its unit vector scaled per dimension (``c = round(127 u / s)``, clipped), with the
exact norms of ``c`` and of its rounding error ``e = 127 u / s - c``. A unit query ``q`` becomes
``q' = q * s / 127`` (so ``q . u = q' . (c + e)``) and int8 codes ``h = round(t q')`` (``|h| <= query_levels``)
with the residual ``r = q' - h / t``. Then ``q . u = (h . c) / t + r . c + q' . e``, where faiss computes ``h . c``
exactly (integer arithmetic, below 2**24) and ``|r . c| + |q' . e| <= |r| max|c| + |q'| max|e|`` (Cauchy-Schwarz):
the ``margin``.

Contract: pure functions of numpy arrays. ``measure_scale`` gives ``s`` from sample rows, ``encode`` the norms, codes
and code/error norms of rows under ``s``, ``outlier_limits`` the code/error norms above which a row is left out of
the bound (and rescored exactly instead), ``screen_query`` the screening codes of a query with ``t`` and the margin.
A ``Quantizer`` holds one matrix's state for them: the scale, the limits and the bounds (``fold`` says which rows are
outliers; the matrix keeps them).
"""

from __future__ import annotations

import math

import numpy as np

ENCODE_ROWS = 4096  # rows encoded at a time (bounds the float64 temporaries)
OUTLIER_ERROR = 1.15  # rows whose rounding error exceeds this many typical ones (clipped) are rescored exactly
LEVELS = 127  # int8 codes in [-127, 127]
FLOAT_SLACK = 1e-9  # on top of the proven bound: float64 rounding of the scores and of the bound itself


def units(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 norms and unit vectors of float16 rows (zero rows stay zero)."""
    x = vectors.astype(np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    return norms, x / np.where(norms > 0, norms, 1.0)[:, None]


def encode(vectors: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Norms, int8 codes, and the exact norms of the codes and of their rounding errors, of float16 rows."""
    norms, errors, code_norms = np.empty(len(vectors)), np.empty(len(vectors)), np.empty(len(vectors))
    codes = np.empty(vectors.shape, dtype=np.int8)
    for start in range(0, len(vectors), ENCODE_ROWS):  # bounded temporaries
        stop = start + ENCODE_ROWS
        norms[start:stop], scaled = units(vectors[start:stop])
        scaled *= LEVELS / scale
        rounded = np.minimum(np.maximum(np.rint(scaled), -LEVELS), LEVELS)
        codes[start:stop] = rounded
        code_norms[start:stop] = np.sqrt(np.einsum("ij,ij->i", rounded, rounded))
        scaled -= rounded
        errors[start:stop] = np.sqrt(np.einsum("ij,ij->i", scaled, scaled))
    return norms, codes, code_norms, errors


def outlier_limits(code_norms: np.ndarray, errors: np.ndarray, dimensions: int) -> tuple[float, float]:
    """(error limit, code limit) measured on freshly encoded rows: a little above nearly all of them."""
    typical = math.sqrt(dimensions / 12)  # the norm of a uniform rounding error, in code units
    return (
        max(OUTLIER_ERROR * typical, float(np.quantile(errors, 0.995)) * 1.02),
        float(np.quantile(code_norms, 0.995)) * 1.02,
    )


def measure_scale(sample: np.ndarray, dimensions: int) -> np.ndarray:
    """The per-dimension scale ``s`` measured on ``sample`` (float16 rows, at least one)."""
    top = np.zeros(dimensions)
    for start in range(0, len(sample), ENCODE_ROWS):
        top = np.maximum(top, np.abs(units(sample[start : start + ENCODE_ROWS])[1]).max(axis=0))
    return np.maximum(top * 1.05, 1e-6)


def screen_query(
    query, scale: np.ndarray, code_bound: float, error_bound: float
) -> tuple[np.ndarray, np.ndarray, float, float] | None:
    """(unit query, its screening codes ``h`` as a float32 row, ``t``, margin), or None for a zero query."""
    q = np.asarray(query, dtype=np.float64).reshape(-1)
    norm = float(np.linalg.norm(q))
    if norm == 0:
        return None
    unit = q / norm
    q = unit * scale / LEVELS  # q'
    top = float(np.abs(q).max())
    if top == 0:
        return None
    factor = query_levels(len(q)) / top  # t
    codes = np.rint(q * factor)  # h
    residual = q - codes / factor  # r
    margin = float(np.linalg.norm(residual)) * code_bound + float(np.linalg.norm(q)) * error_bound + FLOAT_SLACK
    return unit, codes.astype(np.float32)[None, :], factor, margin


def query_levels(dimensions: int) -> int:
    """The largest |h|: 127 (faiss's 8-bit kernels quantise the query to bytes as well), fewer above 1,040
    dimensions, where the sum of ``h . c`` could otherwise pass 2**24 and stop being exact in float32."""
    return min(LEVELS, 2**24 // (dimensions * LEVELS))


class Quantizer:
    """One matrix's scale ``s``, outlier limits and error bounds (the matrix keeps which rows are outliers: left out
    of the bounds, always rescored exactly); the bounds only grow between re-encodes."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self.error_limit = self.code_limit = math.inf
        self.scale = np.ones(dimensions, dtype=np.float64)  # s, per dimension
        self.scale_rows = 0  # rows the scale was measured on
        self.error_bound = 0.0  # >= every live row's |e|, outliers aside (never lowered before a re-encode)
        self.code_bound = 0.0  # >= every live row's |c|, outliers aside

    def measure(self, sample: np.ndarray) -> None:
        """Measure the per-dimension scale on ``sample`` (float16 rows, at least one)."""
        self.scale = measure_scale(sample, self.dimensions)
        self.scale_rows = len(sample)

    def encode(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``encode`` under this scale."""
        return encode(vectors, self.scale)

    def set_limits(self, code_norms: np.ndarray, errors: np.ndarray) -> None:
        """Outlier limits measured on freshly encoded rows."""
        self.error_limit, self.code_limit = outlier_limits(code_norms, errors, self.dimensions)

    def fold(self, code_norms: np.ndarray, errors: np.ndarray) -> np.ndarray:
        """Fold rows into the bounds; returns which rows are outliers: those whose codes are much longer or clip more
        than nearly all (above the limits) are kept out of the bounds and always rescored exactly instead."""
        outliers = (errors > self.error_limit) | (code_norms > self.code_limit)
        if not outliers.all():
            self.error_bound = max(self.error_bound, float(errors[~outliers].max()))
            self.code_bound = max(self.code_bound, float(code_norms[~outliers].max()))
        return outliers

    def reencode_due(self, rows: int, outliers: int) -> bool:
        """Whether ``rows`` rows (``outliers`` of them outliers) should be re-encoded under a new scale: the first scale
        was measured on few rows (the set has doubled since) or more than 2% of the rows are outliers."""
        grown = self.scale_rows < 4096 and rows >= 2 * self.scale_rows
        return rows != 0 and (grown or outliers > max(32, rows // 50))

    def screen(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float] | None:
        """``screen_query`` under this scale and these bounds."""
        return screen_query(query, self.scale, self.code_bound, self.error_bound)

    def meta(self) -> dict:
        """The state as the matrix's exported metadata holds it (``scale`` is exported as an array)."""
        return {
            "scale_rows": self.scale_rows,
            "bounds": [self.error_bound, self.code_bound],
            "limits": [self.error_limit, self.code_limit],
        }

    @classmethod
    def restore(cls, dimensions: int, meta: dict, scale: np.ndarray) -> "Quantizer":
        """The state ``meta`` (and ``scale``) described."""
        quantizer = cls(dimensions)
        quantizer.scale = scale
        quantizer.scale_rows = int(meta["scale_rows"])
        quantizer.error_bound, quantizer.code_bound = meta["bounds"]
        quantizer.error_limit, quantizer.code_limit = meta["limits"]
        return quantizer
