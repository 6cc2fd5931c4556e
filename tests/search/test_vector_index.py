"""The vector index (vectors.py) against a float64 brute-force scan: top-k ids and scores under churn in batches
(set_many/remove/replace, ids repeated in a batch), with vectors unlike those the scale was measured on (outliers),
zero vectors, k > n, many small blocks, and across export/restore from read-only arrays (as a view load hands
them over)."""

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from reme_procedure_memory.search.vector import matrix as vectors
from reme_procedure_memory.search.vector.matrix import VectorMatrix
from reme_procedure_memory.search.vector.quantization import LEVELS, query_levels

from helpers.views import brute_force  # the float64 scan, ties by row

DIMS = 64


def low_rank(rng, count, rank=6, noise=0.05):
    """Vectors near a ``rank``-dimensional subspace (many near-ties, a steep spectrum)."""
    basis = np.random.default_rng(99).normal(size=(rank, DIMS))
    return rng.normal(size=(count, rank)) @ basis + noise * rng.normal(size=(count, DIMS))


def unlike(rng, kind: str) -> np.ndarray:
    """A vector unlike the low-rank ones: isotropic, one huge dimension, or zero."""
    if kind == "isotropic":
        return rng.normal(size=DIMS)
    if kind == "spike":
        vec = np.zeros(DIMS)
        vec[rng.integers(DIMS)] = 50.0
        return vec
    return np.zeros(DIMS)


def assert_exact(matrix: VectorMatrix, truth: dict, query, limit: int) -> None:
    rows = {item: matrix._row_of[item] for item in truth}
    got, expected = matrix.search(query, limit), brute_force(truth, rows, query, limit)
    assert [i for i, _ in got] == [i for i, _ in expected]
    assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_search_equals_brute_force_under_batched_churn(data):
    block_rows = vectors.BLOCK_ROWS
    vectors.BLOCK_ROWS = data.draw(st.sampled_from([8, 32, 16_384]))
    try:
        check_churn(data)
    finally:
        vectors.BLOCK_ROWS = block_rows


def check_churn(data) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 10_000)))
    matrix, truth = VectorMatrix(DIMS), {}
    for _ in range(data.draw(st.integers(1, 12))):
        action = data.draw(st.sampled_from(["add", "add", "replace", "remove", "unlike"]))
        if action in ("add", "replace", "unlike"):
            count = data.draw(st.integers(1, 40))
            names = [
                f"id{rng.integers(150)}" if action != "replace" or not truth else str(rng.choice(list(truth)))
                for _ in range(count)
            ]  # repeats within one batch too: the last value counts
            if action == "unlike":
                batch = [unlike(rng, data.draw(st.sampled_from(["isotropic", "spike", "zero"]))) for _ in names]
            else:
                batch = list(low_rank(rng, count))
            matrix.set_many(zip(names, batch))
            truth.update(zip(names, batch))
        elif truth:
            for item in rng.choice(list(truth), size=min(len(truth), data.draw(st.integers(1, 20))), replace=False):
                matrix.remove(str(item))
                truth.pop(str(item))
    assert len(matrix) == len(truth)
    outliers = set(np.flatnonzero(matrix._outlier[: len(matrix)]).tolist())
    assert outliers == set(matrix._outlier_rows()[0].tolist())  # the cached outlier rows follow every change
    for _ in range(4):
        kind = data.draw(st.sampled_from(["like", "like", "unlike"]))
        query = low_rank(rng, 1)[0] if kind == "like" else rng.normal(size=DIMS)
        limit = data.draw(st.integers(1, 60))  # often more than the rows
        if truth:
            assert_exact(matrix, truth, query, limit)
        assert all(np.array_equal(matrix.view(i), np.asarray(truth[i], dtype=np.float16)) for i in truth)


def test_outliers_are_rescored_from_their_cached_vectors_and_follow_changes():
    rng = np.random.default_rng(1)
    truth = {f"id{i}": vec for i, vec in enumerate(low_rank(rng, 300))}
    matrix = VectorMatrix(DIMS)
    matrix.set_many(truth.items())
    odd = {f"odd{i}": unlike(rng, kind) for i, kind in enumerate(["spike", "isotropic", "zero"] * 2)}
    matrix.set_many(odd.items())
    truth.update(odd)
    assert matrix._outlier[[matrix._row_of[i] for i in ("odd0", "odd3")]].all()  # the spikes clip
    assert_exact(matrix, truth, odd["odd0"], 5)
    matrix.remove("odd0")  # the last row moves into its place
    truth.pop("odd0")
    matrix.set("odd3", low_rank(rng, 1)[0])  # no longer an outlier
    truth["odd3"] = matrix.view("odd3").astype(np.float64)
    assert_exact(matrix, truth, odd["odd3"], 8)
    assert_exact(matrix, truth, low_rank(rng, 1)[0], 400)  # k > n


def test_query_levels_keep_the_integer_sum_exact():
    assert query_levels(1024) == LEVELS and query_levels(384) == LEVELS
    for dims in (1536, 3072):
        assert query_levels(dims) * LEVELS * dims < 2**24


def _read_only(arrays: dict) -> dict:
    """Copies that cannot be written to, like the page-cache views a view load hands over."""
    frozen = {}
    for name, array in arrays.items():
        frozen[name] = np.array(array)
        frozen[name].flags.writeable = False
    return frozen


def test_export_restore_round_trip_from_read_only_arrays():
    rng = np.random.default_rng(5)
    truth = {f"id{i}": vec for i, vec in enumerate(low_rank(rng, 250))}
    truth["far"], truth["zero"] = unlike(rng, "spike"), unlike(rng, "zero")
    matrix = VectorMatrix(DIMS)
    matrix.set_many(truth.items())
    for i in range(0, 250, 9):
        matrix.remove(f"id{i}")
        truth.pop(f"id{i}")
    arrays = matrix.export()
    assert set(arrays) == {"meta", "vectors", "codes", "norms", "scale"}  # snapshot format 3's vector parts, as before
    assert set(json.loads(bytes(arrays["meta"]).decode())) == {"ids", "outliers", "scale_rows", "bounds", "limits"}
    restored = VectorMatrix.restore(DIMS, _read_only(arrays))
    assert restored.ids() == matrix.ids()
    assert np.array_equal(restored._outlier[: len(restored)], matrix._outlier[: len(matrix)])
    for _ in range(5):
        query = low_rank(rng, 1)[0]
        assert restored.search(query, 20) == matrix.search(query, 20)
        assert_exact(restored, truth, query, 300)
    more = dict(zip((f"new{i}" for i in range(30)), low_rank(rng, 30)))
    restored.set_many(more.items())  # restored blocks keep working
    restored.remove("id1")
    both = {**{k: v for k, v in truth.items() if k != "id1"}, **more}
    assert_exact(restored, both, low_rank(rng, 1)[0], 15)


def test_float32_scores_stay_within_their_proven_bound():
    """``Float16Rows.products`` (faiss's float32 kernel) against float64, on rows with large cancellation."""
    rng = np.random.default_rng(5)
    for dims in (64, 1024):
        rows = np.concatenate(
            [
                rng.normal(size=(200, dims)),
                1e3 * rng.normal(size=(50, dims)),
                np.tile(rng.normal(size=dims), (50, 1)) * rng.choice([-1.0, 1.0], size=(50, dims)),
            ]
        )
        rows16 = rows.astype(np.float16)
        gathered = vectors.Float16Rows(len(rows16), dims)
        gathered.rows[:] = rows16
        unit = rng.normal(size=dims)
        unit /= np.linalg.norm(unit)
        got = gathered.products(unit.astype(np.float32)[None, :])
        x = rows16.astype(np.float64)
        exact = x @ unit
        bound = vectors.float32_error(dims) * (np.abs(x) @ np.abs(unit))
        assert np.all(np.abs(got - exact) <= bound)
        assert np.any(got != exact)  # float32 arithmetic: the bound is what makes it safe


def test_rows_closer_than_float32_can_tell_are_ordered_exactly():
    """Rows whose cosines differ by less than the float32 error around the k-th: only float64 orders them."""
    rng = np.random.default_rng(7)
    base = rng.normal(size=DIMS).astype(np.float16)
    truth = {}
    for i in range(120):  # one float16 step up or down in one dimension each: cosines 1e-5 .. 1e-4 apart
        vec = base.copy()
        position = i % DIMS
        vec[position] = np.nextafter(vec[position], np.float16(np.inf if i % 2 else -np.inf))
        truth[f"near{i}"] = vec
    truth.update({f"far{i}": v for i, v in enumerate(low_rank(rng, 200))})
    matrix = VectorMatrix(DIMS)
    matrix.set_many(truth.items())
    query = base.astype(np.float64) + 0.01 * rng.normal(size=DIMS)
    unit = query / np.linalg.norm(query)
    exact = {
        i: float(
            np.asarray(v, dtype=np.float16).astype(np.float64)
            @ unit
            / np.linalg.norm(np.asarray(v, dtype=np.float16).astype(np.float64))
        )
        for i, v in truth.items()
    }
    ranked = sorted(exact.values(), reverse=True)
    error = vectors.float32_error(DIMS)
    assert min(a - b for a, b in zip(ranked[:60], ranked[1:61])) < error  # neighbours float32 cannot separate
    for limit in (1, 10, 40, 60):
        assert_exact(matrix, truth, query, limit)
