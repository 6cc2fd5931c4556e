"""Relevance: the pure formula (search/relevance.py), BM25's self-score and looked-up scores, the matrix's
single cosine, and the relevance a real view's answer carries, recomputed from its raw scores."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from reme_procedure_memory.search import views as views_module
from reme_procedure_memory.search.fusion import Fused
from reme_procedure_memory.search.relevance import Relevance, keyword_evidence, relevance, unseen_idf
from reme_procedure_memory.search.vector.matrix import VectorMatrix

from conftest import memory_of, run_job
from helpers.corpus import corpus, write_corpus

GRID = [-1.0, -0.3, 0.0, 0.05, 0.2, 0.5, 0.77, 1.0]
WEIGHTS = [0.0, 0.3, 0.5, 0.7, 1.0]


# -- the formula ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bm25, self_score, expected",
    [
        (None, 5.0, 0.0),
        (0.0, 5.0, 0.0),
        (-1.0, 5.0, 0.0),  # no score, or no positive one: no evidence
        (2.0, 0.0, 0.0),
        (2.0, -1.0, 0.0),  # a query without terms: no evidence
        (2.5, 5.0, 0.5),
        (5.0, 5.0, 1.0),
        (7.5, 5.0, 1.0),  # the share of the self-score, capped at 1
        (1e-9, 1.0, 1e-9),
    ],
)
def test_keyword_evidence_is_the_capped_share_of_the_self_score(bm25, self_score, expected):
    assert keyword_evidence(bm25, self_score) == pytest.approx(expected)


@pytest.mark.parametrize("documents", [0, 1, 2, 10, 1000, 10**6])
def test_unseen_idf_is_bm25s_idf_at_document_frequency_zero(documents):
    assert unseen_idf(documents) == pytest.approx(math.log(1 + (documents + 0.5) / 0.5))
    assert unseen_idf(documents) > math.log(1 + (documents - 1 + 0.5) / 1.5)  # above any seen term's IDF


@pytest.mark.parametrize("cosine, keyword, weight", list(itertools.product(GRID, [0.0, 0.25, 0.6, 1.0], WEIGHTS)))
def test_relevance_mixes_the_clipped_cosine_and_the_keyword_evidence_by_the_vector_weight(cosine, keyword, weight):
    got = relevance(cosine, keyword, weight)
    assert got == pytest.approx(weight * min(1.0, max(0.0, cosine)) + (1 - weight) * keyword)
    assert 0.0 <= got <= 1.0


@pytest.mark.parametrize("keyword, weight", list(itertools.product([0.0, 0.4, 1.0, 1.7, -0.2], WEIGHTS)))
def test_without_a_cosine_relevance_is_the_keyword_evidence_alone(keyword, weight):
    assert relevance(None, keyword, weight) == min(1.0, max(0.0, keyword))
    assert relevance(float("nan"), keyword, weight) == min(1.0, max(0.0, keyword))


@pytest.mark.parametrize("weight", WEIGHTS)
def test_relevance_never_falls_when_either_evidence_grows(weight):
    for low, high in itertools.pairwise(sorted(GRID)):
        for keyword in (0.0, 0.5, 1.0):
            assert relevance(low, keyword, weight) <= relevance(high, keyword, weight)
            assert relevance(high, keyword * 0.5, weight) <= relevance(high, keyword, weight)


@pytest.mark.parametrize("weight", [-0.1, 1.1])
def test_a_vector_weight_outside_0_1_is_refused(weight):
    with pytest.raises(ValueError):
        relevance(0.5, 0.5, weight)


def fused(path: str, vector: float | None, keyword: float | None) -> Fused:
    return Fused(path, 0.01, 1 if vector is not None else None, 1 if keyword is not None else None, vector, keyword)


def test_relevance_of_candidates_looks_up_only_the_missing_branch_once_per_path():
    looked: list[tuple[str, str]] = []

    def cosine_of(path):
        looked.append(("cosine", path))
        return {"b": 0.4}.get(path)  # "c" has no vector

    def bm25_of(path):
        looked.append(("bm25", path))
        return {"a": 3.0}.get(path, 0.0)

    of = Relevance(0.7, 6.0, cosine_of, bm25_of)
    assert of(fused("a", 0.5, None)) == pytest.approx(0.7 * 0.5 + 0.3 * 0.5)  # bm25 looked up: 3 / 6
    assert of(fused("b", None, 6.0)) == pytest.approx(0.7 * 0.4 + 0.3 * 1.0)  # cosine looked up
    assert of(fused("c", None, 1.5)) == pytest.approx(0.3 * 0.25)  # no vector: cosine 0, not "keyword alone"
    assert of(fused("a", 0.5, None)) == pytest.approx(0.5)  # kept: no second lookup
    assert looked == [("bm25", "a"), ("cosine", "b"), ("cosine", "c")]


def test_relevance_without_a_vector_branch_is_the_keyword_evidence():
    of = Relevance(0.7, 4.0, None, lambda path: 0.0)
    assert of(fused("a", None, 2.0)) == pytest.approx(0.5)
    assert of(fused("b", None, None)) == 0.0


# -- the lookups ------------------------------------------------------------------------------------------------------


def test_the_matrix_cosine_of_one_row_is_the_score_search_gives_it():
    rng = np.random.default_rng(7)
    matrix = VectorMatrix(16)
    matrix.set_many((f"r{i}", rng.normal(size=16)) for i in range(40))
    query = rng.normal(size=16)
    for item, score in matrix.search(query, 40):
        assert matrix.cosine(query, item) == pytest.approx(score, abs=1e-12)
    assert matrix.cosine(query, "absent") is None
    assert matrix.cosine(np.zeros(16), "r1") is None and matrix.cosine(np.ones(3), "r1") is None


async def test_bm25_self_score_and_looked_up_scores_match_the_index(make_app, tmp_path):
    """The self-score is the sum of the query terms' IDFs (an unseen term at ``unseen_idf``), a looked-up score is the
    search's own, and after a change of the index a score is computed anew on the current index."""
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        index = memory_of(app).workspace.views.stores["when_to_use_content"].keyword_index
        query = corpus()[3][2] + " zyzzyvaunseen"
        searched = index.scored_search(query, 3)
        assert searched.hits == index.search(query, 3) and len(searched.hits) == 3
        terms = list(dict.fromkeys(index._tokenize(query)))
        seen = [index.vocab[t] for t in terms if t in index.vocab]
        expected = sum(index._get_idf(t) for t in seen) + unseen_idf(index.n_docs) * (len(terms) - len(seen))
        assert len(seen) < len(terms) and searched.self_score == pytest.approx(expected)
        everything = index.search(query, 10_000)
        for doc_id in list(index._doc_id_to_idx)[:30]:
            assert index.score_of(searched, doc_id) == pytest.approx(everything.get(doc_id, 0.0))
        assert index.score_of(searched, "no such record") == 0.0
        target = next(iter(everything))
        await index.add_docs({"extra": "unrelated words only"})  # a mutation: N and the average length change
        after = index.search(query, 10_000)
        assert after[target] != everything[target]
        assert index.score_of(searched, target) == pytest.approx(after[target])
        assert index.scored_search("the of and", 3).self_score == 0.0  # stopwords only: no terms


# -- on a real view ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("short_lists", [False, True], ids=["lists-of-50", "lists-of-5"])
@pytest.mark.parametrize("view", ["when_to_use", "when_to_use_content"])
async def test_each_result_carries_the_relevance_of_its_raw_scores(make_app, tmp_path, monkeypatch, view, short_lists):
    """Recomputed independently from the record's cosine and BM25 score and the index's IDFs. With candidate lists
    of 5 (of 40 records) results missing from one branch's list get that branch's exact score looked up."""
    if short_lists:
        monkeypatch.setattr(views_module, "MAX_CANDIDATES", 5)
    ws = tmp_path / "ws"
    write_corpus(ws)
    missing = {"vector": 0, "keyword": 0}
    async with make_app(workspace=ws) as app:
        memory = memory_of(app)
        store = memory.workspace.views.stores[view]
        index, weight = store.keyword_index, memory.settings.vector_weight
        for query in [q for _, _, q in corpus()[:6]] + ["zebra crossing deploy"]:
            ok, answer = await run_job(app, "procedure_search", query=query, index=view, limit=40)
            assert ok and answer["results"] and answer["min_relevance"] == 0
            terms = list(dict.fromkeys(index._tokenize(query)))
            self_score = sum(
                index._get_idf(index.vocab[t]) if t in index.vocab else unseen_idf(index.n_docs) for t in terms
            )
            all_bm25 = index.search(query, 10_000)
            vector = (await memory.workspace.views.embeddings.embed([query]))[0]  # the fake model is deterministic
            for result in answer["results"]:
                cid = f"{view}:{result['path']}"
                cosine = store.vectors.cosine(vector, cid)
                bm25 = all_bm25.get(cid, 0.0)
                for branch, exact in (("vector", cosine), ("keyword", bm25)):
                    if result["scores"][branch] is None:
                        missing[branch] += 1
                    else:
                        assert result["scores"][branch] == pytest.approx(exact)
                expected = weight * max(0.0, cosine) + (1 - weight) * min(1.0, bm25 / self_score)
                assert result["relevance"] == pytest.approx(expected, abs=1e-4)
    assert missing["keyword"] > 0  # records without a positive BM25 score are in no keyword list
    assert (missing["vector"] > 0) == short_lists
