"""Which of the library's experiences a segment's message lists: the queries searched, and how their answers merge.

Contract: pure functions of their arguments.

- ``related_queries(segment, hint)`` are the search queries for one segment: the caller's hint with up to
  ``PIECES`` evenly spaced pieces of the segment (each at most ``PIECE_CHARS`` characters), so a procedure in the
  middle or at the end of a segment is found too, not only the one it begins with (an embedding model reads only
  the beginning of a long query);
- ``merged_related(answers, limit)`` merges the compact search answers of those queries: rank by rank (each
  query's best first), each path once, at most ``limit``; only the entry the model is most likely to revise keeps its
  content (the highest vector score, ``scores.vector``, among the entries that carry one, else the first such entry), so it can be
  updated without a ``procedure_read`` round trip while the message stays short.
"""

from __future__ import annotations

from typing import Any

PIECES = 3
PIECE_CHARS = 1500  # about what an embedding model of 256 word pieces reads, and enough words for BM25


def related_queries(segment: str, hint: str = "") -> list[str]:
    """The queries for ``segment``: one per piece (all of a short segment; the beginning, middle and end of a long
    one), each prefixed with ``hint``; never empty."""
    n = len(segment)
    count = max(1, min(PIECES, -(-n // PIECE_CHARS)))
    step = n / count
    pieces = [segment[int(i * step):int(i * step) + min(PIECE_CHARS, int(step) or n)] for i in range(count)]
    queries = [" ".join(part for part in (hint.strip(), piece.strip()) if part) for piece in pieces]
    queries = [q for q in queries if q] or ["procedure"]
    return list(dict.fromkeys(queries))


def merged_related(answers: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The compact answers' results merged rank by rank (see the module docstring); entries are copies."""
    merged: dict[str, dict[str, Any]] = {}
    lists = [answer.get("results") or [] for answer in answers]
    for rank in range(max((len(results) for results in lists), default=0)):
        for results in lists:
            if rank < len(results) and len(merged) < limit and "description" in results[rank]:
                merged.setdefault(results[rank]["path"], dict(results[rank]))
    entries = list(merged.values())
    with_content = [e for e in entries if "content" in e]
    keep = max(with_content, key=lambda e: (e.get("scores") or {}).get("vector", float("-inf")), default=None)
    for entry in entries:
        if entry is not keep:
            entry.pop("content", None)
            entry.pop("content_truncated", None)
    return entries
