"""Regression tests from the second review (extraction, concurrency, served inputs); each names the defect it pins.

- the summary repair of a Claude Code wrapper runs with Claude Code's built-in tools and no turn budget
- agent session ids repeat across resumes (repair ids never change; the attempt counter is saved only after the
  call), which Claude Code rejects ("Session ID ... is already in use")
- the <summary> parser truncates a summary that quotes a closing tag, and drops a valid summary followed by an
  empty tag pair
- a search already in flight when a reindex starts answers from the cleared views with index_complete=true
- a search pays the provider timeout once per pending file (and once per batch) before answering
- one query the embedding provider rejects pauses vector search for every other caller
- served arguments that are bad input answer internal_error (and leak the absolute workspace path)
- an import that fails while copying answers without its generated request_id
- the resume command in an incomplete answer is not shell-safe
- the context-budget check does not count what AgentScope really sends
- the tool schema's limit maximum and the step's limit are one number
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time

from conftest import import_file, memory_of, run_job
from helpers import FakeEmbeddingModel, experience_record, place_trajectory, place_unicorn_experiences, summary
from helpers.corpus import JSONL, TWO_SEGMENTS, replies, two_segment_original, write


def no_summary(text="Created nothing reusable."):
    async def script(tools, prompt, kwargs):
        return text

    return script


def workspace_with_one_experience(tmp_path):
    """A workspace holding procedures/rebuild-search.json, written before the app starts."""
    ws = tmp_path / "ws"
    (ws / "procedures").mkdir(parents=True)
    place_trajectory(ws)
    (ws / "procedures/rebuild-search.json").write_text(
        json.dumps(
            experience_record(
                "Rebuild search", "when search results look stale after a config change", "rebuild the index"
            )
        )
    )
    return ws


# -- the summary repair of a Claude Code wrapper --------------------------------------------------------------------


async def test_claude_code_summary_repair_runs_without_builtin_tools_and_with_a_turn_budget(make_app, tmp_path):
    original = two_segment_original(tmp_path)  # segment 1's summary is repaired (the last needs none)
    async with make_app(scripts=[no_summary(), replies("repaired"), replies("last")], components=TWO_SEGMENTS) as app:
        app.agent.backend = "claude_code"  # what ReMe's cc_agent_wrapper is registered as
        ok, ans = await import_file(app, original, request_id="cc-1")
        assert ok, ans
        main, repair = app.agent.replies[0]["kwargs"], app.agent.replies[1]["kwargs"]
        assert main.get("tools") == [] and main.get("max_turns")  # the segment run is restricted ...
        # ... the repair is not: Claude Code keeps Read/Write/Bash/... (bypassPermissions) and has no max_turns.
        assert repair.get("tools") == [], repair
        assert repair.get("max_turns"), repair


# -- agent session ids ----------------------------------------------------------------------------------------------


async def test_agent_session_ids_never_repeat_across_resumes(make_app, tmp_path):
    original = two_segment_original(tmp_path)  # segment 1's summary is repaired (the last needs none)
    ws = tmp_path / "ws"

    async def repair_fails(tools, prompt, kwargs):
        raise RuntimeError("upstream 529 overloaded")

    async with make_app(workspace=ws, scripts=[no_summary(), repair_fails], components=TWO_SEGMENTS) as app:
        ok, ans = await import_file(app, original, request_id="sid-1")
        assert not ok and ans["error"]["code"] == "agent_failed", ans
        first = [r["kwargs"]["session_id"] for r in app.agent.replies]
    async with make_app(workspace=ws, scripts=[replies("repaired"), replies("last")], components=TWO_SEGMENTS) as app:
        ok, ans = await import_file(app, original, request_id="sid-1")  # the saved reply is reused and repaired
        assert ok, ans
        second = [r["kwargs"]["session_id"] for r in app.agent.replies]
    ids = first + second
    # Claude Code rejects a --session-id that was used before; the repeated repair id makes every resume fail.
    assert len(set(ids)) == len(ids), ids


async def test_attempt_counter_is_durable_before_the_agent_runs(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    seen = []

    async def probe(tools, prompt, kwargs):
        memory = memory_of(app)
        seen.append(memory.workspace.checkpoints.get("att-1").attempts)  # what a SIGKILL now would leave on disk
        return summary("s")

    async with make_app(scripts=[probe]) as app:
        ok, ans = await import_file(app, original, request_id="att-1")
        assert ok, ans
    assert seen == [{"0": 1}], seen


# -- the summary parser ---------------------------------------------------------------------------------------------


async def test_summary_quoting_a_closing_tag_is_not_truncated(make_app, tmp_path):
    original = two_segment_original(tmp_path)  # segment 1's summary is kept (the last needs none)
    text = (
        "<summary>The user asked the agent to end every answer with a </summary> tag; the agent then rebuilt "
        "the docs index and verified a known query.</summary>"
    )
    async with make_app(scripts=[no_summary(text), replies("last")], components=TWO_SEGMENTS) as app:
        ok, ans = await import_file(app, original, request_id="sum-1")
        assert ok, ans
        saved = memory_of(app).workspace.checkpoints.get("sum-1").summary
        assert "rebuilt the docs index" in saved, saved  # silently cut to "... end every answer with a"


async def test_valid_summary_followed_by_an_empty_tag_pair_needs_no_repair(make_app, tmp_path):
    original = two_segment_original(tmp_path)  # segment 1's summary is kept (the last needs none)
    text = "Done.\n<summary>Rebuilt the docs index.</summary>\n(The summary is between <summary></summary> tags.)"
    # one scripted reply per segment: a repair call would fail the import
    async with make_app(scripts=[no_summary(text), replies("last")], components=TWO_SEGMENTS) as app:
        ok, ans = await import_file(app, original, request_id="sum-2")
        assert ok, ans
        assert memory_of(app).workspace.checkpoints.get("sum-2").summary == "Rebuilt the docs index."


# -- a search in flight during a reindex ----------------------------------------------------------------------------


class GatedModel(FakeEmbeddingModel):
    """Embeds like FakeEmbeddingModel, but parks a call whose texts contain a gated marker until released."""

    def __init__(self, dimensions: int = 64) -> None:
        super().__init__(dimensions)
        self.gates: dict[str, asyncio.Event] = {}
        self.parked: dict[str, asyncio.Event] = {}

    def gate(self, marker: str) -> None:
        self.gates[marker], self.parked[marker] = asyncio.Event(), asyncio.Event()

    async def __call__(self, inputs, **kwargs):
        for marker, gate in self.gates.items():
            if any(marker in text for text in inputs):
                self.parked[marker].set()
                await gate.wait()
        return await super().__call__(inputs, **kwargs)


async def test_search_in_flight_when_a_reindex_starts_never_reports_complete_empty_results(make_app, tmp_path):
    ws = workspace_with_one_experience(tmp_path)
    model = GatedModel(64)
    async with make_app(workspace=ws, embedding=model) as app:
        # a new hand-written file: the reindex must embed it (a cache miss) and parks there, views already cleared
        (ws / "procedures/inspect-logs.json").write_text(
            json.dumps(experience_record("Inspect logs", "blockme when a rebuild fails", "read the logs first"))
        )
        model.gate("blockq")
        model.gate("blockme")
        search = asyncio.create_task(
            run_job(
                app,
                "procedure_search",
                index="when_to_use",
                query="blockq search results look stale after a config change",
            )
        )
        await asyncio.wait_for(model.parked["blockq"].wait(), 5)  # the search is embedding its query
        reindex = asyncio.create_task(app.run_job("procedure_reindex"))
        await asyncio.wait_for(model.parked["blockme"].wait(), 5)  # the reindex cleared the views, is re-embedding
        model.gates["blockq"].set()
        await asyncio.sleep(0.05)
        assert not search.done()  # it overlapped the rebuild: it waits for it and searches again
        model.gates["blockme"].set()
        ok, ans = await asyncio.wait_for(search, 5)
        assert (await reindex).success
        assert ok
        # rebuild-search.json was never removed from the workspace: the answer comes from the rebuilt views
        assert ans["results"][0]["path"] == "procedures/rebuild-search.json" and ans["index_complete"] is True, ans


# -- pending files and the provider timeout -------------------------------------------------------------------------


class HangingModel(FakeEmbeddingModel):
    hang = False

    async def __call__(self, inputs, **kwargs):
        if self.hang:
            await asyncio.sleep(3600)
        return await super().__call__(inputs, **kwargs)


async def test_search_does_not_pay_the_provider_timeout_once_per_pending_file(make_app, tmp_path):
    ws = tmp_path / "ws"
    model = HangingModel(64)
    timeout = 0.25
    components = {
        "procedure_memory": {"default": {"embedding_timeout_seconds": timeout}},
        "embedding_store": {"procedure": {"enable_cache": False}},
    }
    async with make_app(workspace=ws, embedding=model, components=components) as app:
        place_unicorn_experiences(ws, 8)
        model.hang = True
        memory = memory_of(app)
        await memory.recovery.reconcile()  # as at a start during an outage: 8 files pending
        assert len(memory.workspace.pending) == 8
        memory.workspace.views.embeddings.vector_down_until = 0.0
        started = time.monotonic()
        ok, ans = await run_job(app, "procedure_search", query="unicorn3 degrades")
        elapsed = time.monotonic() - started
        assert ok and ans["index_complete"] is False
        # One search = query embedding + pending retry; here it waits 1 batch + 8 single-file timeouts (+1 query).
        assert elapsed < 4 * timeout, f"search took {elapsed:.2f}s with an embedding timeout of {timeout}s"


# -- a query the provider rejects -----------------------------------------------------------------------------------


async def test_one_rejected_query_does_not_pause_vector_search_for_other_callers(make_app, tmp_path):
    ws = workspace_with_one_experience(tmp_path)
    model = FakeEmbeddingModel(64)
    model.reject = {"forbiddenword"}  # the provider refuses this input (e.g. content filter, malformed text)
    async with make_app(workspace=ws, embedding=model) as app:
        ok, ans = await run_job(app, "procedure_search", query="forbiddenword stale search")
        assert ok and ans["vector_search"]["available"] is False
        ok, ans = await run_job(app, "procedure_search", query="search results look stale")
        assert ok
        assert "vector_search" not in ans, ans["vector_search"]  # another caller's valid query lost its vectors


# -- bad served arguments -------------------------------------------------------------------------------------------


async def test_odd_served_arguments_answer_invalid_argument_not_internal_error(make_app):
    async with make_app() as app:
        ws = str(memory_of(app).workspace_path)
        cases = [
            ("procedure_search", {"query": "x", "limit": "²"}),  # str.isdigit() is True, int() raises
            ("procedure_search", {"query": "x", "limit": "9" * 5000}),  # int() digit limit
            ("procedure_read", {"kind": "trajectory", "path": "session/trajectories/x", "offset": "²"}),
            ("procedure_read", {"kind": "trajectory", "path": "session/trajectories/" + "a" * 300}),  # ENAMETOOLONG
        ]
        for name, args in cases:
            response = await app.run_job(name, **args)
            answer = json.loads(response.answer)
            assert not response.success
            assert answer["error"]["code"] != "internal_error", (name, args, answer)
            assert ws not in response.answer, answer  # no absolute server path in a served answer


async def test_multi_megabyte_query_is_rejected_not_echoed(make_app):
    async with make_app() as app:
        query = "stale search " * 200_000  # 2.6 MB
        response = await app.run_job("procedure_search", query=query)
        assert not response.success and len(response.answer) < 10_000, len(response.answer)


# -- a failed copy's request id -------------------------------------------------------------------------------------


async def test_copy_failure_answers_with_the_generated_request_id(make_app, tmp_path, monkeypatch):
    from reme_procedure_memory.extraction import copies as copies

    original = write(tmp_path, "run.jsonl", JSONL)

    def disk_full(target, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(copies, "publish_copy", disk_full)
    async with make_app(scripts=[]) as app:
        ok, ans = await import_file(app, original)  # no request_id: one is generated and the name is reserved
        assert not ok
        assert ans.get("request_id"), ans  # without it the reservation of run.jsonl can never be resumed


# -- a shell-safe resume command ------------------------------------------------------------------------------------


async def test_resume_command_survives_a_path_with_spaces(make_app, tmp_path):
    original = tmp_path / "my runs" / "run 1.txt"
    original.parent.mkdir()
    original.write_text("rebuilt the index after the config change\n", encoding="utf-8")
    async with make_app(scripts=[]) as app:  # no agent reply scripted: the import stops resumably
        ok, ans = await import_file(app, original, request_id="space-1")
        assert not ok and ans["status"] == "incomplete", ans
        words = shlex.split(ans["resume"])
        assert f"file={original}" in words and "filename=run 1.txt" in words, ans["resume"]


# -- what AgentScope really sends -----------------------------------------------------------------------------------


async def test_context_check_counts_what_agentscope_really_sends(make_app, tmp_path, monkeypatch):
    from reme_procedure_memory.extraction import loop as extraction

    from helpers.chat import ChatEndpoint, llm_components, search_create_summarize, text_of, write_original

    counted = []
    check = extraction.Extraction._check_context

    async def recording(self, system, user):
        counted.append(await check(self, system, user))
        return counted[-1]

    monkeypatch.setattr(extraction.Extraction, "_check_context", recording)
    original = write_original(tmp_path)
    with ChatEndpoint(search_create_summarize) as endpoint:
        async with make_app(components=llm_components(endpoint.base_url, stream=False)) as app:
            ok, ans = await import_file(app, original, request_id="ctx-1")
            assert ok, ans
            first = endpoint.requests[0]
            tokens = memory_of(app).workspace.tokens
            sent = sum(tokens.count(text_of(m)) for m in first["messages"])
            sent += tokens.count(json.dumps(first["tools"], ensure_ascii=False))
    # AgentScope adds a <system-reminder> user message and wraps every schema in {"type": "function", ...}:
    # the strict budget check admits inputs that are larger on the wire than what it counted.
    assert sent <= counted[0], f"counted {counted[0]} tokens, the first request carries {sent}"


# -- the advertised limit -------------------------------------------------------------------------------------------


async def test_advertised_limit_maximum_is_the_limit_the_step_enforces(make_app):
    from reme_procedure_memory.jobs.fields import MAX_LIMIT

    async with make_app() as app:
        schema = app.context.jobs["procedure_search"].parameters["properties"]["limit"]
        assert schema["maximum"] == MAX_LIMIT
        ok, ans = await run_job(app, "procedure_search", query="x", limit=MAX_LIMIT)
        assert ok, ans
        ok, ans = await run_job(app, "procedure_search", query="x", limit=MAX_LIMIT + 1)
        assert not ok and ans["error"]["code"] == "invalid_argument"
