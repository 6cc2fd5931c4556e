"""Spec sentences that cut across modules: configured directories, structural failures, interrupted corrections,
fingerprints, no count limit, manual edits."""

import json

import pytest

from conftest import add_trajectory, call_tool, import_file, memory_of, run_job
from helpers import experience_record, place_unicorn_experiences, summary
from helpers.views import held_reindex
from reme_procedure_memory.storage.journal import INDEXED, SUPERSEDED


async def test_configured_directories_and_session_dir(make_app, tmp_path):
    components = {"procedure_memory": {"default": {"procedure_dir": "memory/procs", "trajectory_subdir": "runs"}}}
    original = tmp_path / "run.log"
    original.write_text("2026-12-03 INFO rebuilt the index\n")

    async def script(tools, prompt, kwargs):
        ok, ans = await tools.call(
            "procedure_create",
            filename="rebuild.json",
            operation_key="k",
            description="d",
            when_to_use="after config changes",
            content="rebuild",
        )
        assert ok and ans["path"] == "memory/procs/rebuild.json"
        ok, ans = await tools.call("procedure_read", kind="trajectory", path="chats/runs/run.log")
        assert ok and "rebuilt the index" in ans["text"]
        return summary("s")

    async with make_app(scripts=[script], components=components, session_dir="chats") as app:
        ok, ans = await import_file(app, original)
        assert ok and ans["path"] == "chats/runs/run.log"
        ws = memory_of(app).workspace_path
        assert json.loads((ws / "memory/procs/rebuild.json").read_text())["sources"] == ["chats/runs/run.log"]
        ok, read = await run_job(app, "procedure_read", path="memory/procs/rebuild.json")
        assert ok
        ok, bad = await run_job(app, "procedure_read", path="procedures/rebuild.json")
        assert not ok and bad["error"]["code"] in ("path_outside_allowed_directory", "invalid_argument")
        ok, bad = await run_job(app, "procedure_read", kind="trajectory", path="session/trajectories/run.log")
        assert not ok and bad["error"]["code"] == "path_outside_allowed_directory"


async def test_structural_index_failure_fails_explicitly(make_app, monkeypatch):
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req", [add_trajectory(app)])
        app.context.components["as_embedding"]["procedure"].model.reject = {"REJECT"}
        store = memory.workspace.views.stores["when_to_use"]

        async def broken_delete(paths):
            raise OSError("keyword index is corrupt")

        monkeypatch.setattr(store, "delete", broken_delete)  # the failed file cannot be excluded safely
        response = await app.run_job(
            "procedure_create",
            filename="a.json",
            operation_key="k",
            description="d",
            when_to_use="w",
            content="REJECT me",
            **run.injected(),
            tool_context_id=run.context_id,
        )
        assert response.success is False
        assert "keyword index is corrupt" in response.answer and "index_pending" not in response.answer


async def test_correction_interrupted_before_publish_supersedes_after_restart(make_app, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    async with make_app(workspace=ws) as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req", [add_trajectory(app)])
        app.context.components["as_embedding"]["procedure"].model.reject = {"POISON"}
        ok, failed = await call_tool(
            app,
            run,
            "procedure_create",
            filename="a.json",
            operation_key="k1",
            description="d",
            when_to_use="when deploying",
            content="POISON",
        )
        assert failed["status"] == "index_pending"

        def crash(self, rel, data):
            raise KeyboardInterrupt("crash before the correction is published")

        monkeypatch.setattr(type(memory.workspace.files), "publish", crash)
        with pytest.raises(KeyboardInterrupt):
            await call_tool(
                app,
                run,
                "procedure_update",
                path="procedures/a.json",
                expected_version=failed["version"],
                content="corrected",
                operation_key="k2",
            )
        monkeypatch.undo()
    async with make_app(workspace=ws) as app:  # a fresh provider that accepts everything
        memory = memory_of(app)
        assert json.loads((ws / "procedures/a.json").read_text())["content"] == "corrected"
        assert memory.workspace.journal.get("req", "k1").status == SUPERSEDED
        assert memory.workspace.journal.get("req", "k2").status == INDEXED
        ok, ans = await run_job(app, "procedure_search", query="deploying", index="when_to_use")
        assert ans["index_complete"] and ans["results"][0]["experience"]["content"] == "corrected"


async def test_checkpoint_of_another_segmenter_version_is_incompatible(make_app, tmp_path):
    original = tmp_path / "run.md"
    original.write_text("# run\nstep one\n")
    ws = tmp_path / "ws"
    async with make_app(workspace=ws, scripts=[]) as app:
        memory = memory_of(app)
        ok, ans = await import_file(
            app,
            original,
            request_id="old",
        )  # the agent is not scripted: the import stops after checkpointing
        checkpoint = memory.workspace.checkpoints.get("old")
        assert checkpoint.fingerprint["segmenter_version"] == "1"
        checkpoint.fingerprint["segmenter_version"] = "0"
        memory.workspace.checkpoints.put(checkpoint)
        ok, ans = await import_file(app, original, request_id="old")
        assert not ok and ans["error"]["code"] == "incompatible_checkpoint"
        assert "segmenter_version" in ans["error"]["message"]
        assert memory.workspace.checkpoints.get("old") == checkpoint


@pytest.mark.slow
async def test_no_limit_on_the_number_of_experiences(make_app, tmp_path):
    original = tmp_path / "run.txt"
    original.write_text("many procedures\n")

    async def many(tools, prompt, kwargs):
        for i in range(120):
            ok, ans = await tools.call(
                "procedure_create",
                filename=f"procedure-{i}.json",
                operation_key=f"k{i}",
                description=f"p{i}",
                when_to_use=f"situation {i}",
                content=f"do {i}",
            )
            assert ok, ans
        return summary("s")

    async with make_app(scripts=[many]) as app:
        ok, ans = await import_file(app, original)
        assert ok and len(ans["experiences"]["created"]) == 120
        assert len(list((memory_of(app).workspace_path / "procedures").glob("*.json"))) == 120


async def test_manual_edits_are_not_watched_but_results_are_never_stale(make_app, tmp_path):
    ws = tmp_path / "ws"
    async with make_app(workspace=ws) as app:
        run = memory_of(app).grants.begin_attempt("req", [add_trajectory(app)])
        await call_tool(
            app,
            run,
            "procedure_create",
            filename="a.json",
            operation_key="k",
            description="d",
            when_to_use="when the pager fires",
            content="acknowledge",
        )
        (ws / "procedures/new.json").write_text(json.dumps(experience_record("d", "when the pager fires", "x")))
        (ws / "procedures/a.json").write_text(
            json.dumps(experience_record("d", "when the pager fires", "edited by hand"))
        )
        ok, ans = await run_job(app, "procedure_search", query="pager fires", index="when_to_use")
        assert [r["path"] for r in ans["results"]] == ["procedures/a.json"]  # new.json waits for restart/reindex
        assert ans["results"][0]["experience"]["content"] == "edited by hand"  # the current file, not index text
        ok, _ = await run_job(app, "procedure_reindex")
        ok, ans = await run_job(app, "procedure_search", query="pager fires", index="when_to_use")
        assert sorted(r["path"] for r in ans["results"]) == ["procedures/a.json", "procedures/new.json"]


async def test_updates_leave_no_deleted_bm25_slots_after_close(make_app, tmp_path):
    ws = tmp_path / "ws"
    async with make_app(workspace=ws) as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req", [add_trajectory(app)])
        ok, ans = await call_tool(
            app,
            run,
            "procedure_create",
            filename="a.json",
            operation_key="k0",
            description="d",
            when_to_use="when the queue backs up",
            content="v0",
        )
        for i in range(1, 6):
            ok, ans = await call_tool(
                app,
                run,
                "procedure_update",
                path="procedures/a.json",
                expected_version=ans["version"],
                content=f"v{i}",
                operation_key=f"k{i}",
            )
            assert ok
        bm25 = memory.workspace.views.stores["when_to_use_content"].keyword_index
        assert len(bm25._doc_ids) > 1  # lazily deleted versions are still there while running
    async with make_app(workspace=ws) as app:
        for store in memory_of(app).workspace.views.stores.values():
            assert len(store.keyword_index._doc_ids) == 1  # compacted before the stores persisted
        ok, found = await run_job(app, "procedure_search", query="queue backs up", index="when_to_use_content")
        assert found["results"][0]["experience"]["content"] == "v5"


async def test_trajectory_reads_follow_the_file(make_app):
    async with make_app() as app:
        src = add_trajectory(app, "run.log", b"first version\n")
        ok, ans = await run_job(app, "procedure_read", kind="trajectory", path=src)
        assert ans["text"] == "first version\n"
        (memory_of(app).workspace_path / src).write_bytes(b"second, longer version\n")
        ok, ans = await run_job(app, "procedure_read", kind="trajectory", path=src)
        assert ans["text"] == "second, longer version\n"


async def test_a_failed_publish_writes_nothing_and_frees_the_name(make_app, monkeypatch):
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req", [add_trajectory(app)])
        original = type(memory.workspace.files).publish

        def disk_full(self, rel, data):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(type(memory.workspace.files), "publish", disk_full)
        ok, ans = await call_tool(
            app,
            run,
            "procedure_create",
            filename="a.json",
            operation_key="k1",
            description="d",
            when_to_use="w",
            content="c",
        )
        assert not ok and ans["error"]["code"] == "disk_full"  # a full disk has its own code (issue 10, 4c)
        assert not (memory.workspace_path / "procedures/a.json").exists()
        assert memory.workspace.journal.get("req", "k1").status == "abandoned"
        monkeypatch.setattr(type(memory.workspace.files), "publish", original)
        ok, ans = await call_tool(
            app,
            run,
            "procedure_create",
            filename="a.json",
            operation_key="k2",
            description="d",
            when_to_use="w",
            content="c",
        )
        assert ok and ans["status"] == "created"  # the name was not left reserved by the failed intent


async def test_searches_during_a_reindex_wait_for_complete_views(make_app, tmp_path):
    import asyncio

    ws = tmp_path / "ws"
    place_unicorn_experiences(ws, 30)
    async with make_app(workspace=ws) as app:
        reindex, gate = await held_reindex(app)
        search = asyncio.create_task(
            run_job(app, "procedure_search", query="unicorn7 service degrades", index="when_to_use")
        )
        await asyncio.sleep(0.2)
        assert not search.done()  # it waits for the rebuild instead of answering from half-built views
        gate.set()
        ok, ans = await search
        assert reindex.done()
        assert ok and ans["results"][0]["path"] == "procedures/p7.json" and ans["index_complete"] is True
        assert (await reindex).success
