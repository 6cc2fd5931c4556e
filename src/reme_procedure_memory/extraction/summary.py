"""The rolling summary's rules: where a reply's summary is, and when it is not a summary.

Contract: pure functions of their arguments. ``parse_summary`` finds the summary between ``<summary>`` tags (or
None); ``tagged`` puts a summary given on its own between them; ``summary_problem`` says why a parsed summary is not
one (none, cut off, empty, the prompt's placeholder copied back, the previous summary unchanged although the segment
had content), or None. The size ceiling is checked by the caller with exact tokens.
"""

from __future__ import annotations

import re

from .prompt import PROMPTS

SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.DOTALL)

# Placeholders a model may copy back instead of summarising: the first segment's sentence (the prompt shows no
# summary block then) and the placeholder earlier versions put in that block.
NO_SUMMARY_YET = PROMPTS["first_segment"].strip()
PLACEHOLDERS = (NO_SUMMARY_YET, "(none yet: this is the first segment)")


def parse_summary(reply: str) -> str | None:
    """The reply's rolling summary, stripped, or None.

    The summary runs from the last ``<summary>`` to the last ``</summary>`` after it, so a summary that quotes a
    closing tag stays whole; when that span is empty (e.g. the reply mentions an empty tag pair at the end), the
    last non-empty ``<summary>...</summary>`` block counts.
    """
    reply = reply or ""
    start, end = reply.rfind("<summary>"), reply.rfind("</summary>")
    if start >= 0 and end > start:
        span = reply[start + len("<summary>") : end].strip()
        if span:
            return span
    blocks = [block.strip() for block in SUMMARY.findall(reply) if block.strip()]
    return blocks[-1] if blocks else None


def tagged(summary: str) -> str:
    """A summary given on its own (e.g. to ``finish_segment``) as a reply: between ``<summary>`` tags, unless it
    already has them."""
    return summary if "<summary>" in summary else f"<summary>{summary}</summary>"


def _comparable(text: str) -> str:
    """Text compared for sameness: case, runs of whitespace and enclosing brackets, quotes or dots ignored."""
    return " ".join(text.casefold().split()).strip(" .()[]\"'")


def summary_problem(reply: str, summary: str | None, previous: str, segment: str) -> str | None:
    """Why a parsed rolling summary is not a summary (its size is checked separately), or None.

    Invalid: none at all, one cut off (the last ``<summary>`` never closed), an empty one, the prompt's own
    placeholder copied back, or the previous summary unchanged although the segment had content (a summary must take
    in every segment).
    """
    if summary is None:
        reply = reply or ""
        if reply.rfind("<summary>") > reply.rfind("</summary>"):
            # A reply cut off at its length limit, often a small model repeating itself. Saying so makes the next
            # attempt's input differ from this one's: a deterministic model given the same input answers the same.
            return (
                "its summary was cut off before </summary>: it ran past the reply's limit. Write each fact once, "
                "in a few sentences."
            )
        if "<summary>" in reply and "</summary>" in reply:
            return "the summary between <summary> and </summary> is empty."
        return "it has no <summary>...</summary> section."
    if _comparable(summary) in {_comparable(p) for p in PLACEHOLDERS}:
        return (
            f"the summary is the prompt's placeholder {summary.strip()!r}, not a summary; write what the "
            "trajectory read so far shows."
        )
    if previous.strip() and segment.strip() and _comparable(summary) == _comparable(previous):
        return (
            "the summary is the previous summary unchanged, but this segment has content; add what this segment shows."
        )
    return None
