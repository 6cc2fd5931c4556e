"""Which of the library's experiences a segment's message lists: the queries searched, and how their answers merge.

Contract: pure functions of their arguments.

- ``related_queries(segment, hint)`` are the search queries for one segment: the caller's hint with up to
  ``PIECES`` evenly spaced pieces of the segment (each at most ``PIECE_CHARS`` characters), so a procedure in the
  middle or at the end of a segment is found too, not only the one it begins with (an embedding model reads only
  the beginning of a long query);
- ``called_names(segment)`` are the names of the functions the segment calls, as trajectories write calls
  (``name(...)``, and ``"name": "..."`` of JSON tool calls and results), first seen first, at most ``CALLED_LIMIT``:
  the segment's message also lists the experiences that name them (a ``tools`` search), which a query of the
  segment's words can miss (the words of a trajectory are mostly its data);
- ``with_contents(compact, whole)`` is a compact answer (weak results left out) whose results carry their content
  as the ``detail=full`` answer of the same search (``whole``) gives it;
- ``shown_whole(entries, names)`` keeps the content of only the entries whose content names a function the
  segment calls (``names``; naming as ``procedure_search tools=`` counts it: ``operations.delivery``), the others
  listed by their head: an experience a segment revises is one of the functions it calls (another goal is a new
  experience), and a whole entry costs its tokens in every request of the segment; with no ``names`` (a segment
  whose calls are not written as calls) every entry stays whole. Of three or more such entries, one whose content
  names just one called function, a function more than half of them name (``SHARED_SHARE``: a step most
  procedures share, such as changing directory or logging in) and its description does not, is listed by its head
  too, when another entry names a called function that is not shared: that call says nothing about which procedure
  the segment continues (in the relay runs of issue 31 the model revised such an entry only to shorten it, while
  they were a third of a long file's whole entries: ``shared_calls``);
- ``listed_first(own, searched, limit)`` puts ``own`` (the experiences the same import wrote in its earlier segments:
  a continuing trajectory revises them most) before the searched entries, each path once, at most ``limit``;
- ``merged_related(answers, limit, contents)`` merges the compact search answers of those queries: rank by rank
  (each query's best first), each path once, at most ``limit``; only the ``contents`` entries the model is most
  likely to revise keep their content (the highest vector score, ``scores.vector``, among the entries that carry one, else the
  first such entries), so they can be rewritten without a ``procedure_read`` round trip while the message stays
  short.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from ..operations.delivery import last_part, names_any, tool_pattern

SHARED_SHARE = 0.5  # a called function more than this share of the candidates name is shared, not a goal
SHARED_MIN = 3  # with fewer candidates no function is shared
PIECES = 3
PIECE_CHARS = 1500  # about what an embedding model of 256 word pieces reads, and enough words for BM25
CALLED_LIMIT = 24  # the names of one search: a segment calls a few functions, many times
# a call as trajectories write it: `name(` (Markdown, logs, code) or a JSON tool call's (or answer's) "name": "..."
CALL = re.compile(r'(?<![\w.])([A-Za-z_][\w.]*)\(|"name"\s*:\s*"([A-Za-z_][\w.]*)"')


def related_queries(segment: str, hint: str = "") -> list[str]:
    """The queries for ``segment``: one per piece (all of a short segment; the beginning, middle and end of a long
    one), each prefixed with ``hint``; never empty."""
    n = len(segment)
    count = max(1, min(PIECES, -(-n // PIECE_CHARS)))
    step = n / count
    pieces = [segment[int(i * step) : int(i * step) + min(PIECE_CHARS, int(step) or n)] for i in range(count)]
    queries = [" ".join(part for part in (hint.strip(), piece.strip()) if part) for piece in pieces]
    queries = [q for q in queries if q] or ["procedure"]
    return list(dict.fromkeys(queries))


def called_names(segment: str) -> list[str]:
    """The names ``segment`` calls (see the module docstring), first seen first, each once, at most
    ``CALLED_LIMIT``."""
    names: dict[str, None] = {}
    for match in CALL.finditer(segment):
        names.setdefault(match.group(1) or match.group(2))
        if len(names) == CALLED_LIMIT:
            break
    return list(names)


def with_contents(compact: dict[str, Any], whole: dict[str, Any]) -> dict[str, Any]:
    """``compact``'s results (copies), each with the content (and ``content_truncated``) ``whole`` gives its path."""
    by_path = {r["path"]: r for r in whole.get("results") or [] if "content" in r}
    results = []
    for result in compact.get("results") or []:
        entry, full = dict(result), by_path.get(result["path"])
        if full is not None and "description" in entry:
            entry["content"] = full["content"]
            entry.pop("content_truncated", None)
            if full.get("content_truncated"):
                entry["content_truncated"] = True
        results.append(entry)
    return {**compact, "results": results}


def listed_first(own: list[dict[str, Any]], searched: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """``own`` then ``searched``, each path once (its first entry), at most ``limit`` entries."""
    listed: dict[str, dict[str, Any]] = {}
    for entry in [*own, *searched]:
        if len(listed) < limit:
            listed.setdefault(entry["path"], entry)
    return list(listed.values())


def shown_whole(entries: list[dict[str, Any]], names: list[str] | tuple[str, ...]) -> list[dict[str, Any]]:
    """``entries`` (copies), without their content those whose content names none of ``names``, or only a shared
    one that their description does not name (see the module docstring); all unchanged when ``names`` is empty."""
    if not names:
        return [dict(entry) for entry in entries]
    forms: dict[str, list[str]] = {}  # a function by its last part: "fs.cd" and "cd" are one function
    for name in names:
        forms.setdefault(last_part(name), []).append(name)
    patterns = {key: tool_pattern(group) for key, group in forms.items()}
    named = [
        {name for name, pattern in patterns.items() if names_any(entry["content"], pattern)}
        if "content" in entry
        else set()
        for entry in entries
    ]
    shared = shared_calls([found for found in named if found])
    shown = []
    for entry, found in zip(entries, named):
        entry = dict(entry)
        only_shared = len(found) == 1 and found <= shared
        if only_shared and names_any(str(entry.get("description", "")), patterns[next(iter(found))]):
            only_shared = False  # the description names it: the shared function is this procedure's goal
        if "content" in entry and (not found or only_shared):
            entry.pop("content")
            entry.pop("content_truncated", None)
        shown.append(entry)
    return shown


def shared_calls(candidates: list[set[str]]) -> set[str]:
    """The functions (of those each candidate entry names) that more than ``SHARED_SHARE`` of at least
    ``SHARED_MIN`` candidates name, when some candidate names another one; else none (then only the shared ones
    can tell the candidates apart)."""
    if len(candidates) < SHARED_MIN:
        return set()
    counts = Counter(name for found in candidates for name in found)
    shared = {name for name, count in counts.items() if count > SHARED_SHARE * len(candidates)}
    return shared if any(found - shared for found in candidates) else set()


def merged_related(answers: list[dict[str, Any]], limit: int, contents: int = 1) -> list[dict[str, Any]]:
    """The compact answers' results merged rank by rank (see the module docstring); entries are copies."""
    merged: dict[str, dict[str, Any]] = {}
    lists = [answer.get("results") or [] for answer in answers]
    for rank in range(max((len(results) for results in lists), default=0)):
        for results in lists:
            if rank < len(results) and len(merged) < limit and "description" in results[rank]:
                merged.setdefault(results[rank]["path"], dict(results[rank]))
    entries = list(merged.values())
    with_content = [e for e in entries if "content" in e]

    def vector(entry: dict[str, Any]) -> float:
        score = (entry.get("scores") or {}).get("vector")
        return float("-inf") if score is None else score

    by_similarity = sorted(with_content, key=lambda e: -vector(e))  # stable: rank on ties
    keep = [id(e) for e in by_similarity[:contents]]
    for entry in entries:
        if id(entry) not in keep:
            entry.pop("content", None)
            entry.pop("content_truncated", None)
    return entries
