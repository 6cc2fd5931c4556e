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
from helpers.chat import (
    EXPERIENCE,
    ChatEndpoint,
    assert_offered_only_the_four_job_tools,
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
            begin_run = memory.grants.begin_run

            def recording_begin_run(*args, **kwargs):
                runs.append(begin_run(*args, **kwargs))
                return runs[-1]

            memory.grants.begin_run = recording_begin_run  # only to learn the run's secret values
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
                assert_offered_only_the_four_job_tools(conversation.body)
            # The run's injected kwargs (whatever the plugin injects) and its tool context id are hidden from the
            # tool schemas, and the secret values never reached the model.
            assert len(runs) == 1
            injected = {**runs[0].injected(), "tool_context_id": runs[0].context_id}
            assert "_procedure_grant" in injected
            for conversation in conversations:
                assert_offered_only_the_four_job_tools(conversation.body, tuple(injected))
                wire = json.dumps(conversation.body)
                assert runs[0].grant not in wire and runs[0].context_id not in wire
            first = conversations[0]
            assert "You extract reusable procedural experience" in first.system  # the plugin's system prompt
            assert first.segment == 1 and first.total == 1
            assert "rebuilt 1200 documents" in first.prompt and '"tool_calls"' in first.prompt  # JSONL fields kept
            # The tool results the model saw come from the real jobs.
            search = json.loads(conversations[1].tool_results[-1])
            assert search["status"] == "ok" and search["index"] == "when_to_use" and search["results"] == []
            created = conversations[2].last_tool_answer()
            assert created["status"] == "created"
            assert created["path"] == f"procedures/{EXPERIENCE['filename']}"
            assert created["sources"] == ["session/trajectories/run.jsonl"]

            # One segment is the last: no rolling summary is asked for, and none is kept (nothing would read it);
            # the experience is searchable in both views.
            assert "This is the last segment" in first.prompt and "between <summary> and </summary>" not in first.prompt
            checkpoint = memory_of(app).checkpoints.get("as-001")
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
        tight = {**llm_components(endpoint.base_url),
                 "procedure_memory": {"default": {"extraction": {"max_iters": 2}}}}
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
            checkpoint = memory_of(app).checkpoints.get("budget-1")
            assert checkpoint.next_segment == 0 and checkpoint.saved_reply is None
            assert checkpoint.summary == ""
            assert not any((ws / "procedures").iterdir())

        # Resume (new process state, same workspace) with a normal model and a larger iteration budget:
        # iteration budgets may change between resumes without changing segmentation.
        endpoint.script = search_create_summarize
        endpoint.requests.clear()
        roomy = {**llm_components(endpoint.base_url),
                 "procedure_memory": {"default": {"extraction": {"max_iters": 10}}}}
        async with make_app(workspace=ws, components=roomy) as app:
            ok, ans = await import_file(app, original, request_id="budget-1")
            assert endpoint.errors == []
            assert ok and ans["status"] == "complete", ans
            assert ans["segments"] == {"done": 1, "total": 1}
            assert ans["experiences"]["created"] == [f"procedures/{EXPERIENCE['filename']}"]
            assert [c.step for c in endpoint.conversations()] == [0, 1, 2]
            assert memory_of(app).checkpoints.get("budget-1").next_segment == 1
            assert sorted(p.name for p in (ws / "procedures").iterdir()) == [EXPERIENCE["filename"]]
