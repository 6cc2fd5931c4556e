"""End-to-end: the real ``reme`` console script in subprocesses, a real HTTP/MCP service, a local embedding endpoint.

Every process gets a temporary workspace (absolute ``workspace_dir``), ``log_to_file=false`` and a temporary cwd
(holding an empty ``.env`` so no ``.env`` from a parent directory can override the test environment), so nothing is
written into the repository. Embeddings come from ``EmbeddingEndpoint`` (an OpenAI-compatible ``/v1/embeddings``
server on 127.0.0.1) through ReMe's real ``openai`` embedding backend; the tokenizer is a local ``tokenizer.json``.

One server (``reme start``) is shared by all service tests (module-scoped fixture) and stopped by its own pid.
Client calls are the documented ``reme <job> key=value ... host=127.0.0.1 port=<port>``: with a non-default port the
client needs both ``host`` and ``port`` (ReMe falls back to 127.0.0.1:2333 when only one is known).
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from reme_procedure_memory.schema import version_of

from helpers import EmbeddingEndpoint, write_word_tokenizer
from helpers.cli import (
    CLEANUP,
    CLEANUP_RULES,
    DIMENSIONS,
    HIDDEN_JOBS,
    INSPECT,
    REBUILD,
    SERVED_JOBS,
    TRAJECTORY,
    Reme,
    Service,
    durable_state,
    make_reme,
    running_server,
    snapshot,
    write_experience,
    write_trajectory,
)

pytestmark = pytest.mark.slow  # real `reme` processes and services

# -- helpers ----------------------------------------------------------------------------------------------------


@pytest.fixture
def endpoint():
    with EmbeddingEndpoint(DIMENSIONS) as server:
        yield server


@pytest.fixture
def reme(tmp_path, endpoint) -> Reme:
    return make_reme(tmp_path, endpoint, write_word_tokenizer(tmp_path / "tok" / "tokenizer.json"))


# -- one-shot CLI jobs ------------------------------------------------------------------------------------------


def test_reindex_job_indexes_valid_files_reports_invalid_ones_and_rewrites_nothing(reme, tmp_path, endpoint):
    ws = tmp_path / "ws"
    write_experience(ws, "rebuild-search-after-config-change.json", REBUILD)
    write_experience(ws, "inspect-logs-before-rebuilding.json", INSPECT, compact=True)
    (ws / "procedures" / "broken.json").write_bytes(b'{"description": "half a file",')
    write_trajectory(ws)
    before = snapshot(ws / "procedures", ws / "session")

    proc = reme.start_job("procedure_reindex", ws)

    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout)
    assert answer["status"] == "complete"
    assert answer["indexed"] == 2
    assert [item["path"] for item in answer["invalid_files"]] == ["procedures/broken.json"]
    assert "invalid JSON" in answer["invalid_files"][0]["error"]
    assert answer["pending_indexes"] == []
    assert endpoint.requests > 0, "the vectors must come from the configured embedding endpoint"
    # Rebuilds never delete or rewrite experience or trajectory files (same bytes, same mtime).
    assert snapshot(ws / "procedures", ws / "session") == before
    assert not (tmp_path / "cwd" / ".reme").exists() and not (tmp_path / "cwd" / "logs").exists()


@pytest.mark.parametrize("job", ["procedure_create", "procedure_update"])
def test_cli_cannot_forge_a_write_grant(reme, tmp_path, job):
    ws = tmp_path / "ws"
    existing = write_experience(ws, "rebuild-search-after-config-change.json", REBUILD)
    write_trajectory(ws)
    forged = [
        "_procedure_grant=forged",
        "tool_context_id=forged",
        "operation_key=k",
        "description=a",
        "when_to_use=b",
        "content=c",
    ]
    if job == "procedure_create":
        args = ["filename=x.json", *forged]
    else:
        args = [
            "path=procedures/rebuild-search-after-config-change.json",
            f"expected_version={version_of(existing)}",
            *forged,
        ]
    before = durable_state(ws)

    proc = reme.start_job(job, ws, *args)

    assert proc.returncode != 0, proc.stdout
    assert "no_active_extraction_run" in proc.stdout + proc.stderr
    assert sorted(p.name for p in (ws / "procedures").iterdir()) == ["rebuild-search-after-config-change.json"]
    assert durable_state(ws) == before


# -- the two-terminal service flow ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """A workspace rebuilt by the one-shot reindex job, one more file added afterwards, then ``reme start``."""
    root = tmp_path_factory.mktemp("service")
    with EmbeddingEndpoint(DIMENSIONS) as endpoint:
        reme = make_reme(root, endpoint, write_word_tokenizer(root / "tok" / "tokenizer.json"))
        ws = root / "ws"
        versions = {
            "rebuild-search-after-config-change.json": version_of(
                write_experience(ws, "rebuild-search-after-config-change.json", REBUILD)
            )
        }
        write_trajectory(ws)
        reindex = reme.start_job("procedure_reindex", ws)
        assert reindex.returncode == 0, reindex.stderr[-3000:]
        assert json.loads(reindex.stdout)["indexed"] == 1
        # Placed after the rebuild: only the startup reconcile can make these searchable.
        for name, record in (
            ("inspect-logs-before-rebuilding.json", INSPECT),
            ("clean-temporary-files-of-failed-build.json", CLEANUP),
        ):
            versions[name] = version_of(write_experience(ws, name, record))

        # MCP tool calls get `tenant` injected by the service (ReMe's service.injected_job_kwargs)
        with running_server(reme, ws, root / "server.log", 'service.injected_job_kwargs={"tenant": "e2e"}') as (
            proc,
            port,
        ):
            yield Service(reme=reme, ws=ws, port=port, proc=proc, endpoint=endpoint, versions=versions)


def test_cli_search_when_to_use_returns_the_experience(service):
    answer, ok = service.reme.call(
        service.port,
        "procedure_search",
        "query=recover after an index configuration change",
        "index=when_to_use",
    )
    assert ok and answer["status"] == "ok" and answer["index"] == "when_to_use"
    top = answer["results"][0]
    assert top["path"] == "procedures/rebuild-search-after-config-change.json"
    assert top["version"] == service.versions["rebuild-search-after-config-change.json"]
    assert top["experience"] == REBUILD
    # Hybrid: both the vector list and the BM25 list ranked it.
    assert top["scores"]["vector_rank"] == 1 and top["scores"]["keyword_rank"] == 1
    assert answer["index_complete"] is True and answer["pending_indexes"] == []
    assert service.endpoint.requests > 0


def test_cli_search_when_to_use_content_with_limit(service):
    answer, ok = service.reme.call(
        service.port,
        "procedure_search",
        "query=inspect logs before rebuilding",
        "index=when_to_use_content",
        "limit=5",
    )
    assert ok and answer["index"] == "when_to_use_content"
    assert 1 <= len(answer["results"]) <= 5
    # "inspect logs" occurs only in the content of this experience: the content view indexes it.
    assert answer["results"][0]["path"] == "procedures/inspect-logs-before-rebuilding.json"
    assert answer["results"][0]["experience"] == INSPECT

    answer, ok = service.reme.call(
        service.port,
        "procedure_search",
        "query=search configuration stale",
        "index=when_to_use_content",
        "limit=1",
    )
    assert ok and len(answer["results"]) == 1


def test_startup_reconcile_makes_files_placed_before_start_searchable(service):
    answer, ok = service.reme.call(
        service.port,
        "procedure_search",
        "query=a build fails and leaves partial artifacts",
        "index=when_to_use",
    )
    assert ok
    top = answer["results"][0]
    assert top["path"] == "procedures/clean-temporary-files-of-failed-build.json"
    assert top["version"] == service.versions["clean-temporary-files-of-failed-build.json"]
    assert top["experience"] == CLEANUP
    paths = {r["path"] for r in answer["results"]}
    assert paths <= {f"procedures/{name}" for name in service.versions}


def test_cli_read_experience_and_trajectory(service):
    answer, ok = service.reme.call(
        service.port,
        "procedure_read",
        "path=procedures/rebuild-search-after-config-change.json",
    )
    assert ok and answer["status"] == "ok"
    assert answer["path"] == "procedures/rebuild-search-after-config-change.json"
    assert answer["version"] == service.versions["rebuild-search-after-config-change.json"]
    assert answer["experience"] == REBUILD

    answer, ok = service.reme.call(
        service.port,
        "procedure_read",
        "kind=trajectory",
        "path=session/trajectories/run.jsonl",
        "offset=0",
        "length=20",
    )
    assert ok and answer["kind"] == "trajectory"
    assert answer["text"] == TRAJECTORY.decode()[:20]
    assert answer["total_chars"] == len(TRAJECTORY.decode())

    answer, ok = service.reme.call(service.port, "procedure_read", "path=procedures/nope.json")
    assert not ok and answer["status"] == "error"


def test_write_and_import_jobs_are_not_served_over_http(service):
    before = durable_state(service.ws)
    outside = service.ws.parent / "outside.jsonl"
    outside.write_bytes(TRAJECTORY)
    bodies = {
        "procedure_create": {
            "filename": "x.json",
            "description": "a",
            "when_to_use": "b",
            "content": "c",
            "operation_key": "k",
        },
        "procedure_update": {
            "path": "procedures/rebuild-search-after-config-change.json",
            "expected_version": service.versions["rebuild-search-after-config-change.json"],
            "content": "overwritten",
            "operation_key": "k2",
        },
        "procedure_auto_memory": {"file": str(outside), "filename": "stolen.jsonl"},
        "procedure_reindex": {},
        "procedure_export": {"dest": str(service.ws.parent / "exported-skills")},
        "procedure_delete": {"path": "procedures/rebuild-search-after-config-change.json"},
        "procedure_dump": {},
    }
    with httpx.Client(base_url=service.url, timeout=30) as client:
        for job in HIDDEN_JOBS:
            for extra in ({}, {"_procedure_grant": "forged", "tool_context_id": "forged"}):
                response = client.post(f"/{job}", json={**bodies[job], **extra})
                assert response.status_code in (404, 405), (job, response.status_code, response.text[:200])
        paths = client.get("/openapi.json").json()["paths"]
    for job in SERVED_JOBS:
        assert f"/{job}" in paths
    for job in HIDDEN_JOBS:
        assert f"/{job}" not in paths
    assert durable_state(service.ws) == before
    assert not (service.ws / "procedures" / "x.json").exists()
    assert not (service.ws.parent / "exported-skills").exists()


def test_search_over_http_with_json_body(service):
    with httpx.Client(base_url=service.url, timeout=30) as client:
        response = client.post(
            "/procedure_search",
            json={
                "query": "verify a known query after rebuilding indexes",
                "index": "when_to_use_content",
                "limit": 3,
            },
        )
    assert response.status_code == 200
    body = response.json()
    assert body["success"] is True
    answer = json.loads(body["answer"])
    assert answer["status"] == "ok" and 1 <= len(answer["results"]) <= 3
    assert answer["results"][0]["path"] == "procedures/rebuild-search-after-config-change.json"


def test_forged_grant_on_search_writes_nothing(service):
    """Forged injected names reach the served jobs (and change nothing); write arguments are not theirs: refused."""
    before = durable_state(service.ws)
    forged = {
        "_procedure_grant": "forged",
        "_procedure_sources": ["session/trajectories/run.jsonl"],
        "tool_context_id": "forged",
    }
    writes = {
        "filename": "forged.json",
        "description": "d",
        "when_to_use": "w",
        "content": "c",
        "operation_key": "k",
        "procedure_memory": "default",
    }
    with httpx.Client(base_url=service.url, timeout=30) as client:
        search = client.post("/procedure_search", json={"query": "rebuild search", **forged}).json()
        read = client.post(
            "/procedure_read", json={"path": "procedures/rebuild-search-after-config-change.json", **forged}
        ).json()
        refused = client.post("/procedure_search", json={"query": "rebuild search", **forged, **writes}).json()
    answer = json.loads(search["answer"])
    assert search["success"] and answer["status"] == "ok" and answer["results"]
    assert read["success"] and json.loads(read["answer"])["experience"] == REBUILD
    error = json.loads(refused["answer"])["error"]
    assert not refused["success"] and error["code"] == "invalid_argument"
    assert error["message"].startswith("`filename` is not an argument of procedure_search")
    assert durable_state(service.ws) == before
    assert not (service.ws / "procedures" / "forged.json").exists()


# -- unknown arguments: every channel refuses them; ReMe's own names pass ----------------------


def test_one_shot_cli_refuses_a_misspelled_argument_before_copying_anything(reme, tmp_path):
    ws = tmp_path / "ws"
    original = tmp_path / "run.jsonl"
    original.write_bytes(TRAJECTORY)
    write_trajectory(ws, "other.jsonl")

    imported = reme.start_job("procedure_auto_memory", ws, f"file={original}", "filename=run.jsonl", "memory_hnt=x")
    rebuilt = reme.start_job("procedure_reindex", ws, "force=true")

    for proc, wrong, meant in (
        (imported, "memory_hnt", "did you mean `memory_hint`?"),
        (rebuilt, "force", "which takes none"),
    ):
        assert proc.returncode == 1, proc.stdout
        error = json.loads(proc.stderr.strip().splitlines()[-1])["error"]
        assert error["code"] == "invalid_argument" and f"`{wrong}` is not an argument" in error["message"]
        assert meant in error["message"]
    assert not (ws / "session" / "trajectories" / "run.jsonl").exists()
    assert not list((ws / "metadata" / "procedure" / "default" / "imports").glob("*"))


def test_client_http_and_mcp_refuse_a_misspelled_argument_and_pass_remes_own_names(service):
    before = durable_state(service.ws)
    expected = "`limt` is not an argument of procedure_search; did you mean `limit`?"
    answer, ok = service.reme.call(service.port, "procedure_search", "query=rebuild", "limt=3")
    assert not ok and answer["error"]["code"] == "invalid_argument" and answer["error"]["message"].startswith(expected)
    with httpx.Client(base_url=service.url, timeout=30) as client:
        refused = client.post("/procedure_search", json={"query": "rebuild", "limt": 3}).json()
        envelope = client.post("/procedure_search", json={"query": "rebuild", "metadata": {"trace": "t"}}).json()
    assert not refused["success"] and json.loads(refused["answer"])["error"]["message"].startswith(expected)
    assert envelope["success"], envelope  # ReMe's HTTP request model declares `metadata` for every job

    async def session():
        from fastmcp import Client

        async with Client(f"{service.url}/mcp") as client:
            refused = await client.call_tool(
                "procedure_read", {"path": "procedures/x.json", "knd": "experience"}, raise_on_error=False
            )
            # the service injects `tenant` into every MCP call (service.injected_job_kwargs): never refused
            served = await client.call_tool("procedure_search", {"query": "rebuild"}, raise_on_error=False)
            clash = await client.call_tool(
                "procedure_search", {"query": "rebuild", "tenant": "x"}, raise_on_error=False
            )
            assert clash.is_error and "injected by the MCP server" in clash.content[0].text  # it is injected
            return json.loads(refused.content[0].text), json.loads(served.content[0].text)

    refused, served = asyncio.run(asyncio.wait_for(session(), timeout=60))
    assert refused["error"]["message"].startswith("`knd` is not an argument of procedure_read; did you mean `kind`?")
    assert served["status"] == "ok" and served["results"]
    assert durable_state(service.ws) == before


def test_mcp_exposes_only_the_read_jobs(service):
    from fastmcp import Client
    from fastmcp.exceptions import ToolError

    before = durable_state(service.ws)

    async def session() -> dict:
        out: dict = {}
        async with Client(f"{service.url}/mcp") as client:
            tools = {tool.name: tool for tool in await client.list_tools()}
            out["names"] = set(tools)
            out["search_params"] = set(tools["procedure_search"].inputSchema.get("properties", {}))
            result = await client.call_tool(
                "procedure_search", {"query": "recover after an index configuration change", "index": "when_to_use"}
            )
            out["search"] = json.loads(result.content[0].text)
            result = await client.call_tool(
                "procedure_read", {"path": "procedures/inspect-logs-before-rebuilding.json"}
            )
            out["read"] = json.loads(result.content[0].text)
            out["create_errors"] = []
            for job in HIDDEN_JOBS:
                with pytest.raises(ToolError):
                    await client.call_tool(
                        job,
                        {
                            "filename": "mcp.json",
                            "description": "a",
                            "when_to_use": "b",
                            "content": "c",
                            "operation_key": "k",
                        },
                    )
                out["create_errors"].append(job)
            try:  # forged injected keys on a served tool: may be accepted or rejected, but must not write
                result = await client.call_tool(
                    "procedure_search",
                    {
                        "query": "rebuild",
                        "_procedure_grant": "forged",
                        "tool_context_id": "forged",
                        "filename": "mcp.json",
                        "content": "c",
                        "operation_key": "k",
                    },
                    raise_on_error=False,
                )
                out["forged_is_error"] = result.is_error
            except Exception as exc:  # noqa: BLE001 - a rejection is fine here
                out["forged_is_error"] = repr(exc)
        return out

    out = asyncio.run(asyncio.wait_for(session(), timeout=60))

    assert set(SERVED_JOBS) <= out["names"]
    assert not set(HIDDEN_JOBS) & out["names"]
    assert out["search_params"] == {
        "query",
        "index",
        "limit",
        "detail",
        "min_relevance",
        "tools",
        "max_tokens",
        "min_evidence",
    }
    assert out["search"]["status"] == "ok"
    assert out["search"]["results"][0]["path"] == "procedures/rebuild-search-after-config-change.json"
    assert out["read"]["experience"] == INSPECT
    assert out["create_errors"] == list(HIDDEN_JOBS)
    assert durable_state(service.ws) == before
    assert not (service.ws / "procedures" / "mcp.json").exists()


# -- the listings: served like search ------------------------------------------------------------


def test_cli_client_lists_the_experiences_a_page_at_a_time(service):
    before = durable_state(service.ws)
    names = sorted(service.versions)
    first, ok = service.reme.call(service.port, "procedure_list", "limit=2")
    assert ok and first["total"] == 3 and first["next"] == f"procedures/{names[1]}"
    rest, ok = service.reme.call(service.port, "procedure_list", "limit=2", f"cursor={first['next']}")
    assert ok and rest["next"] is None
    entries = first["experiences"] + rest["experiences"]
    assert [(e["path"], e["version"], e["state"], e["source_count"]) for e in entries] == [
        (f"procedures/{name}", service.versions[name], "indexed", 1) for name in names
    ]
    assert entries[names.index("rebuild-search-after-config-change.json")]["description"] == REBUILD["description"]
    imports, ok = service.reme.call(service.port, "procedure_imports")
    assert ok and imports == {"status": "ok", "imports": [], "total": 0, "next": None, "damaged_records": []}
    assert durable_state(service.ws) == before


def test_listings_are_served_over_http_and_mcp(service):
    before = durable_state(service.ws)
    with httpx.Client(base_url=service.url, timeout=30) as client:
        listed = client.post("/procedure_list", json={"limit": 1}).json()
        imports = client.post("/procedure_imports", json={"limit": 10}).json()
        refused = client.post("/procedure_list", json={"limit": 1, "cursr": "x"}).json()
        paths = client.get("/openapi.json").json()["paths"]
    assert listed["success"] and json.loads(listed["answer"])["next"] is not None
    assert imports["success"] and json.loads(imports["answer"])["imports"] == []
    assert not refused["success"] and "did you mean `cursor`?" in json.loads(refused["answer"])["error"]["message"]
    assert "/procedure_list" in paths and "/procedure_imports" in paths

    async def session():
        from fastmcp import Client

        async with Client(f"{service.url}/mcp") as client:
            tools = {tool.name: tool for tool in await client.list_tools()}
            listed = await client.call_tool("procedure_list", {"limit": 50})
            imports = await client.call_tool("procedure_imports", {})
            return tools, json.loads(listed.content[0].text), json.loads(imports.content[0].text)

    tools, listed, imports = asyncio.run(asyncio.wait_for(session(), timeout=60))
    for job in ("procedure_list", "procedure_imports"):
        assert set(tools[job].inputSchema["properties"]) == {"limit", "cursor"}
    assert [e["path"] for e in listed["experiences"]] == sorted(f"procedures/{n}" for n in service.versions)
    assert imports["status"] == "ok" and imports["total"] == 0
    assert durable_state(service.ws) == before


def test_second_process_on_a_served_workspace_fails_with_workspace_in_use(service):
    before = durable_state(service.ws)

    proc = service.reme.start_job("procedure_reindex", service.ws)

    assert proc.returncode != 0, proc.stdout
    assert "in use" in proc.stderr and f"pid={service.proc.pid}" in proc.stderr, proc.stderr[-3000:]
    assert durable_state(service.ws) == before
    # The server is unaffected and still serves its views.
    assert service.proc.poll() is None
    answer, ok = service.reme.call(service.port, "procedure_search", "query=partial artifacts", "index=when_to_use")
    assert ok and answer["results"][0]["path"] == "procedures/clean-temporary-files-of-failed-build.json"


def test_stopping_the_service_frees_the_workspace_for_maintenance(reme, tmp_path):
    """Terminal 1 is stopped (SIGTERM), then the documented one-shot rebuild runs on the same workspace."""
    ws = tmp_path / "ws"
    write_experience(ws, "rebuild-search-after-config-change.json", REBUILD)
    write_experience(ws, "inspect-logs-before-rebuilding.json", INSPECT)
    write_trajectory(ws)
    with running_server(reme, ws, tmp_path / "server.log") as (proc, port):
        answer, ok = reme.call(port, "procedure_search", "query=inspect logs before rebuilding", "limit=5")
        assert ok and answer["results"][0]["path"] == "procedures/inspect-logs-before-rebuilding.json"
    before = snapshot(ws / "procedures", ws / "session")

    rebuild = reme.start_job("procedure_reindex", ws)

    assert rebuild.returncode == 0, rebuild.stderr[-3000:]
    answer = json.loads(rebuild.stdout)
    assert answer["status"] == "complete" and answer["indexed"] == 2 and answer["invalid_files"] == []
    assert snapshot(ws / "procedures", ws / "session") == before


def test_one_shot_delete_removes_an_experience_and_history_shows_who_and_when(reme, tmp_path):
    """Issue 32 item 6 as an operator runs it: procedure_delete, then procedure_history and a search, each one-shot."""
    ws = tmp_path / "ws"
    path = "procedures/rebuild-search-after-config-change.json"
    write_experience(ws, "rebuild-search-after-config-change.json", REBUILD)
    write_experience(ws, "inspect-logs-before-rebuilding.json", INSPECT)
    write_trajectory(ws)

    removed = reme.start_job("procedure_delete", ws, f"path={path}")

    assert removed.returncode == 0, removed.stderr[-3000:]
    answer = json.loads(removed.stdout)
    assert answer["status"] == "deleted" and answer["path"] == path and answer["deleted_at"], answer
    assert not (ws / path).exists() and (ws / "procedures" / "inspect-logs-before-rebuilding.json").exists()
    shown = reme.start_job("procedure_history", ws, f"path={path}")
    assert shown.returncode == 0, shown.stderr[-3000:]
    history = json.loads(shown.stdout)
    assert history["exists"] is False and [v["change"] for v in history["versions"]] == ["hand_edit", "hand_delete"]
    assert (
        history["versions"][-1]["note"].startswith("removed with procedure_delete by ")
        and history["versions"][-1]["at"]
    )
    found = reme.start_job("procedure_search", ws, "query=rebuild search after a configuration change", "limit=5")
    assert found.returncode == 0 and path not in [r["path"] for r in json.loads(found.stdout)["results"]]
    again = reme.start_job("procedure_delete", ws, f"path={path}")
    assert again.returncode != 0 and json.loads(again.stderr.strip().splitlines()[-1])["error"]["code"] == "not_found"


def test_one_shot_dump_prints_the_metadata_for_support_without_any_text(reme, tmp_path):
    """Issue 33 item 1 as an operator runs it: ``reme start job=procedure_dump`` prints one JSON object on stdout with
    every metadata file's kind, format, status and size, and no experience or trajectory text."""
    ws = tmp_path / "ws"
    write_experience(ws, "rebuild-search-after-config-change.json", REBUILD)
    write_experience(ws, "inspect-logs-before-rebuilding.json", INSPECT)
    write_trajectory(ws)
    assert reme.start_job("procedure_reindex", ws).returncode == 0  # the views' state on disk
    before = durable_state(ws)

    dumped = reme.start_job("procedure_dump", ws)

    assert dumped.returncode == 0, dumped.stderr[-3000:]
    answer = json.loads(dumped.stdout)
    assert answer["status"] == "ok" and answer["experiences"]["files"] == 2 and answer["trajectories"]["files"] == 1
    kinds = {f["kind"] for f in answer["files"]}
    assert {"lock", "view_manifest", "view_part"} <= kinds, kinds
    assert all(f["path"].startswith("metadata/") and f["bytes"] >= 0 for f in answer["files"])
    assert {f["format"] for f in answer["files"] if f["kind"] == "view_manifest"} == {3}
    for text in (REBUILD["content"], INSPECT["when-to-use"], "search results are stale after the config change"):
        assert text not in dumped.stdout
    assert durable_state(ws) == before


def test_embedding_outage_at_startup_keeps_serving_and_recovers(reme, tmp_path, endpoint):
    """Startup continues through a provider outage; search reports what is excluded; recovery re-indexes it."""
    ws = tmp_path / "ws"
    write_experience(ws, "rebuild-search-after-config-change.json", REBUILD)
    write_trajectory(ws)
    rebuild = reme.start_job("procedure_reindex", ws)
    assert rebuild.returncode == 0, rebuild.stderr[-3000:]
    late = version_of(write_experience(ws, "inspect-logs-before-rebuilding.json", INSPECT))
    before = snapshot(ws / "procedures", ws / "session")

    endpoint.failing = True  # HTTP 500 from the provider, as in an outage
    # No SDK-level retries, for speed (embedding_store.max_retries counts attempts: keep it at 1).
    with running_server(
        reme,
        ws,
        tmp_path / "server.log",
        "components.procedure_memory.default.pending_retry_seconds=0",
        "components.as_embedding.procedure.max_retries=0",
    ) as (proc, port):
        # The experience indexed before the outage is still found (BM25; the query cannot be embedded).
        answer, ok = reme.call(port, "procedure_search", "query=search configuration stale", "index=when_to_use")
        assert ok and [r["path"] for r in answer["results"]] == ["procedures/rebuild-search-after-config-change.json"]
        assert answer["vector_search"]["available"] is False
        # The file that could not be embedded at startup is excluded and reported, never silently missing.
        assert answer["index_complete"] is False
        assert [(p["path"], p["version"]) for p in answer["pending_indexes"]] == [
            ("procedures/inspect-logs-before-rebuilding.json", late)
        ]

        endpoint.failing = False
        deadline = time.monotonic() + 30
        while True:
            answer, ok = reme.call(port, "procedure_search", "query=inspect logs before rebuilding", "limit=5")
            if answer["index_complete"] or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert ok and answer["index_complete"] is True and answer["pending_indexes"] == []
        assert answer["results"][0]["path"] == "procedures/inspect-logs-before-rebuilding.json"
        assert answer["results"][0]["version"] == late
        assert "vector_search" not in answer
    assert snapshot(ws / "procedures", ws / "session") == before


def test_served_reads_stay_inside_their_directories(service):
    """Over HTTP, reads cannot leave procedures/ (experiences) or session/trajectories/ (excerpts), symlinks included."""
    secret = service.ws.parent / "secret.json"
    secret.write_text(json.dumps(REBUILD))
    links = [service.ws / "procedures" / "escape-link.json", service.ws / "session" / "trajectories" / "escape.jsonl"]
    for link in links:
        link.symlink_to(secret)
    requests = [
        {"path": "procedures/escape-link.json"},
        {"path": "procedures/../metadata/procedure/default/workspace.lock"},
        {"path": str(secret)},
        {"path": "../secret.json"},
        {"path": "session/trajectories/run.jsonl"},  # a trajectory is not an experience
        {"kind": "trajectory", "path": "session/trajectories/escape.jsonl"},
        {"kind": "trajectory", "path": "procedures/rebuild-search-after-config-change.json"},
        {"kind": "trajectory", "path": "session/trajectories/../../procedures/rebuild-search-after-config-change.json"},
        {"kind": "trajectory", "path": str(secret)},
    ]
    try:
        with httpx.Client(base_url=service.url, timeout=30) as client:
            for body in requests:
                response = client.post("/procedure_read", json=body)
                assert response.status_code == 200, body
                result = response.json()
                answer = json.loads(result["answer"])
                assert result["success"] is False and answer["status"] == "error", (body, answer)
                assert "Rebuild the affected indexes" not in result["answer"], body
    finally:
        for link in links:
            link.unlink()


def test_relevance_floor_tools_and_token_budget_are_served_on_cli_http_and_mcp(service):
    """issue 31: the delivery arguments reach the job from every channel (the CLI as text, HTTP and MCP as JSON)."""
    query = "inspect logs or delete the build directory"
    answer, ok = service.reme.call(
        service.port, "procedure_search", f"query={query}", "min_relevance=0", "tools=Inspect,Delete", "max_tokens=1000"
    )
    assert ok and answer["min_relevance"] == 0, answer
    assert {r["path"] for r in answer["results"]} == {
        "procedures/inspect-logs-before-rebuilding.json",
        "procedures/clean-temporary-files-of-failed-build.json",
    }
    assert all(0 <= r["relevance"] <= 1 for r in answer["results"])
    assert answer["token_budget"]["max_tokens"] == 1000 and answer["token_budget"]["left_out"] == 0
    nothing, ok = service.reme.call(service.port, "procedure_search", f"query={query}", "min_relevance=1")
    assert ok and nothing["results"] == [] and nothing["min_relevance"] == 1

    with httpx.Client(base_url=service.url, timeout=30) as client:
        response = client.post(
            "/procedure_search", json={"query": query, "min_relevance": 0, "tools": ["Inspect"], "max_tokens": 3}
        ).json()
        refused = client.post("/procedure_search", json={"query": query, "min_relevance": 2}).json()
    budgeted = json.loads(response["answer"])
    assert response["success"] and budgeted["results"] == []
    assert budgeted["token_budget"] == {"max_tokens": 3, "tokens": 0, "left_out": 1}  # never cut: left out
    assert not refused["success"]
    assert json.loads(refused["answer"])["error"]["message"] == "`min_relevance` must be a number from 0 to 1."

    async def session():
        from fastmcp import Client

        async with Client(f"{service.url}/mcp") as client:
            tools = {tool.name: tool for tool in await client.list_tools()}
            found = await client.call_tool(
                "procedure_search", {"query": query, "min_relevance": 0, "tools": ["Inspect"]}
            )
            none = await client.call_tool("procedure_search", {"query": query, "tools": ["no_such_function"]})
            return tools, json.loads(found.content[0].text), json.loads(none.content[0].text)

    tools, found, none = asyncio.run(asyncio.wait_for(session(), timeout=60))
    assert {"min_relevance", "tools", "max_tokens"} <= set(tools["procedure_search"].inputSchema["properties"])
    assert [r["path"] for r in found["results"]] == ["procedures/inspect-logs-before-rebuilding.json"]
    assert none["results"] == []


def test_detail_rules_is_served_on_cli_http_and_mcp(service):
    """The conventions without the steps reach a caller from every channel: each result's path, version, relevance,
    description, when-to-use and rules (``""`` for an experience without them), never its content."""
    query = "inspect logs or delete the build directory"
    shape = {"path", "version", "relevance", "description", "when-to-use", "rules"}
    cli, ok = service.reme.call(service.port, "procedure_search", f"query={query}", "min_relevance=0", "detail=rules")
    assert ok and cli["detail"] == "rules" and cli["results"], cli
    assert all(set(r) == shape for r in cli["results"])
    assert {r["path"]: r["rules"] for r in cli["results"]} == {
        "procedures/clean-temporary-files-of-failed-build.json": "\n".join(CLEANUP_RULES),
        "procedures/inspect-logs-before-rebuilding.json": "",
        "procedures/rebuild-search-after-config-change.json": "",
    }
    with httpx.Client(base_url=service.url, timeout=30) as client:
        http = json.loads(
            client.post("/procedure_search", json={"query": query, "min_relevance": 0, "detail": "rules"}).json()[
                "answer"
            ]
        )
    assert http["results"] == cli["results"]

    async def session():
        from fastmcp import Client

        async with Client(f"{service.url}/mcp") as client:
            tools = {tool.name: tool for tool in await client.list_tools()}
            found = await client.call_tool("procedure_search", {"query": query, "min_relevance": 0, "detail": "rules"})
            return tools, json.loads(found.content[0].text)

    tools, mcp = asyncio.run(asyncio.wait_for(session(), timeout=60))
    assert "rules" in tools["procedure_search"].inputSchema["properties"]["detail"]["enum"]
    assert mcp["results"] == cli["results"]


def test_min_evidence_is_served_on_cli_http_and_mcp(service):
    """Rules fewer trajectories showed than ``min_evidence`` are left out of what every channel hands (the rules
    answer and the whole experience alike), each result saying how many; the file keeps them, and a bad value is
    refused with its message."""
    query = "delete the build directory of a failed build"
    cleanup = "procedures/clean-temporary-files-of-failed-build.json"
    evident, thin = CLEANUP_RULES  # 3 trajectories, 1 trajectory

    def of_cleanup(answer: dict) -> dict:
        return next(r for r in answer["results"] if r["path"] == cleanup)

    cli, ok = service.reme.call(
        service.port, "procedure_search", f"query={query}", "min_relevance=0", "detail=rules", "min_evidence=3"
    )
    assert ok and cli["min_evidence"] == 3, cli
    assert of_cleanup(cli)["rules"] == evident and of_cleanup(cli)["rules_left_out"] == 1
    assert all("rules_left_out" not in r for r in cli["results"] if r["path"] != cleanup)  # no rules: none left out
    default, ok = service.reme.call(service.port, "procedure_search", f"query={query}", "min_relevance=0")
    assert ok and default["min_evidence"] == 0 and of_cleanup(default)["experience"] == CLEANUP  # whole by default
    assert "rules_left_out" not in of_cleanup(default)

    with httpx.Client(base_url=service.url, timeout=30) as client:
        http = json.loads(
            client.post("/procedure_search", json={"query": query, "min_relevance": 0, "min_evidence": 2}).json()[
                "answer"
            ]
        )
        refused = client.post("/procedure_search", json={"query": query, "min_evidence": -1}).json()
        read = json.loads(client.post("/procedure_read", json={"path": cleanup}).json()["answer"])
    whole = CLEANUP["content"]
    assert of_cleanup(http)["experience"]["content"] == whole.replace("\n" + thin, "")
    assert of_cleanup(http)["rules_left_out"] == 1
    assert not refused["success"] and "min_evidence" in json.loads(refused["answer"])["error"]["message"]
    assert read["experience"]["content"] == whole  # the file keeps every rule

    async def session():
        from fastmcp import Client

        async with Client(f"{service.url}/mcp") as client:
            tools = {tool.name: tool for tool in await client.list_tools()}
            found = await client.call_tool(
                "procedure_search", {"query": query, "min_relevance": 0, "detail": "rules", "min_evidence": 4}
            )
            return tools, json.loads(found.content[0].text)

    tools, mcp = asyncio.run(asyncio.wait_for(session(), timeout=60))
    assert "min_evidence" in tools["procedure_search"].inputSchema["properties"]
    assert of_cleanup(mcp)["rules"] == "" and of_cleanup(mcp)["rules_left_out"] == 2
