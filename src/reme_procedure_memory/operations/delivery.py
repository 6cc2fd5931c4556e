"""What a search answer delivers beyond ranking (pure functions): which experiences name the caller's tools, how many
results fit a token budget, the rules a ``detail=rules`` answer hands and which rules have the evidence asked for
(``procedure_search tools=... max_tokens=... detail=rules min_evidence=3``; docs/reference.md).

* **Naming a function.** An experience's steps (its ``content``) name a function when the name occurs there as a
  whole identifier: case-sensitive, not preceded or followed by a letter, digit or underscore, so ``post_tweet``
  in ``post_tweet(content=...)``, ``TwitterAPI.post_tweet`` or "then post_tweet", ``cd`` in ``cd(folder=...)`` or
  "cd into it", never ``cd`` in ``cdrom`` nor ``get_x`` in ``get_x_y``. A qualified name (``GorillaFileSystem.cd``)
  also matches its last part (``cd``): experiences usually write functions bare. (The transfer instrument,
  ``benchmarks/benchlib/transfer.py``, counts a function as named the same way.)
* **Budget.** The experience text of a result is its description, when-to-use and content joined by newlines (what
  an agent is handed; ``sources`` are paths); the results are taken best first while their texts together stay
  within ``max_tokens``, and the first that would exceed it ends the answer: an experience is never cut, so a first
  result larger than the budget is left out too (the answer says how many were left out). With ``detail=rules`` the
  text counted is what that answer hands (``rules_text``), so the budget bounds what the caller gets.
* **Rules.** An extraction writes an experience's content as its procedure, then its rules after a line that is
  exactly ``Rules:``: the environment's conventions (phrasing to values, verbatim arguments, defaults), each with
  its evidence. ``detail=rules`` hands an experience's description, when-to-use and those lines alone: the
  conventions without the steps (an experience without that line hands its description and when-to-use).
* **Evidence.** A rule is a line of the rules that starts with ``-`` and the lines that continue it; its evidence is
  the last "(N trajectories)" (or "(1 trajectory)") it states, as the extraction prompt asks. ``min_evidence=N``
  leaves out of the content the rules whose evidence is below N, and the ``Rules:`` line when none is left; a rule
  that states no count stays (nothing says it is thin), and so do the steps. Rules one or two trajectories showed
  are conditions the agent may apply to a case they do not cover (benchmarks/RUNS.md, issue 31).
"""

from __future__ import annotations

import re
from typing import Iterable

BOUNDARY = "A-Za-z0-9_"


def last_part(name: str) -> str:
    """A function's name without its qualifier: ``"GorillaFileSystem.cd"`` -> ``"cd"``; an unqualified name as is."""
    return name.rstrip(".").rsplit(".", 1)[-1]


def tool_pattern(names: Iterable[str]) -> re.Pattern[str]:
    """A pattern that finds any of ``names`` as a whole identifier (a qualified name also by its last part)."""
    forms = set()
    for name in names:
        forms.add(name)
        if "." in name.strip("."):
            forms.add(last_part(name))
    alternatives = "|".join(re.escape(form) for form in sorted(forms, key=lambda f: (-len(f), f)) if form)
    return re.compile(rf"(?<![{BOUNDARY}])(?:{alternatives})(?![{BOUNDARY}])")


def names_any(content: str, pattern: re.Pattern[str]) -> bool:
    """Whether ``content`` names one of the functions of ``pattern`` (``tool_pattern``)."""
    return pattern.search(content) is not None


def experience_text(fields: dict[str, str]) -> str:
    """The text an agent is handed of an experience: description, when-to-use and content joined by newlines."""
    return "\n".join((fields["description"], fields["when-to-use"], fields["content"]))


RULES_HEAD = "Rules:"  # the line before an experience's rules (extraction/prompts.yaml asks for it)


def rules_head(lines: list[str]) -> int | None:
    """Where a content's rules start: the index of its first line that is exactly ``Rules:`` (spaces around it
    aside); ``None`` when it has none."""
    return next((n for n, line in enumerate(lines) if line.strip() == RULES_HEAD), None)


def rules_of(content: str) -> str:
    """The rules of an experience's ``content``: the lines after its ``rules_head``, stripped; ``""`` when it has
    none."""
    lines = content.splitlines()
    head = rules_head(lines)
    return "" if head is None else "\n".join(lines[head + 1 :]).strip()


def rules_text(fields: dict[str, str]) -> str:
    """The text ``detail=rules`` hands of an experience: description, when-to-use and ``rules_of`` its content
    joined by newlines (the first two alone when it has no rules)."""
    rules = rules_of(fields["content"])
    return "\n".join([fields["description"], fields["when-to-use"]] + ([rules] if rules else []))


EVIDENCE = re.compile(r"\((\d+) trajector(?:y|ies)\)")  # a rule's evidence, as the extraction prompt asks for it


def rule_items(lines: list[str]) -> list[list[str]]:
    """Rule ``lines`` grouped by rule: each ``-`` line with the lines that continue it (lines before the first
    ``-`` line form a group of their own)."""
    items: list[list[str]] = []
    for line in lines:
        if line.lstrip().startswith("-") or not items:
            items.append([line])
        else:
            items[-1].append(line)
    return items


def evidence_of(rule: list[str]) -> int | None:
    """How many trajectories showed a rule (its lines): the last count it states; ``None`` when it states none."""
    counts = EVIDENCE.findall(" ".join(rule))
    return int(counts[-1]) if counts else None


def evident_content(content: str, minimum: int) -> tuple[str, int]:
    """``content`` without the rules whose evidence is below ``minimum`` (``evidence_of``) and how many rules were
    left out; the ``Rules:`` line goes too when no rule is left. The procedure, a content without a ``Rules:`` line
    and a ``minimum`` of 1 or less are left as they are (``content`` itself, 0)."""
    if minimum <= 1:  # every rule: nothing to read (the default, on every search's every result)
        return content, 0
    lines = content.splitlines()
    head = rules_head(lines)
    if head is None:
        return content, 0
    items = rule_items(lines[head + 1 :])
    evident = [(count := evidence_of(item)) is None or count >= minimum for item in items]
    if all(evident):
        return content, 0
    rules = [line for item, keep in zip(items, evident) if keep for line in item]
    kept = lines[: head + 1] + rules if any(line.strip() for line in rules) else lines[:head]
    return "\n".join(kept).rstrip(), evident.count(False)


def within_budget(tokens: list[int], max_tokens: int) -> int:
    """How many of the results (their texts' ``tokens``, best first) are delivered: the longest prefix whose sum is
    at most ``max_tokens`` (0 when the first alone exceeds it)."""
    used = 0
    for n, count in enumerate(tokens):
        used += count
        if used > max_tokens:
            return n
    return len(tokens)
