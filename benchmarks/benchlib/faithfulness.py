"""Faithfulness of extracted experiences: how many of their steps can be traced to a trajectory they cite.

Contract: pure functions of their arguments (no file access).

- ``steps(content)`` are a content's steps: its non-empty lines, without section headers such as ``Rules:`` or
  ``Procedure:`` and without the extractor's advice (the lines after ``Advice (not shown in the trajectory):``);
- ``evidence(step)`` is what a step can be traced by: the functions it calls (``name(``) and the literals it quotes
  (``'...'`` or ``"..."``, 2 characters or more);
- ``traceable(step, texts)``: whether one piece of that evidence occurs in one of the cited trajectories' texts
  (None when the step has no evidence at all: "report the result" can be neither traced nor refuted);
- ``faithfulness(experiences, text_of)`` sums it over experiences (``(content, sources)`` pairs; ``text_of(source)``
  the cited trajectory's text): steps, steps with evidence, traceable ones and their share.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

ADVICE = "Advice (not shown in the trajectory):"
CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\(")
QUOTED = re.compile(r"'([^'\n]{2,})'|\"([^\"\n]{2,})\"")
HEADER = re.compile(r"^\s*[A-Za-z][A-Za-z ]{0,30}:\s*$")  # "Rules:", "Procedure:" alone on a line


def steps(content: str) -> list[str]:
    """The content's steps (see the module docstring)."""
    own = content.split(ADVICE, 1)[0]
    return [line.strip() for line in own.splitlines() if line.strip() and not HEADER.match(line)]


def evidence(step: str) -> set[str]:
    """The calls and quoted literals of one step."""
    found = {m.group(1) for m in CALL.finditer(step)}
    found |= {m.group(1) or m.group(2) for m in QUOTED.finditer(step)}
    return {piece for piece in found if not piece.startswith("<")}  # placeholders trace nothing


def traceable(step: str, texts: Iterable[str]) -> bool | None:
    """Whether a piece of the step's evidence occurs in one of ``texts``; None when it has none."""
    pieces = evidence(step)
    if not pieces:
        return None
    texts = list(texts)
    return any(piece in text for piece in pieces for text in texts)


def faithfulness(experiences: Iterable[tuple[str, list[str]]], text_of: Callable[[str], str]) -> dict:
    """Steps of every experience, those with evidence, the traceable ones and their share of those with evidence."""
    total = with_evidence = traced = 0
    for content, sources in experiences:
        texts = [text_of(source) for source in sources]
        for step in steps(content):
            total += 1
            verdict = traceable(step, texts)
            if verdict is not None:
                with_evidence += 1
                traced += verdict
    return {
        "steps": total,
        "with_evidence": with_evidence,
        "traceable": traced,
        "share": round(traced / with_evidence, 3) if with_evidence else None,
    }
