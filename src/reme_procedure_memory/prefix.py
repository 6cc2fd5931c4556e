"""The prefix screen of the vector index: int8 codes of each row's first coordinates in a PCA basis and of its tail
norm, whose scan gives a proven upper bound of every row's score.

The basis ``P`` (``dimensions x (w - 1)``, orthonormal columns; ``w = prefix_width``) spans the top principal
directions (of the uncentred second moment) of a bounded sample of unit rows. For a unit row ``u`` and the unit query
``q``, with ``a = P^T u`` and ``b = P^T q``::

    q . u = b . a + q_perp . u_perp           (q_perp, u_perp: the parts orthogonal to P's span)
          <= b . a + |q_perp| |u_perp|        (Cauchy-Schwarz),  |u_perp|^2 = |u|^2 - |a|^2,  |q_perp|^2 = 1 - |b|^2
          =  [b, |q_perp|] . [a, |u_perp|]

so each row is kept as the ``w`` int8 codes of ``[a, |u_perp|]`` (quantization.py, under a scale of their own) and the
query screens them with the codes of ``[b, |q_perp|]``: the quantization bound of that product (the same proven
``margin``) makes ``(h . c) / t + margin`` an upper bound of ``q . u``. That is all the screen needs: a row is rescored
exactly unless that bound is below the k-th exact score found. Rows whose codes are beyond the limits are outliers
(always rescored), as in the full screen. The exact scores still come from the stored float16 rows, so the prefix
changes which rows are rescored, never a result. Float64 rounding: ``|a|^2``, ``|b|^2`` are exact to about 1e-12 and
``P``'s columns orthonormal to 1e-12 (checked), so the squared tail norms get ``TAIL_SLACK`` (1e-9) added and the
margin ``FLOAT_SLACK``: far above those errors.

Contract: ``prefix_width`` is ``w`` for a dimension count (0: no prefix screen), ``measure_basis`` the basis of a
sample; a ``Prefix`` holds one matrix's basis and prefix quantizer: ``encode`` gives the codes and code/error norms of
unit rows, ``fold`` folds rows into the bounds and says which are outliers, ``screen`` gives a query's codes, ``t`` and
margin.
"""

from __future__ import annotations

import math

import numpy as np

from .quantization import ENCODE_ROWS, FLOAT_SLACK, Quantizer, scale_of, screen_codes, units

TAIL_SLACK = 1e-9  # added to squared tail norms: covers the float64 rounding of |u|^2 - |a|^2 and P's orthonormality
ORTHONORMAL = 1e-12  # the largest |P^T P - I| entry accepted
POWER_STEPS = 3  # subspace iterations of the basis measurement
TAIL_COPIES = 8  # columns that hold the tail norm (the query's tail split among them: a finer query quantisation)
_blas = None  # threadpoolctl's controller of the BLAS libraries loaded, found on first use


def one_blas_thread():
    """A context in which BLAS (numpy's matrix products) runs on the calling thread only: beside the other work of a
    loaded machine, BLAS threads spinning made the projections several times slower."""
    global _blas
    if _blas is None:
        from threadpoolctl import ThreadpoolController

        _blas = ThreadpoolController()
    return _blas.limit(limits=1, user_api="blas")


def prefix_width(dimensions: int) -> int:
    """``w``: a quarter of the dimensions, a multiple of 16 (0: too few dimensions for a prefix screen); the basis
    has ``w - TAIL_COPIES`` columns."""
    return dimensions // 4 // 16 * 16


def measure_basis(sample: np.ndarray, width: int) -> np.ndarray:
    """An orthonormal basis of the span of the ``width`` top principal directions (uncentred) of ``sample`` (float64
    unit rows): subspace iteration on the second moment, then Rayleigh-Ritz (a few ``d x (width + 16)`` products, no
    full eigendecomposition). The directions are then mixed by a random rotation: every row's and query's prefix
    spreads evenly over the columns, so no single coordinate sets the query's quantisation step (a margin about
    twice as tight as in the principal directions themselves, measured)."""
    dimensions = sample.shape[1]
    with one_blas_thread():
        sample32 = sample.astype(np.float32)
        moment = (sample32.T @ sample32).astype(np.float64)  # the basis need not be exact, only orthonormal
        basis = np.random.default_rng(0).standard_normal((dimensions, min(dimensions, width + 16)))
        for _ in range(POWER_STEPS):
            basis = np.linalg.qr(moment @ basis)[0]
        values, vectors = np.linalg.eigh(basis.T @ moment @ basis)
        rotation = np.linalg.qr(np.random.default_rng(1).standard_normal((width, width)))[0]
        basis = np.linalg.qr(basis @ vectors[:, ::-1][:, :width] @ rotation)[0]
    if np.abs(basis.T @ basis - np.eye(width)).max() > ORTHONORMAL:
        raise ArithmeticError("the prefix basis is not orthonormal")
    return np.ascontiguousarray(basis)


def project(rows: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """``[a, |u_perp| (TAIL_COPIES times)]`` of float64 unit rows ``u`` (a zero row's is about zero) in ``basis``."""
    columns = basis.shape[1]
    prefixes = np.empty((len(rows), columns + TAIL_COPIES))
    with one_blas_thread():
        np.matmul(rows, basis, out=prefixes[:, :columns])
    tails = np.einsum("ij,ij->i", rows, rows) - np.einsum("ij,ij->i", prefixes[:, :columns], prefixes[:, :columns])
    prefixes[:, columns:] = np.sqrt(np.maximum(tails, 0.0) + TAIL_SLACK)[:, None]
    return prefixes


class Prefix:
    """One matrix's basis (``w - TAIL_COPIES`` columns) and the quantizer of its ``w`` prefix coordinates (the bounds
    only grow until the next measurement)."""

    def __init__(self, basis: np.ndarray, mean: np.ndarray) -> None:
        self.basis = basis
        self.width = basis.shape[1] + TAIL_COPIES
        self.mean = mean  # of [a, |u_perp|] over the sample: subtracted before quantising (a narrower range)
        self.quantizer = Quantizer(self.width)

    def project(self, rows: np.ndarray) -> np.ndarray:
        """``[a, |u_perp|]`` of float64 unit rows ``u`` (a zero row's is about zero), less ``mean``."""
        return project(rows, self.basis) - self.mean

    def measure_scale(self, vectors: np.ndarray) -> None:
        """The prefix quantizer's scale, measured on float16 rows."""
        top = np.zeros(self.width)
        for start in range(0, len(vectors), ENCODE_ROWS):
            top = np.maximum(top, np.abs(self.project(units(vectors[start:start + ENCODE_ROWS])[1])).max(axis=0))
        self.quantizer.scale = scale_of(top)
        self.quantizer.scale_rows = len(vectors)

    def encode(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """int8 prefix codes, code norms, error norms and clipped flags of float64 unit rows."""
        return self.quantizer.encode_units(self.project(rows), flag_clipped=True)

    def set_limits(self, code_norms: np.ndarray, errors: np.ndarray) -> None:
        """Outlier limits measured on freshly encoded rows."""
        self.quantizer.set_limits(code_norms, errors)

    def fold(self, code_norms: np.ndarray, errors: np.ndarray, clipped: np.ndarray) -> np.ndarray:
        """Fold rows into the bounds; returns which rows are outliers: beyond the limits, or clipped (no row in the
        bounds is, so the screen may take the tighter error bound)."""
        outliers = clipped.copy()
        outliers[~clipped] = self.quantizer.fold(code_norms[~clipped], errors[~clipped])
        return outliers

    def screen(self, unit: np.ndarray) -> tuple[np.ndarray, float, float] | None:
        """The unit query's prefix screening codes (a float32 row), ``t`` and margin; None when they are all zero."""
        columns = self.basis.shape[1]
        query = np.empty(self.width)
        query[:columns] = np.einsum("ij,i->j", self.basis, unit)  # einsum: no BLAS threads on the search path
        tail = float(unit @ unit) - float(query[:columns] @ query[:columns])
        query[columns:] = math.sqrt(max(tail, 0.0) + TAIL_SLACK) / TAIL_COPIES
        quantizer = self.quantizer
        screened = screen_codes(query, quantizer.scale, quantizer.code_bound, quantizer.error_bound, unclipped=True)
        if screened is None:
            return None
        codes, factor, margin = screened
        # the codes hold [a, |u_perp|] - mean: the product misses query . mean, the same for every row (added to the
        # margin, it is added to every row's upper bound)
        return codes, factor, margin + float(query @ self.mean) + FLOAT_SLACK

    def meta(self) -> dict:
        """The state as the matrix's exported metadata holds it (basis, mean and scale are exported as arrays)."""
        return self.quantizer.meta()

    @classmethod
    def restore(cls, meta: dict, basis: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> "Prefix":
        """The state ``meta``, ``basis``, ``mean`` and ``scale`` described (copied: they may be read-only views)."""
        prefix = cls(np.array(basis, dtype=np.float64), np.array(mean, dtype=np.float64))
        prefix.quantizer = Quantizer.restore(prefix.width, meta, np.array(scale, dtype=np.float64))
        return prefix
