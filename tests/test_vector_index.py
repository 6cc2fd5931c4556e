"""The vector index with its prefix screen (prefix.py): results equal a float64 brute-force scan with the prefix on
and off, under churn, for vectors unlike the basis sample, zero vectors, k > n, and across export/restore (including
an export written before the prefix existed)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reme_procedure_memory import vectors
from reme_procedure_memory.prefix import TAIL_COPIES, Prefix, measure_basis, prefix_width, project
from reme_procedure_memory.quantization import units
from reme_procedure_memory.vectors import VectorMatrix

DIMS = 64  # prefix width 16: 8 basis columns and the tail norm 8 times


@pytest.fixture
def small_prefix(monkeypatch):
    """A prefix screen from 24 rows on, its basis measured on at most 40 of them (so it is re-measured as the set
    grows), small blocks."""
    monkeypatch.setattr(vectors, "PREFIX_MIN_ROWS", 24)
    monkeypatch.setattr(vectors, "PREFIX_SAMPLE", 40)
    monkeypatch.setattr(vectors, "BLOCK_ROWS", 32)


def low_rank(rng, count, rank=6, noise=0.05):
    """Vectors near a ``rank``-dimensional subspace (a steep spectrum, as the prefix screen expects)."""
    basis = np.random.default_rng(99).normal(size=(rank, DIMS))
    return rng.normal(size=(count, rank)) @ basis + noise * rng.normal(size=(count, DIMS))


def brute_force(truth: dict, rows: dict, query, limit: int) -> list[tuple[str, float]]:
    """The exact top ``limit``: float64 cosine of the stored float16 vectors, ties by row."""
    q = np.asarray(query, dtype=np.float64) / np.linalg.norm(query)
    scored = []
    for item, vec in truth.items():
        v = np.asarray(vec, dtype=np.float16).astype(np.float64)
        norm = np.linalg.norm(v)
        scored.append((-(v @ q / norm if norm else 0.0), rows[item], item))
    return [(item, -score) for score, _, item in sorted(scored)[:limit]]


def assert_exact(matrix: VectorMatrix, truth: dict, query, limit: int) -> None:
    rows = {item: matrix._row_of[item] for item in truth}
    got, expected = matrix.search(query, limit), brute_force(truth, rows, query, limit)
    assert [i for i, _ in got] == [i for i, _ in expected]
    assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-12)


def unlike(rng, kind: str) -> np.ndarray:
    """A vector unlike the low-rank sample: a long tail, one huge dimension, or zero."""
    if kind == "tail":
        return rng.normal(size=DIMS)
    if kind == "spike":
        vec = np.zeros(DIMS)
        vec[rng.integers(DIMS)] = 50.0
        return vec
    return np.zeros(DIMS)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_prefix_search_equals_brute_force_under_churn(data):
    use_prefix = data.draw(st.booleans())
    saved = {name: getattr(vectors, name) for name in ("PREFIX_MIN_ROWS", "PREFIX_SAMPLE", "BLOCK_ROWS")}
    vectors.PREFIX_MIN_ROWS, vectors.PREFIX_SAMPLE = (24 if use_prefix else 10**9), 40
    vectors.BLOCK_ROWS = data.draw(st.sampled_from([8, 32, 16_384]))
    try:
        check_churn(data, use_prefix)
    finally:
        for name, value in saved.items():
            setattr(vectors, name, value)


def check_churn(data, use_prefix: bool) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 10_000)))
    matrix, truth = VectorMatrix(DIMS), {}
    for _ in range(data.draw(st.integers(1, 12))):
        action = data.draw(st.sampled_from(["add", "add", "replace", "remove", "unlike"]))
        if action in ("add", "replace", "unlike"):
            count = data.draw(st.integers(1, 40))
            pool = 150 if action == "add" else max(1, len(truth))
            names = [f"id{rng.integers(pool)}" if action == "add" else rng.choice(list(truth) or ["id0"])
                     for _ in range(count)]
            if action == "unlike":
                batch = [unlike(rng, data.draw(st.sampled_from(["tail", "spike", "zero"]))) for _ in names]
            else:
                batch = list(low_rank(rng, count))
            matrix.set_many(zip(names, batch))
            truth.update(zip(names, batch))
        elif truth:
            for item in rng.choice(list(truth), size=min(len(truth), data.draw(st.integers(1, 20))), replace=False):
                matrix.remove(str(item))
                truth.pop(str(item))
    assert len(matrix) == len(truth)
    if use_prefix and len(truth) >= vectors.PREFIX_MIN_ROWS:
        assert matrix._prefix_rows > 0
    for _ in range(4):
        kind = data.draw(st.sampled_from(["like", "like", "unlike"]))
        query = low_rank(rng, 1)[0] if kind == "like" else rng.normal(size=DIMS)
        limit = data.draw(st.integers(1, 60))  # often more than the rows
        if truth:
            assert_exact(matrix, truth, query, limit)
        assert all(np.array_equal(matrix.view(i), np.asarray(truth[i], dtype=np.float16)) for i in truth)


def test_prefix_screen_is_used_and_exact_on_a_steep_spectrum(small_prefix):
    rng = np.random.default_rng(1)
    truth = {f"id{i}": vec for i, vec in enumerate(low_rank(rng, 300))}
    truth.update({f"odd{i}": unlike(rng, kind) for i, kind in enumerate(["tail", "spike", "zero"] * 3)})
    matrix = VectorMatrix(DIMS)
    matrix.set_many(truth.items())
    assert matrix._prefix is not None
    tried = []
    search = matrix._search
    matrix._search = lambda jobs, *rest: tried.append(jobs[0][0].d) or search(jobs, *rest)
    for _ in range(20):
        assert_exact(matrix, truth, low_rank(rng, 1)[0], 10)
    assert matrix._prefix.width in tried  # the prefix screened (and found) at least some of them


def test_prefix_falls_back_to_the_full_codes_and_pauses(small_prefix, monkeypatch):
    monkeypatch.setattr(vectors, "PREFIX_MAX_RESCORE", 0)  # every prefix screen would rescore too many rows
    rng = np.random.default_rng(2)
    truth = {f"id{i}": vec for i, vec in enumerate(low_rank(rng, 200))}
    matrix = VectorMatrix(DIMS)
    matrix.set_many(truth.items())
    assert matrix._prefix is not None
    for _ in range(vectors.PREFIX_FAILURES):
        assert_exact(matrix, truth, low_rank(rng, 1)[0], 5)
    assert matrix._prefix_pause == vectors.PREFIX_PAUSE
    assert_exact(matrix, truth, low_rank(rng, 1)[0], 5)
    assert matrix._prefix_pause == vectors.PREFIX_PAUSE - 1


def test_flat_spectrum_keeps_no_prefix(small_prefix):
    rng = np.random.default_rng(3)
    truth = {f"id{i}": rng.normal(size=DIMS) for i in range(200)}  # isotropic: the tails are most of each row
    matrix = VectorMatrix(DIMS)
    matrix.set_many(truth.items())
    assert matrix._prefix is None and matrix._prefix_rows > 0
    assert all(block.prefix is None for block in matrix._blocks)
    assert_exact(matrix, truth, rng.normal(size=DIMS), 7)


def test_prefix_bound_holds_for_every_row_in_the_bounds():
    rng = np.random.default_rng(4)
    rows = np.concatenate([low_rank(rng, 400), rng.normal(size=(20, DIMS)), np.zeros((2, DIMS))]).astype(np.float16)
    unit = units(rows)[1]
    sample = unit[:200]
    columns = prefix_width(DIMS) - TAIL_COPIES
    basis = measure_basis(sample, columns)
    assert np.abs(basis.T @ basis - np.eye(columns)).max() < 1e-12
    prefix = Prefix(basis, project(sample, basis).mean(axis=0))
    prefix.measure_scale(rows[:200])  # measured on the first rows only: later ones may clip
    codes, code_norms, errors, clipped = prefix.encode(unit.copy())
    prefix.set_limits(code_norms[:200], errors[:200])
    outliers = prefix.fold(code_norms, errors, clipped)
    for query in [*low_rank(rng, 10), *rng.normal(size=(10, DIMS))]:
        q = query / np.linalg.norm(query)
        h, factor, margin = prefix.screen(q)
        bound = codes.astype(np.float64) @ h[0].astype(np.float64) / factor + margin
        assert np.all(bound[~outliers] >= unit[~outliers] @ q)


def _without_prefix(arrays: dict) -> dict:
    """``arrays`` as an export written before the prefix screen existed (main's format 3 vector parts)."""
    import json

    meta = json.loads(bytes(arrays["meta"]).decode("utf-8"))
    for key in ("prefix", "prefix_rows", "outlier_share"):
        meta.pop(key, None)
    old = {name: array for name, array in arrays.items() if not name.startswith("prefix_")}
    old["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    return old


def _read_only(arrays: dict) -> dict:
    """Copies that cannot be written to, like the page-cache views a view load hands over."""
    frozen = {}
    for name, array in arrays.items():
        frozen[name] = np.array(array)
        frozen[name].flags.writeable = False
    return frozen


def test_export_restore_round_trip_and_an_export_without_prefix(small_prefix):
    rng = np.random.default_rng(5)
    truth = {f"id{i}": vec for i, vec in enumerate(low_rank(rng, 250))}
    truth["far"] = unlike(rng, "tail")
    truth["zero"] = unlike(rng, "zero")
    matrix = VectorMatrix(DIMS)
    matrix.set_many(truth.items())
    for i in range(0, 250, 9):
        matrix.remove(f"id{i}")
        truth.pop(f"id{i}")
    arrays = matrix.export()
    assert {"prefix_codes", "prefix_basis", "prefix_mean", "prefix_scale"} <= set(arrays)
    for exported in (arrays, _without_prefix(arrays)):
        restored = VectorMatrix.restore(DIMS, _read_only(exported))
        assert restored.ids() == matrix.ids() and restored._prefix is not None  # measured on load when missing
        for _ in range(5):
            query = low_rank(rng, 1)[0]
            assert restored.search(query, 20) == matrix.search(query, 20)
            assert_exact(restored, truth, query, 300)  # k > n
        more = dict(zip((f"new{i}" for i in range(30)), low_rank(rng, 30)))
        restored.set_many(more.items())  # restored blocks keep working
        restored.remove("id1")
        both = {**{k: v for k, v in truth.items() if k != "id1"}, **more}
        assert_exact(restored, both, low_rank(rng, 1)[0], 15)
    broken = dict(arrays, prefix_codes=arrays["prefix_codes"][:-1])
    with pytest.raises(ValueError):
        VectorMatrix.restore(DIMS, broken)
