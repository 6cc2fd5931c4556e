"""procedure_history on the real Application: an experience's durable versions from the journal,
changes made by hand, the retention bound, damaged records, paging, refusals, and the same answer after a restart.

Imports run with the scripted agent (``helpers.ScriptedAgent``), which calls the real job tools; everything else is
real (Jobs, FileStores, BM25, the journal on disk).
"""

from __future__ import annotations

import json
import os

import pytest
from reme_procedure_memory.schema import version_of

from conftest import add_trajectory, call_tool, import_file, memory_of, run_job
from helpers.cli import durable_state
from helpers.corpus import TWO_SEGMENTS, two_segment_original
from helpers.revisions import CONTENTS, FIELDS, NAME, PATH, revising_agent


def components(**history) -> dict:
    merged = json.loads(json.dumps(TWO_SEGMENTS))
    if history:
        merged["procedure_memory"]["default"]["history"] = history
    return merged


async def history(app, path=PATH, **args) -> dict:
    ok, answer = await run_job(app, "procedure_history", path=path, **args)
    assert ok, answer
    return answer


def file_text(app, path=PATH) -> str:
    return (memory_of(app).workspace_path / path).read_text()


def operations_dir(ws):
    return ws / "metadata" / "procedure" / "default" / "operations"


# -- the agent's revisions ----------------------------------------------------------------------------------------


async def test_an_import_that_creates_and_revises_twice_shows_three_versions_with_import_segment_and_diff(
    make_app, tmp_path
):
    original = two_segment_original(tmp_path)
    async with make_app(scripts=revising_agent(), components=TWO_SEGMENTS) as app:
        ok, imported = await import_file(app, original, request_id="run-001")
        assert ok and imported["segments"] == {"done": 2, "total": 2}, imported
        answer = await history(app, diff=True)

        assert answer["status"] == "ok" and answer["kind"] == "history" and answer["path"] == PATH
        versions = answer["versions"]
        assert [v["number"] for v in versions] == [1, 2, 3] and answer["total"] == 3
        assert [v["change"] for v in versions] == ["create", "update", "update"]
        assert [v["request_id"] for v in versions] == ["run-001"] * 3
        assert [v["segment"] for v in versions] == [1, 1, 2]
        assert [json.loads(v["text"])["content"] for v in versions] == CONTENTS
        assert all(v["recorded"] and v["status"] == "indexed" and v["at"] for v in versions)
        # each version names the one it replaced; the last one is the file now
        assert [v["previous_version"] for v in versions] == [None, versions[0]["version"], versions[1]["version"]]
        assert versions[-1]["text"] == file_text(app) and versions[-1]["current"]
        assert answer["current_version"] == versions[-1]["version"] == version_of(file_text(app).encode())
        assert [v["current"] for v in versions] == [False, False, True]
        # diffs between consecutive versions, line by line inside the content
        assert versions[0]["diff"] is None
        assert "+Then verify a known query.\n" in versions[1]["diff"].splitlines(keepends=True)
        assert f"--- {PATH}@{versions[0]['version']}" in versions[1]["diff"]
        assert "+Resume traffic only after it matches.\n" in versions[2]["diff"].splitlines(keepends=True)
        assert not any(
            line.startswith("-") and not line.startswith("---") for line in versions[2]["diff"].splitlines()
        )  # the third version only added a line
        assert "diff" not in (await history(app))["versions"][0]  # only with diff=true
        assert "compacted" not in answer and "damaged_records" not in answer


async def test_the_history_is_the_same_after_a_restart(make_app, tmp_path):
    original = two_segment_original(tmp_path)
    ws = tmp_path / "ws"
    async with make_app(scripts=revising_agent(), components=TWO_SEGMENTS) as app:
        assert (await import_file(app, original, request_id="run-001"))[0]
        before = await history(app, diff=True)
    async with make_app(components=TWO_SEGMENTS) as app:
        assert await history(app, diff=True) == before
        files = durable_state(ws)
    async with make_app(components=TWO_SEGMENTS) as app:  # nothing was recorded by the restarts themselves
        assert await history(app, diff=True) == before
    assert durable_state(ws) == files


async def test_writes_of_a_run_are_versions_and_an_abandoned_or_unpublished_write_is_not(make_app):
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, created = await call_tool(app, run, "procedure_create", filename=NAME, **FIELDS)
        assert ok
        ok, stale = await call_tool(
            app, run, "procedure_update", path=PATH, expected_version="0" * 16, content="never written"
        )
        assert not ok and stale["error"]["code"] == "stale_version"
        answer = await history(app)
        assert [v["version"] for v in answer["versions"]] == [created["version"]]


# -- changes made by hand -------------------------------------------------------------------------------------------


async def test_a_hand_edit_while_stopped_is_a_version_without_an_import_after_restart(make_app, tmp_path):
    original = two_segment_original(tmp_path)
    ws = tmp_path / "ws"
    async with make_app(scripts=revising_agent(), components=TWO_SEGMENTS) as app:
        assert (await import_file(app, original, request_id="run-001"))[0]
        agent_last = (await history(app))["versions"][-1]
    edited = json.loads((ws / PATH).read_text())
    edited["content"] += "\nEdited by hand: also clear the query cache."
    (ws / PATH).write_text(json.dumps(edited, indent=2) + "\n")

    async with make_app(components=TWO_SEGMENTS) as app:
        answer = await history(app, diff=True)
        assert answer["total"] == 4
        hand = answer["versions"][-1]
        assert hand["change"] == "hand_edit" and hand["recorded"] and hand["current"]
        assert hand["request_id"] is None and hand["segment"] is None and hand["operation_key"] is None
        assert hand["text"] == (ws / PATH).read_text() and hand["previous_version"] == agent_last["version"]
        assert "+Edited by hand: also clear the query cache.\n" in hand["diff"].splitlines(keepends=True)
        assert answer["versions"][2] == {**agent_last, "current": False, "diff": answer["versions"][2]["diff"]}
        # the edit is searchable too: the start reconciled it into the views after recording it
        ok, found = await run_job(app, "procedure_search", query="clear the query cache")
        assert found["results"][0]["path"] == PATH and found["results"][0]["version"] == hand["version"]
    async with make_app(components=TWO_SEGMENTS) as app:  # recorded once
        assert await history(app, diff=True) == answer


async def test_a_start_that_rebuilds_its_views_checks_known_files_by_their_markers_alone(
    make_app, tmp_path, monkeypatch
):
    """Every file is out of step with views that were lost; one that holds its newest record's content is told so
    from the markers' names (no record read), an edited one is recorded."""
    import shutil

    from reme_procedure_memory.storage.journal import OperationJournal

    ws = tmp_path / "ws"
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        assert (await call_tool(app, run, "procedure_create", filename=NAME, **FIELDS))[0]
        assert (await call_tool(app, run, "procedure_create", filename="other.json", **FIELDS))[0]
        before = await history(app)
    edited = (ws / "procedures/other.json").read_text().replace("indexes", "indexes by hand")
    (ws / "procedures/other.json").write_text(edited)
    for view in (ws / "metadata" / "file_store").glob("*.view"):
        shutil.rmtree(view)
    reads = []
    real = OperationJournal.path_records
    monkeypatch.setattr(OperationJournal, "path_records", lambda self, path: (reads.append(path), real(self, path))[1])
    async with make_app() as app:
        assert PATH not in reads and "procedures/other.json" in reads  # the unchanged file: no record read
        monkeypatch.undo()
        assert await history(app) == before
        assert [v["change"] for v in (await history(app, path="procedures/other.json"))["versions"]] == [
            "create",
            "hand_edit",
        ]


async def test_a_hand_edit_while_running_is_the_unrecorded_current_version_until_the_next_start(make_app):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, created = await call_tool(app, run, "procedure_create", filename=NAME, **FIELDS)
        ws = memory_of(app).workspace_path
        (ws / PATH).write_text((ws / PATH).read_text().replace("indexes", "indexes by hand"))
        answer = await history(app)
        assert [(v["change"], v["recorded"], v["current"]) for v in answer["versions"]] == [
            ("create", True, False),
            ("unrecorded", False, True),
        ]
        assert answer["versions"][-1]["text"] == (ws / PATH).read_text()
        assert answer["versions"][-1]["previous_version"] == created["version"]
    async with make_app() as app:
        assert [(v["change"], v["recorded"]) for v in (await history(app))["versions"]] == [
            ("create", True),
            ("hand_edit", True),
        ]


async def test_a_deletion_by_hand_while_stopped_is_recorded_and_the_history_stays(make_app, tmp_path):
    ws = tmp_path / "ws"
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        assert (await call_tool(app, run, "procedure_create", filename=NAME, **FIELDS))[0]
    text = (ws / PATH).read_text()
    (ws / PATH).unlink()
    async with make_app() as app:
        answer = await history(app, diff=True)
        assert answer["exists"] is False and answer["current_version"] is None
        assert [v["change"] for v in answer["versions"]] == ["create", "hand_delete"]
        deleted = answer["versions"][1]
        assert deleted["version"] is None and deleted["text"] is None and deleted["request_id"] is None
        assert deleted["diff"].splitlines()[1] == "+++ /dev/null"
        assert "-Rebuild the affected indexes.\n" in deleted["diff"].splitlines(keepends=True)
        assert answer["versions"][0]["text"] == text


async def test_a_file_placed_by_hand_is_recorded_before_the_agent_first_updates_it(make_app, tmp_path):
    ws = tmp_path / "ws"
    async with make_app() as app:
        src = add_trajectory(app)
    placed = {"description": "Placed by hand", "when-to-use": "When testing", "content": "Line one.", "sources": [src]}
    (ws / PATH).write_text(json.dumps(placed, indent=2) + "\n")
    async with make_app() as app:
        answer = await history(app)  # the start does not copy files placed by hand into the journal
        assert [(v["change"], v["recorded"], v["current"]) for v in answer["versions"]] == [("unrecorded", False, True)]
        assert answer["versions"][0]["text"] == (ws / PATH).read_text()
        assert not any(operations_dir(ws).glob("*.v2/*.json"))
        run = memory_of(app).grants.begin_attempt("req-1", [src])
        ok, updated = await call_tool(
            app,
            run,
            "procedure_update",
            path=PATH,
            expected_version=answer["current_version"],
            content="Line one.\nLine two.",
        )
        assert ok, updated
        answer = await history(app, diff=True)
        assert [(v["change"], v["recorded"]) for v in answer["versions"]] == [("hand_edit", True), ("update", True)]
        assert answer["versions"][0]["version"] == answer["versions"][1]["previous_version"]
        assert "+Line two.\n" in answer["versions"][1]["diff"].splitlines(keepends=True)


# -- the retention bound ---------------------------------------------------------------------------------------------


def record_files(ws) -> list:
    """The journal's record files (of a record's open and final files, the final one)."""
    files = {}
    for path in sorted(operations_dir(ws).glob("*.v2/*.json")):
        stem = path.name.split(".")[0]
        if (path.parent, stem) not in files or not path.name.endswith(".open.json"):
            files[(path.parent, stem)] = path
    return sorted(files.values())


async def test_a_completed_import_keeps_the_records_of_the_newest_versions_only(make_app, tmp_path):
    original = two_segment_original(tmp_path)
    ws = tmp_path / "ws"
    async with make_app(scripts=revising_agent(), components=components(keep_versions=2)) as app:
        ok, imported = await import_file(app, original, request_id="run-001")
        assert ok, imported
        answer = await history(app, diff=True)
        assert answer["compacted"]["versions"] == 1 and "keep_versions" in answer["compacted"]["note"]
        assert answer["total"] == 2 and [v["number"] for v in answer["versions"]] == [2, 3]
        assert [json.loads(v["text"])["content"] for v in answer["versions"]] == CONTENTS[1:]
        assert answer["versions"][0]["diff"] is None  # its predecessor's text is gone with its record
        assert answer["versions"][-1]["current"] and answer["versions"][-1]["text"] == file_text(app)
        assert len(record_files(ws)) == 2  # the create's record is gone from the journal
        markers = [
            p
            for p in (operations_dir(ws) / "paths").rglob("*")
            if p.is_file() and "." in p.name and p.name != "compacted.json"
        ]
        assert len(markers) == 2
        summary_file = json.loads(next((operations_dir(ws) / "paths").rglob("compacted.json")).read_text())
        assert summary_file["versions"] == 1 and summary_file["removing"] == []
    async with make_app(components=components(keep_versions=2)) as app:
        assert await history(app, diff=True) == answer  # the same after a restart


async def test_an_unfinished_import_keeps_every_record_until_it_completes(make_app, tmp_path):
    original = two_segment_original(tmp_path)
    ws = tmp_path / "ws"
    first, second = revising_agent()

    async def interrupted(tools, prompt, kwargs):
        return {
            "session_id": None,
            "result": "",
            "usage": None,
            "last_message": {"finished_reason": "interrupted", "content": []},
        }

    async with make_app(scripts=[first, interrupted, second], components=components(keep_versions=1)) as app:
        ok, stopped = await import_file(app, original, request_id="run-001")
        assert not ok and stopped["status"] == "incomplete", stopped
        assert (await history(app))["total"] == 2  # above the bound: a resume may still replay from them
        ok, reindexed = await run_job(app, "procedure_reindex")  # not even the full sweep removes them
        assert ok and reindexed["journal_records_compacted"] == 0
        assert len(record_files(ws)) == 2
        ok, done = await import_file(app, original, request_id="run-001")
        assert ok and done["status"] == "complete", done
        answer = await history(app)
        assert answer["compacted"]["versions"] == 2 and answer["total"] == 1
        assert answer["versions"][0]["number"] == 3 and answer["versions"][0]["current"]
        assert len(record_files(ws)) == 1


async def test_a_kill_during_a_compaction_neither_counts_twice_nor_shows_a_removed_record(
    make_app, tmp_path, monkeypatch
):
    original = two_segment_original(tmp_path)
    from reme_procedure_memory.storage import journal as journal_module

    def killed(self, path, refs):
        raise KeyboardInterrupt("killed after the summary named the records")

    async with make_app(scripts=revising_agent(), components=components(keep_versions=1)) as app:
        monkeypatch.setattr(journal_module.OperationJournal, "remove_records", killed)
        with pytest.raises(KeyboardInterrupt):
            await import_file(app, original, request_id="run-001")
        monkeypatch.undo()
        answer = await history(app)  # the records named for removal are still there, and skipped
        assert answer["compacted"]["versions"] == 2 and [v["number"] for v in answer["versions"]] == [3]
        assert len(record_files(tmp_path / "ws")) == 3
        ok, again = await import_file(app, original, request_id="run-001")  # complete: the bound applies again
        assert ok and again["status"] == "complete"
        assert await history(app) == answer
        assert len(record_files(tmp_path / "ws")) == 1


async def test_the_reindex_applies_the_bound_to_every_experience(make_app, tmp_path):
    original = two_segment_original(tmp_path)
    async with make_app(scripts=revising_agent(), components=TWO_SEGMENTS) as app:  # the default bound: 20
        assert (await import_file(app, original, request_id="run-001"))[0]
        assert (await history(app))["total"] == 3
    async with make_app(components=components(keep_versions=1)) as app:
        ok, reindexed = await run_job(app, "procedure_reindex")
        assert ok and reindexed["journal_records_compacted"] == 2
        answer = await history(app)
        assert answer["total"] == 1 and answer["compacted"]["versions"] == 2


# -- damaged records -------------------------------------------------------------------------------------------------


async def test_a_damaged_record_is_reported_and_never_hidden_or_changed(make_app, tmp_path):
    original = two_segment_original(tmp_path)
    ws = tmp_path / "ws"
    async with make_app(scripts=revising_agent(), components=TWO_SEGMENTS) as app:
        assert (await import_file(app, original, request_id="run-001"))[0]
        middle = (await history(app))["versions"][1]
        record = next(p for p in record_files(ws) if json.loads(p.read_text())["key"] == middle["operation_key"])
        record.write_text('{"scope": "run-001", "key": ')  # truncated
        files = durable_state(ws)
        answer = await history(app, diff=True)
        assert durable_state(ws) == files  # reported, not set aside: a history answer changes nothing
        assert [d["record"] for d in answer["damaged_records"]] == [str(record.relative_to(ws))]
        damaged = answer["damaged_records"][0]
        assert damaged["set_aside"] is False and "JSONDecodeError" in damaged["error"] and damaged["fix"]
        versions = answer["versions"]
        assert [v["segment"] for v in versions] == [1, 2]  # the versions that can be read are all listed
        assert versions[1]["previous_version"] == middle["version"] != versions[0]["version"]  # the gap shows
        # the import it belongs to sets it aside when run again (complete: nothing else to do); still reported
        ok, again = await import_file(app, original, request_id="run-001")
        assert ok and again["status"] == "complete"
        answer = await history(app)
        assert answer["damaged_records"][0]["set_aside"] is True
        assert answer["damaged_records"][0]["record"].endswith(".json.damaged")
        assert [v["segment"] for v in answer["versions"]] == [1, 2]


# -- paging and refusals ---------------------------------------------------------------------------------------------


async def test_paging_by_offset_and_limit(make_app, tmp_path):
    original = two_segment_original(tmp_path)
    async with make_app(scripts=revising_agent(), components=TWO_SEGMENTS) as app:
        assert (await import_file(app, original, request_id="run-001"))[0]
        whole = await history(app, diff=True)
        first = await history(app, diff=True, limit=2)
        assert first["versions"] == whole["versions"][:2] and first["next_offset"] == 2 and first["total"] == 3
        rest = await history(app, diff="true", offset="2", limit=2)  # as the CLI sends them
        assert rest["versions"] == whole["versions"][2:] and rest["next_offset"] is None
        assert rest["versions"][0]["diff"]  # from the version on the page before
        assert (await history(app, offset=5))["versions"] == []


@pytest.mark.parametrize(
    "args, code",
    [
        ({"path": "procedures/x.txt"}, "invalid_argument"),
        ({"path": "procedures/a/b.json"}, "invalid_argument"),
        ({"path": 7}, "invalid_argument"),
        ({"path": "../outside.json"}, "path_outside_allowed_directory"),
        ({"path": "procedures/nothing-here.json"}, "not_found"),
        ({"path": PATH, "limit": 0}, "invalid_argument"),
        ({"path": PATH, "limit": 51}, "invalid_argument"),
        ({"path": PATH, "offset": -1}, "invalid_argument"),
        ({"path": PATH, "diff": "maybe"}, "invalid_argument"),
        ({}, "invalid_argument"),
    ],
)
async def test_refusals(make_app, args, code):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        assert (await call_tool(app, run, "procedure_create", filename=NAME, **FIELDS))[0]
        ok, answer = await run_job(app, "procedure_history", **args)
        assert not ok and answer["status"] == "error" and answer["error"]["code"] == code, answer


async def test_a_path_with_history_answers_after_its_file_is_gone_and_one_without_is_not_found(make_app):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req-1", [add_trajectory(app)])
        assert (await call_tool(app, run, "procedure_create", filename=NAME, **FIELDS))[0]
        os.unlink(memory_of(app).workspace_path / PATH)  # while running: not recorded until the next start
        answer = await history(app)
        assert answer["exists"] is False and [v["change"] for v in answer["versions"]] == ["create"]
        ok, missing = await run_job(app, "procedure_history", path="procedures/never-written.json")
        assert not ok and missing["error"]["code"] == "not_found" and "no history" in missing["error"]["message"]


# -- a journal written before the history existed ----------------------------------------------------------------


async def test_a_journal_without_the_path_index_or_the_new_fields_still_reads(make_app, tmp_path):
    """Records as the earlier version wrote them (no ``published_at``/``file_version``, no ``paths/`` index): the
    first start indexes them once; a superseded record counts as a version when a later update was made on it."""
    ws = tmp_path / "ws"
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, created = await call_tool(app, run, "procedure_create", filename=NAME, **FIELDS)
        ok, updated = await call_tool(
            app, run, "procedure_update", path=PATH, expected_version=created["version"], content=CONTENTS[1]
        )
        assert ok
        expected = await history(app, diff=True)
    import shutil

    shutil.rmtree(operations_dir(ws) / "paths")
    for path in record_files(ws):
        record = json.loads(path.read_text())
        del record["published_at"], record["file_version"]
        if record["key"] == created["operation_key"]:
            record["status"] = "superseded"  # e.g. published, then overtaken before it was indexed
        path.write_text(json.dumps(record))
    async with make_app() as app:
        answer = await history(app, diff=True)
    assert [v["version"] for v in answer["versions"]] == [v["version"] for v in expected["versions"]]
    assert [v["diff"] for v in answer["versions"]] == [v["diff"] for v in expected["versions"]]
    assert answer["versions"][0]["status"] == "superseded"
    assert (operations_dir(ws) / "paths").is_dir() and not (operations_dir(ws) / "paths.building").exists()
