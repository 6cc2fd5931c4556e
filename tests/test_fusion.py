"""Pure algorithms: weighted RRF arithmetic and the contiguous vector matrix (against brute force)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from reme_procedure_memory.filestore import VectorMatrix
from reme_procedure_memory.views import rrf_fuse


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


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_vector_matrix_matches_brute_force_under_churn(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 10_000)))
    matrix, truth = VectorMatrix(8), {}
    for _ in range(data.draw(st.integers(1, 60))):
        item = f"id{data.draw(st.integers(0, 20))}"
        if data.draw(st.booleans()) or item not in truth:
            vec = rng.normal(size=8).astype(np.float32)
            matrix.set(item, vec)
            truth[item] = vec / np.linalg.norm(vec)
        else:
            matrix.remove(item)
            truth.pop(item)
    assert len(matrix) == len(truth)
    query = rng.normal(size=8)
    limit = data.draw(st.integers(1, 25))
    got = matrix.search(query, limit)
    expected = sorted(((i, float(v @ (query / np.linalg.norm(query)))) for i, v in truth.items()), key=lambda t: -t[1])
    assert [s for _, s in got] == pytest.approx([s for _, s in expected[:limit]], abs=1e-5)
    assert {i for i, _ in got} <= set(truth)


def test_vector_matrix_rejects_wrong_dimensions_and_zero_query():
    matrix = VectorMatrix(4)
    with pytest.raises(ValueError):
        matrix.set("a", [1, 2, 3])
    matrix.set("a", [1, 0, 0, 0])
    assert matrix.search([0, 0, 0, 0], 5) == []
    assert matrix.search([1, 0, 0, 0], 5) == [("a", pytest.approx(1.0))]
