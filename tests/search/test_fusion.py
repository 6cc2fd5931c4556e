"""Pure algorithms: weighted RRF arithmetic and the contiguous vector matrix (against brute force)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from reme_procedure_memory.search.fusion import rrf_fuse
from reme_procedure_memory.search.vector.matrix import VectorMatrix

from helpers.views import brute_force


def test_rrf_weighted_arithmetic():
    fused = rrf_fuse([("a", 0.9), ("b", 0.5)], [("b", 3.0), ("c", 1.0)], vector_weight=0.7)
    by_id = {f.path: f for f in fused}
    assert by_id["a"].score == pytest.approx(0.7 / 61)
    assert by_id["b"].score == pytest.approx(0.7 / 62 + 0.3 / 61)
    assert by_id["c"].score == pytest.approx(0.3 / 62)
    assert [f.path for f in fused] == ["b", "a", "c"]
    assert (by_id["b"].vector_rank, by_id["b"].keyword_rank) == (2, 1)
    assert (by_id["c"].vector_rank, by_id["c"].keyword_score) == (None, 1.0)


def test_rrf_is_rrf_even_with_one_empty_list():
    only_keyword = rrf_fuse([], [("x", 12.5), ("y", 3.0)], vector_weight=0.7)
    assert [f.score for f in only_keyword] == pytest.approx([0.3 / 61, 0.3 / 62])
    only_vector = rrf_fuse([("x", 0.1)], [], vector_weight=0.7)
    assert only_vector[0].score == pytest.approx(0.7 / 61)


def test_rrf_extreme_weights_follow_one_list():
    vec, kw = [("a", 1), ("b", 1), ("c", 1)], [("c", 1), ("b", 1), ("a", 1)]
    assert [f.path for f in rrf_fuse(vec, kw, 1.0)] == ["a", "b", "c"]
    assert [f.path for f in rrf_fuse(vec, kw, 0.0)] == ["c", "b", "a"]
    with pytest.raises(ValueError):
        rrf_fuse(vec, kw, 1.5)


@given(
    st.lists(st.sampled_from("abcdefghij"), unique=True, max_size=10),
    st.lists(st.sampled_from("abcdefghij"), unique=True, max_size=10),
    st.floats(0, 1),
)
def test_rrf_properties(vec_ids, kw_ids, weight):
    fused = rrf_fuse([(i, 0.0) for i in vec_ids], [(i, 0.0) for i in kw_ids], weight)
    assert {f.path for f in fused} == set(vec_ids) | set(kw_ids)
    scores = [f.score for f in fused]
    assert scores == sorted(scores, reverse=True)
    for f in fused:
        expected = (weight / (60 + vec_ids.index(f.path) + 1) if f.path in vec_ids else 0) + (
            (1 - weight) / (60 + kw_ids.index(f.path) + 1) if f.path in kw_ids else 0
        )
        assert f.score == pytest.approx(expected)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_vector_matrix_ranks_exactly_like_brute_force_under_churn(data):
    from reme_procedure_memory.search.vector import matrix as vectors

    block_rows = vectors.BLOCK_ROWS
    vectors.BLOCK_ROWS = data.draw(st.sampled_from([4, 16, 64, 16_384]))  # many blocks too
    try:
        check_churn(data)
    finally:
        vectors.BLOCK_ROWS = block_rows


def check_churn(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 10_000)))
    dims = data.draw(st.sampled_from([8, 48]))
    matrix, truth = VectorMatrix(dims), {}
    clustered = rng.normal(size=dims)  # many near-ties around one direction, and outlier dimensions
    for _ in range(data.draw(st.integers(1, 300))):
        item = f"id{data.draw(st.integers(0, 120))}"
        if data.draw(st.integers(0, 3)) or item not in truth:
            vec = rng.normal(size=dims) * (rng.random(dims) < 0.9) + data.draw(st.sampled_from([0, 3])) * clustered
            vec[0] *= data.draw(st.sampled_from([1, 1, 20]))
            matrix.set(item, vec)
            truth[item] = vec
        else:
            matrix.remove(item)
            truth.pop(item)
    assert len(matrix) == len(truth)
    rows = {item: matrix._row_of[item] for item in truth}
    for _ in range(3):
        query = rng.normal(size=dims) + data.draw(st.sampled_from([0, 3])) * clustered
        limit = data.draw(st.integers(1, 60))
        got = matrix.search(query, limit)
        expected = brute_force(truth, rows, query, limit)
        assert [i for i, _ in got] == [i for i, _ in expected]
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-12)
        assert all(np.array_equal(matrix.view(i), np.asarray(truth[i], dtype=np.float16)) for i in truth)


def test_vector_matrix_rejects_wrong_dimensions_and_zero_query():
    matrix = VectorMatrix(4)
    with pytest.raises(ValueError):
        matrix.set("a", [1, 2, 3])
    matrix.set("a", [1, 0, 0, 0])
    assert matrix.search([0, 0, 0, 0], 5) == []
    assert matrix.search([1, 0, 0, 0], 5) == [("a", pytest.approx(1.0))]


def test_vector_matrix_export_restores_the_same_index_and_rejects_mismatched_arrays():
    rng = np.random.default_rng(5)
    matrix = VectorMatrix(16)
    matrix.set_many((f"id{i}", rng.normal(size=16)) for i in range(300))
    for i in range(0, 300, 7):
        matrix.remove(f"id{i}")
    arrays = matrix.export()
    restored = VectorMatrix.restore(16, arrays)
    assert restored.ids() == matrix.ids()
    assert all(np.array_equal(restored.view(i), matrix.view(i)) for i in matrix.ids())
    for _ in range(5):
        query = rng.normal(size=16)
        assert restored.search(query, 20) == matrix.search(query, 20)
    restored.set("new", rng.normal(size=16))  # restored blocks keep working
    assert "new" in restored and restored.search(np.asarray(restored.view("new"), dtype=float), 1)[0][0] == "new"
    broken = dict(arrays, codes=arrays["codes"][:-1])
    with pytest.raises(ValueError):
        VectorMatrix.restore(16, broken)
