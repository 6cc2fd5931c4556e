"""Extraction with fewer tokens and turns, same rules, on the scripted agent and the real jobs.

- in-run search answers are compact: path, version, scores.vector, description, when-to-use; the best result's content
  (bounded); results weak on both branches left out; a result the run was shown before only named;
  the agent's ``detail=full`` gets every result's content (still without raw scores and sources); every service
  caller gets whole ones
- ``operation_key`` is optional: without one the key is derived from the segment and the arguments, so an
  identical retry (also on resume) is the same operation and a changed write a new one; a given key still wins
- the segment's message lists the library's experiences that match it best (or says the library is empty), asks
  to search before writing what they miss, and lets a segment with nothing reusable end at once
- no rolling summary is asked for (or checked) after the last segment
"""

from __future__ import annotations

import json

from reme_procedure_memory.operations.reads import COMPACT_CONTENT_CHARS, compact_answer

from conftest import add_trajectory, call_tool, import_file, memory_of, run_job
from helpers import experience_record, place_trajectory, summary
from helpers.corpus import JSONL, TWO_SEGMENTS, two_segment_original, write

FIELDS = {
    "description": "Drain a node",
    "when_to_use": "Before rebooting a cluster node",
    "content": "Cordon the node, drain workloads, then reboot.",
}


def place(ws, name: str, when: str, content: str) -> None:
    place_trajectory(ws)
    (ws / "procedures").mkdir(parents=True, exist_ok=True)
    (ws / "procedures" / name).write_text(json.dumps(experience_record(f"About {name}", when, content)))


def result(path, vector, keyword, content="steps"):
    return {
        "path": path,
        "version": "v",
        "score": 0.01,
        "scores": {"vector": vector, "keyword": keyword},
        "experience": {"description": "d", "when-to-use": "w", "content": content, "sources": ["s"]},
    }


# -- compact search answers in a run --------------------------------------------------------------------------------


def test_compact_answer_keeps_the_best_content_and_leaves_out_weak_results():
    answer = {
        "status": "ok",
        "results": [
            result("procedures/a.json", 0.80, 4.0, content="x" * (COMPACT_CONTENT_CHARS + 10)),
            result("procedures/b.json", 0.45, 0.5),  # strong by meaning (0.45 >= 0.5 * 0.80)
            result("procedures/c.json", 0.10, 2.5),  # strong by words (2.5 >= 0.5 * 4.0)
            result("procedures/d.json", 0.30, 1.0),  # weak on both branches: left out
            result("procedures/e.json", None, None),
        ],
    }
    compact = compact_answer(answer)
    assert [r["path"] for r in compact["results"]] == ["procedures/a.json", "procedures/b.json", "procedures/c.json"]
    assert compact["left_out"] == 2 and compact["detail"] == "compact" and "procedure_read" in compact["read_more"]
    best, other = compact["results"][0], compact["results"][1]
    assert best["content"] == "x" * COMPACT_CONTENT_CHARS and best["content_truncated"] is True
    assert set(other) == {"path", "version", "scores", "description", "when-to-use"} and other["scores"] == {
        "vector": 0.45
    }
    # the names of the full answer: its `when-to-use` key and its `scores.vector`, rounded
    full = answer["results"][1]
    assert other["when-to-use"] == full["experience"]["when-to-use"] and full["scores"]["vector"] == 0.45


async def test_the_extraction_agent_gets_compact_answers_and_service_callers_whole_ones(make_app, tmp_path):
    ws = tmp_path / "ws"
    place(ws, "drain-node.json", "Before rebooting a cluster node", "Cordon the node, drain workloads, reboot.")
    place(ws, "rotate-keys.json", "When credentials leak", "Rotate the keys and audit access.")
    async with make_app(workspace=ws) as app:
        run = memory_of(app).grants.begin_attempt("req", [add_trajectory(app)])
        ok, in_run = await call_tool(app, run, "procedure_search", query="reboot a cluster node drain")
        assert ok and in_run["detail"] == "compact"
        assert in_run["results"][0]["path"] == "procedures/drain-node.json"
        assert in_run["results"][0]["content"] == "Cordon the node, drain workloads, reboot."
        assert all("experience" not in r for r in in_run["results"])
        ok, again = await call_tool(app, run, "procedure_search", query="drain the node before a reboot")
        assert again["results"][0] == {
            "path": "procedures/drain-node.json",
            "version": in_run["results"][0]["version"],
            "shown_before": True,
        }  # shown earlier in this run: only named again
        ok, whole = await call_tool(app, run, "procedure_search", query="reboot a cluster node drain", detail="full")
        assert ok and whole["detail"] == "full" and len(whole["results"]) == 2  # none left out or only named
        assert "read_more" not in whole  # every content is there, none cut
        assert [r.get("content") for r in whole["results"]] == [
            "Cordon the node, drain workloads, reboot.",
            "Rotate the keys and audit access.",
        ]
        assert all(
            set(r) == {"path", "version", "scores", "description", "when-to-use", "content"} for r in whole["results"]
        )  # the agent's full: every content, no raw scores or sources
        ok, service = await run_job(app, "procedure_search", query="reboot a cluster node drain")
        assert ok and "detail" not in service and service["results"][0]["experience"]["sources"]
        ok, asked = await run_job(app, "procedure_search", query="reboot a cluster node drain", detail="compact")
        assert ok and asked["detail"] == "compact"


# -- the operation key is optional ----------------------------------------------------------------------------------


async def test_without_an_operation_key_an_identical_retry_is_the_same_write(make_app):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req", [add_trajectory(app)], segment=1)
        ok, created = await call_tool(app, run, "procedure_create", filename="drain-node.json", **FIELDS)
        assert ok and created["status"] == "created" and created["operation_key"].startswith("auto-s2-")
        ok, keyed = await call_tool(app, run, "procedure_create", filename="given.json", operation_key="mine", **FIELDS)
        assert ok and keyed["operation_key"] == "mine"  # a key the model gives still wins
        ok, again = await call_tool(app, run, "procedure_create", filename="drain-node.json", **FIELDS)
        assert ok and again.get("replayed") and again["operation_key"] == created["operation_key"]
        ok, other = await call_tool(
            app,
            run,
            "procedure_create",
            filename="drain-node.json",
            **{**FIELDS, "content": "Cordon, drain, reboot, uncordon."},
        )
        assert not ok and other["error"]["code"] == "already_exists"  # a changed write is a new operation
        update = {"path": created["path"], "expected_version": created["version"], "content": "Cordon, drain."}
        ok, updated = await call_tool(app, run, "procedure_update", **update)
        assert ok and updated["status"] == "updated" and updated["operation_key"].startswith("auto-s2-")
        await call_tool(app, run, "procedure_create", filename="other.json", **FIELDS)  # the workspace changes
        ok, retried = await call_tool(app, run, "procedure_update", **update)
        assert ok and retried.get("replayed") and retried["version"] == updated["version"]
        journal = memory_of(app).workspace.journal
        assert journal.get("req", created["operation_key"]).status in ("indexed", "superseded")


async def test_a_resumed_segment_that_repeats_a_keyless_write_replays_it(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    calls = []

    async def writes_then_fails(tools, prompt, kwargs):
        calls.append(await tools.call("procedure_create", filename="drain-node.json", **FIELDS))
        raise RuntimeError("the model endpoint went away")

    async def writes_again(tools, prompt, kwargs):
        calls.append(await tools.call("procedure_create", filename="drain-node.json", **FIELDS))
        return "Done."

    async with make_app(scripts=[writes_then_fails, writes_again]) as app:
        ok, ans = await import_file(app, original, request_id="r1")
        assert not ok and ans["error"]["code"] == "agent_failed"
        ok, ans = await import_file(app, original, request_id="r1")
        assert ok and ans["experiences"]["created"] == ["procedures/drain-node.json"], ans
    assert calls[1][1].get("replayed") and calls[1][1]["operation_key"] == calls[0][1]["operation_key"]


# -- the segment's message: related experiences, no summary after the last ------------------------------------------


async def test_the_segment_lists_the_related_experiences_and_the_last_asks_for_no_summary(make_app, tmp_path):
    ws = tmp_path / "ws"
    place(
        ws,
        "rebuild-index.json",
        "After changing the index config when search results look stale",
        "rebuild_index(index=<name>), then verify a known query.",
    )
    place(ws, "rotate-keys.json", "When credentials leak", "Rotate the keys and audit access.")
    prompts = []

    async def first(tools, prompt, kwargs):
        prompts.append(prompt)
        return summary("The user rebuilt the docs index.")

    async def last(tools, prompt, kwargs):
        prompts.append(prompt)
        return "Nothing more to keep."

    async with make_app(workspace=ws, scripts=[first, last], components=TWO_SEGMENTS) as app:
        ok, ans = await import_file(app, two_segment_original(tmp_path), request_id="r1")
        assert ok and ans["segments"] == {"done": 2, "total": 2}, ans
        version = memory_of(app).reads.experience("procedures/rebuild-index.json")["version"]
    listed = prompts[0].split("match this segment best", 1)[1]
    # the closest ones naming a function the segment calls (rebuild_index) whole (their when-to-use and content:
    # revisable without a read)
    assert (
        f"- procedures/rebuild-index.json ({version}): About rebuild-index.json\n"
        "  when to use: After changing the index config when search results look stale\n"
        "  content:\n    rebuild_index(index=<name>), then verify a known query."
    ) in listed
    assert "Rotate the keys" not in listed  # a weak match is left out, whole or not
    assert "Begin with procedure_search" not in prompts[0]
    assert "between\n<summary> and </summary>" in prompts[0] or "between <summary> and </summary>" in prompts[0]
    # the summary asked for is what a later segment needs, not a retelling of the calls the experiences hold
    assert "the task still in progress at the end of this segment and its state" in " ".join(prompts[0].split())
    assert "not the finished tasks nor the experiences" in " ".join(prompts[0].split())
    assert "This is the last segment" in prompts[1] and "<summary> and </summary>" not in prompts[1]
    assert "The user rebuilt the docs index." in prompts[1]  # the rolling summary reaches the last segment
    system = app.agent.replies[0]["kwargs"]["system_prompt"]
    flat = " ".join(system.split())  # sentences may wrap anywhere
    assert "the runtime searched for you" in flat and "nothing reusable needs no write: end it at once" in flat
    assert "naming every tool or function" in flat
    from reme_procedure_memory.schema import ADVICE_MARKER

    assert ADVICE_MARKER not in system  # faithfulness: no advice of the extractor's own unless extraction.advice


async def test_an_empty_library_is_said_so_and_a_segment_may_end_without_a_tool_call(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)

    async def nothing(tools, prompt, kwargs):
        assert "The library holds no experience yet." in prompt
        return "Nothing reusable."

    async with make_app(scripts=[nothing]) as app:
        ok, ans = await import_file(app, original, request_id="r1")
        assert ok and ans["status"] == "complete" and ans["experiences"] == {"created": [], "updated": []}
        assert app.agent.replies[0]["tools"].log == []  # no search was needed


# -- additions ------------------------------------------------------------------------------------------------------
# An update may add to when-to-use and content without reading them first (``*_append``): the segment's message lists
# the library's matches by description, and a read before every revision cost a whole model turn.


async def test_an_addition_lands_on_a_new_line_and_keeps_the_rest_and_the_sources(make_app):
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req", [add_trajectory(app)], segment=0)
        ok, created = await call_tool(app, run, "procedure_create", filename="drain-node.json", **FIELDS)
        other = add_trajectory(app, "run-2.jsonl")
        run2 = memory.grants.begin_attempt("req-2", [other], segment=0)
        addition = {
            "path": created["path"],
            "expected_version": created["version"],
            "content_append": "4. Uncordon the node.",
            "when_to_use_append": "Also before a kernel update.",
        }
        ok, updated = await call_tool(app, run2, "procedure_update", **addition)
        assert ok and updated["status"] == "updated", updated
        stored = memory.reads.experience(created["path"])["experience"]
        assert stored["content"] == FIELDS["content"] + "\n4. Uncordon the node."
        assert stored["when-to-use"] == FIELDS["when_to_use"] + "\nAlso before a kernel update."
        assert stored["description"] == FIELDS["description"]
        assert stored["sources"] == ["session/trajectories/run.jsonl", "session/trajectories/run-2.jsonl"]
        ok, again = await call_tool(app, run2, "procedure_update", **addition)  # the run's memory answers it
        assert ok and again.get("repeated_call") and again["version"] == updated["version"]
        memory.grants.end_attempt(run2)
        resumed = memory.grants.begin_attempt(
            "req-2", [other], segment=0
        )  # a resume repeats it: the journal replays it
        ok, again = await call_tool(app, resumed, "procedure_update", **addition)
        assert ok and again.get("replayed") and again["version"] == updated["version"]
        assert memory.reads.experience(created["path"])["experience"]["content"].count("Uncordon") == 1
        ok, found = await run_job(app, "procedure_search", query="uncordon the node kernel update")
        assert ok and found["results"][0]["path"] == created["path"]  # both views hold the new text


async def test_an_addition_is_refused_beside_the_whole_field_over_the_limit_or_with_a_secret(make_app):
    components = {"procedure_memory": {"default": {"token_limits": {"content": 10}}}}
    async with make_app(components=components) as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req", [add_trajectory(app)], segment=0)
        ok, created = await call_tool(app, run, "procedure_create", filename="drain-node.json", **FIELDS)
        assert ok, created
        at = {"path": created["path"], "expected_version": created["version"]}
        ok, both = await call_tool(app, run, "procedure_update", **at, content="Reboot.", content_append="Reboot.")
        assert not ok and both["error"]["code"] == "invalid_argument" and "`content_append`" in both["error"]["message"]
        ok, long = await call_tool(app, run, "procedure_update", **at, content_append="one two three four five")
        assert not ok and long["error"]["code"] == "field_too_long"
        message = long["error"]["message"]  # the field as it would be, not the addition alone (5 tokens)
        assert message.startswith("Nothing was written: With the addition, `content` has ") and "(limit 10)" in message
        assert long["fields"][0]["tokens"] > 11 and "procedure_read" in message
        ok, secret = await call_tool(
            app,
            run,
            "procedure_update",
            **at,
            content_append="export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        )
        assert not ok and secret["error"]["code"] == "secret_detected"
        ok, stale = await call_tool(
            app, run, "procedure_update", path=created["path"], expected_version="0" * 16, content_append="Reboot."
        )
        assert not ok and stale["error"]["code"] == "stale_version"
        # additions overwrite nothing: the answer gives the version to retry with; a rewrite must read first
        assert f"Retry the additions with expected_version {created['version']}" in stale["error"]["message"]
        ok, rewrite = await call_tool(
            app, run, "procedure_update", path=created["path"], expected_version="0" * 16, description="Drain a node"
        )
        assert not ok and rewrite["error"]["code"] == "stale_version"
        assert (
            "Read it again" in rewrite["error"]["message"] and "Retry the additions" not in rewrite["error"]["message"]
        )
        stored = memory.reads.experience(created["path"])
        assert stored["version"] == created["version"] and stored["experience"]["content"] == FIELDS["content"]


def test_an_addition_goes_before_the_extractors_advice_which_stays_last():
    from reme_procedure_memory.operations.writes import with_addition
    from reme_procedure_memory.schema import ADVICE_MARKER

    plain = "1. cd(folder='a')\n2. mv(source='x', destination='b')"
    assert with_addition(plain + "\n", "3. ls()") == plain + "\n3. ls()"
    advised = f"{plain}\n{ADVICE_MARKER} check the folder first."
    assert with_addition(advised, "3. ls()") == f"{plain}\n3. ls()\n{ADVICE_MARKER} check the folder first."
    assert with_addition(advised, f"3. ls()\n{ADVICE_MARKER} list before moving.") == (
        f"{plain}\n3. ls()\n{ADVICE_MARKER} check the folder first.\nlist before moving."
    )
    assert with_addition(advised, f"{ADVICE_MARKER} list before moving.") == f"{advised}\nlist before moving."
    assert with_addition(f"{ADVICE_MARKER} only advice.", "1. ls()") == f"1. ls()\n{ADVICE_MARKER} only advice."
