"""``finish_segment``: the tool that ends a segment's reply in the turn of its writes (AgentScope backend).

Why: AgentScope asks the model again after every tool call, so a segment whose writes are answered needs a second
request that re-sends the whole segment only to receive a final text reply. Calling ``finish_segment`` in the same
turn as the writes ends the reply once that turn's calls have run (AgentScope's own structured-output exit: the
reply's ``structured_output`` becomes ``{"summary": ...}``), so such a segment costs one request.

Contract: ``FinishSegment`` is offered next to the four job tools for one segment's reply. It refuses, with a JSON
error answer and without ending the reply, when

- another call of the same turn comes after it (it must be last, so every answer of the turn is known);
- a call before it in the same turn answered an error: the model has not seen that answer yet, and a write it meant
  (too long, stale version, ...) would be lost silently. Errors of earlier turns were seen: a write that still
  failed to be saved (e.g. a full disk) is the loop's to stop on (``loop._check_failed_writes``);
- the segment needs a rolling summary and ``check(summary)`` names a problem (none, placeholder, unchanged, too long).

Otherwise it records ``{"summary": summary}`` as the reply's structured output (AgentScope ends the reply when the
turn's calls are done). ``reply_summary(result)`` reads it back from a wrapper result; a reply that ended with text
instead (every other backend, or a model that did not call the tool) keeps its text.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

from agentscope.message import TextBlock, ToolResultState
from agentscope.permission import PermissionBehavior, PermissionContext, PermissionDecision
from agentscope.tool import ToolBase, ToolChunk

from ..errors import ErrorCode, error_answer

FINISH_TOOL = "finish_segment"
DESCRIPTION = (
    "End this segment: call it last, in the same turn as your writes (alone when there is nothing to "
    "write). It ends your reply."
)
SUMMARY_DESCRIPTION = "The updated rolling summary the segment's message asks for (leave it out on the last segment)."
INPUT_SCHEMA = {"type": "object", "properties": {"summary": {"type": "string", "description": SUMMARY_DESCRIPTION}}}
OUTPUT_SCHEMA = {"type": "object", "properties": {"summary": {"type": "string"}}}


def _answer(success: bool, body: dict[str, Any]) -> ToolChunk:
    state = ToolResultState.SUCCESS if success else ToolResultState.ERROR
    return ToolChunk(content=[TextBlock(text=json.dumps(body, ensure_ascii=False))], state=state)


def _refusal(code: ErrorCode, message: str) -> ToolChunk:
    return _answer(False, error_answer(code, message))


def _turn(state) -> tuple[list[str], list[str]]:
    """For the ``finish_segment`` call being run: the names of the calls of its turn that come after it (no answer
    yet), and of the calls before it in its turn that answered an error. A reply accumulates in one message: each
    turn's calls, then their results, so the turn starts after the last result before the running call."""
    last = state.context[-1] if state.context else None
    if last is None or last.role != "assistant":
        return [], []
    blocks = list(last.content)
    answered = {b.id for b in blocks if b.type == "tool_result"}
    running = next(
        (i for i, b in enumerate(blocks) if b.type == "tool_call" and b.name == FINISH_TOOL and b.id not in answered),
        None,
    )
    if running is None:
        return [], []
    start = max((i + 1 for i, b in enumerate(blocks[:running]) if b.type == "tool_result"), default=0)
    calls = [(i, b) for i, b in enumerate(blocks[start:], start) if b.type == "tool_call" and b.name != FINISH_TOOL]
    later = [b.name for i, b in calls if i > running and b.id not in answered]
    failed_ids = {b.id for b in blocks[start:] if b.type == "tool_result" and b.state == ToolResultState.ERROR}
    failed = [b.name for i, b in calls if i < running and b.id in failed_ids]
    return later, failed


class FinishSegment(ToolBase):
    """See the module docstring. ``summary_required``: False on the last segment (nothing reads its summary)."""

    name = FINISH_TOOL
    description = DESCRIPTION
    input_schema = INPUT_SCHEMA
    is_concurrency_safe = False  # runs in turn order with the job tools, which are sequential too
    is_read_only = True
    is_state_injected = True

    def __init__(self, *, summary_required: bool, check: Callable[[str], Awaitable[str | None]]) -> None:
        super().__init__()
        self.summary_required = summary_required
        self.check = check

    async def check_permissions(self, tool_input: dict[str, Any], context: PermissionContext) -> PermissionDecision:
        return PermissionDecision(behavior=PermissionBehavior.ALLOW, message=f"{self.name} is always allowed.")

    async def call(self, _agent_state, summary: str = "", **_: Any) -> ToolChunk:  # type: ignore[override]
        later, failed = _turn(_agent_state)
        if later:
            return _refusal(
                ErrorCode.INVALID_ARGUMENT,
                (
                    f"{FINISH_TOOL} must be the last call of a turn, but {', '.join(later)} came after it. "
                    f"Call {FINISH_TOOL} again once their answers are in."
                ),
            )
        if failed:
            return _refusal(
                ErrorCode.INVALID_ARGUMENT,
                (
                    f"The segment cannot end in this turn: {', '.join(failed)} answered an error. Do what each error "
                    f"says, then call {FINISH_TOOL} again (alone if nothing more can be done)."
                ),
            )
        if self.summary_required:
            problem = await self.check(summary)
            if problem:
                return _refusal(
                    ErrorCode.SUMMARY_INVALID,
                    (f"The rolling summary is not valid: {problem} Call {FINISH_TOOL} again with a valid one."),
                )
        reply = _agent_state.reply_context
        reply.structured_schema = OUTPUT_SCHEMA  # AgentScope ends the reply when its schema is satisfied
        reply.structured_output = {"summary": summary if self.summary_required else ""}
        return _answer(True, {"status": "ok", "segment": "finished"})


def reply_summary(result: dict) -> str | None:
    """The summary a reply ended with through ``finish_segment`` (possibly ""), or None when it ended otherwise."""
    last = result.get("last_message")
    output = last.get("structured_output") if isinstance(last, dict) else None
    if isinstance(output, dict) and isinstance(output.get("summary"), str):
        return output["summary"]
    return None
