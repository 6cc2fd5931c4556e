"""Weighted reciprocal-rank fusion of a view's vector and BM25 candidate lists (a pure function)."""

from __future__ import annotations

from typing import NamedTuple

RRF_K = 60


class Fused(NamedTuple):
    """One fused result: the path, the RRF score and where it ranked in each list (1-based, None if absent)."""

    path: str
    score: float
    vector_rank: int | None
    keyword_rank: int | None
    vector_score: float | None
    keyword_score: float | None


def rrf_fuse(
    vector: list[tuple[str, float]],
    keyword: list[tuple[str, float]],
    vector_weight: float,
    k: int = RRF_K,
) -> list[Fused]:
    """Weighted reciprocal-rank fusion of two ranked ``(id, native score)`` lists.

    score(id) = w / (k + rank_vector) + (1 - w) / (k + rank_keyword), ranks 1-based, a missing term contributes 0.
    The result is the union of both lists, best first; ties keep the better vector rank, then the better keyword rank,
    then the id, so the order is total and deterministic. An id listed twice in one list keeps its first rank.
    """
    if not 0.0 <= vector_weight <= 1.0:
        raise ValueError("vector_weight must be within [0, 1]")
    keyword_weight = 1 - vector_weight
    absent = 1 << 30  # the sort rank of a list the id is missing from
    keyword_first: dict[str, tuple[int, float]] = {}
    for rank, (item, native) in enumerate(keyword, 1):
        if item not in keyword_first:
            keyword_first[item] = (rank, native)
    # rows sort as (-score, vector rank, keyword rank, id, result): ids are unique, so results are never compared
    rows: list[tuple[float, int, int, str, Fused]] = []
    in_vector: set[str] = set()
    for rank, (item, native) in enumerate(vector, 1):
        if item in in_vector:
            continue
        in_vector.add(item)
        hit = keyword_first.get(item)
        if hit is None:
            score = vector_weight / (k + rank)
            rows.append((-score, rank, absent, item, Fused(item, score, rank, None, native, None)))
        else:
            score = vector_weight / (k + rank) + keyword_weight / (k + hit[0])
            rows.append((-score, rank, hit[0], item, Fused(item, score, rank, hit[0], native, hit[1])))
    for item, (rank, native) in keyword_first.items():
        if item not in in_vector:
            score = keyword_weight / (k + rank)
            rows.append((-score, absent, rank, item, Fused(item, score, None, rank, None, native)))
    rows.sort()
    return [row[4] for row in rows]
