"""What a search answer delivers beyond ranking (pure functions): which experiences name the caller's tools, and how
many results fit a token budget (``procedure_search tools=... max_tokens=...``; docs/reference.md).

* **Naming a function.** An experience's steps (its ``content``) name a function when the name occurs there as a
  whole identifier: case-sensitive, not preceded or followed by a letter, digit or underscore, so ``post_tweet``
  in ``post_tweet(content=...)``, ``TwitterAPI.post_tweet`` or "then post_tweet", ``cd`` in ``cd(folder=...)`` or
  "cd into it", never ``cd`` in ``cdrom`` nor ``get_x`` in ``get_x_y``. A qualified name (``GorillaFileSystem.cd``)
  also matches its last part (``cd``): experiences usually write functions bare. (The transfer instrument,
  ``benchmarks/benchlib/transfer.py``, counts a function as named the same way.)
* **Budget.** The experience text of a result is its description, when-to-use and content joined by newlines (what
  an agent is handed; ``sources`` are paths); the results are taken best first while their texts together stay
  within ``max_tokens``, and the first that would exceed it ends the answer: an experience is never cut, so a first
  result larger than the budget is left out too (the answer says how many were left out).
"""

from __future__ import annotations

import re
from typing import Iterable

BOUNDARY = "A-Za-z0-9_"


def tool_pattern(names: Iterable[str]) -> re.Pattern[str]:
    """A pattern that finds any of ``names`` as a whole identifier (a qualified name also by its last part)."""
    forms = set()
    for name in names:
        forms.add(name)
        if "." in name.strip("."):
            forms.add(name.rstrip(".").rsplit(".", 1)[1])
    alternatives = "|".join(re.escape(form) for form in sorted(forms, key=lambda f: (-len(f), f)) if form)
    return re.compile(rf"(?<![{BOUNDARY}])(?:{alternatives})(?![{BOUNDARY}])")


def names_any(content: str, pattern: re.Pattern[str]) -> bool:
    """Whether ``content`` names one of the functions of ``pattern`` (``tool_pattern``)."""
    return pattern.search(content) is not None


def experience_text(fields: dict[str, str]) -> str:
    """The text an agent is handed of an experience: description, when-to-use and content joined by newlines."""
    return "\n".join((fields["description"], fields["when-to-use"], fields["content"]))


def within_budget(tokens: list[int], max_tokens: int) -> int:
    """How many of the results (their texts' ``tokens``, best first) are delivered: the longest prefix whose sum is
    at most ``max_tokens`` (0 when the first alone exceeds it)."""
    used = 0
    for n, count in enumerate(tokens):
        used += count
        if used > max_tokens:
            return n
    return len(tokens)
