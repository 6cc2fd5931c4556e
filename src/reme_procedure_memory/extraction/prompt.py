"""What the extraction agent is shown for one segment, and whether that fits the model's context.

Contract: pure functions of their arguments (the shipped ``prompts.yaml`` is read once, at import).

- ``system_prompt(limits, advice)`` is the same for every segment and import with the same targets and advice
  setting, so a provider's prefix cache covers it;
- ``user_message(...)`` renders one segment's message: the segment's exact text, the summary so far (or the
  first-segment sentence), the caller's hint, the library's experiences that match the segment best
  (``related_lines``), the ledger of earlier attempts (``ledger_lines``) and what to finish with (a rolling summary,
  except after the last segment);
- ``repair_message(...)`` renders a tool-less summary repair turn;
- ``tool_schemas(jobs, finish_tool)`` are the four job tools (and ``finish_segment``) as function-calling requests
  carry them;
- ``user_tokens(counter, user, parts)`` counts a user message exactly, reusing recorded counts of parts inside it;
- ``budget_problem(sizes, limits)`` is the sentence saying why an initial input does not fit, or None when it does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Mapping

import yaml

from ..schema import AGENT_TOOLS, agent_description, agent_parameters
from ..storage.journal import ABANDONED
from .finish import DESCRIPTION as FINISH_DESCRIPTION, FINISH_TOOL, INPUT_SCHEMA as FINISH_SCHEMA

PROMPTS = yaml.safe_load((Path(__file__).with_name("prompts.yaml")).read_text(encoding="utf-8"))

# Tokens an agent SDK adds around what the plugin counts: role markers of the chat template and AgentScope's runtime
# reminder message (measured ~130 tokens with AgentScope 2.0.10); the budget check counts this allowance on top.
FRAMING_ALLOWANCE = 512


def system_prompt(limits, advice: bool = False, grow_limit: int = 0) -> str:
    """The system prompt for the token targets in ``limits``; ``advice`` (``extraction.advice``): whether the
    extractor may add advice of its own, after ``schema.ADVICE_MARKER``; ``grow_limit`` (``extraction.grow_limit``,
    0: none): the tokens a revision may take an experience's three text fields to."""
    growth = PROMPTS["growth"].format(space=" ", limit=grow_limit) if grow_limit else ""
    return PROMPTS["system_prompt"].format(
        description=limits.description,
        when_to_use=limits.when_to_use,
        content=limits.content,
        summary=limits.summary,
        advice=PROMPTS["advice_on" if advice else "advice_off"],
        growth=growth,
    )


def ledger_lines(ledger, failed: Iterable[dict[str, str]]) -> list[str]:
    """One line per journaled write of the segment (oldest first), then its failed writes the journal could not
    record (e.g. its directory was not writable)."""
    lines = [
        f"- {op.tool} {op.path} (operation_key {op.key}) FAILED, not saved: {op.error}"
        if op.status == ABANDONED
        else f"- {op.tool} {op.path} (operation_key {op.key}, {op.status}, version {op.target_version})"
        for op in ledger
    ]
    journaled = {op.key for op in ledger}
    lines += [
        f"- {f['tool']} {f['path']} (operation_key {f['operation_key']}) FAILED, not saved: {f['error']}"
        for f in failed
        if f["operation_key"] not in journaled
    ]
    return lines


def related_lines(results: list[dict], over: Mapping[str, int] | None = None, limit: int = 0) -> list[str]:
    """One entry per related experience (``related.merged_related``): path, version and description (the line that
    names its procedure; every listed entry is re-sent with each turn of the segment); an entry that carries its
    content shows its when-to-use and its content too, so it can be revised without reading it first. ``over``:
    the three fields' tokens of the experiences over ``limit`` (``extraction.grow_limit``), by path; their entries
    say so: they sit between the bound and its ceiling, where a revision that adds anything without folding is
    refused (``consolidate_required``, a request re-sending the segment)."""
    lines = []
    over = over or {}
    for r in results:
        size = f"; {over[r['path']]} tokens, over {limit}: a revision shortens it" if r["path"] in over else ""
        head = f"- {r['path']} ({r['version']}{size}): {r['description']}"
        if "content" in r:
            more = " (continues: procedure_read it before rewriting the content)" if r.get("content_truncated") else ""
            lines.append(
                f"{head}\n  when to use: {r['when-to-use']}\n  content{more}:\n"
                + "\n".join(f"    {line}" for line in r["content"].splitlines())
            )
        else:
            lines.append(head)
    return lines


def user_message(
    *,
    path: str,
    fmt: str,
    number: int,
    total: int,
    start: int,
    end: int,
    segment: str,
    hint: str,
    summary: str,
    lines: list[str],
    summary_limit: int,
    related: list[str] | None = None,
    finish_tool: bool = False,
) -> str:
    """The user message of segment ``number`` of ``total`` (characters ``start``..``end`` of the copy at ``path``):
    the related experiences (``related``: ``related_lines``; [] for an empty library, None when not searched) and,
    except on the last segment, the request for the rolling summary: in the final reply, or with ``finish_tool``
    as ``finish_segment``'s argument."""
    if related is None:
        listed = ""
    else:
        listed = PROMPTS["related"].format(entries="\n".join(related)) if related else PROMPTS["no_related"]
    suffix = "_tool" if finish_tool else ""
    finish = (
        PROMPTS["finish_last" + suffix]
        if number == total
        else PROMPTS["finish_segment" + suffix].format(
            number=number, summary_limit=summary_limit, summary_scope=PROMPTS["summary_scope"]
        )
    )
    return PROMPTS["segment_user"].format(
        path=path,
        format=fmt,
        number=number,
        total=total,
        start=start,
        end=end,
        hint=PROMPTS["memory_hint"].format(memory_hint=hint) if hint else "",
        previous=PROMPTS["previous_summary"].format(summary=summary) if summary else PROMPTS["first_segment"],
        related=listed,
        ledger=PROMPTS["ledger"].format(entries="\n".join(lines)) if lines else "",
        segment=segment,
        finish=finish,
    )


def repair_message(
    *, segment_message: str, number: int, total: int, problem: str, reply: str, summary_limit: int
) -> str:
    """A summary repair turn: the problem, the quoted reply (when not empty) and the segment's own message (when
    not empty)."""
    quoted = PROMPTS["repair_reply"].format(number=number, total=total, reply=reply) if reply else ""
    return PROMPTS["summary_repair"].format(
        segment_message=segment_message,
        number=number,
        total=total,
        problem=problem,
        reply=quoted,
        summary_limit=summary_limit,
        summary_scope=PROMPTS["summary_scope"],
    )


def tool_schemas(jobs, finish_tool: bool = False) -> str:
    """The four job tools' schemas (and ``finish_segment``'s, with ``finish_tool``) as function-calling requests
    carry them: with ``finish_tool`` (the toolkit the plugin builds: ``agent_call.agent_tool``) as an extraction
    agent sees them (``schema.agent_description``, ``schema.agent_parameters``), else whole, as the backend builds
    them."""
    schemas = [
        (
            name,
            agent_description(name, jobs[name].description) if finish_tool else jobs[name].description,
            agent_parameters(name, jobs[name].parameters) if finish_tool else jobs[name].parameters,
        )
        for name in AGENT_TOOLS
    ]
    if finish_tool:
        schemas.append((FINISH_TOOL, FINISH_DESCRIPTION, FINISH_SCHEMA))
    return json.dumps(
        [
            {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}
            for name, description, parameters in schemas
        ],
        ensure_ascii=False,
    )


def user_tokens(counter, user: str, parts: Iterable[tuple[str, int | None]]) -> int:
    """Exact tokens of ``user``: each (text, tokens) part found in it (not overlapping an earlier one) keeps its
    recorded count, so mostly the text around the parts is encoded (``TokenCounter.count_around``)."""
    known = []
    for part, tokens in parts:
        at = user.find(part) if part and tokens is not None else -1
        if at >= 0 and all(at >= e or at + len(part) <= s for s, e, _ in known):
            known.append((at, at + len(part), tokens))
    return counter.count_around(user, known)


def budget_problem(sizes: list[int], limits) -> tuple[int, str | None]:
    """The initial input's total tokens (``sizes``: system, input, tool schemas, plus the framing allowance) and,
    when it exceeds ``limits.context - limits.reserve``, the sentence saying so and what to do."""
    total, available = sum(sizes) + FRAMING_ALLOWANCE, limits.context - limits.reserve
    if total <= available:
        return total, None
    return total, (
        f"The initial input of this segment needs {total} tokens (system {sizes[0]}, input {sizes[1]}, tool "
        f"schemas {sizes[2]}, message framing {FRAMING_ALLOWANCE}) but only {available} fit (token_limits.context {limits.context} minus "
        f"reserve {limits.reserve}). Configure a model with a larger context and raise "
        "components.procedure_memory.default.token_limits.context, then resume with the same request_id."
    )
