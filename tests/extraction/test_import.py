"""procedure_auto_memory end to end on a real Application with a scripted agent that calls the real job tools."""

import hashlib
import json

import pytest

from conftest import import_file, memory_of, run_job
from helpers import FIXTURES, summary
from helpers.corpus import JSONL, TWO_SEGMENTS, long_trajectory, replies, summarises, two_segment_original, write


def creates(name="rebuild-search-after-config-change.json", key="s1-1", text="Summary of the run."):
    async def script(tools, prompt, kwargs):
        ok, found = await tools.call("procedure_search", query="stale search after config change", index="when_to_use")
        assert ok
        ok, ans = await tools.call(
            "procedure_create",
            filename=name,
            operation_key=key,
            description="Rebuild search after a configuration change",
            when_to_use="After changing search configuration when results appear stale",
            content="Rebuild the affected indexes, then verify a known query before resuming.",
        )
        assert ok, ans
        return summary(text)

    return script


async def test_import_copies_bytes_and_extracts_an_experience(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    async with make_app(scripts=[creates()]) as app:
        ok, ans = await import_file(app, original, request_id="run-001")
        assert ok, ans
        assert ans["status"] == "complete" and ans["request_id"] == "run-001"
        assert ans["path"] == "session/trajectories/run.jsonl"
        assert ans["segments"] == {"done": 1, "total": 1}
        assert ans["experiences"] == {"created": ["procedures/rebuild-search-after-config-change.json"], "updated": []}
        ws = memory_of(app).workspace_path
        assert (ws / ans["path"]).read_bytes() == original.read_bytes()
        exp = json.loads((ws / "procedures/rebuild-search-after-config-change.json").read_text())
        assert exp["sources"] == ["session/trajectories/run.jsonl"]
        # the agent got exactly the four tools, the grant hidden in injected kwargs, no built-in tools
        call = app.agent.replies[0]
        assert sorted(call["kwargs"]["job_tools"]) == sorted(
            ["procedure_search", "procedure_read", "procedure_create", "procedure_update"]
        )
        assert call["kwargs"]["injected_job_kwargs"]["_procedure_sources"] == ["session/trajectories/run.jsonl"]
        assert set(call["kwargs"]["injected_job_kwargs"]) == {"_procedure_grant", "_procedure_sources"}
        assert call["kwargs"]["builtin_tools"] == []
        assert call["kwargs"]["react_config"]["interruption_raise_cancelled_error"] is True
        assert '"tool_calls"' in call["prompt"] and "rebuilt 1200 documents" in call["prompt"]  # all fields kept
        # the grant is revoked after the run: forged or replayed writes fail
        ok, forged = await run_job(
            app,
            "procedure_create",
            filename="x.json",
            description="d",
            when_to_use="w",
            content="c",
            operation_key="k",
            **call["kwargs"]["injected_job_kwargs"],
            tool_context_id=call["kwargs"]["tool_context_id"],
        )
        assert not ok and forged["error"]["code"] == "no_active_extraction_run"
        ok, found = await run_job(app, "procedure_search", query="stale search config", index="when_to_use")
        assert found["results"][0]["path"] == "procedures/rebuild-search-after-config-change.json"
        # no source.json and no public trace id anywhere
        assert not list(ws.rglob("source.json"))
        assert "trace_id" not in json.dumps(ans) and "trace_id" not in json.dumps(found)


@pytest.mark.parametrize("name", ["run.jsonl", "run.json", "run.md", "run.log", "run.txt", "RUN"])
async def test_every_supported_format_is_read_and_kept_byte_exact(make_app, tmp_path, name):
    source = {
        "run.jsonl": JSONL,
        "run.json": json.dumps({"id": "s1", "messages": [json.loads(x) for x in JSONL.splitlines()]}, indent=1),
        "run.md": "# Session\n\n**user**: stale search after config change\n\n**assistant**: rebuilt the index\n",
        "run.log": "2026-12-03T10:00:00 INFO user: stale search\n2026-12-03T10:00:05 INFO tool rebuild_index ok\n",
        "run.txt": "user: stale search\r\nassistant: rebuild the index\r\n",
        "RUN": "plain text without an extension\n",
    }[name]
    original = write(tmp_path, name, source)
    async with make_app(scripts=[replies()]) as app:
        ok, ans = await import_file(app, original)
        assert ok and ans["status"] == "complete", ans
        assert ans["path"] == f"session/trajectories/{name}"  # extension kept, never rewritten as .txt
        assert (memory_of(app).workspace_path / ans["path"]).read_bytes() == original.read_bytes()
        assert source.replace("\r\n", "\n") in app.agent.replies[0]["prompt"].replace("\r\n", "\n")
        assert ans["request_id"]  # generated when none was given


ELF = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256))


@pytest.mark.parametrize(
    "name, data, code",
    [
        ("run.log", b"\xff\xfe\x00bad", "unsupported_format"),
        ("run.txt", b"caf\xe9 latin-1", "malformed_input"),
        ("image.png", b"\x89PNG\r\n", "unsupported_format"),
        ("t.pdf", b"%PDF-1.7\n", "unsupported_format"),
        ("program.log", ELF, "unsupported_format"),  # an ELF binary saved as .log: NUL bytes
        ("run.md", "   \n", "malformed_input"),
        ("empty.jsonl", b"", "malformed_input"),
    ],
)
async def test_what_is_not_text_of_a_supported_kind_is_rejected_before_anything_is_copied(
    make_app, tmp_path, name, data, code
):
    original = write(tmp_path, name, data)
    async with make_app(scripts=[]) as app:
        memory = memory_of(app)
        trajectories = memory.workspace_path / memory.workspace.trajectory_rel_dir
        ok, ans = await import_file(app, original, request_id="bad-1")
        assert not ok and ans["status"] == "rejected" and ans["error"]["code"] == code, ans
        assert "Nothing was copied" in ans["error"]["message"] and "resume" not in ans and "path" not in ans
        assert list(trajectories.iterdir()) == [] and list((memory.workspace.state_dir / "imports").iterdir()) == []
        assert list((memory.workspace.state_dir / "processing").iterdir()) == []
        assert app.agent.replies == []
        ok, listed = await run_job(app, "procedure_imports")
        assert ok and listed["imports"] == []  # nothing behind: the listing agrees (no import at all)
        again = await import_file(app, original, request_id="bad-1")
        assert again[1]["status"] == "rejected" and again[1]["error"]["code"] == code  # the same, still nothing
        assert list(trajectories.iterdir()) == []


@pytest.mark.parametrize(
    "name, data",
    [
        ("run.json", '{"messages": ['),
        ("run.jsonl", '{"a": 1}\nnot json\n'),
    ],
)
async def test_malformed_content_found_while_reading_is_rejected_and_keeps_the_copy(make_app, tmp_path, name, data):
    """The spec's "malformed input produces an incomplete response and retains the saved original": the structure
    is found wrong reading the saved copy; the answer is not complete (status rejected, the listing's status too)."""
    original = write(tmp_path, name, data)
    async with make_app(scripts=[]) as app:
        ok, ans = await import_file(app, original, request_id="bad-1")
        assert not ok and ans["status"] == "rejected" and ans["error"]["code"] == "malformed_input", ans
        assert "resume" not in ans and "new request_id" in ans["error"]["message"]  # resuming cannot succeed
        assert f"job=procedure_delete path={ans['path']}" in ans["error"]["message"]  # the way to remove it
        assert (memory_of(app).workspace_path / ans["path"]).read_bytes() == original.read_bytes()
        assert app.agent.replies == []
        ok, listed = await run_job(app, "procedure_imports")
        assert [(i["request_id"], i["status"], i["error_code"]) for i in listed["imports"]] == [
            ("bad-1", ans["status"], "malformed_input")
        ]  # the answer and the listing agree
        again = await import_file(app, original, request_id="bad-1")
        assert again[1]["status"] == "rejected" and again[1]["error"]["code"] == "malformed_input"
        assert "resume" not in again[1]  # the same, and still nothing to resume


async def test_name_collisions_and_reservations(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    async with make_app(scripts=[replies() for _ in range(5)]) as app:
        memory = memory_of(app)
        paths = [(await import_file(app, original))[1]["path"] for _ in range(2)]
        assert paths == ["session/trajectories/run.jsonl", "session/trajectories/run-2.jsonl"]  # no content dedup
        from reme_procedure_memory.storage.imports import ImportRecord

        memory.workspace.imports.put(
            ImportRecord(
                request_id="held",
                source="/x/run.jsonl",
                filename="run.jsonl",
                path="session/trajectories/run-3.jsonl",
                sha256="0",
                size=0,
            )
        )
        ok, ans = await import_file(app, original)
        assert ans["path"] == "session/trajectories/run-4.jsonl"  # a pending reservation keeps its name
        dotted = write(tmp_path, "archive.tar.md", "x\n")
        paths = [(await import_file(app, dotted))[1]["path"] for _ in range(2)]
        assert paths == ["session/trajectories/archive.tar.md", "session/trajectories/archive.tar-2.md"]


async def test_a_completed_import_run_again_says_that_nothing_was_done(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    async with make_app(scripts=[replies()]) as app:
        ok, first = await import_file(app, original, request_id="r1")
        assert ok and "already_complete" not in first and "note" not in first, first
        ok, again = await import_file(app, original, request_id="r1")
        assert ok and again["status"] == "complete" and again["already_complete"] is True
        assert "nothing was done" in again["note"] and "r1" in again["note"]
        assert len(app.agent.replies) == 1 and again["segments"] == first["segments"]  # the first run's progress


async def test_the_same_bytes_imported_again_are_a_new_import_that_names_the_earlier_one(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    async with make_app(scripts=[replies() for _ in range(3)]) as app:
        ok, first = await import_file(app, original)  # no request_id: a generated one
        assert ok and "same_bytes_as" not in first and "note" not in first
        ok, second = await import_file(app, original)
        assert ok and second["request_id"] != first["request_id"]
        assert second["path"] == "session/trajectories/run-2.jsonl"  # imported all the same (no deduplication)
        assert second["same_bytes_as"] == [{"request_id": first["request_id"], "path": first["path"]}]
        assert f"{first['request_id']} ({first['path']})" in second["note"]
        ok, other = await import_file(app, write(tmp_path, "other.jsonl", JSONL + '{"role": "user"}\n'))
        assert ok and "same_bytes_as" not in other  # other bytes: nothing to say


async def test_request_id_resume_contract(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    other = write(tmp_path, "other.jsonl", JSONL)
    async with make_app(scripts=[replies(), replies()]) as app:
        ok, first = await import_file(app, original, request_id="r1")
        assert ok
        # same id, different path or name: explicit failure
        ok, ans = await import_file(app, other, request_id="r1")
        assert not ok and ans["error"]["code"] == "request_id_conflict"
        ok, ans = await import_file(app, original, filename="renamed.jsonl", request_id="r1")
        assert not ok and ans["error"]["code"] == "request_id_conflict"
        # a finished request replays without running the agent again
        ok, again = await import_file(app, original, request_id="r1")
        assert ok and again["path"] == first["path"] and len(app.agent.replies) == 1
        # changed bytes of a still existing original are rejected
        original.write_text(JSONL + '{"role": "user", "content": "more"}\n')
        ok, ans = await import_file(app, original, request_id="r1")
        assert not ok and ans["error"]["code"] == "original_changed"
        # once the copy is published the original may be deleted
        original.unlink()
        ok, ans = await import_file(app, original, request_id="r1")
        assert ok and ans["status"] == "complete"
        # without a saved copy the original is required
        ok, ans = await import_file(app, tmp_path / "missing.jsonl", request_id="r2")
        assert not ok and ans["error"]["code"] == "not_found"


async def test_saved_copy_is_verified_against_its_checksum(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    async with make_app(scripts=[replies()]) as app:
        ok, ans = await import_file(app, original, request_id="r1")
        copy = memory_of(app).workspace_path / ans["path"]
        copy.write_text("tampered\n")
        original.unlink()
        ok, ans = await import_file(app, original, request_id="r1")
        assert not ok and ans["error"]["code"] == "copy_corrupted"
        assert copy.read_text() == "tampered\n"  # nothing is rewritten silently


async def test_files_over_the_limit_are_refused_before_copying(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    components = {"procedure_memory": {"default": {"max_file_bytes": 100}}}
    async with make_app(scripts=[], components=components) as app:
        ok, ans = await import_file(app, original, request_id="big")
        assert not ok and ans["error"]["code"] == "file_too_large"
        assert not any((memory_of(app).workspace_path / "session/trajectories").iterdir())
        assert memory_of(app).workspace.imports.get("big") is None


async def test_required_arguments(make_app, tmp_path):
    async with make_app(scripts=[]) as app:
        for args, needle in [
            ({"filename": "a.jsonl"}, "file"),
            ({"file": str(tmp_path / "a.jsonl")}, "filename"),
            ({"file": str(tmp_path / "a"), "filename": "../a.jsonl"}, "filename"),
        ]:
            ok, ans = await run_job(app, "procedure_auto_memory", **args)
            assert not ok and ans["error"]["code"] == "invalid_argument" and needle in ans["error"]["message"]


async def test_multi_segment_rolling_summary_and_revisions(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", long_trajectory())
    components = {"procedure_memory": {"default": {"token_limits": {"segment": 60}}}}
    seen = []

    async def segment_script(tools, prompt, kwargs):
        seen.append(prompt)
        number = len(seen)
        if number == 1:
            ok, ans = await tools.call(
                "procedure_create",
                filename="rollout.json",
                operation_key="s1-1",
                description="Roll out",
                when_to_use="When rolling out",
                content="Step 0.",
            )
            assert ok
        else:
            ok, found = await tools.call("procedure_read", path="procedures/rollout.json")
            ok, ans = await tools.call(
                "procedure_update",
                path="procedures/rollout.json",
                expected_version=found["version"],
                operation_key=f"s{number}-1",
                content=found["experience"]["content"] + f" Step {number}.",
            )
            assert ok, ans
        return summary(f"summary after segment {number}")

    async with make_app(scripts=[segment_script] * 50, components=components) as app:
        ok, ans = await import_file(app, original, request_id="long")
        assert ok, ans
        total = ans["segments"]["total"]
        assert total > 3 and ans["segments"]["done"] == total and len(seen) == total
        for number in range(2, total + 1):  # each segment sees the previous summary
            assert f"summary after segment {number - 1}" in seen[number - 1]
        checkpoint = memory_of(app).workspace.checkpoints.get("long")
        text = original.read_text()
        assert "".join(text[s:e] for s, e in checkpoint.segments) == text  # lossless
        assert ans["experiences"] == {"created": ["procedures/rollout.json"], "updated": []}
        exp = json.loads((memory_of(app).workspace_path / "procedures/rollout.json").read_text())
        assert exp["content"].endswith(f"Step {total}.") and exp["sources"] == ["session/trajectories/run.jsonl"]


async def test_token_error_then_shorter_retry(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)

    async def script(tools, prompt, kwargs):
        ok, ans = await tools.call(
            "procedure_create",
            filename="a.json",
            operation_key="k1",
            description="d",
            when_to_use="w",
            content=" ".join(["word"] * 3000),
        )
        assert not ok and ans["error"]["code"] == "field_too_long" and ans["fields"][0]["limit"] == 2048
        ok, ans = await tools.call(
            "procedure_create", filename="a.json", operation_key="k2", description="d", when_to_use="w", content="short"
        )
        assert ok
        return summary("s")

    async with make_app(scripts=[script]) as app:
        ok, ans = await import_file(app, original)
        assert ok and ans["experiences"]["created"] == ["procedures/a.json"]
        assert "2048" in app.agent.replies[0]["kwargs"]["system_prompt"]  # targets, never the ceilings
        assert "2252" not in app.agent.replies[0]["kwargs"]["system_prompt"]


async def test_pending_index_then_correction_within_the_segment(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)

    async def script(tools, prompt, kwargs):
        ok, ans = await tools.call(
            "procedure_create",
            filename="a.json",
            operation_key="k1",
            description="d",
            when_to_use="w",
            content="REJECTED by the provider",
        )
        assert not ok and ans["status"] == "index_pending"
        ok, current = await tools.call("procedure_read", path=ans["path"])
        ok, fixed = await tools.call(
            "procedure_update",
            path=ans["path"],
            expected_version=current["version"],
            content="acceptable",
            operation_key="k2",
        )
        assert ok, fixed
        return summary("s")

    async with make_app(scripts=[script]) as app:
        app.context.components["as_embedding"]["procedure"].model.reject = {"REJECTED"}
        ok, ans = await import_file(app, original)
        assert ok and ans["status"] == "complete" and ans["pending_writes"] == []


async def test_segment_with_pending_writes_cannot_advance_until_resumed(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)

    async def leaves_pending(tools, prompt, kwargs):
        ok, ans = await tools.call(
            "procedure_create",
            filename="a.json",
            operation_key="k1",
            description="d",
            when_to_use="w",
            content="REJECTED content",
        )
        assert ans["status"] == "index_pending"
        return summary("s")

    async def corrects(tools, prompt, kwargs):
        assert "procedures/a.json" in prompt and "k1" in prompt  # the prior operation ledger
        ok, current = await tools.call("procedure_read", path="procedures/a.json")
        ok, ans = await tools.call(
            "procedure_update",
            path="procedures/a.json",
            expected_version=current["version"],
            content="fine now",
            operation_key="k2",
        )
        assert ok
        return summary("s")

    async with make_app(scripts=[leaves_pending, corrects]) as app:
        app.context.components["as_embedding"]["procedure"].model.reject = {"REJECTED"}
        ok, ans = await import_file(app, original, request_id="p1")
        assert not ok and ans["status"] == "incomplete" and ans["error"]["code"] == "pending_writes"
        assert [p["path"] for p in ans["pending_writes"]] == ["procedures/a.json"]
        assert ans["segments"]["done"] == 0
        ok, ans = await import_file(app, original, request_id="p1")
        assert ok and ans["status"] == "complete" and ans["segments"]["done"] == 1


async def test_missing_summary_is_repaired_within_budget(make_app, tmp_path):
    original = two_segment_original(tmp_path)

    async def no_summary(tools, prompt, kwargs):
        return "I created nothing."

    async def repaired(tools, prompt, kwargs):
        assert kwargs["job_tools"] == [] and "no <summary>" in prompt
        return summary("fixed summary")

    async def last(tools, prompt, kwargs):  # the last segment: no summary asked for, none checked
        assert "This is the last segment" in prompt and "between <summary> and </summary>" not in prompt
        return "Nothing reusable."

    async with make_app(scripts=[no_summary, repaired, last], components=TWO_SEGMENTS) as app:
        ok, ans = await import_file(app, original, request_id="s1")
        assert ok and ans["segments"] == {"done": 2, "total": 2}, ans
        assert memory_of(app).workspace.checkpoints.get("s1").summary == "fixed summary"
        assert len(app.agent.replies) == 3  # the last segment's reply needed no repair


async def test_over_limit_summary_exhausts_the_repair_budget_and_stops_resumably(make_app, tmp_path):
    original = two_segment_original(tmp_path)
    components = {
        "procedure_memory": {
            "default": {"token_limits": {"summary": 10, "segment": 200}, "extraction": {"summary_repair_attempts": 1}}
        }
    }
    too_long = summary(" ".join(["w"] * 12))  # ceiling floor(10 * 1.1) = 11

    async def long_summary(tools, prompt, kwargs):
        return too_long

    scripts = [long_summary, long_summary, replies("ok now"), replies("done")]
    async with make_app(scripts=scripts, components=components) as app:
        ok, ans = await import_file(app, original, request_id="s2")
        assert not ok and ans["error"]["code"] == "summary_invalid" and ans["segments"]["done"] == 0
        assert len(app.agent.replies) == 2  # one reply + one bounded repair
        ok, ans = await import_file(app, original, request_id="s2")
        assert ok and ans["status"] == "complete"


@pytest.mark.parametrize("reason", ["exceed_max_iters", "interrupted"])
async def test_unfinished_agent_never_advances_the_checkpoint(make_app, tmp_path, reason):
    original = write(tmp_path, "run.jsonl", JSONL)

    async def unfinished(tools, prompt, kwargs):
        return {
            "session_id": "x",
            "result": "stopped",
            "usage": None,
            "last_message": {"finished_reason": reason, "content": [{"type": "text", "text": "stopped"}]},
        }

    components = {"procedure_memory": {"default": {"extraction": {"max_iters": 3}}}}
    async with make_app(scripts=[unfinished, replies()], components=components) as app:
        ok, ans = await import_file(app, original, request_id="u1")
        assert not ok and ans["status"] == "incomplete" and ans["segments"]["done"] == 0
        assert app.agent.replies[0]["kwargs"]["react_config"]["max_iters"] == 3
        assert memory_of(app).workspace.checkpoints.get("u1").saved_reply is None
        setting = "components.procedure_memory.default.extraction.max_iters"
        if reason == "exceed_max_iters":  # the answer names the setting and its resume raises it
            assert ans["error"]["code"] == "agent_budget_exhausted"
            assert f"Raise {setting} (now 3); the resume command below uses 6." in ans["error"]["message"]
            assert f"{setting}=6" in ans["resume"]
        else:
            assert ans["error"]["code"] == "agent_interrupted" and f"{setting}=3" in ans["resume"]  # as it was
        ok, ans = await import_file(app, original, request_id="u1")
        assert ok and ans["segments"]["done"] == 1


async def test_agent_exception_is_resumable(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)

    async def boom(tools, prompt, kwargs):
        raise RuntimeError("model endpoint unavailable")

    async with make_app(scripts=[boom, replies()]) as app:
        ok, ans = await import_file(app, original, request_id="e1")
        assert (
            not ok
            and ans["error"]["code"] == "agent_failed"
            and "model endpoint unavailable" in ans["error"]["message"]
        )
        ok, ans = await import_file(app, original, request_id="e1")
        assert ok


async def test_saved_final_reply_is_reused_when_the_checkpoint_did_not_advance(make_app, tmp_path, monkeypatch):
    original = two_segment_original(tmp_path)
    from reme_procedure_memory.extraction import loop as extraction

    async with make_app(scripts=[replies("the saved summary"), replies("done")], components=TWO_SEGMENTS) as app:
        real = extraction.Extraction._check_pending_writes

        def crash_once(self, index):
            monkeypatch.setattr(extraction.Extraction, "_check_pending_writes", real)
            raise KeyboardInterrupt("crash between the saved reply and the advance")

        monkeypatch.setattr(extraction.Extraction, "_check_pending_writes", crash_once)
        with pytest.raises(KeyboardInterrupt):
            await import_file(app, original, request_id="c1")
        assert memory_of(app).workspace.checkpoints.get("c1").saved_reply["segment"] == 0
        ok, ans = await import_file(app, original, request_id="c1")
        assert ok and len(app.agent.replies) == 2  # the agent did not run segment 1 again, only segment 2
        assert memory_of(app).workspace.checkpoints.get("c1").summary == "the saved summary"


async def test_context_budget_is_checked_before_any_model_call(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    components = {"procedure_memory": {"default": {"token_limits": {"context": 300, "reserve": 100}}}}
    async with make_app(scripts=[], components=components) as app:
        ok, ans = await import_file(app, original, request_id="ctx")
        assert not ok and ans["error"]["code"] == "context_budget_exceeded"
        assert "token_limits.context" in ans["error"]["message"] and app.agent.replies == []


async def test_budgets_may_change_between_resumes_but_segmentation_may_not(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", long_trajectory(10))
    ws = tmp_path / "ws"
    small = {"procedure_memory": {"default": {"token_limits": {"segment": 80, "context": 700, "reserve": 100}}}}
    async with make_app(workspace=ws, scripts=[], components=small) as app:
        ok, ans = await import_file(app, original, request_id="b1")
        assert ans["error"]["code"] == "context_budget_exceeded"
        before = json.dumps(memory_of(app).workspace.checkpoints.get("b1").to_record(), sort_keys=True)
    bigger = {
        "procedure_memory": {
            "default": {
                "token_limits": {"segment": 80, "context": 262144, "reserve": 4096},
                "extraction": {"max_iters": 5},
            }
        }
    }
    other_segmentation = {"procedure_memory": {"default": {"token_limits": {"segment": 81}}}}
    async with make_app(workspace=ws, scripts=[], components=other_segmentation) as app:
        ok, ans = await import_file(app, original, request_id="b1")
        assert (
            not ok and ans["error"]["code"] == "incompatible_checkpoint" and "segment_tokens" in ans["error"]["message"]
        )
        assert (
            json.dumps(memory_of(app).workspace.checkpoints.get("b1").to_record(), sort_keys=True) == before
        )  # nothing changed
    async with make_app(workspace=ws, scripts=[summarises()] * 20, components=bigger) as app:
        ok, ans = await import_file(app, original, request_id="b1")
        assert ok and ans["status"] == "complete"
        assert app.agent.replies[0]["kwargs"]["react_config"]["max_iters"] == 5


async def test_unavailable_tokenizer_is_refused_before_anything_is_copied(make_app, tmp_path, word_tokenizer):
    original = write(tmp_path, "run.jsonl", JSONL)
    ws = tmp_path / "ws"
    missing = {"procedure_memory": {"default": {"tokenizer_source": str(tmp_path / "nope" / "tokenizer.json")}}}
    async with make_app(workspace=ws, scripts=[], components=missing) as app:
        ok, ans = await import_file(app, original, request_id="t1")
        assert not ok and ans["status"] == "error" and ans["error"]["code"] == "tokenizer_unavailable"
        assert "nope" in ans["error"]["message"] and "PROCEDURE_TOKENIZER_SOURCE" in ans["error"]["message"]
        assert "Nothing was copied" in ans["error"]["message"] and "resume" not in ans
        assert (
            memory_of(app).workspace.checkpoints.get("t1") is None
            and memory_of(app).workspace.imports.get("t1") is None
        )
        assert not list((ws / "session").rglob("run*"))  # no copy
    hub = {"procedure_memory": {"default": {"tokenizer_source": "no-such-org/no-such-tokenizer"}}}
    async with make_app(workspace=ws, scripts=[], components=hub) as app:  # HF_HUB_OFFLINE=1: fails fast
        ok, ans = await import_file(app, original, request_id="t2")
        assert ans["error"]["code"] == "tokenizer_unavailable"
    # resuming t1 under a different tokenizer is incompatible only once a checkpoint exists; t1 has none yet
    async with make_app(workspace=ws, scripts=[replies()]) as app:
        ok, ans = await import_file(app, original, request_id="t1")
        assert ok and ans["status"] == "complete"
        assert (
            hashlib.sha256((memory_of(app).workspace_path / ans["path"]).read_bytes()).hexdigest()
            == hashlib.sha256(original.read_bytes()).hexdigest()
        )


async def test_memory_hint_focuses_the_prompt_and_source_id_is_kept(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    async with make_app(scripts=[replies()]) as app:
        ok, ans = await import_file(
            app, original, request_id="h1", memory_hint="focus on index rebuilds", source_id="ci-run-42"
        )
        assert ok
        assert "focus on index rebuilds" in app.agent.replies[0]["prompt"]
        assert memory_of(app).workspace.imports.get("h1").source_id == "ci-run-42"


async def test_progress_goes_to_the_log_and_to_a_terminal(make_app, tmp_path, monkeypatch):
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    original = write(tmp_path, "run.jsonl", long_trajectory(10))
    components = {"procedure_memory": {"default": {"token_limits": {"segment": 80}}}}
    logged = []

    class Log:
        def info(self, message):
            logged.append(message)

    async with make_app(scripts=[creates(name="a.json")] + [summarises()] * 20, components=components) as app:
        monkeypatch.setattr(memory_of(app).workspace, "logger", Log())  # the import logs through the workspace
        ok, ans = await import_file(app, original)
        assert ok and ans["segments"]["total"] > 1
    assert [m.replace("procedure import: ", "[procedure-memory] ") for m in logged] == terminal.getvalue().splitlines()
    lines = terminal.getvalue().splitlines()
    total = ans["segments"]["total"]
    generated = ans["request_id"]  # no request_id given: the generated one comes first, before anything is copied
    assert lines[0] == (
        f"[procedure-memory] request_id={generated} (generated; to resume, run the same command "
        f"with request_id={generated})"
    )
    assert f"[procedure-memory] segment 1/{total}: " in lines[1] and "input tokens" in lines[1]
    assert f"[procedure-memory] segment 1/{total} done: 1 created, 0 updated so far" in lines
    assert f"[procedure-memory] segment {total}/{total} done: 1 created, 0 updated so far" in lines


@pytest.mark.parametrize("name", sorted(p.name for p in (FIXTURES / "trajectories").iterdir()))
async def test_real_trajectories_in_every_format_multi_segment(make_app, tmp_path, name):
    original = tmp_path / name
    original.write_bytes((FIXTURES / "trajectories" / name).read_bytes())
    components = {"procedure_memory": {"default": {"token_limits": {"segment": 300}}}}
    prompts = []

    async def segment_script(tools, prompt, kwargs):
        prompts.append(prompt)
        if len(prompts) == 1:  # create from the first segment, skip the others
            ok, ans = await tools.call(
                "procedure_create",
                filename="bfcl-session.json",
                operation_key="s1-1",
                description="Work through a BFCL tool session",
                when_to_use="When a user asks for file-system or API tool operations",
                content="Inspect the state first, then call the tools step by step.",
            )
            assert ok, ans
        return summary(f"read {len(prompts)} segments")

    async with make_app(scripts=[segment_script] * 80, components=components) as app:
        ok, ans = await import_file(app, original, request_id=f"real-{name}")
        assert ok and ans["status"] == "complete", ans
        assert ans["path"] == f"session/trajectories/{name}"
        memory = memory_of(app)
        assert (memory.workspace_path / ans["path"]).read_bytes() == original.read_bytes()
        checkpoint = memory.workspace.checkpoints.get(f"real-{name}")
        text = original.read_text(encoding="utf-8")
        assert "".join(text[s:e] for s, e in checkpoint.segments) == text
        assert all(memory.workspace.tokens.count(text[s:e]) <= 300 for s, e in checkpoint.segments)
        assert len(prompts) == ans["segments"]["total"] >= 2
        for (s, e), prompt in zip(checkpoint.segments, prompts):
            assert text[s:e] in prompt  # every segment reached the agent whole, fields untouched
        assert ans["experiences"] == {"created": ["procedures/bfcl-session.json"], "updated": []}


@pytest.mark.parametrize(
    "name, data", [("run.json", '\ufeff{"messages": []}'), ("run.jsonl", '\ufeff{"a": 1}\n{"b": 2}\n')]
)
async def test_a_byte_order_mark_is_accepted_and_kept(make_app, tmp_path, name, data):
    original = write(tmp_path, name, data.encode("utf-8"))
    async with make_app(scripts=[replies()]) as app:
        ok, ans = await import_file(app, original)
        assert ok, ans
        assert (memory_of(app).workspace_path / ans["path"]).read_bytes() == original.read_bytes()


async def test_a_new_memory_hint_applies_to_the_remaining_segments(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)

    async def boom(tools, prompt, kwargs):
        raise RuntimeError("stop")

    async with make_app(scripts=[boom, replies()]) as app:
        ok, ans = await import_file(app, original, request_id="h2", memory_hint="first focus")
        assert not ok and "first focus" in app.agent.replies[0]["prompt"]
        ok, ans = await import_file(app, original, request_id="h2", memory_hint="second focus")
        assert ok and "second focus" in app.agent.replies[1]["prompt"]


@pytest.mark.slow
async def test_context_check_reuses_segment_and_summary_counts_exactly_and_old_checkpoints_still_resume(
    make_app, tmp_path, qwen3_tokenizer
):
    import re

    original = tmp_path / "run.jsonl"
    original.write_bytes((FIXTURES / "trajectories" / "multi_turn_long_context_0.jsonl").read_bytes())
    text = original.read_text(encoding="utf-8")
    ws = tmp_path / "ws"

    def settings(context):
        return {
            "procedure_memory": {
                "default": {
                    "tokenizer_source": str(qwen3_tokenizer),
                    "token_limits": {"segment": 3000, "context": context, "reserve": 0},
                }
            }
        }

    async def needed(app) -> tuple[int, list[str]]:
        tokens, counted = memory_of(app).workspace.tokens, []
        count = tokens.count
        tokens.count = lambda t: counted.append(t) or count(t)  # record what the import encodes
        try:
            ok, ans = await import_file(app, original, request_id="ctx-counts")
        finally:
            del tokens.count
        assert not ok and ans["error"]["code"] == "context_budget_exceeded", ans
        return int(re.search(r"needs (\d+) tokens", ans["error"]["message"]).group(1)), counted

    async with make_app(workspace=ws, scripts=[], components=settings(2000)) as app:
        with_counts, encoded = await needed(app)
        checkpoint = memory_of(app).workspace.checkpoints.get("ctx-counts")
        first = text[slice(*checkpoint.segments[0])]
        assert checkpoint.segment_counts == [
            memory_of(app).workspace.tokens.count(text[s:e]) for s, e in checkpoint.segments
        ]
        assert len(checkpoint.segments) >= 2
        assert not any(first in t for t in encoded)  # the segment itself was never encoded again
        checkpoint.segment_counts = None  # a checkpoint written before the counts were kept
        memory_of(app).workspace.checkpoints.put(checkpoint)
    async with make_app(workspace=ws, scripts=[], components=settings(2000)) as app:
        without_counts, encoded = await needed(app)
        assert any(first in t for t in encoded)  # counted whole, as before
    assert with_counts == without_counts
    async with make_app(workspace=ws, scripts=[summarises()] * 10, components=settings(262144)) as app:
        ok, ans = await import_file(app, original, request_id="ctx-counts")
        assert ok and ans["status"] == "complete", ans
        checkpoint = memory_of(app).workspace.checkpoints.get("ctx-counts")
        assert checkpoint.summary_tokens == memory_of(app).workspace.tokens.count(checkpoint.summary)
        # the rolling summary's validated count is reused too: back to segment 2 with a long summary
        summary = "\n".join(f"- step {i}: rebuilt the index of shard {i} and checked a known query" for i in range(40))
        checkpoint.next_segment, checkpoint.summary, checkpoint.status = 1, summary, "processing"
        checkpoint.summary_tokens = memory_of(app).workspace.tokens.count(summary)
        memory_of(app).workspace.checkpoints.put(checkpoint)
    async with make_app(workspace=ws, scripts=[], components=settings(2000)) as app:
        with_summary_count, encoded = await needed(app)
        assert not any(summary in t for t in encoded)
        checkpoint = memory_of(app).workspace.checkpoints.get("ctx-counts")
        checkpoint.summary_tokens = None
        memory_of(app).workspace.checkpoints.put(checkpoint)
        without_summary_count, encoded = await needed(app)
        assert any(summary in t for t in encoded) and with_summary_count == without_summary_count
