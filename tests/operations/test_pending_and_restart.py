"""Pending indexes against a real local embedding endpoint, restart reconciliation, the workspace lock."""

import json
import shutil

import pytest
from reme_procedure_memory.errors import WorkspaceBusy

from conftest import add_trajectory, call_tool, memory_of, run_job
from helpers import EmbeddingEndpoint, experience_record, place_trajectory
from helpers.endpoints import endpoint_components

FIELDS = {
    "description": "Drain a node",
    "when_to_use": "Before rebooting a cluster node",
    "content": "Cordon the node, drain workloads, then reboot.",
}


@pytest.mark.slow
async def test_provider_outage_excludes_files_from_both_views_then_recovers(make_app):
    with EmbeddingEndpoint(64) as endpoint:
        async with make_app(embedding=False, components=endpoint_components(endpoint)) as app:
            memory = memory_of(app)
            run = memory.grants.begin_attempt("req", [add_trajectory(app)])
            ok, good = await call_tool(
                app,
                run,
                "procedure_create",
                filename="good.json",
                operation_key="g",
                description="Rotate keys",
                when_to_use="When credentials leak",
                content="Rotate the keys and audit access.",
            )
            assert ok
            endpoint.failing = True
            ok, failed = await call_tool(
                app, run, "procedure_create", filename="drain-node.json", operation_key="d", **FIELDS
            )
            assert not ok and failed["status"] == "index_pending"
            assert failed["path"] == "procedures/drain-node.json" and failed["version"]
            assert (memory.workspace_path / failed["path"]).exists()  # the file stays intact
            for store in memory.workspace.views.stores.values():
                assert "procedures/drain-node.json" not in {n.path for n in await store.get_nodes()}
                assert all(c.path != "procedures/drain-node.json" for c in store.file_chunks.values())
            for view in ("when_to_use", "when_to_use_content"):
                ok, ans = await run_job(app, "procedure_search", query="rebooting cluster node drain", index=view)
                assert ok and ans["index_complete"] is False
                assert [p["path"] for p in ans["pending_indexes"]] == ["procedures/drain-node.json"]
                assert ans["pending_indexes"][0]["version"] == failed["version"] and ans["pending_indexes"][0]["error"]
                assert "procedures/drain-node.json" not in [r["path"] for r in ans["results"]]
                assert ans["vector_search"]["available"] is False  # BM25 still answers
            # an unrelated experience remains available while one file is pending
            ok, ans = await run_job(app, "procedure_search", query="credentials leak rotate", index="when_to_use")
            assert [r["path"] for r in ans["results"]] == ["procedures/good.json"]
            # the provider recovers: retrying the identical operation indexes the saved file
            endpoint.failing = False
            ok, retried = await call_tool(
                app, run, "procedure_create", filename="drain-node.json", operation_key="d", **FIELDS
            )
            assert ok and retried["version"] == failed["version"]
            for view in ("when_to_use", "when_to_use_content"):
                ok, ans = await run_job(app, "procedure_search", query="rebooting cluster node drain", index=view)
                assert ans["index_complete"] is True and ans["pending_indexes"] == []
                assert ans["results"][0]["path"] == "procedures/drain-node.json"


@pytest.mark.slow
async def test_pending_file_re_enters_the_views_after_synchronisation(make_app):
    with EmbeddingEndpoint(64) as endpoint:
        async with make_app(embedding=False, components=endpoint_components(endpoint)) as app:
            run = memory_of(app).grants.begin_attempt("req", [add_trajectory(app)])
            endpoint.failing = True
            ok, failed = await call_tool(
                app, run, "procedure_create", filename="drain-node.json", operation_key="d", **FIELDS
            )
            assert not ok
            endpoint.failing = False
            # pending_retry_seconds is 0 in tests: the next search synchronises pending files first
            ok, ans = await run_job(app, "procedure_search", query="rebooting cluster node", index="when_to_use")
            assert ans["index_complete"] is True
            assert ans["results"][0]["path"] == "procedures/drain-node.json"


async def test_pending_after_restart_is_reported_then_indexed(make_app, tmp_path):
    ws = tmp_path / "ws"
    (ws / "procedures").mkdir(parents=True)
    place_trajectory(ws)
    (ws / "procedures" / "drain-node.json").write_text(
        json.dumps(experience_record("Drain a node", "Before rebooting a cluster node", "Cordon, drain, reboot."))
    )
    with EmbeddingEndpoint(64) as endpoint:
        endpoint.failing = True
        async with make_app(workspace=ws, embedding=False, components=endpoint_components(endpoint)) as app:
            assert set(memory_of(app).workspace.pending) == {"procedures/drain-node.json"}  # startup continued
            endpoint.failing = False
            ok, ans = await run_job(app, "procedure_search", query="rebooting cluster node", index="when_to_use")
            assert ans["index_complete"] and ans["results"][0]["path"] == "procedures/drain-node.json"


async def test_restart_rebuilds_views_from_json_when_metadata_is_missing(make_app, tmp_path):
    ws = tmp_path / "ws"
    async with make_app(workspace=ws) as app:
        run = memory_of(app).grants.begin_attempt("req", [add_trajectory(app)])
        ok, created = await call_tool(
            app, run, "procedure_create", filename="drain-node.json", operation_key="d", **FIELDS
        )
    before = (ws / created["path"]).read_bytes()
    for sub in ("file_store", "file_graph", "keyword_index"):
        shutil.rmtree(ws / "metadata" / sub)
    async with make_app(workspace=ws) as app:
        for view in ("when_to_use", "when_to_use_content"):
            ok, ans = await run_job(app, "procedure_search", query="rebooting cluster node", index=view)
            assert [r["path"] for r in ans["results"]] == [created["path"]]
            assert ans["results"][0]["version"] == created["version"]
    assert (ws / created["path"]).read_bytes() == before


async def test_restart_reconciles_removed_edited_and_invalid_files(make_app, tmp_path):
    ws = tmp_path / "ws"
    async with make_app(workspace=ws) as app:
        run = memory_of(app).grants.begin_attempt("req", [add_trajectory(app)])
        for name, wtu in [("a.json", "alpha situation"), ("b.json", "bravo situation"), ("c.json", "charlie case")]:
            await call_tool(
                app,
                run,
                "procedure_create",
                filename=name,
                operation_key=name,
                description="d",
                when_to_use=wtu,
                content="do it",
            )
    (ws / "procedures/a.json").unlink()
    (ws / "procedures/b.json").write_text(json.dumps(experience_record("d", "bravo edited situation", "do it")))
    (ws / "procedures/c.json").write_text("{ broken")
    async with make_app(workspace=ws) as app:
        memory = memory_of(app)
        for store in memory.workspace.views.stores.values():
            assert {n.path for n in await store.get_nodes()} == {"procedures/b.json"}
        ok, ans = await run_job(app, "procedure_search", query="situation", index="when_to_use")
        assert [r["path"] for r in ans["results"]] == ["procedures/b.json"]
        assert ans["results"][0]["experience"]["when-to-use"] == "bravo edited situation"
        assert ans["index_complete"] is False
        assert [p["path"] for p in ans["pending_indexes"]] == ["procedures/c.json"]
        assert "invalid" in ans["pending_indexes"][0]["error"]


async def test_reindex_reports_invalid_files_and_never_rewrites_files(make_app, tmp_path):
    ws = tmp_path / "ws"
    (ws / "procedures").mkdir(parents=True)
    (ws / "session/trajectories").mkdir(parents=True)
    good = json.dumps(experience_record("d", "when the build breaks", "bisect"), indent=4).encode()
    (ws / "procedures/good.json").write_bytes(good)
    (ws / "procedures/bad.json").write_bytes(b'{"description": "only one field"}')
    (ws / "procedures/notes.txt").write_bytes(b"not an experience")
    (ws / "session/trajectories/run.jsonl").write_bytes(b'{"a": 1}\n')
    snapshot = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file() and "metadata" not in p.parts}
    async with make_app(workspace=ws) as app:
        ok, ans = await run_job(app, "procedure_reindex")
        assert ok and ans["status"] == "complete" and ans["indexed"] == 1
        assert [i["path"] for i in ans["invalid_files"]] == ["procedures/bad.json"]
        assert "when-to-use" in ans["invalid_files"][0]["error"]
        ok, found = await run_job(app, "procedure_search", query="build breaks", index="when_to_use")
        assert [r["path"] for r in found["results"]] == ["procedures/good.json"]
    assert {p: p.read_bytes() for p in snapshot} == snapshot
    assert {p for p in ws.rglob("*") if p.is_file() and "metadata" not in p.parts} == set(snapshot)


@pytest.mark.slow
async def test_reindex_with_a_failing_provider_is_incomplete(make_app, tmp_path):
    ws = tmp_path / "ws"
    (ws / "procedures").mkdir(parents=True)
    place_trajectory(ws)
    (ws / "procedures/a.json").write_text(json.dumps(experience_record("d", "w", "c")))
    with EmbeddingEndpoint(64) as endpoint:
        endpoint.failing = True
        async with make_app(workspace=ws, embedding=False, components=endpoint_components(endpoint)) as app:
            response = await app.run_job("procedure_reindex")
            ans = json.loads(response.answer)
            assert response.success is False and ans["status"] == "incomplete"
            assert [p["path"] for p in ans["pending_indexes"]] == ["procedures/a.json"]


async def test_one_process_per_workspace(make_app, tmp_path):
    ws = tmp_path / "ws"
    async with make_app(workspace=ws):
        with pytest.raises(WorkspaceBusy, match="in use by another ReMe process"):
            async with make_app(workspace=ws):
                pass
    async with make_app(workspace=ws):  # released on close
        pass
