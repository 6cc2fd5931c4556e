"""What a capable model's extraction run cost, read from a relay queue (``shared/tools/relay``).

Contract: pure functions of the queue's files (``N.req.json`` the request body, ``N.resp.json`` the answer,
``usage.jsonl`` the relay's token counts) and a token counter; nothing is written.

- ``conversations(queue, first, last)``: the requests ``first..last`` grouped into conversations (a request whose
  messages hold no assistant message starts one: one conversation is one segment's agent run; an import's model
  preflight, ``is_probe``, is a conversation of its own marked ``probe``), each with its requests' usage and the tool
  calls answered;
- ``cost(conversations, trajectory_tokens)``: requests per segment and their histogram (probes left out: they belong
  to no segment; ``probes`` and ``probe_prompt`` count them), prompt and completion tokens per trajectory token (probes
  included: a provider bills them), the prompt tokens of each segment's first request alone (what the run would cost
  at one request per segment), tool calls by tool, segments with a read or a search, searches on segments that wrote
  nothing, tool answers that are an SDK schema refusal, ``finish_segment`` answers that refused to end the segment,
  and reads and updates of a path the conversation had not shown (``unshown``: an answerer's memory of other
  conversations, which the relay's brief forbids and a model does not have; each such read re-sends the segment);
- ``prompt_parts(queue, requests, count)``: where the prompt tokens go, each request's parts counted with ``count``
  and summed: tool schemas, system prompt, the segment (between ``<segment>`` tags), the listed matches of the
  library, the rest of the segment's message, AgentScope's reminder (any other user message), the model's own calls
  re-sent, and the tool answers by tool.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Callable

RELATED_MARK = "match this segment best"  # the plugin's sentence that opens the listed matches
FINISH = "finish_segment"  # the tool that ends a segment's reply (AgentScope); an error answer is a refusal
PATH_CALLS = ("procedure_read", "procedure_update")  # calls that name an experience the model must have been shown
SCHEMA_REFUSALS = ("is a required property", "Additional properties are not allowed", "is not of type")


def text_of(content) -> str:
    """A message's text (a string, or content blocks)."""
    if isinstance(content, list):
        return "".join(block.get("text", "") for block in content if isinstance(block, dict))
    return content or ""


def usage(queue: Path) -> dict[int, dict]:
    """The relay's token counts by request number."""
    rows = (json.loads(line) for line in (queue / "usage.jsonl").read_text().splitlines() if line.strip())
    return {row["request"]: row for row in rows}


def is_probe(body: dict) -> bool:
    """Whether a request is the import's model preflight (``extraction/preflight.py``): one user message, no system
    prompt, no tools. It belongs to no segment."""
    messages = body.get("messages") or []
    return not body.get("tools") and len(messages) == 1 and messages[0].get("role") == "user"


def conversations(queue: Path, first: int = 1, last: int = 10**9) -> list[dict]:
    """The requests ``first..last`` of ``queue`` by conversation (see the module docstring)."""
    counts = usage(queue)
    result: list[dict] = []
    for n in sorted(r for r in counts if first <= r <= last):
        body = json.loads((queue / f"{n}.req.json").read_text(encoding="utf-8"))
        probe = is_probe(body)
        if (
            probe
            or not result
            or result[-1]["probe"]
            or not any(m.get("role") == "assistant" for m in body["messages"])
        ):
            result.append(
                {
                    "probe": probe,
                    "requests": [],
                    "prompt": 0,
                    "completion": 0,
                    "calls": Counter(),
                    "refused": set(),
                    "finish_refused": set(),
                    "unshown": 0,
                    "first_prompt": counts[n]["prompt_tokens"],
                }
            )
        conversation = result[-1]
        conversation["requests"].append(n)
        conversation["prompt"] += counts[n]["prompt_tokens"]
        conversation["completion"] += counts[n]["completion_tokens"]
        answer = queue / f"{n}.resp.json"
        if answer.is_file():
            shown = json.dumps(body["messages"], ensure_ascii=False)
            for call in json.loads(answer.read_text(encoding="utf-8")).get("tool_calls") or []:
                conversation["calls"][call["name"]] += 1
                path = (call.get("arguments") or {}).get("path") if isinstance(call.get("arguments"), dict) else None
                if call["name"] in PATH_CALLS and path and path not in shown:
                    conversation["unshown"] += 1
        answers = [m for m in body["messages"] if m.get("role") == "tool"]
        conversation["refused"] |= {
            m.get("tool_call_id") for m in answers if any(r in text_of(m.get("content")) for r in SCHEMA_REFUSALS)
        }
        conversation["finish_refused"] |= {
            m.get("tool_call_id")
            for m in answers
            if m.get("name") == FINISH and '"status": "error"' in text_of(m.get("content"))
        }
    return result


def cost(convs: list[dict], trajectory_tokens: int) -> dict:
    """The run's cost figures (see the module docstring)."""
    probes = [c for c in convs if c["probe"]]
    prompt, completion = sum(c["prompt"] for c in convs), sum(c["completion"] for c in convs)
    convs = [c for c in convs if not c["probe"]]
    requests = sum(len(c["requests"]) for c in convs)
    calls = sum((c["calls"] for c in convs), Counter())

    def writes(c: dict) -> int:
        return c["calls"]["procedure_create"] + c["calls"]["procedure_update"]

    return {
        "segments": len(convs),
        "requests": requests,
        "requests_per_segment": round(requests / max(1, len(convs)), 2),
        "histogram": dict(sorted(Counter(len(c["requests"]) for c in convs).items())),
        "prompt": prompt,
        "completion": completion,
        "prompt_per_trajectory_token": round(prompt / trajectory_tokens, 2),
        "first_request_prompt_per_trajectory_token": round(
            (sum(c["first_prompt"] for c in convs) + sum(c["prompt"] for c in probes)) / trajectory_tokens, 2
        ),
        "completion_per_trajectory_token": round(completion / trajectory_tokens, 3),
        "calls": dict(sorted(calls.items())),
        "segments_with_read": sum(1 for c in convs if c["calls"]["procedure_read"]),
        "segments_with_search": sum(1 for c in convs if c["calls"]["procedure_search"]),
        "searches_without_writes": sum(c["calls"]["procedure_search"] for c in convs if not writes(c)),
        "probes": len(probes),
        "probe_prompt": sum(c["prompt"] for c in probes),
        "schema_refusals": sum(len(c["refused"]) for c in convs),
        "finish_refusals": sum(len(c["finish_refused"]) for c in convs),
        "unshown_paths": sum(c["unshown"] for c in convs),
        "segments_with_unshown_path": sum(1 for c in convs if c["unshown"]),
    }


def prompt_parts(queue: Path, requests: list[int], count: Callable[[str], int]) -> dict[str, int]:
    """Tokens of each part of the prompts of ``requests`` (see the module docstring), largest first."""
    parts: Counter = Counter()
    for n in requests:
        body = json.loads((queue / f"{n}.req.json").read_text(encoding="utf-8"))
        parts["tool schemas"] += count(json.dumps(body.get("tools") or [], ensure_ascii=False))
        for message in body["messages"]:
            role, text = message.get("role"), text_of(message.get("content"))
            if role == "system":
                parts["system prompt"] += count(text)
            elif role == "user" and text.startswith("<segment>") and "</segment>" in text:
                segment, rest = text.split("</segment>", 1)
                parts["segment"] += count(segment + "</segment>")
                before, mark, after = rest.partition(RELATED_MARK)
                if mark:
                    listed, _, tail = after.partition("\n\n\n")
                    parts["listed matches"] += count(mark + listed)
                    parts["segment message, other"] += count(before) + count(tail)
                else:
                    parts["segment message, other"] += count(rest)
            elif role == "user":
                parts["other user messages (SDK reminder)"] += count(text)
            elif role == "assistant":
                parts["model's calls re-sent"] += count(text) + count(
                    json.dumps(message.get("tool_calls") or [], ensure_ascii=False)
                )
            elif role == "tool":
                parts[f"answers of {message.get('name') or 'tools'}"] += count(text)
    return dict(parts.most_common())
