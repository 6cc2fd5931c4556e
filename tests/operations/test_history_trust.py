"""procedure_history trusted (issue 30 items 1 and 2): a recorded version is never lost at a kill between a record's
marker and the record, and every kind of damage to the journal, its path index and the import records is named,
never answered as a complete history or import on partial evidence.

A kill is ``Killed`` (a BaseException the plugin never catches) raised where the journal is about to write one
record: its marker may exist by then, the record does not. The dead application is abandoned (its lock released as
the kernel would) and a new one started, as a restarted process is.
"""

from __future__ import annotations

import json
import shutil

import pytest
from reme_procedure_memory.storage import journal as journal_module

from conftest import add_trajectory, call_tool, import_file, memory_of, run_job
from helpers.corpus import TWO_SEGMENTS, two_segment_original
from helpers.revisions import CONTENTS, FIELDS, NAME, PATH, revising_agent


class Killed(BaseException):
    """The process died."""


def operations_dir(ws):
    return ws / "metadata" / "procedure" / "default" / "operations"


async def history(app, path=PATH, **args) -> dict:
    ok, answer = await run_job(app, "procedure_history", path=path, **args)
    assert ok, answer
    return answer


def kill_at_hand_record(monkeypatch) -> list:
    """Kill the process when the journal writes the record of a change made by hand (its marker may be made)."""
    hits = []
    real = journal_module.write_json

    def write_json(path, obj, **kwargs):
        if isinstance(obj, dict) and obj.get("scope") == journal_module.HAND_SCOPE:
            hits.append(path)
            raise Killed(f"killed before writing {path}")
        return real(path, obj, **kwargs)

    monkeypatch.setattr(journal_module, "write_json", write_json)
    return hits


async def dies(app_or_work) -> None:
    with pytest.raises(Killed):
        await app_or_work


def abandon(app) -> None:
    """What the kernel does for a killed process: its workspace lock goes."""
    memory_of(app)._lock_file.release()


def placed(src: str, content: str = "Placed by hand.") -> str:
    return json.dumps({"description": "Placed by hand", "when-to-use": "When testing", "content": content,
                       "sources": [src]}, indent=2) + "\n"


# -- item 1: the proof that a content is recorded is its record ---------------------------------------------------


async def test_a_kill_before_the_hand_record_of_an_update_loses_no_version_on_resume(make_app, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    async with make_app() as app:
        src = add_trajectory(app)
    (ws / PATH).write_text(placed(src))
    text = (ws / PATH).read_text()
    app = make_app.build()
    await app.start()
    version = (await history(app))["current_version"]
    run = memory_of(app).begin_run("req-1", [src])
    hits = kill_at_hand_record(monkeypatch)
    await dies(call_tool(app, run, "procedure_update", path=PATH, expected_version=version, operation_key="u1",
                         content="Placed by hand.\nThen updated."))
    assert hits  # the kill came where the hand-placed text was being recorded
    monkeypatch.undo()
    abandon(app)
    async with make_app() as app:  # the resume sends the same update again
        run = memory_of(app).begin_run("req-1", [src])
        ok, updated = await call_tool(app, run, "procedure_update", path=PATH, expected_version=version,
                                      operation_key="u1", content="Placed by hand.\nThen updated.")
        assert ok, updated
        answer = await history(app)
    assert [(v["change"], v["recorded"]) for v in answer["versions"]] == [("hand_edit", True), ("update", True)]
    assert answer["versions"][0]["text"] == text and answer["versions"][0]["version"] == version


async def test_a_kill_before_the_hand_record_of_a_start_records_it_at_the_next_start(make_app, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    async with make_app() as app:
        run = memory_of(app).begin_run("req-1", [add_trajectory(app)])
        assert (await call_tool(app, run, "procedure_create", filename=NAME, **FIELDS))[0]
    edited = (ws / PATH).read_text().replace("indexes", "indexes by hand")
    (ws / PATH).write_text(edited)
    hits = kill_at_hand_record(monkeypatch)
    app = make_app.build()
    await dies(app.start())
    assert hits
    monkeypatch.undo()
    abandon(app)
    async with make_app() as app:
        answer = await history(app)
    assert [(v["change"], v["recorded"]) for v in answer["versions"]] == [("create", True), ("hand_edit", True)]
    assert answer["versions"][1]["text"] == edited


async def test_a_kill_before_the_hand_record_of_a_deletion_records_it_at_the_next_start(make_app, tmp_path,
                                                                                       monkeypatch):
    ws = tmp_path / "ws"
    async with make_app() as app:
        run = memory_of(app).begin_run("req-1", [add_trajectory(app)])
        assert (await call_tool(app, run, "procedure_create", filename=NAME, **FIELDS))[0]
    (ws / PATH).unlink()
    hits = kill_at_hand_record(monkeypatch)
    app = make_app.build()
    await dies(app.start())
    assert hits
    monkeypatch.undo()
    abandon(app)
    async with make_app() as app:
        answer = await history(app)
    assert [v["change"] for v in answer["versions"]] == ["create", "hand_delete"]


async def test_a_kill_before_the_hand_record_of_a_reindex_records_it_at_the_next_reindex(make_app, tmp_path,
                                                                                        monkeypatch):
    ws = tmp_path / "ws"
    async with make_app() as app:
        run = memory_of(app).begin_run("req-1", [add_trajectory(app)])
        assert (await call_tool(app, run, "procedure_create", filename=NAME, **FIELDS))[0]
    edited = (ws / PATH).read_text().replace("indexes", "indexes by hand")
    (ws / PATH).write_text(edited)
    reindexing = {"backend": "cli", "job": "procedure_reindex"}
    app = make_app.build(service=reindexing)
    await app.start()  # a reindex process: its start leaves the files to the job
    hits = kill_at_hand_record(monkeypatch)
    await dies(app.run_job("procedure_reindex"))
    assert hits
    monkeypatch.undo()
    abandon(app)
    app = make_app.build(service=reindexing)
    await app.start()
    try:
        ok, reindexed = await run_job(app, "procedure_reindex")
        assert ok, reindexed
        answer = await history(app)
    finally:
        await app.close()
    assert [(v["change"], v["recorded"]) for v in answer["versions"]] == [("create", True), ("hand_edit", True)]
    assert answer["versions"][1]["text"] == edited
