"""Absolute relevance of a search result, in [0, 1] (pure functions; docs/guide.md "Relevance").

RRF scores rank but say nothing absolute (every first result scores about 1/61 whatever it is about), so a result's
relevance is computed from the raw evidence of both branches instead:

* **vector** ``v = max(0, cosine)``: the cosine similarity of the query's and the record's embeddings (negative
  similarity is no evidence);
* **keyword** ``k = min(1, bm25 / self_score)``: the record's BM25 score divided by the query's self-score, the sum
  of the IDFs of the query's distinct terms (stems, stopwords removed), a term no record holds counting with the
  highest IDF, ``ln(1 + (N + 0.5) / 0.5)``. A record of average length holding each query term once scores exactly
  the self-score with BM25's ``(k1 + 1) tf / (tf + k1 (...))`` at ``tf = 1``, so ``k`` is the IDF-weighted share of
  the query's terms the record holds (rarer terms count more; repeats count a little more, up to 1);
* **relevance** ``w v + (1 - w) k`` with ``w = vector_weight`` (the weight the fusion gives the vector list); when
  the vector branch did not run (``vector_weight`` 0, or the provider unavailable) it is ``k`` alone.

The scale of ``v`` is the embedding model's: the default floor (setting ``search.min_relevance``) is calibrated on
the embedded MiniLM by ``benchmarks/relevance.py``; another model needs its own (docs/guide.md says how).
"""

from __future__ import annotations

import math
from typing import Callable

from .fusion import Fused


def keyword_evidence(bm25: float | None, self_score: float) -> float:
    """``min(1, bm25 / self_score)``; 0 without a score or without query terms (``self_score`` 0)."""
    if not bm25 or bm25 <= 0 or self_score <= 0:
        return 0.0
    return min(1.0, bm25 / self_score)


def unseen_idf(documents: int) -> float:
    """The IDF BM25 would give a term no document holds: ``ln(1 + (N + 0.5) / 0.5)`` (the highest it gives)."""
    return math.log(1 + (max(0, documents) + 0.5) / 0.5)


def relevance(cosine: float | None, keyword: float, vector_weight: float) -> float:
    """``vector_weight * max(0, cosine) + (1 - vector_weight) * keyword``, in [0, 1]; ``keyword`` alone when there
    is no cosine (the vector branch did not run)."""
    if not 0.0 <= vector_weight <= 1.0:
        raise ValueError("vector_weight must be within [0, 1]")
    keyword = min(1.0, max(0.0, keyword))
    if cosine is None or math.isnan(cosine):
        return keyword
    return vector_weight * min(1.0, max(0.0, cosine)) + (1 - vector_weight) * keyword


class Relevance:
    """The relevance of one search's fused candidates, computed on demand and kept per path.

    A candidate lacks a branch's score when it was not among that branch's candidates: ``cosine_of(path)`` and
    ``bm25_of(path)`` then give the exact value (``cosine_of``: None for a record without a vector, which counts as
    cosine 0). ``cosine_of`` is None when the vector branch did not run. Any thread may call it (the lookups lock
    what they read)."""

    def __init__(
        self,
        vector_weight: float,
        self_score: float,
        cosine_of: Callable[[str], float | None] | None,
        bm25_of: Callable[[str], float],
    ) -> None:
        self.vector_weight = vector_weight
        self.self_score = self_score
        self.cosine_of = cosine_of
        self.bm25_of = bm25_of
        self._known: dict[str, float] = {}

    def __call__(self, hit: Fused) -> float:
        known = self._known.get(hit.path)
        if known is None:
            cosine = None
            if self.cosine_of is not None:
                cosine = hit.vector_score if hit.vector_score is not None else self.cosine_of(hit.path)
                cosine = 0.0 if cosine is None else cosine  # a record without a vector: no vector evidence
            bm25 = hit.keyword_score if hit.keyword_score is not None else self.bm25_of(hit.path)
            known = self._known[hit.path] = relevance(
                cosine, keyword_evidence(bm25, self.self_score), self.vector_weight
            )
        return known
