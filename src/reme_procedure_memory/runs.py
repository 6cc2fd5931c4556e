"""An extraction run: the secret write grant its tools present, its scope and sources, and the answers it got.

A ``Run`` lives from ``ProcedureMemory.begin_run`` to ``end_run`` (one agent attempt at one segment). Besides the
capability, it remembers the answers of its tool calls, so that a call identical to one already answered, with the
workspace unchanged since, gets its earlier answer plus one sentence telling the agent to move on, instead of
running again in a loop until the iteration budget is gone (nothing is journaled or written for it).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .schema import ErrorCode

if TYPE_CHECKING:
    from .store import Operation

INJECTED_KEYS = ("_procedure_grant", "_procedure_sources", "tool_context_id")
# Answers the identical call would get again while nothing changes: the ones a run remembers. Transient failures
# (index_pending, tokenizer_unavailable, disk_full, storage_error, internal errors) are not remembered: retrying them is right.
REPEATABLE_ERRORS = frozenset({
    ErrorCode.INVALID_ARGUMENT, ErrorCode.PATH_OUTSIDE, ErrorCode.NOT_FOUND, ErrorCode.INVALID_EXPERIENCE,
    ErrorCode.ALREADY_EXISTS, ErrorCode.STALE_VERSION, ErrorCode.FIELD_TOO_LONG, ErrorCode.OPERATION_KEY_CONFLICT,
})
REPEAT_NOTE = (
    "You already made this identical call in this segment and nothing has changed since, so this is its earlier "
    "answer: do not repeat it, but create or update an experience, or finish with your final reply and its <summary>."
)


def remembered(answer: dict[str, Any], success: bool) -> bool:
    """Whether an answer is what the identical call would get again in the same workspace state."""
    if not success:
        return (answer.get("error") or {}).get("code") in REPEATABLE_ERRORS
    return "vector_search" not in answer  # a search without vectors (provider outage) is worth repeating


@dataclass
class Run:
    """An active extraction run: the secret grant its tools must present, its scope and its source paths, and the
    answers its tool calls got (so an identical repeated call is answered from memory with a nudge)."""

    scope: str
    sources: tuple[str, ...]
    segment: int | None = None
    context_id: str = field(default_factory=lambda: secrets.token_hex(16))
    grant: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    answers: dict[str, tuple[int, bool, dict[str, Any]]] = field(default_factory=dict)
    # Writes of this run that failed to publish (disk full, permissions, ...) and were not corrected by a later
    # successful write of the same path or the same content: path -> {tool, path, operation_key, code, error, target}.
    failed_writes: dict[str, dict[str, str]] = field(default_factory=dict)

    def write_failed(self, op: "Operation", code: str, error: str) -> None:
        self.failed_writes[op.path] = {"tool": op.tool, "path": op.path, "operation_key": op.key, "code": code,
                                       "error": error, "target": op.target_version}

    def write_succeeded(self, op: "Operation") -> None:
        """A published write corrects an earlier failure of the same path or of the same content."""
        for path, failure in list(self.failed_writes.items()):
            if path == op.path or failure["target"] == op.target_version:
                del self.failed_writes[path]

    def injected(self) -> dict[str, Any]:
        """The injected job kwargs of this run's tool calls (hidden from the model): the write capability and the
        run's original-source paths. ``tool_context_id`` (the run's id) travels beside them."""
        return {"_procedure_grant": self.grant, "_procedure_sources": list(self.sources)}

    @staticmethod
    def call_key(tool: str, args: dict[str, Any]) -> str:
        """Identity of a tool call: the tool and the model's own arguments (injected values excluded)."""
        own = {k: v for k, v in args.items() if k not in INJECTED_KEYS}
        return json.dumps([tool, own], sort_keys=True, ensure_ascii=False, default=str)

    def repeated(self, key: str, generation: int) -> tuple[bool, dict[str, Any]] | None:
        """The earlier answer of an identical call made while the workspace was in the same state, with the nudge."""
        earlier = self.answers.get(key)
        if earlier is None or earlier[0] != generation:
            return None
        return earlier[1], {**earlier[2], "repeated_call": True, "note": REPEAT_NOTE}

    def remember(self, key: str, generation: int, success: bool, answer: dict[str, Any]) -> None:
        if remembered(answer, success):
            self.answers[key] = (generation, success, answer)
