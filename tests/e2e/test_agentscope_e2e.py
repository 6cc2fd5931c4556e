"""procedure_auto_memory with ReMe's REAL AgentScope agent wrapper against a local OpenAI-compatible chat endpoint.

Nothing in the agent path is faked: ``agent_wrapper.default`` is ReMe's ``agentscope`` backend (``AsAgentWrapper``),
its model is ReMe's ``openai`` ``as_llm`` (AgentScope's ``OpenAIChatModel`` over the real ``openai`` client), and the
model's tool calls run the plugin's real job tools. Only the "LLM" is scripted: ``ChatEndpoint`` is a small
``/v1/chat/completions`` server on 127.0.0.1 (JSON or SSE, as the client asks) that answers from the request it
receives and records every request, so the tests can check what the model was actually offered.

``ChatEndpoint`` is also used by ``test_e2e_import_cli.py``.
"""

from __future__ import annotations

import json

import pytest

from conftest import import_file, memory_of, run_job
from helpers import PLAIN_FILE_STORE
from helpers.corpus import TWO_SEGMENTS, two_segment_original
from helpers.faults import Faults
from reme_procedure_memory.extraction import prompt
from helpers.chat import (
    EXPERIENCE,
    ChatEndpoint,
    Conversation,
    assert_offered_only_the_extraction_tools,
    llm_components,
    search_create_summarize,
    search_forever,
    write_original,
)

# -- the scripted OpenAI-compatible chat endpoint ------------------------------------------------------------------


# -- scripts --------------------------------------------------------------------------------------------------


# -- tests ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["sse", "json"])
async def test_real_agentscope_agent_extracts_an_experience(make_app, tmp_path, stream):
    original = write_original(tmp_path)
    with ChatEndpoint(search_create_summarize) as endpoint:
        async with make_app(components=llm_components(endpoint.base_url, stream=stream)) as app:
            wrapper = app.context.components["agent_wrapper"]["default"]
            assert type(wrapper).__name__ == "AsAgentWrapper"  # the real ReMe AgentScope wrapper
            memory = memory_of(app)
            runs = []
            begin_attempt = memory.grants.begin_attempt

            def recording_begin_attempt(*args, **kwargs):
                runs.append(begin_attempt(*args, **kwargs))
                return runs[-1]

            memory.grants.begin_attempt = recording_begin_attempt  # only to learn the run's secret values
            ok, ans = await import_file(app, original, request_id="as-001")
            assert endpoint.errors == []
            assert ok, ans
            assert ans["status"] == "complete" and ans["request_id"] == "as-001"
            assert ans["path"] == "session/trajectories/run.jsonl"
            assert ans["segments"] == {"done": 1, "total": 1}
            assert ans["experiences"] == {"created": [f"procedures/{EXPERIENCE['filename']}"], "updated": []}

            ws = memory_of(app).workspace_path
            assert (ws / ans["path"]).read_bytes() == original.read_bytes()
            record = json.loads((ws / "procedures" / EXPERIENCE["filename"]).read_text(encoding="utf-8"))
            assert record == {
                "description": EXPERIENCE["description"],
                "when-to-use": EXPERIENCE["when_to_use"],
                "content": EXPERIENCE["content"],
                "sources": ["session/trajectories/run.jsonl"],  # added by the runtime: the copied path only
            }

            # What the model received: three calls (search, create, final), each offered exactly the four job tools.
            conversations = endpoint.conversations()
            assert [c.step for c in conversations] == [0, 1, 2]
            for conversation in conversations:
                assert conversation.body["stream"] is stream
                assert conversation.body["model"] == "fake-chat"
                assert_offered_only_the_extraction_tools(conversation.body)
            # The run's injected kwargs (whatever the plugin injects) and its tool context id are hidden from the
            # tool schemas, and the secret values never reached the model.
            assert len(runs) == 1
            injected = {**runs[0].injected(), "tool_context_id": runs[0].context_id}
            assert "_procedure_grant" in injected
            for conversation in conversations:
                assert_offered_only_the_extraction_tools(conversation.body, tuple(injected))
                wire = json.dumps(conversation.body)
                assert runs[0].grant not in wire and runs[0].context_id not in wire
            # The schemas leave out what an extraction agent does not use (a caller's delivery arguments and
            # trajectory excerpts, the update's additions), say what the narrowed tools do, and are what the context
            # check counts (prompt.tool_schemas).
            counted = {
                t["function"]["name"]: t["function"] for t in json.loads(prompt.tool_schemas(app.context.jobs, True))
            }
            for conversation in conversations:
                sent = {t["function"]["name"]: t["function"] for t in conversation.body["tools"]}
                search = sent["procedure_search"]["parameters"]["properties"]
                update = sent["procedure_update"]["parameters"]["properties"]
                assert set(search) == {"query"}
                assert set(sent["procedure_read"]["parameters"]["properties"]) == {"path"}
                assert "trajectory" not in json.dumps(sent["procedure_read"])  # an experience's read alone
                assert "content" in update and not {"content_append", "when_to_use_append"} & set(update)
                assert sent == counted  # names, descriptions and parameters exactly as counted
            first = conversations[0]
            assert "You extract reusable procedural experience" in first.system  # the plugin's system prompt
            assert first.segment == 1 and first.total == 1
            assert "rebuilt 1200 documents" in first.prompt and '"tool_calls"' in first.prompt  # JSONL fields kept
            # The tool results the model saw come from the real jobs.
            search = json.loads(conversations[1].tool_results[-1])
            assert search["status"] == "ok" and search["index"] == "when_to_use_content" and search["results"] == []
            created = conversations[2].last_tool_answer()
            assert created["status"] == "created"
            assert created["path"] == f"procedures/{EXPERIENCE['filename']}"
            assert created["sources"] == ["session/trajectories/run.jsonl"]

            # One segment is the last: no rolling summary is asked for, and none is kept (nothing would read it);
            # the experience is searchable in both views.
            assert "This is the last segment" in first.prompt and "between <summary> and </summary>" not in first.prompt
            checkpoint = memory_of(app).workspace.checkpoints.get("as-001")
            assert checkpoint.status == "complete"
            assert checkpoint.summary == ""
            for view in ("when_to_use", "when_to_use_content"):
                ok, found = await run_job(app, "procedure_search", query="stale search configuration", index=view)
                assert ok and found["results"][0]["path"] == f"procedures/{EXPERIENCE['filename']}"
                assert found["results"][0]["version"] == created["version"]
            # The write grant died with the run: the same tool called outside it fails closed.
            forged_args = {**EXPERIENCE, "filename": "x.json", "operation_key": "x"}
            ok, forged = await run_job(app, "procedure_create", **forged_args)
            assert not ok and forged["error"]["code"] == "no_active_extraction_run"


async def test_iteration_budget_exhaustion_is_resumable(make_app, tmp_path):
    original = write_original(tmp_path)
    ws = tmp_path / "ws"
    with ChatEndpoint(search_forever) as endpoint:
        tight = {**llm_components(endpoint.base_url), "procedure_memory": {"default": {"extraction": {"max_iters": 2}}}}
        async with make_app(workspace=ws, components=tight) as app:
            ok, ans = await import_file(app, original, request_id="budget-1")
            assert endpoint.errors == []
            assert not ok and ans["status"] == "incomplete", ans
            assert ans["error"]["code"] == "agent_budget_exhausted"
            assert "exceed_max_iters" in ans["error"]["message"]
            assert ans["segments"] == {"done": 0, "total": 1}
            assert "request_id=budget-1" in ans["resume"]
            # max_iters=2 reached AgentScope: two tool-calling turns, then its forced no-tools call.
            conversations = endpoint.conversations()
            assert len(conversations) == 3
            assert [c.forced_final for c in conversations] == [False, False, True]
            # The checkpoint did not advance, and the forced reply's <summary> was not taken.
            checkpoint = memory_of(app).workspace.checkpoints.get("budget-1")
            assert checkpoint.next_segment == 0 and checkpoint.saved_reply is None
            assert checkpoint.summary == ""
            assert not any((ws / "procedures").iterdir())

        # Resume (new process state, same workspace) with a normal model and a larger iteration budget:
        # iteration budgets may change between resumes without changing segmentation.
        endpoint.script = search_create_summarize
        endpoint.requests.clear()
        roomy = {
            **llm_components(endpoint.base_url),
            "procedure_memory": {"default": {"extraction": {"max_iters": 10}}},
        }
        async with make_app(workspace=ws, components=roomy) as app:
            ok, ans = await import_file(app, original, request_id="budget-1")
            assert endpoint.errors == []
            assert ok and ans["status"] == "complete", ans
            assert ans["segments"] == {"done": 1, "total": 1}
            assert ans["experiences"]["created"] == [f"procedures/{EXPERIENCE['filename']}"]
            assert [c.step for c in endpoint.conversations()] == [0, 1, 2]
            assert memory_of(app).workspace.checkpoints.get("budget-1").next_segment == 1
            assert sorted(p.name for p in (ws / "procedures").iterdir()) == [EXPERIENCE["filename"]]


async def test_agent_session_files_are_removed_when_their_reply_ends_and_never_served(make_app, tmp_path):
    """AgentScope dumps every reply's whole conversation (the segment's text) under ``mem_session/agentscope/``; the
    plugin removes it once the reply ends — stopped or completed — and a resume does not need it."""
    original = write_original(tmp_path)
    ws = tmp_path / "ws"
    sessions = ws / "mem_session" / "agentscope"
    with ChatEndpoint(search_forever) as endpoint:
        tight = {**llm_components(endpoint.base_url), "procedure_memory": {"default": {"extraction": {"max_iters": 2}}}}
        async with make_app(workspace=ws, components=tight) as app:
            ok, ans = await import_file(app, original, request_id="sessions-1")
            assert not ok and ans["error"]["code"] == "agent_budget_exhausted", ans
        assert sessions.is_dir() and list(sessions.iterdir()) == []  # the wrapper dumped one; it is gone
        endpoint.script = search_create_summarize
        generic = {
            name: {"backend": "base", "steps": [{"backend": f"{name}_step"}]} for name in ("load", "list", "read")
        }
        async with make_app(
            workspace=ws, components={**llm_components(endpoint.base_url), **PLAIN_FILE_STORE}, jobs=generic
        ) as app:
            ok, ans = await import_file(app, original, request_id="sessions-1")
            assert ok and ans["status"] == "complete", ans
            assert list(sessions.iterdir()) == []
            # a leftover (a kill between the dump and its removal) is private to ReMe's generic jobs
            leftover = sessions / "0b7d9c1e-5f3a-4c2b-9e8d-7a6b5c4d3e2f.jsonl"
            leftover.write_text(original.read_text())
            for job, args in [
                ("load", {"path": "mem_session/agentscope/" + leftover.name}),
                ("list", {"path": "mem_session", "recursive": True}),
                ("read", {"path": ans["path"]}),
            ]:
                response = await app.run_job(job, **args)
                answer = json.loads(response.answer)
                assert not response.success and answer["error"]["code"] == "protected_path", (job, answer)
                assert "rebuilt 1200 documents" not in response.answer
            ok, excerpt = await run_job(app, "procedure_read", kind="trajectory", path=ans["path"])
            assert ok and "rebuilt 1200 documents" in excerpt["text"]  # the one way in (nothing to mask here)


# -- finish_segment: a segment's writes and its end in one request -------------------------------------------------

ONE_TURN_SUMMARY = "Segment {n}: the user rebuilt a stale search index after a config change."


def write_and_finish(conversation: Conversation) -> dict:
    """Every segment in one turn: a create (one per segment) and finish_segment with its summary, in that order."""
    n = conversation.segment
    finish = {} if n == conversation.total else {"summary": ONE_TURN_SUMMARY.format(n=n)}
    return {
        "tool_calls": [
            (
                "procedure_create",
                {**EXPERIENCE, "filename": f"rebuild-{n}.json", "description": f"Rebuild search, part {n}"},
            ),
            ("finish_segment", finish),
        ]
    }


async def test_finish_segment_ends_a_segment_in_the_turn_of_its_writes(make_app, tmp_path):
    """AgentScope asks the model again after every tool call; finish_segment in the same turn as the writes ends the
    reply once they are answered: one request per segment, and its summary is the segment's rolling summary."""
    with ChatEndpoint(write_and_finish) as endpoint:
        async with make_app(components={**llm_components(endpoint.base_url), **TWO_SEGMENTS}) as app:
            ok, ans = await import_file(app, two_segment_original(tmp_path), request_id="one-turn")
            assert endpoint.errors == []
            assert ok and ans["status"] == "complete", ans
            assert ans["segments"] == {"done": 2, "total": 2}
            assert ans["experiences"]["created"] == ["procedures/rebuild-1.json", "procedures/rebuild-2.json"]
            conversations = endpoint.conversations()
            assert [(c.segment, c.step) for c in conversations] == [(1, 0), (2, 0)]  # one request per segment
            for conversation in conversations:
                assert_offered_only_the_extraction_tools(conversation.body)
            # segment 1's summary came through finish_segment and reached segment 2; the last asked for none
            first, last = conversations
            assert "call finish_segment last with" in first.prompt and "summary:" in first.prompt
            assert ONE_TURN_SUMMARY.format(n=1) in last.prompt
            assert "This is the last segment" in last.prompt and "call finish_segment last" in last.prompt
            assert memory_of(app).workspace.checkpoints.get("one-turn").status == "complete"


def correcting_finish(conversation: Conversation) -> dict:
    """Segment 1: finish_segment before a write; then after a write that fails (field too long); then with an
    empty summary; then alone with a valid one. Segment 2 (the last): finish_segment alone."""
    too_long = {**EXPERIENCE, "content": "word " * 5000}
    valid = {"summary": "The user rebuilt a stale index."}
    if conversation.segment == 2:
        return {"tool_calls": [("finish_segment", {})]}
    return {
        "tool_calls": [
            [("finish_segment", {"summary": "too early"}), ("procedure_create", too_long)],
            [("procedure_create", too_long), ("finish_segment", valid)],
            [("procedure_create", EXPERIENCE), ("finish_segment", {"summary": ""})],
            [("finish_segment", valid)],
        ][conversation.step]
    }


async def test_finish_segment_refuses_to_end_before_every_answer_of_its_turn_is_seen(make_app, tmp_path):
    """finish_segment refuses (and the reply goes on) when a call of its turn comes after it, when a call before it
    in its turn answered an error the model has not seen, and when the summary a later segment needs is missing."""
    with ChatEndpoint(correcting_finish) as endpoint:
        async with make_app(components={**llm_components(endpoint.base_url), **TWO_SEGMENTS}) as app:
            ok, ans = await import_file(app, two_segment_original(tmp_path), request_id="refusals")
            assert endpoint.errors == []
            assert ok and ans["status"] == "complete", ans
            first = [c for c in endpoint.conversations() if c.segment == 1]
            assert [c.step for c in first] == [0, 1, 2, 3]
            answers = [[json.loads(r) for r in c.tool_results] for c in first[1:]]
            codes = [[a.get("error", {}).get("code") for a in turn] for turn in answers]
            # turn 0: finish came first (refused: a call followed it), the create was too long
            assert codes[0] == ["invalid_argument", "field_too_long"]
            assert "procedure_create came after it" in answers[0][0]["error"]["message"]
            # turn 1: the too-long create again, then finish: refused, the model has not seen that error yet
            assert codes[1][-2:] == ["field_too_long", "invalid_argument"]
            assert "procedure_create answered an error" in answers[1][-1]["error"]["message"]
            # turn 2: the corrected create succeeded; finish refused the empty summary a later segment needs
            assert answers[2][-2]["status"] == "created" and codes[2][-1] == "summary_invalid"
            # turn 3 ended segment 1; segment 2 (the last) took one request and received the valid summary
            second = [c for c in endpoint.conversations() if c.segment == 2]
            assert [c.step for c in second] == [0]
            assert "The user rebuilt a stale index." in second[0].prompt
            assert ans["experiences"]["created"] == [f"procedures/{EXPERIENCE['filename']}"]


def create_then_finish_alone(conversation: Conversation) -> dict:
    """A create and finish_segment in one turn; after the refusal (the create answered disk_full), finish alone."""
    if conversation.step == 0:
        return {"tool_calls": [("procedure_create", EXPERIENCE), ("finish_segment", {})]}
    return {"tool_calls": [("finish_segment", {})]}


async def test_a_write_that_could_not_be_saved_still_stops_the_segment_after_finish_segment(
    make_app, tmp_path, monkeypatch
):
    """A full disk: finish_segment refuses in the turn of the failed create (the model has not seen it); finished
    alone in the next turn, the reply ends and the segment's gate stops the import with disk_full, resumably."""
    faults = Faults(monkeypatch)
    ws = tmp_path / "ws"
    with ChatEndpoint(create_then_finish_alone) as endpoint:
        async with make_app(workspace=ws, components=llm_components(endpoint.base_url)) as app:
            faults.full = {ws / "procedures"}
            ok, ans = await import_file(app, write_original(tmp_path), request_id="full-finish")
            assert endpoint.errors == []
            assert not ok and ans["status"] == "incomplete" and ans["error"]["code"] == "disk_full", ans
            assert [f["code"] for f in ans["failed_writes"]] == ["disk_full"]
            conversations = endpoint.conversations()
            assert [c.step for c in conversations] == [0, 1]
            refusal = json.loads(conversations[1].tool_results[-1])
            assert "procedure_create answered an error" in refusal["error"]["message"]
            faults.full = set()
            ok, ans = await import_file(app, write_original(tmp_path), request_id="full-finish")
            assert ok and ans["status"] == "complete", ans  # the resume runs the segment again and saves it
            assert ans["experiences"]["created"] == [f"procedures/{EXPERIENCE['filename']}"]
