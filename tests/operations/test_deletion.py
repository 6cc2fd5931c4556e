"""procedure_delete on the real Application: the file leaves both views, the journal records the
removal so procedure_history shows who removed it and when, the name is free again, refusals change nothing.

Experiences are written by the real create tool inside an extraction run (``call_tool``); everything is real (Jobs,
FileStores, BM25, the journal on disk); the embedding model is the deterministic fake.
"""

from __future__ import annotations

import getpass
import json

import pytest
import yaml

from conftest import add_trajectory, call_tool, import_file, memory_of, run_job
from helpers import REPO
from helpers.cli import durable_state
from helpers.faults import Faults
from helpers.corpus import JSONL, replies, write
from helpers.revisions import FIELDS, NAME, PATH

QUERY = "stale search results after a configuration change"


async def create(app, scope="req-1", **fields) -> dict:
    run = memory_of(app).grants.begin_attempt(scope, [add_trajectory(app)])
    ok, created = await call_tool(app, run, "procedure_create", filename=NAME, **{**FIELDS, **fields})
    assert ok, created
    return created


async def found(app) -> dict[str, list[str]]:
    """The paths each view's search returns for QUERY."""
    out = {}
    for index in ("when_to_use", "when_to_use_content"):
        ok, answer = await run_job(app, "procedure_search", query=QUERY, index=index, limit=10)
        assert ok, answer
        out[index] = [r["path"] for r in answer["results"]]
    return out


async def history(app) -> dict:
    ok, answer = await run_job(app, "procedure_history", path=PATH)
    assert ok, answer
    return answer


async def test_a_deletion_leaves_both_views_shows_in_history_and_frees_the_name(make_app, tmp_path):
    ws = tmp_path / "ws"
    async with make_app() as app:
        created = await create(app)
        assert await found(app) == {"when_to_use": [PATH], "when_to_use_content": [PATH]}

        ok, answer = await run_job(app, "procedure_delete", path=PATH)

        assert ok and answer["status"] == "deleted" and answer["path"] == PATH, answer
        assert answer["version"] == created["version"] and answer["deleted_at"]
        assert not (ws / PATH).exists()
        assert await found(app) == {"when_to_use": [], "when_to_use_content": []}
        assert memory_of(app).workspace.views.held_version(PATH) is None
        ok, listed = await run_job(app, "procedure_list")
        assert ok and listed["experiences"] == []
        removed = await history(app)
        assert removed["exists"] is False and removed["current_version"] is None
        assert [v["change"] for v in removed["versions"]] == ["create", "hand_delete"]
        last = removed["versions"][-1]
        assert last["note"] == f"removed with procedure_delete by {getpass.getuser()}"  # who
        assert last["at"] and last["at"] >= removed["versions"][0]["at"]  # when
        assert last["previous_version"] == created["version"] and last["request_id"] is None

        again = await create(app, scope="req-2", content="Rebuild the affected indexes, then verify a query.")
        assert again["status"] == "created" and again["path"] == PATH  # the name is free again
        assert await found(app) == {"when_to_use": [PATH], "when_to_use_content": [PATH]}
        assert [v["change"] for v in (await history(app))["versions"]] == ["create", "hand_delete", "create"]
    async with make_app() as app:  # a restart records nothing twice and serves the new experience
        answer = await history(app)
        assert [v["change"] for v in answer["versions"]] == ["create", "hand_delete", "create"]
        assert answer["current_version"] == again["version"]
        assert await found(app) == {"when_to_use": [PATH], "when_to_use_content": [PATH]}


async def test_a_deletion_survives_a_restart_without_a_second_record(make_app, tmp_path):
    async with make_app() as app:
        await create(app)
        ok, answer = await run_job(app, "procedure_delete", path=PATH)
        assert ok, answer
    async with make_app() as app:
        answer = await history(app)
        assert [v["change"] for v in answer["versions"]] == ["create", "hand_delete"]
        assert await found(app) == {"when_to_use": [], "when_to_use_content": []}


async def test_content_changed_by_hand_is_recorded_before_it_is_removed(make_app, tmp_path):
    ws = tmp_path / "ws"
    async with make_app() as app:
        await create(app)
        edited = json.loads((ws / PATH).read_text())
        edited["content"] = "Edited by hand before the removal."
        (ws / PATH).write_text(json.dumps(edited, indent=2) + "\n")

        ok, answer = await run_job(app, "procedure_delete", path=PATH)

        assert ok, answer
        versions = (await history(app))["versions"]
        assert [v["change"] for v in versions] == ["create", "hand_edit", "hand_delete"]
        assert json.loads(versions[1]["text"])["content"] == "Edited by hand before the removal."
        assert answer["version"] == versions[1]["version"] == versions[2]["previous_version"]


async def test_an_invalid_file_placed_by_hand_can_be_removed(make_app, tmp_path):
    ws = tmp_path / "ws"
    async with make_app() as app:
        (ws / PATH).write_bytes(b'{"description": "half a file",')
        ok, answer = await run_job(app, "procedure_delete", path=PATH)
        assert ok and answer["status"] == "deleted", answer
        assert not (ws / PATH).exists()
        assert [v["change"] for v in (await history(app))["versions"]] == ["hand_edit", "hand_delete"]


@pytest.mark.parametrize(
    "args, code",
    [
        ({"path": "procedures/missing-experience.json"}, "not_found"),
        ({"path": "procedures/../outside.json"}, "path_outside_allowed_directory"),
        ({"path": "session/trajectories/run.jsonl"}, "not_found"),  # a copy no rejected import holds
        ({"path": "session/trajectories/../procedures/" + NAME}, "path_outside_allowed_directory"),
        ({"path": "metadata/procedure/default/imports/x.json"}, "path_outside_allowed_directory"),
        ({"path": "procedures/Not A Name.json"}, "invalid_argument"),
        ({}, "invalid_argument"),
        ({"path": PATH, "force": True}, "invalid_argument"),
    ],
)
async def test_refusals_change_nothing(make_app, tmp_path, args, code):
    ws = tmp_path / "ws"
    async with make_app() as app:
        await create(app)
        before = durable_state(ws)
        ok, answer = await run_job(app, "procedure_delete", **args)
        assert not ok and answer["status"] == "error" and answer["error"]["code"] == code, answer
        assert durable_state(ws) == before
        assert await found(app) == {"when_to_use": [PATH], "when_to_use_content": [PATH]}


def test_the_job_is_one_shot_only():
    job = yaml.safe_load((REPO / "plugin.yaml").read_text())["application_defaults"]["jobs"]["procedure_delete"]
    assert job["enable_serve"] is False  # never served (HTTP, MCP), so never an agent's or a client's tool


async def test_a_removal_the_journal_cannot_record_says_so_and_the_next_start_records_it(
    make_app, tmp_path, monkeypatch
):
    ws = tmp_path / "ws"
    async with make_app() as app:
        await create(app)
        faults = Faults(monkeypatch)
        faults.denied = {memory_of(app).workspace.state_dir / "operations"}
        ok, answer = await run_job(app, "procedure_delete", path=PATH)
        faults.denied = set()
        assert not ok and answer["error"]["code"] == "storage_error", answer
        assert answer["error"]["message"].startswith(f"{PATH} was removed, but the journal could not record")
        assert "The next start records it" in answer["error"]["message"]
        assert not (ws / PATH).exists() and await found(app) == {"when_to_use": [], "when_to_use_content": []}
    async with make_app() as app:
        assert memory_of(app).workspace.views.held_version(PATH) is None
        versions = (await history(app))["versions"]
        assert [v["change"] for v in versions] == ["create", "hand_delete"]
        assert "note" not in versions[-1]  # found by the start: a deletion by hand, without the job's note


# -- a rejected import: its kept copy and its record ----------------------------------------------


async def test_a_rejected_import_is_removed_with_its_copy_and_record(make_app, tmp_path):
    original = write(tmp_path, "bad.json", '{"messages": [')
    async with make_app(scripts=[]) as app:
        memory = memory_of(app)
        ok, rejected = await import_file(app, original, request_id="bad-1")
        assert not ok and rejected["status"] == "rejected" and (memory.workspace_path / rejected["path"]).is_file()

        ok, answer = await run_job(app, "procedure_delete", path=rejected["path"])

        assert ok and answer == {
            "status": "deleted",
            "kind": "rejected_import",
            "path": rejected["path"],
            "request_id": "bad-1",
            "error_code": "malformed_input",
        }, answer
        assert list((memory.workspace_path / memory.workspace.trajectory_rel_dir).iterdir()) == []
        assert list((memory.workspace.state_dir / "imports").iterdir()) == []
        ok, listed = await run_job(app, "procedure_imports")
        assert ok and listed["imports"] == []
        ok, again = await run_job(app, "procedure_delete", path=rejected["path"])
        assert not ok and again["error"]["code"] == "not_found"


async def test_the_copy_of_an_import_that_was_not_rejected_stays(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    async with make_app(scripts=[replies()]) as app:
        ok, imported = await import_file(app, original, request_id="good-1")
        assert ok, imported
        before = durable_state(tmp_path / "ws")
        ok, answer = await run_job(app, "procedure_delete", path=imported["path"])
        assert not ok and answer["error"]["code"] == "invalid_argument" and "'good-1'" in answer["error"]["message"]
        assert durable_state(tmp_path / "ws") == before


async def test_a_rejected_copy_replaced_by_other_bytes_is_left(make_app, tmp_path):
    original = write(tmp_path, "bad.jsonl", '{"a": 1}\nnot json\n')
    async with make_app(scripts=[]) as app:
        ok, rejected = await import_file(app, original, request_id="bad-2")
        copy = memory_of(app).workspace_path / rejected["path"]
        copy.write_text("someone else's file\n")
        ok, answer = await run_job(app, "procedure_delete", path=rejected["path"])
        assert not ok and answer["error"]["code"] == "invalid_argument", answer
        assert copy.read_text() == "someone else's file\n"
