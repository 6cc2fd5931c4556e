"""Exact-token segmentation of a decoded trajectory (a pure function of the text, the budget and a counter).

Contract of ``segment(text, budget, count)`` (``segment_counted(text, budget, count_span)`` is the same algorithm
with a span counter, ``count_span(start, end) == count(text[start:end])``, and also returns each segment's exact
count, so later steps need not encode the segment again):

* the segments are ``[(start, end), ...]`` character offsets that tile the text: ``text[s0:e0] + text[s1:e1] + ...
  == text`` (lossless);
* every segment's exact count, ``count(text[start:end])``, is at most ``budget``; each one is checked;
* segments need not fill the budget.

Algorithm (``SEGMENTER_VERSION`` in storage/format.py changes whenever its output may change, so checkpoints made by another version are
recognised): the token density (characters per token) is measured on a sample and then on every emitted segment; a
candidate is predicted to hold about 95% of the budget at the measured density, bounded by the remaining text and by
``MAX_CANDIDATE_FACTOR`` times the budget in characters; in the latter half of a candidate the last whole-line
boundary is preferred (records may still be split when a line is longer than that); a candidate whose exact count
exceeds the budget is halved (re-snapping to a line boundary) until it fits.
"""

from __future__ import annotations

from typing import Callable

from ..errors import SegmentationError

TARGET_FILL = 0.95
SAMPLE_CHARS = 65_536
MAX_CANDIDATE_FACTOR = 64  # characters per token never assumed above this (bounds a candidate's size)


def _snap_to_line(text: str, start: int, end: int, n: int) -> int:
    """Prefer ending right after a newline in the latter half of ``[start, end)``; keep ``end`` at the text's end."""
    if end >= n:
        return n
    cut = text.rfind("\n", start + (end - start) // 2, end)
    return cut + 1 if cut >= 0 else end


def segment(text: str, budget: int, count: Callable[[str], int]) -> list[tuple[int, int]]:
    """Split ``text`` into lossless segments of at most ``budget`` exact tokens each (see the module docstring)."""
    return [(start, end) for start, end, _ in segment_counted(text, budget, lambda a, b: count(text[a:b]))]


def segment_counted(text: str, budget: int, count_span: Callable[[int, int], int]) -> list[tuple[int, int, int]]:
    """``segment`` with a span counter; returns ``(start, end, exact tokens)`` per segment."""
    if budget <= 0:
        raise ValueError("budget must be positive")
    n = len(text)
    if n == 0:
        return []
    sample = min(n, SAMPLE_CHARS)
    density = min(MAX_CANDIDATE_FACTOR, sample / max(1, count_span(0, sample)))
    segments: list[tuple[int, int, int]] = []
    start = 0
    while start < n:
        length = max(1, int(budget * TARGET_FILL * density))
        end = _snap_to_line(text, start, min(n, start + length), n)
        tokens = count_span(start, end)
        while tokens > budget:
            if end - start == 1:
                raise SegmentationError(
                    f"the character at offset {start} alone counts {tokens} tokens, more than the budget {budget}",
                )
            end = _snap_to_line(text, start, start + (end - start) // 2, n)
            tokens = count_span(start, end)
        segments.append((start, end, tokens))
        if tokens:
            density = min(MAX_CANDIDATE_FACTOR, (end - start) / tokens)
        start = end
    return segments
