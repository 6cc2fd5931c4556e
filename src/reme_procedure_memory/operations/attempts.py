"""Agent attempts: one agent attempt at one segment of an import, with the secret write grant its tools present,
its scope and sources, and the answers it got.

An ``AgentAttempt`` lives from ``AttemptGrants.begin_attempt`` to ``end_attempt``; ``AttemptGrants`` holds the live
ones and is the only way a write step finds its attempt (it fails closed). Besides the
capability, it remembers the answers of its tool calls, so that a call identical to one already answered, with the
workspace unchanged since, gets its earlier answer plus one sentence telling the agent to move on, instead of
running again in a loop until the iteration budget is gone (nothing is journaled or written for it).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ErrorCode, ProcedureError
from ..storage.paths import resolve_inside

if TYPE_CHECKING:
    from ..storage.journal import Operation
    from ..workspace import Workspace

INJECTED_KEYS = ("_procedure_grant", "_procedure_sources", "tool_context_id")
# Answers the identical call would get again while nothing changes: the ones a run remembers. Transient failures
# (index_pending, tokenizer_unavailable, disk_full, storage_error, internal errors) are not remembered: retrying them is right.
REPEATABLE_ERRORS = frozenset(
    {
        ErrorCode.INVALID_ARGUMENT,
        ErrorCode.PATH_OUTSIDE,
        ErrorCode.NOT_FOUND,
        ErrorCode.INVALID_EXPERIENCE,
        ErrorCode.ALREADY_EXISTS,
        ErrorCode.STALE_VERSION,
        ErrorCode.FIELD_TOO_LONG,
        ErrorCode.OPERATION_KEY_CONFLICT,
        ErrorCode.SECRET_DETECTED,
    }
)
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
class AgentAttempt:
    """One live agent attempt at one segment: the secret grant its tools must present, its scope and its source
    paths, and the answers its tool calls got (so an identical repeated call is answered from memory with a nudge)."""

    scope: str
    sources: tuple[str, ...]
    segment: int | None = None
    context_id: str = field(default_factory=lambda: secrets.token_hex(16))
    grant: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    answers: dict[str, tuple[int, bool, dict[str, Any]]] = field(default_factory=dict)
    # Writes of this run that failed to publish (disk full, permissions, ...) and were not corrected by a later
    # successful write of the same path or the same content: path -> {tool, path, operation_key, code, error, target}.
    failed_writes: dict[str, dict[str, str]] = field(default_factory=dict)
    # (path, version) of every experience a compact search answer of this run showed (named only when shown again)
    shown: set[tuple[str, str]] = field(default_factory=set)

    def write_failed(self, op: "Operation", code: ErrorCode, error: str) -> None:
        self.failed_writes[op.path] = {
            "tool": op.tool,
            "path": op.path,
            "operation_key": op.key,
            "code": code,
            "error": error,
            "target": op.target_version,
        }

    def carry_failures(self, failed: list[dict[str, str]]) -> None:
        """Failed writes of earlier attempts at this segment (from its checkpoint): uncorrected until a write of this
        run corrects them (see ``write_succeeded``)."""
        for failure in failed:
            self.failed_writes.setdefault(failure["path"], dict(failure))

    def write_succeeded(self, op: "Operation") -> None:
        """A published write corrects an earlier failure of the same path or of the same content."""
        for path, failure in list(self.failed_writes.items()):
            if path == op.path or failure.get("target") == op.target_version:
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


class AttemptGrants:
    """The live agent attempts of one component, by their tool context id."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self._attempts: dict[str, AgentAttempt] = {}

    def begin_attempt(self, scope: str, sources: list[str], segment: int | None = None) -> AgentAttempt:
        """Open an agent attempt whose tools may create/update experiences citing ``sources``; its writes are
        journaled under ``scope`` (the request id) and ``segment``."""
        checked = []
        for source in dict.fromkeys(sources):
            rel, target = resolve_inside(
                self.workspace.root,
                self.workspace.trajectory_rel_dir,
                source,
                what="trajectory",
            )
            if not target.is_file():
                raise ProcedureError(ErrorCode.NOT_FOUND, f"Source trajectory {rel} does not exist.")
            checked.append(rel)
        run = AgentAttempt(scope=scope, sources=tuple(checked), segment=segment)
        self._attempts[run.context_id] = run
        return run

    def end_attempt(self, run: AgentAttempt) -> None:
        """Revoke an attempt's grant."""
        self._attempts.pop(run.context_id, None)

    def clear(self) -> None:
        """Revoke every grant (the component closes)."""
        self._attempts.clear()

    def live_attempt(self, context_id, grant, sources) -> AgentAttempt | None:
        """The live attempt a tool call's injected values name, or None for any missing or forged value."""
        run = self._attempts.get(context_id) if isinstance(context_id, str) else None
        if (
            run is None
            or not isinstance(grant, str)
            or not secrets.compare_digest(run.grant, grant)
            or sources != list(run.sources)
        ):
            return None
        return run

    def attempt_for(self, context_id, grant, sources) -> AgentAttempt:
        """The live attempt of a tool call, or NO_ACTIVE_RUN (fails closed for any missing or forged value)."""
        run = self.live_attempt(context_id, grant, sources)
        if run is None:
            raise ProcedureError(
                ErrorCode.NO_ACTIVE_RUN,
                "procedure_create and procedure_update are only available to the extraction agent inside an "
                "active procedure_auto_memory run.",
            )
        return run
