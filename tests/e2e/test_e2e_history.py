"""End to end: ``procedure_history`` served by a real ``reme start`` on the CLI client, HTTP and MCP.

The journal is made by an import in this process (the scripted agent creates an experience and revises it twice,
over two segments), on a temporary workspace that the real service (a subprocess on 127.0.0.1, stopped by its own
pid) then serves. All three channels answer what the in-process application answered before the restart.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from conftest import import_file, run_job
from helpers import EmbeddingEndpoint, write_word_tokenizer
from helpers.cli import DIMENSIONS, durable_state, make_reme, running_server
from helpers.corpus import TWO_SEGMENTS, two_segment_original
from helpers.revisions import PATH, revising_agent

pytestmark = pytest.mark.slow  # real `reme` processes and services


def test_history_is_served_on_cli_http_and_mcp_and_survives_the_restart(make_app, tmp_path):
    ws = tmp_path / "ws"

    async def make_journal() -> dict:
        async with make_app(scripts=revising_agent(), components=TWO_SEGMENTS) as app:
            ok, imported = await import_file(app, two_segment_original(tmp_path), request_id="run-001")
            assert ok, imported
            ok, answer = await run_job(app, "procedure_history", path=PATH, diff=True)
            assert ok
            return answer

    expected = asyncio.run(make_journal())
    assert [v["change"] for v in expected["versions"]] == ["create", "update", "update"]

    with EmbeddingEndpoint(DIMENSIONS) as endpoint:
        reme = make_reme(tmp_path, endpoint, write_word_tokenizer(tmp_path / "tok" / "tokenizer.json"))
        with running_server(reme, ws, tmp_path / "server.log") as (proc, port):
            before = durable_state(ws)
            url = f"http://127.0.0.1:{port}"

            cli, ok = reme.call(port, "procedure_history", f"path={PATH}", "diff=true")
            assert ok and cli == expected

            with httpx.Client(base_url=url, timeout=30) as client:
                response = client.post("/procedure_history", json={"path": PATH, "diff": True})
                assert response.status_code == 200 and response.json()["success"] is True
                assert json.loads(response.json()["answer"]) == expected
                missing = client.post("/procedure_history", json={"path": "procedures/nothing.json"}).json()
                assert missing["success"] is False
                assert json.loads(missing["answer"])["error"]["code"] == "not_found"
                assert "/procedure_history" in client.get("/openapi.json").json()["paths"]

            async def mcp() -> tuple[set, dict, dict]:
                from fastmcp import Client

                async with Client(f"{url}/mcp") as client:
                    tools = {tool.name: tool for tool in await client.list_tools()}
                    result = await client.call_tool("procedure_history", {"path": PATH, "diff": True})
                    page = await client.call_tool("procedure_history", {"path": PATH, "offset": 2, "limit": 1})
                    return (
                        set(tools["procedure_history"].inputSchema.get("properties", {})),
                        json.loads(result.content[0].text),
                        json.loads(page.content[0].text),
                    )

            params, answer, page = asyncio.run(asyncio.wait_for(mcp(), timeout=60))
            assert params == {"path", "diff", "offset", "limit"}
            assert answer == expected
            assert page["versions"] == [{k: v for k, v in expected["versions"][2].items() if k != "diff"}]
            assert durable_state(ws) == before  # a read-only job
