"""``finish_segment`` (extraction/finish.py): which calls belong to its turn, and when it ends the reply.

AgentScope's real message and state classes are used; the end-to-end behaviour with ReMe's AgentScope wrapper is in
``tests/e2e/test_agentscope_e2e.py``.
"""

from __future__ import annotations

import json

from agentscope.message import AssistantMsg, ToolCallBlock, ToolResultBlock, ToolResultState
from agentscope.state import AgentState

from reme_procedure_memory.extraction.agent_call import reply_text
from reme_procedure_memory.extraction.finish import FINISH_TOOL, FinishSegment, reply_summary


def call(cid: str, name: str) -> ToolCallBlock:
    return ToolCallBlock(id=cid, name=name, input="{}")


def result(cid: str, name: str, ok: bool = True) -> ToolResultBlock:
    return ToolResultBlock(
        id=cid, name=name, output="{}", state=ToolResultState.SUCCESS if ok else ToolResultState.ERROR
    )


def state_of(*blocks) -> AgentState:
    state = AgentState()
    state.context = [AssistantMsg(name="agent", content=list(blocks))]
    return state


async def finish(state: AgentState, summary: str = "s", *, required: bool = True, problem: str | None = None):
    checked = []

    async def check(text: str) -> str | None:
        checked.append(text)
        return problem

    chunk = await FinishSegment(summary_required=required, check=check)(_agent_state=state, summary=summary)
    return json.loads(chunk.content[0].text), checked


async def test_it_ends_the_reply_after_the_answered_writes_of_its_turn():
    # an earlier turn's error was seen (a read, then a failed create, answered); this turn's create succeeded
    state = state_of(
        call("1", "procedure_create"),
        result("1", "procedure_create", ok=False),
        call("2", "procedure_create"),
        call("3", FINISH_TOOL),
        result("2", "procedure_create"),
    )
    answer, checked = await finish(state, "what the segment showed")
    assert answer == {"status": "ok", "segment": "finished"} and checked == ["what the segment showed"]
    assert state.reply_context.structured_output == {"summary": "what the segment showed"}
    assert state.reply_context.structured_schema is not None  # AgentScope's exit needs both


async def test_it_refuses_while_a_call_of_its_turn_follows_it_or_answered_an_unseen_error():
    follows = state_of(call("1", FINISH_TOOL), call("2", "procedure_update"))
    answer, _ = await finish(follows)
    assert (
        answer["error"]["code"] == "invalid_argument" and "procedure_update came after it" in answer["error"]["message"]
    )
    failed = state_of(call("1", "procedure_update"), call("2", FINISH_TOOL), result("1", "procedure_update", ok=False))
    answer, checked = await finish(failed)
    assert "procedure_update answered an error" in answer["error"]["message"] and checked == []
    for state in (follows, failed):
        assert state.reply_context.structured_output is None  # the reply goes on


async def test_the_summary_is_checked_only_where_a_later_segment_reads_it():
    answer, _ = await finish(state_of(call("1", FINISH_TOOL)), "", problem="it is empty.")
    assert answer["error"]["code"] == "summary_invalid" and "it is empty." in answer["error"]["message"]
    last = state_of(call("1", FINISH_TOOL))
    answer, checked = await finish(last, "", required=False, problem="never asked")
    assert answer["status"] == "ok" and checked == [] and last.reply_context.structured_output == {"summary": ""}


def test_the_reply_text_is_the_tool_summary_between_tags_or_the_final_text():
    def result_with(output, text="final text"):
        return {
            "last_message": {"structured_output": output, "content": [{"type": "text", "text": text}]},
            "result": text,
        }

    assert reply_summary(result_with({"summary": "S"})) == "S"
    assert reply_text(result_with({"summary": "S"})) == "<summary>S</summary>"
    assert reply_text(result_with({"summary": "x <summary>S</summary>"})) == "x <summary>S</summary>"
    assert reply_text(result_with({"summary": ""})) == "(ended with finish_segment)"
    assert reply_summary(result_with(None)) is None
    assert reply_text(result_with(None, "Done.\n<summary>T</summary>")) == "Done.\n<summary>T</summary>"
