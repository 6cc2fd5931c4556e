"""procedure_history trusted: a recorded version is never lost at a kill between a record's
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
from helpers.revisions import FIELDS, NAME, PATH, revising_agent


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
    memory_of(app).workspace.lock_file.release()


def placed(src: str, content: str = "Placed by hand.") -> str:
    return (
        json.dumps(
            {"description": "Placed by hand", "when-to-use": "When testing", "content": content, "sources": [src]},
            indent=2,
        )
        + "\n"
    )


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
    run = memory_of(app).grants.begin_attempt("req-1", [src])
    hits = kill_at_hand_record(monkeypatch)
    await dies(
        call_tool(
            app,
            run,
            "procedure_update",
            path=PATH,
            expected_version=version,
            operation_key="u1",
            content="Placed by hand.\nThen updated.",
        )
    )
    assert hits  # the kill came where the hand-placed text was being recorded
    monkeypatch.undo()
    abandon(app)
    async with make_app() as app:  # the resume sends the same update again
        run = memory_of(app).grants.begin_attempt("req-1", [src])
        ok, updated = await call_tool(
            app,
            run,
            "procedure_update",
            path=PATH,
            expected_version=version,
            operation_key="u1",
            content="Placed by hand.\nThen updated.",
        )
        assert ok, updated
        answer = await history(app)
    assert [(v["change"], v["recorded"]) for v in answer["versions"]] == [("hand_edit", True), ("update", True)]
    assert answer["versions"][0]["text"] == text and answer["versions"][0]["version"] == version


async def created(make_app) -> None:
    """The experience, created by an import's agent: the journal knows it."""
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        assert (await call_tool(app, run, "procedure_create", filename=NAME, **FIELDS))[0]


async def start_killed_at_the_hand_record(make_app, monkeypatch) -> None:
    hits = kill_at_hand_record(monkeypatch)
    app = make_app.build()
    await dies(app.start())
    assert hits
    monkeypatch.undo()
    abandon(app)


async def test_a_kill_before_the_hand_record_of_a_start_records_it_at_the_next_start(make_app, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    await created(make_app)
    edited = (ws / PATH).read_text().replace("indexes", "indexes by hand")
    (ws / PATH).write_text(edited)
    await start_killed_at_the_hand_record(make_app, monkeypatch)
    async with make_app() as app:
        answer = await history(app)
    assert [(v["change"], v["recorded"]) for v in answer["versions"]] == [("create", True), ("hand_edit", True)]
    assert answer["versions"][1]["text"] == edited


async def test_a_kill_before_the_hand_record_of_a_deletion_records_it_at_the_next_start(
    make_app, tmp_path, monkeypatch
):
    ws = tmp_path / "ws"
    await created(make_app)
    (ws / PATH).unlink()
    await start_killed_at_the_hand_record(make_app, monkeypatch)
    async with make_app() as app:
        answer = await history(app)
    assert [v["change"] for v in answer["versions"]] == ["create", "hand_delete"]


async def test_a_kill_before_the_hand_record_of_a_reindex_records_it_at_the_next_reindex(
    make_app, tmp_path, monkeypatch
):
    ws = tmp_path / "ws"
    await created(make_app)
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


# -- item 2: damage is named, never answered as a complete history or import ----------------------------------------


def components(**history) -> dict:
    merged = json.loads(json.dumps(TWO_SEGMENTS))
    if history:
        merged["procedure_memory"]["default"]["history"] = history
    return merged


async def compacted_import(make_app, tmp_path) -> dict:
    """An import that creates and revises the experience twice, its oldest version compacted (keep 2)."""
    async with make_app(scripts=revising_agent(), components=components(keep_versions=2)) as app:
        ok, imported = await import_file(app, two_segment_original(tmp_path), request_id="run-001")
        assert ok, imported
        answer = await history(app, diff=True)
    assert [v["number"] for v in answer["versions"]] == [2, 3] and answer["compacted"]["versions"] == 1
    return answer


def started_with_log(make_app, **kwargs):
    """An unstarted application and the list its component's warnings go to."""
    messages: list[str] = []
    app = make_app.build(**kwargs)
    memory_of(app).logger.add(messages.append, level="WARNING")
    return app, messages


async def test_a_lost_path_index_is_rebuilt_with_its_compaction_summaries_and_the_start_says_so(make_app, tmp_path):
    ws = tmp_path / "ws"
    expected = await compacted_import(make_app, tmp_path)
    shutil.rmtree(operations_dir(ws) / "paths")
    app, messages = started_with_log(make_app, components=components(keep_versions=2))
    await app.start()
    try:
        assert await history(app, diff=True) == expected  # not renumbered from 1
    finally:
        await app.close()
    assert any("operations/paths/" in m and "built it from" in m for m in messages), messages


@pytest.mark.parametrize("lost", ["in the marker directory", "beside the index"])
async def test_one_lost_compaction_summary_renumbers_nothing(make_app, tmp_path, lost):
    ws = tmp_path / "ws"
    expected = await compacted_import(make_app, tmp_path)
    copies = (
        sorted((operations_dir(ws) / "paths").rglob("compacted.json"))
        if lost == "in the marker directory"
        else sorted((operations_dir(ws) / "compacted").glob("*.json"))
    )
    assert len(copies) == 1
    copies[0].unlink()
    async with make_app(components=components(keep_versions=2)) as app:
        assert await history(app, diff=True) == expected


async def test_losing_every_compaction_summary_is_named_in_the_history(make_app, tmp_path):
    ws = tmp_path / "ws"
    await compacted_import(make_app, tmp_path)
    for copy in [
        *(operations_dir(ws) / "paths").rglob("compacted.json"),
        *(operations_dir(ws) / "compacted").glob("*"),
    ]:
        copy.unlink()
    async with make_app(components=components(keep_versions=2)) as app:
        answer = await history(app)
    assert "compacted" not in answer
    first = answer["versions"][0]
    assert first["change"] == "unrecorded" and not first["recorded"]
    assert "compaction summary" in first["note"] and "numbers" in first["note"]


async def imported(make_app, tmp_path) -> dict:
    async with make_app(scripts=revising_agent(), components=TWO_SEGMENTS) as app:
        ok, answer = await import_file(app, two_segment_original(tmp_path), request_id="run-001")
        assert ok, answer
        return await history(app, diff=True)


async def test_a_deleted_marker_directory_is_named_and_its_versions_still_listed(make_app, tmp_path):
    ws = tmp_path / "ws"
    expected = await imported(make_app, tmp_path)
    markers = [p for p in (operations_dir(ws) / "paths").iterdir() if p.is_dir()]
    assert len(markers) == 1
    shutil.rmtree(markers[0])
    async with make_app(components=TWO_SEGMENTS) as app:
        answer = await history(app, diff=True)
        assert [v["version"] for v in answer["versions"]] == [v["version"] for v in expected["versions"]]
        assert [v["number"] for v in answer["versions"]] == [1, 2, 3]
        (damaged,) = answer["damaged_records"]
        assert "marker directory" in damaged["error"] and "procedure_reindex" in damaged["fix"]
        ok, reindexed = await run_job(app, "procedure_reindex")
        assert ok and reindexed["journal_markers_recreated"] == 3, reindexed
        assert await history(app, diff=True) == expected  # repaired: nothing left to name


def record_of(ws, key: str):
    for path in operations_dir(ws).glob("*.v2/*.json"):
        if json.loads(path.read_text()).get("key") == key:
            return path
    raise AssertionError(key)


async def test_a_deleted_final_record_is_named_in_the_history_and_the_reindex(make_app, tmp_path):
    ws = tmp_path / "ws"
    expected = await imported(make_app, tmp_path)
    last = record_of(ws, expected["versions"][2]["operation_key"])
    last.unlink()
    async with make_app(components=TWO_SEGMENTS) as app:
        answer = await history(app)
        (damaged,) = answer["damaged_records"]
        assert damaged["record"] == str(last.relative_to(ws)) and "missing" in damaged["error"]
        assert "removed outside the plugin" in damaged["error"] and damaged["fix"]
        ok, reindexed = await run_job(app, "procedure_reindex")
        assert ok and any("missing" in d["error"] for d in reindexed["damaged_metadata"]), reindexed


async def test_a_record_reopened_to_intent_is_named_in_the_history_and_the_import_listing(make_app, tmp_path):
    ws = tmp_path / "ws"
    expected = await imported(make_app, tmp_path)
    middle = record_of(ws, expected["versions"][1]["operation_key"])
    record = json.loads(middle.read_text())
    middle.write_text(json.dumps({**record, "status": "intent"}))
    async with make_app(components=TWO_SEGMENTS) as app:
        answer = await history(app)
        (damaged,) = answer["damaged_records"]
        assert damaged["record"] == str(middle.relative_to(ws)) and "'intent'" in damaged["error"]
        ok, listed = await run_job(app, "procedure_imports")
        (entry,) = listed["imports"]
        assert [d["path"] for d in entry["damaged_records"]] == [str(middle.relative_to(ws))]


async def test_a_deleted_scope_directory_is_named_in_the_import_listing(make_app, tmp_path):
    ws = tmp_path / "ws"
    await imported(make_app, tmp_path)
    (scope,) = [
        p
        for p in operations_dir(ws).glob("*.v2")
        if any(json.loads(r.read_text())["scope"] == "run-001" for r in p.glob("*.json"))
    ]
    shutil.rmtree(scope)
    async with make_app(components=TWO_SEGMENTS) as app:
        ok, listed = await run_job(app, "procedure_imports")
    (entry,) = listed["imports"]
    assert entry["status"] == "damaged", entry
    assert any("journal" in d["error"] and "missing" in d["error"] for d in entry["damaged_records"]), entry


async def test_a_deleted_checkpoint_of_a_complete_import_is_named_not_listed_incomplete(make_app, tmp_path):
    ws = tmp_path / "ws"
    await imported(make_app, tmp_path)
    (checkpoint,) = (ws / "metadata" / "procedure" / "default" / "processing").glob("*.json")
    checkpoint.unlink()
    async with make_app(components=TWO_SEGMENTS) as app:
        ok, listed = await run_job(app, "procedure_imports")
    (entry,) = listed["imports"]
    assert entry["status"] == "damaged" and entry["segments"] is None, entry
    (damaged,) = entry["damaged_records"]
    assert damaged["path"] == str(checkpoint.relative_to(ws)) and "missing" in damaged["error"], damaged


async def test_a_path_index_replaced_by_a_file_names_it(make_app, tmp_path):
    from reme_procedure_memory.errors import StartupError

    ws = tmp_path / "ws"
    await imported(make_app, tmp_path)
    index = operations_dir(ws) / "paths"
    shutil.rmtree(index)
    index.write_text("not a directory")
    app = make_app.build(components=TWO_SEGMENTS)
    with pytest.raises(StartupError) as raised:
        await app.start()
    await app.close()
    message = str(raised.value)
    assert f"{index} is not a directory" in message and "move it aside" in message, message
