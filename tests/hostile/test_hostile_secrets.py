"""Hostile cases for the secret guard: a credential of every kind in every argument an agent writes,
and masked trajectory excerpts on every served channel.

* Agent tool calls (a scripted agent inside one real import): ``procedure_create`` and ``procedure_update`` get a
  planted secret of each kind in each of their arguments (the three text fields, the ``when-to-use`` alias, the
  filename, the path, the expected version, the operation key). Each call is refused with ``secret_detected`` naming
  that argument and kind, its answer repeats no 8 characters of the secret, and no byte of the experience, trajectory
  or plugin-state directories changes (journal included).
* Served channels: a real ``reme start`` on 127.0.0.1 (started and stopped by this module) serves a trajectory copy
  that holds a secret of every kind; ``procedure_read kind=trajectory`` over HTTP, MCP and the ``reme`` CLI client
  answers it masked, with the count, and the copy stays byte-exact. The one-shot CLI with
  ``mask_trajectory_secrets=false`` serves it as it is.
* No twin: on the same service, ReMe's own jobs — every served tool that takes a path, called on
  the copy and on an agent session file a killed import left under ``mem_session/`` — answer no 8 characters of any
  secret: content reads of the copy are refused and point to ``procedure_read``, the session directory is neither
  read nor listed, neither is moved or deleted.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import httpx
import pytest

from conftest import app_factory
from helpers import EmbeddingEndpoint, place_trajectory, summary, write_word_tokenizer
from helpers.cli import REME, durable_state, make_reme, running_server, start_args
from helpers.planted import fragments, planted

pytestmark = pytest.mark.slow

ONE_OF_EACH = list({item.kind: item for item in planted(5)}.values())
CREATE_ARGUMENTS = ("filename", "description", "when_to_use", "when-to-use", "content", "operation_key")
UPDATE_ARGUMENTS = ("path", "expected_version", "description", "when_to_use", "when-to-use", "content", "operation_key")
CASES = [
    (tool, argument, item)
    for tool, arguments in (("procedure_create", CREATE_ARGUMENTS), ("procedure_update", UPDATE_ARGUMENTS))
    for argument in arguments
    for item in ONE_OF_EACH
]
FIELDS = {
    "description": "Push a release",
    "when_to_use": "When a release must be pushed",
    "content": "Tag the release, push the tag, then check the pipeline.",
}


def case_id(case) -> str:
    tool, argument, item = case
    return f"{tool.removeprefix('procedure_')}-{argument}-{item.label}"


def hostile_value(argument: str, item) -> str:
    """The secret as the argument would carry it."""
    if argument in ("filename", "path"):
        return f"procedures/notes-{item.text}.json"
    return f"Log in ({item.text}) first."


@pytest.fixture(scope="module")
def agent_results(tmp_path_factory):
    """One import whose agent makes every case's call: case id -> (ok, answer text, plugin state unchanged)."""
    root = tmp_path_factory.mktemp("secrets-agent")
    ws = root / "ws"
    original = root / "originals" / "run.jsonl"
    original.parent.mkdir(parents=True)
    original.write_text('{"role": "user", "content": "push the release"}\n')
    factory = app_factory(ws, write_word_tokenizer(root / "tok" / "tokenizer.json"))
    out: dict[str, Any] = {}

    async def script(tools, prompt, kwargs):
        ok, target = await tools.call("procedure_create", filename="push-a-release.json", **FIELDS)
        assert ok, target
        for case in CASES:
            tool, argument, item = case
            if tool == "procedure_create":
                args = {"filename": "other.json", **FIELDS}
            else:
                args = {"path": target["path"], "expected_version": target["version"], "content": "Tag, push."}
            if argument == "when-to-use":
                args.pop("when_to_use", None)
            args[argument] = hostile_value(argument, item)
            before = durable_state(ws)
            ok, answer = await tools.call(tool, **args)
            out[case_id(case)] = (ok, json.dumps(answer, ensure_ascii=False), durable_state(ws) == before)
        return summary("Tried a secret in every argument.")

    async def run():
        async with factory(scripts=[script]) as app:
            response = await app.run_job(
                "procedure_auto_memory", file=str(original), filename="run.jsonl", request_id="secrets"
            )
            out["import"] = (response.success, json.loads(response.answer))

    asyncio.run(run())
    return out


def test_the_import_completes_after_every_refused_call(agent_results):
    ok, answer = agent_results["import"]
    assert ok and answer["status"] == "complete", answer
    assert answer["experiences"]["created"] == ["procedures/push-a-release.json"]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_a_secret_in_any_argument_is_refused_unrepeated_and_nothing_changes(agent_results, case):
    tool, argument, item = case
    ok, text, unchanged = agent_results[case_id(case)]
    answer = json.loads(text)
    assert not ok and answer["error"]["code"] == "secret_detected", answer
    assert (argument, item.kind) in {(s["field"], s["kind"]) for s in answer["secrets"]}, answer
    assert not {f for f in fragments(item.secret) if f in text}
    assert unchanged


# -- served channels ----------------------------------------------------------------------------------------------

TRAJECTORY = "".join(
    json.dumps({"role": "tool", "content": f"step {i}: {item.text}"}) + "\n" for i, item in enumerate(ONE_OF_EACH)
).encode()
COPY = "session/trajectories/run.jsonl"
READ = {"kind": "trajectory", "path": COPY, "length": 65536}


def check_masked(text: str) -> dict:
    answer = json.loads(text)
    assert answer["status"] == "ok", answer
    assert answer["secrets_masked"] == len(ONE_OF_EACH), answer
    assert answer["masked_kinds"] == {item.kind: 1 for item in ONE_OF_EACH}
    assert not {f for item in ONE_OF_EACH for f in fragments(item.secret) if f in answer["text"]}
    assert answer["length"] == len(TRAJECTORY.decode()) and answer["next_offset"] is None
    return answer


SESSION = "mem_session/agentscope/0b7d9c1e-5f3a-4c2b-9e8d-7a6b5c4d3e2f.jsonl"  # a killed extraction's leftover
SESSION_DATA = json.dumps({"role": "user", "content": TRAJECTORY.decode()}).encode() + b"\n"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("secrets-served")
    ws = root / "ws"
    place_trajectory(ws, "run.jsonl", TRAJECTORY)
    (ws / SESSION).parent.mkdir(parents=True)
    (ws / SESSION).write_bytes(SESSION_DATA)
    with EmbeddingEndpoint(64) as endpoint:
        reme = make_reme(root, endpoint, write_word_tokenizer(root / "tok" / "tokenizer.json"))
        with running_server(reme, ws, root / "server.log") as (proc, port):
            yield root, ws, port, reme


def test_http_serves_the_excerpt_masked(served):
    root, ws, port, reme = served
    response = httpx.post(f"http://127.0.0.1:{port}/procedure_read", json=READ, timeout=60)
    assert response.status_code == 200 and response.json()["success"], response.text[:500]
    check_masked(response.json()["answer"])
    assert (ws / COPY).read_bytes() == TRAJECTORY


def test_mcp_serves_the_excerpt_masked(served):
    from fastmcp import Client

    root, ws, port, reme = served

    async def session():
        async with Client(f"http://127.0.0.1:{port}/mcp", timeout=60) as client:
            return await client.call_tool("procedure_read", READ, raise_on_error=False)

    result = asyncio.run(asyncio.wait_for(session(), timeout=120))
    assert not result.is_error
    check_masked(result.content[0].text)
    assert (ws / COPY).read_bytes() == TRAJECTORY


def test_the_cli_client_serves_the_excerpt_masked(served):
    root, ws, port, reme = served
    answer, ok = reme.call(port, "procedure_read", "kind=trajectory", f"path={COPY}", "length=65536")
    assert ok
    check_masked(json.dumps(answer))
    assert (ws / COPY).read_bytes() == TRAJECTORY


def test_the_setting_off_serves_the_excerpt_as_it_is(tmp_path):
    ws = tmp_path / "ws"
    place_trajectory(ws, "run.jsonl", TRAJECTORY)
    with EmbeddingEndpoint(64) as endpoint:
        reme = make_reme(tmp_path, endpoint, write_word_tokenizer(tmp_path / "tok" / "tokenizer.json"))
        procs = {
            mask: subprocess.run(
                [
                    str(REME),
                    "start",
                    "job=procedure_read",
                    "kind=trajectory",
                    f"path={COPY}",
                    "length=65536",
                    *start_args(ws),
                    *([] if mask else ["components.procedure_memory.default.mask_trajectory_secrets=false"]),
                ],
                cwd=reme.cwd,
                env=reme.env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            for mask in (True, False)
        }
    for mask, proc in procs.items():
        assert proc.returncode == 0, proc.stderr[-3000:]
        text = proc.stdout.strip().splitlines()[-1]
        if mask:
            check_masked(text)
        else:
            answer = json.loads(text)
            assert answer["text"] == TRAJECTORY.decode() and "secrets_masked" not in answer
    assert (ws / COPY).read_bytes() == TRAJECTORY


# -- no unmasked twin: ReMe's own jobs on the copy and on an agent session file --------------------------------------

SECRET_FRAGMENTS = {f for item in ONE_OF_EACH for f in fragments(item.secret)}
TO_PROCEDURE_READ = "procedure_read kind=trajectory"
GENERIC = [  # (job, arguments, must succeed, a phrase the refusal must hold)
    *[(job, {"path": COPY}, False, TO_PROCEDURE_READ) for job in ("read", "load", "read_image", "frontmatter_read")],
    ("read", {"path": COPY, "start_line": 1, "end_line": 3}, False, TO_PROCEDURE_READ),
    ("load", {"path": f"session/trajectories/../trajectories/{COPY.rpartition('/')[2]}"}, False, TO_PROCEDURE_READ),
    ("stat", {"path": COPY}, True, ""),
    ("list", {"path": "session/trajectories"}, True, ""),
    *[
        (job, {"path": SESSION}, False, "session files")
        for job in ("read", "load", "read_image", "frontmatter_read", "stat")
    ],
    ("list", {"path": "mem_session"}, False, "session files"),
    ("list", {"path": "mem_session/agentscope", "recursive": True}, False, "session files"),
    ("move", {"src_path": SESSION, "dst_path": "notes/session.md"}, False, "session files"),
    ("move", {"src_path": "mem_session", "dst_path": "notes/sessions"}, False, "session files"),
    ("delete", {"path": SESSION}, False, "session files"),
    ("move", {"src_path": COPY, "dst_path": "notes/run.md"}, False, "would change"),
]


def no_secret_in(text: str) -> None:
    assert not {f for f in SECRET_FRAGMENTS if f in text}, text[:300]


@pytest.mark.parametrize("job, args, ok, phrase", GENERIC, ids=lambda v: v if isinstance(v, str) else None)
def test_reme_generic_jobs_serve_no_byte_of_a_copy_or_an_agent_session_over_http(served, job, args, ok, phrase):
    root, ws, port, reme = served
    response = httpx.post(f"http://127.0.0.1:{port}/{job}", json=args, timeout=60)
    assert response.status_code == 200, response.text[:500]
    no_secret_in(response.text)
    result = response.json()
    assert result["success"] is ok, result
    if not ok:
        error = json.loads(result["answer"])["error"]
        assert error["code"] == "protected_path" and phrase in error["message"], error
    assert (ws / COPY).read_bytes() == TRAJECTORY and (ws / SESSION).read_bytes() == SESSION_DATA


def test_a_listing_of_the_workspace_leaves_private_files_out(served):
    root, ws, port, reme = served
    for path in ("", str(ws)):
        response = httpx.post(
            f"http://127.0.0.1:{port}/list", json={"path": path, "recursive": True, "limit": 1000}, timeout=60
        )
        result = response.json()
        assert result["success"], result
        assert COPY in result["metadata"]["items"]  # names of copies stay listed
        assert "mem_session" not in result["answer"] and "metadata/procedure" not in result["answer"], result
    assert (ws / "metadata/procedure/default/workspace.lock").exists() and (ws / SESSION).exists()  # there, unlisted


PATH_ARGUMENTS = ("path", "src_path", "file_path")


def test_no_served_tool_that_takes_a_path_returns_a_byte_of_a_copy_or_an_agent_session(served):
    """Every MCP tool of the service (ReMe's and the plugin's) with a path argument, called on the copy, the session
    file and their directories: no answer holds 8 characters of a secret."""
    from fastmcp import Client

    root, ws, port, reme = served

    async def session():
        out = {}
        async with Client(f"http://127.0.0.1:{port}/mcp", timeout=60) as client:
            for tool in await client.list_tools():
                props = tool.inputSchema.get("properties") or {}
                paths = [p for p in PATH_ARGUMENTS if p in props]
                if not paths:
                    continue
                for target in (COPY, SESSION, "session/trajectories", "mem_session/agentscope"):
                    args = {p: target for p in paths}
                    if "kind" in props:
                        args["kind"] = "trajectory"
                    result = await client.call_tool(tool.name, args, raise_on_error=False)
                    out[(tool.name, target)] = "".join(getattr(c, "text", "") for c in result.content)
        return out

    answers = asyncio.run(asyncio.wait_for(session(), timeout=300))
    tools = {name for name, _ in answers}
    assert {"read", "load", "read_image", "frontmatter_read", "stat", "list", "procedure_read"} <= tools, tools
    for text in answers.values():
        no_secret_in(text)
    assert json.loads(answers[("procedure_read", COPY)])["secrets_masked"] == len(ONE_OF_EACH)  # the one way in
    assert (ws / COPY).read_bytes() == TRAJECTORY and (ws / SESSION).read_bytes() == SESSION_DATA
