"""procedure_create / procedure_update through real ReMe Jobs: validation, versions, sources, journal, grants."""

import json

import pytest
from reme_procedure_memory.schema import version_of
from reme_procedure_memory.storage.journal import INDEXED, SUPERSEDED, OperationJournal

from conftest import add_trajectory, call_tool, memory_of, run_job

FIELDS = {
    "description": "Rebuild search after a configuration change",
    "when_to_use": "After changing search configuration when results appear stale",
    "content": "Rebuild the affected indexes, then verify a known query before resuming.",
}


async def create(app, run, name="rebuild-search.json", key="op-1", **overrides):
    return await call_tool(app, run, "procedure_create", filename=name, operation_key=key, **{**FIELDS, **overrides})


def file_json(app, rel):
    return json.loads((memory_of(app).workspace_path / rel).read_text())


async def test_create_writes_exactly_four_fields_with_runtime_sources(make_app):
    async with make_app() as app:
        src = add_trajectory(app)
        run = memory_of(app).grants.begin_attempt("req-1", [src, src])
        ok, ans = await create(app, run)
        assert ok and ans["status"] == "created"
        assert ans["path"] == "procedures/rebuild-search.json"
        data = file_json(app, ans["path"])
        assert data == {
            "description": FIELDS["description"],
            "when-to-use": FIELDS["when_to_use"],
            "content": FIELDS["content"],
            "sources": [src],
        }
        raw = (memory_of(app).workspace_path / ans["path"]).read_bytes()
        assert ans["version"] == version_of(raw)


async def test_create_accepts_the_directory_prefix_and_rejects_bad_names(make_app):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, ans = await create(app, run, name="procedures/a-b.json")
        assert ok and ans["path"] == "procedures/a-b.json"
        for bad in ["../x.json", "x/y.json", "/tmp/x.json", "x.txt", "x.y.json"]:  # canonical names: test_robust_loop
            ok, ans = await create(app, run, name=bad, key=f"k-{bad}")
            assert not ok and ans["error"]["code"] == "invalid_argument", bad
        assert sorted(p.name for p in (memory_of(app).workspace_path / "procedures").iterdir()) == ["a-b.json"]


async def test_create_over_an_existing_name_is_rejected(make_app):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        assert (await create(app, run))[0]
        before = (memory_of(app).workspace_path / "procedures/rebuild-search.json").read_bytes()
        ok, ans = await create(app, run, key="op-2", content="Something else entirely.")
        assert not ok and ans["error"]["code"] == "already_exists"
        assert "procedure_update" in ans["error"]["message"]
        assert (memory_of(app).workspace_path / "procedures/rebuild-search.json").read_bytes() == before


async def test_missing_or_blank_fields_are_rejected(make_app):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, ans = await call_tool(
            app, run, "procedure_create", filename="x.json", operation_key="k", description="d", when_to_use="w"
        )
        assert not ok and "`content` is required" in ans["error"]["message"]
        ok, ans = await create(app, run, key="k2", description="  ")
        assert not ok and ans["error"]["code"] == "invalid_argument"
        ok, ans = await create(app, run, key="")
        assert not ok and "operation_key" in ans["error"]["message"]
        assert not any((memory_of(app).workspace_path / "procedures").iterdir())


async def test_field_over_its_ceiling_writes_nothing_and_names_the_target(make_app):
    # The word tokenizer counts one token per word: description target 128, ceiling 140.
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, ans = await create(app, run, description=" ".join(["word"] * 140))  # at the ceiling: accepted
        assert ok, ans
        ok, ans = await create(app, run, name="other.json", key="op-2", description=" ".join(["word"] * 141))
        assert not ok and ans["error"]["code"] == "field_too_long"
        assert ans["fields"] == [{"field": "description", "tokens": 141, "limit": 128}]
        assert "140" not in ans["error"]["message"]  # the agent sees only the target
        assert not (memory_of(app).workspace_path / "procedures/other.json").exists()
        # a shorter retry with a new key succeeds
        ok, ans = await create(app, run, name="other.json", key="op-3", description="short")
        assert ok


async def test_content_ceiling_uses_the_configured_limits(make_app):
    components = {"procedure_memory": {"default": {"token_limits": {"content": 10}}}}
    async with make_app(components=components) as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        assert (await create(app, run, content=" ".join(["w"] * 11)))[0]  # ceiling floor(10*1.1) = 11
        ok, ans = await create(app, run, name="b.json", key="k2", content=" ".join(["w"] * 12))
        assert not ok and ans["fields"][0] == {"field": "content", "tokens": 12, "limit": 10}


async def test_update_requires_the_current_version_and_keeps_sources(make_app):
    async with make_app() as app:
        memory = memory_of(app)
        first = add_trajectory(app, "run.jsonl")
        second = add_trajectory(app, "run-2.jsonl")
        run1 = memory.grants.begin_attempt("req-1", [first])
        ok, created = await create(app, run1)
        memory.grants.end_attempt(run1)
        run2 = memory.grants.begin_attempt("req-2", [second])
        ok, ans = await call_tool(
            app,
            run2,
            "procedure_update",
            path=created["path"],
            expected_version="0" * 16,
            content="New content.",
            operation_key="u-1",
        )
        assert not ok and ans["error"]["code"] == "stale_version"
        assert ans["current_version"] == created["version"]
        ok, ans = await call_tool(
            app,
            run2,
            "procedure_update",
            path=created["path"],
            expected_version=created["version"],
            content="New content.",
            operation_key="u-2",
        )
        assert ok and ans["status"] == "updated" and ans["version"] != created["version"]
        data = file_json(app, created["path"])
        assert data["content"] == "New content." and data["description"] == FIELDS["description"]
        assert data["sources"] == [first, second]
        # all three text fields may be rewritten by a later segment
        ok, ans2 = await call_tool(
            app,
            run2,
            "procedure_update",
            path=created["path"],
            expected_version=ans["version"],
            description="D2",
            when_to_use="W2",
            content="C2",
            operation_key="u-3",
        )
        assert ok
        data = file_json(app, created["path"])
        assert (data["description"], data["when-to-use"], data["content"]) == ("D2", "W2", "C2")
        assert data["sources"] == [first, second]  # deduplicated, order kept


async def test_update_of_a_missing_experience_or_without_version_fails(make_app):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, ans = await call_tool(
            app,
            run,
            "procedure_update",
            path="procedures/nope.json",
            expected_version="abc",
            content="x",
            operation_key="k",
        )
        assert not ok and ans["error"]["code"] == "not_found"
        ok, ans = await call_tool(
            app, run, "procedure_update", path="procedures/nope.json", content="x", operation_key="k2"
        )
        assert not ok and "expected_version" in ans["error"]["message"]


async def test_identical_retry_is_idempotent_and_key_reuse_conflicts(make_app):
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, first = await create(app, run)
        ok, again = await create(app, run)  # the same run: its earlier answer (test_robust_loop covers the nudge)
        assert ok and again["repeated_call"] and again["version"] == first["version"]
        resumed = memory.grants.begin_attempt(
            "req-1", run.sources
        )  # a later run of the same import retries it: a replay
        ok, again = await create(app, resumed)
        assert ok and again["replayed"] and again["version"] == first["version"]
        ok, ans = await create(app, resumed, name="different.json")
        assert not ok and ans["error"]["code"] == "operation_key_conflict"
        assert not (memory.workspace_path / "procedures/different.json").exists()
        # the same key in another run scope is a different operation
        run2 = memory.grants.begin_attempt("req-2", [add_trajectory(app)])
        ok, ans = await create(app, run2, name="different.json")
        assert ok and ans["status"] == "created"


async def test_journal_records_intent_before_publish_and_final_status(make_app, monkeypatch):
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-1", [add_trajectory(app)])
        seen = []
        original = memory.workspace.files.__class__.publish

        def spy(self, rel, data):
            op = OperationJournal(memory.workspace.state_dir / "operations").get("req-1", "op-1")
            seen.append((op.status, op.path, op.target_bytes == data))
            return original(self, rel, data)

        monkeypatch.setattr(memory.workspace.files.__class__, "publish", spy)
        ok, ans = await create(app, run)
        assert ok and seen == [("intent", "procedures/rebuild-search.json", True)]
        assert memory.workspace.journal.get("req-1", "op-1").status == INDEXED


async def test_interrupted_publish_is_rolled_forward_on_restart(make_app, monkeypatch, tmp_path):
    ws = tmp_path / "ws"
    async with make_app(workspace=ws) as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-1", [add_trajectory(app)])

        def crash(self, rel, data):
            raise KeyboardInterrupt("simulated crash after the intent was journaled")

        monkeypatch.setattr(memory.workspace.files.__class__, "publish", crash)
        with pytest.raises(KeyboardInterrupt):
            await create(app, run)
        monkeypatch.undo()
        assert not (ws / "procedures/rebuild-search.json").exists()
    async with make_app(workspace=ws) as app:
        assert (ws / "procedures/rebuild-search.json").exists()
        ok, ans = await run_job(app, "procedure_search", query="stale search configuration", index="when_to_use")
        assert [r["path"] for r in ans["results"]] == ["procedures/rebuild-search.json"]
        assert memory_of(app).workspace.journal.get("req-1", "op-1").status == INDEXED


async def test_stale_intent_is_dropped_on_restart(make_app, tmp_path):
    ws = tmp_path / "ws"
    async with make_app(workspace=ws) as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, created = await create(app, run)
        from reme_procedure_memory.storage.journal import Operation

        # an update intent journaled against a version the file no longer has
        stale = Operation("req-1", "u-9", "update", "r", created["path"], "{}", "0" * 16)
        memory.workspace.journal.put(stale)
    async with make_app(workspace=ws) as app:
        assert memory_of(app).workspace.journal.get("req-1", "u-9").status == "abandoned"
        assert file_json(app, created["path"])["content"] == FIELDS["content"]


async def test_write_tools_fail_closed_without_a_live_grant(make_app):
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-1", [add_trajectory(app)])
        attempts = [
            {},  # plain service-style call
            {**run.injected(), "_procedure_grant": "forged", "tool_context_id": run.context_id},
            {**run.injected(), "tool_context_id": "forged"},
            {"_procedure_grant": run.grant},
            {
                **run.injected(),
                "_procedure_sources": ["session/trajectories/other.jsonl"],
                "tool_context_id": run.context_id,
            },  # forged sources
        ]
        for extra in attempts:
            for job in ("procedure_create", "procedure_update"):
                ok, ans = await run_job(
                    app,
                    job,
                    filename="x.json",
                    path="procedures/x.json",
                    expected_version="v",
                    operation_key="k",
                    **FIELDS,
                    **extra,
                )
                assert not ok and ans["error"]["code"] == "no_active_extraction_run", (job, extra)
        memory.grants.end_attempt(run)
        ok, ans = await create(app, run)  # the grant is revoked with the run
        assert not ok and ans["error"]["code"] == "no_active_extraction_run"
        assert not any((memory.workspace_path / "procedures").iterdir())


async def test_superseded_failed_intent_after_correction(make_app):
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-1", [add_trajectory(app)])
        app.context.components["as_embedding"]["procedure"].model.reject = {"POISON"}
        ok, failed = await create(app, run, content="POISON content the provider rejects")
        assert not ok and failed["status"] == "index_pending"
        app.context.components["as_embedding"]["procedure"].model.reject = set()
        ok, fixed = await call_tool(
            app,
            run,
            "procedure_update",
            path=failed["path"],
            expected_version=failed["version"],
            content="Acceptable content.",
            operation_key="fix-1",
        )
        assert ok and fixed["status"] == "updated"
        assert memory.workspace.journal.get("req-1", "op-1").status == SUPERSEDED
        assert len(memory.workspace.pending) == 0


async def test_a_write_that_cannot_be_saved_names_the_experience_once(make_app, tmp_path, monkeypatch):
    """Issue 32 item 7: the message read "Writing the write of procedures/...": it names the experience and where."""
    from helpers.faults import Faults

    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        faults = Faults(monkeypatch)
        faults.full = {memory_of(app).workspace_path / "procedures"}
        ok, ans = await create(app, run)
        assert not ok and ans["error"]["code"] == "disk_full", ans
        message = ans["error"]["message"]
        assert message.startswith("Writing procedures/rebuild-search.json (") and "the write of" not in message
