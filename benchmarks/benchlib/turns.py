"""User turns of a trajectory in the four formats of ``shared/data/trajectories`` (pure; no I/O but ``read_turns``).

A *turn* is one user message and the functions the assistant called after it, in call order (repeats kept), until
the next user message. The system prompt, assistant text and tool results are not part of any turn; calls made
before the first user message belong to no turn. Formats (see ``shared/data/README.md``):

* ``.jsonl`` -- one OpenAI-style chat message per line; calls are ``tool_calls[].function.name`` of assistant messages.
* ``.json`` -- ``{"id": ..., "messages": [...]}`` with the same messages.
* ``.md`` -- ``## user`` / ``## assistant`` / ``## system`` sections; a call is a line
  ``**assistant → tool** `name(args)` ``; its result is a fenced block (never read as a header or a call). A user
  message is the section's text up to the next header or call line.
* ``.log`` -- ``<time> <LEVEL> user: <text>``, ``<time> INFO agent tool_call name(args)``, ``... tool name -> ...``,
  ``... assistant: ...``; a line without a leading timestamp continues the entry above it.

Used by ``extraction.py`` (the task of a trajectory is its first turn's message; the transfer mode's per-turn
queries and gold functions). Tested in ``tests/benchmarks/test_extraction_transfer.py``::

    python -c "import sys; sys.path.insert(0, 'benchmarks'); from benchlib.turns import read_turns; print(read_turns(PATH))"
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

FORMATS = (".jsonl", ".json", ".md", ".log")
CALL = re.compile(r"([A-Za-z_][\w.]*)\s*\(")  # the function name before its argument list
MD_HEADER = re.compile(r"^## (\w+)\s*$")
MD_CALL = re.compile(r"^\*\*assistant → tool\*\* `(.*)`\s*$")
LOG_LINE = re.compile(r"^\d{4}-\d{2}-\d{2}T\S+ +[A-Z]+ +(.*)$")
LOG_USER = re.compile(r"^user: ?(.*)$", re.S)
LOG_CALL = re.compile(r"^agent tool_call (.*)$", re.S)


@dataclass(frozen=True)
class Turn:
    """One user message and the names of the functions called after it (in order, repeats kept)."""

    message: str
    calls: tuple[str, ...] = field(default_factory=tuple)

    @property
    def functions(self) -> tuple[str, ...]:
        """The distinct function names, in the order of their first call."""
        return tuple(dict.fromkeys(self.calls))


def _call_name(signature: str) -> str | None:
    found = CALL.match(signature.strip())
    return found.group(1) if found else None


def _from_events(events: list[tuple[str, str]]) -> list[Turn]:
    """Turns from ``("user", message)`` and ``("call", name)`` events in order."""
    turns: list[list] = []
    for kind, value in events:
        if kind == "user":
            turns.append([value.strip(), []])
        elif kind == "call" and turns:
            turns[-1][1].append(value)
    return [Turn(message, tuple(calls)) for message, calls in turns]


def _message_events(messages: list[dict]) -> list[tuple[str, str]]:
    events = []
    for message in messages:
        role = message.get("role")
        if role == "user":
            content = message.get("content")
            if isinstance(content, list):  # OpenAI content parts
                content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            events.append(("user", str(content or "")))
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                name = (call.get("function") or {}).get("name")
                if name:
                    events.append(("call", str(name)))
    return events


def _markdown_events(text: str) -> list[tuple[str, str]]:
    events: list[tuple[str, str]] = []
    section, lines, fenced = None, [], False

    def close() -> None:
        if section == "user":
            events.append(("user", "\n".join(lines)))

    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        header, call = MD_HEADER.match(line), MD_CALL.match(line)
        if header or call:
            close()
            section, lines = (header.group(1) if header else None), []
            name = _call_name(call.group(1)) if call else None
            if name:
                events.append(("call", name))
        elif section == "user":
            lines.append(line)
    close()
    return events


def _log_events(text: str) -> list[tuple[str, str]]:
    entries: list[str] = []
    for line in text.splitlines():
        found = LOG_LINE.match(line)
        if found:
            entries.append(found.group(1))
        elif entries:
            entries[-1] += "\n" + line
    events = []
    for entry in entries:
        user, call = LOG_USER.match(entry), LOG_CALL.match(entry)
        if user:
            events.append(("user", user.group(1)))
        elif call and _call_name(call.group(1)):
            events.append(("call", _call_name(call.group(1))))
    return events


def parse_turns(text: str, suffix: str) -> list[Turn]:
    """The user turns of a trajectory's ``text`` in the format named by its file ``suffix`` (``.jsonl`` ...)."""
    suffix = suffix.lower()
    if suffix == ".jsonl":
        events = _message_events([json.loads(line) for line in text.splitlines() if line.strip()])
    elif suffix == ".json":
        events = _message_events(json.loads(text)["messages"])
    elif suffix == ".md":
        events = _markdown_events(text)
    elif suffix == ".log":
        events = _log_events(text)
    else:
        raise ValueError(f"unknown trajectory format {suffix!r} (known: {', '.join(FORMATS)})")
    return _from_events(events)


def read_turns(path: Path) -> list[Turn]:
    """The user turns of the trajectory file ``path`` (UTF-8)."""
    return parse_turns(path.read_text(encoding="utf-8"), path.suffix)
