"""procedure_list and procedure_imports through real ReMe Jobs: pages in a stable order with
``next``, each experience validated as search validates it (pending and invalid ones visible), each import's status
and progress from its record, checkpoint and journal, damaged records reported without crashing — and nothing
written, renamed or set aside.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from reme_procedure_memory.storage import experiences as experience_files

from conftest import add_trajectory, call_tool, import_file, memory_of, run_job
from helpers import experience_record, place_unicorn_experiences, summary
from helpers.corpus import JSONL, TWO_SEGMENTS, creates, replies, two_segment_original, write
from helpers.views import held_reindex


def everything(ws: Path) -> dict[str, tuple]:
    """Every entry under the workspace: files (bytes, mtime), links, directories — what a listing must not change."""
    out = {}
    for path in sorted(ws.rglob("*")):
        if path.is_symlink():
            out[str(path)] = ("link", os.readlink(path))
        elif path.is_file():
            out[str(path)] = ("file", path.read_bytes(), path.stat().st_mtime_ns)
        else:
            out[str(path)] = ("dir",)
    return out


async def pages(app, job: str, key: str, limit: int, **args) -> tuple[list[dict], list[dict]]:
    """Every page of a listing, following ``next``: (the entries in order, the answers)."""
    entries, answers, cursor = [], [], None
    while True:
        ok, answer = await run_job(app, job, limit=limit, **({"cursor": cursor} if cursor else {}), **args)
        assert ok, answer
        answers.append(answer)
        entries += answer[key]
        cursor = answer["next"]
        if cursor is None:
            return entries, answers


# -- experiences ------------------------------------------------------------------------------------------------------


async def test_experiences_are_listed_by_path_a_page_at_a_time(make_app):
    async with make_app() as app:
        ws = memory_of(app).workspace_path
        place_unicorn_experiences(ws, 23)
        await memory_of(app).recovery.reconcile()  # placed by hand after the start: indexed as a restart would
        entries, answers = await pages(app, "procedure_list", "experiences", 5)
        paths = sorted(f"procedures/p{i}.json" for i in range(23))
        assert [e["path"] for e in entries] == paths
        assert [len(a["experiences"]) for a in answers] == [5, 5, 5, 5, 3]
        assert [a["next"] for a in answers] == [paths[4], paths[9], paths[14], paths[19], None]
        assert {a["total"] for a in answers} == {23}
        first = entries[0]
        raw = (ws / first["path"]).read_bytes()
        assert first == {
            "path": "procedures/p0.json",
            "version": memory_of(app).workspace.files.read(first["path"]).version,
            "state": "indexed",
            "description": "d0",
            "source_count": 1,
        }
        assert json.loads(raw)["description"] == "d0"
        ok, whole = await run_job(app, "procedure_list")  # default limit 50: one page
        assert ok and whole["next"] is None and [e["path"] for e in whole["experiences"]] == paths
        assert whole["index_complete"] is True and whole["pending_indexes"] == []


async def test_a_page_starts_after_its_cursor_whatever_changed_before_it(make_app):
    async with make_app() as app:
        ws = memory_of(app).workspace_path
        place_unicorn_experiences(ws, 10)
        ok, first = await run_job(app, "procedure_list", limit=4)
        assert first["next"] == "procedures/p3.json"
        (ws / "procedures/p0.json").unlink()  # before the cursor: removed
        (ws / "procedures/a-new-one.json").write_text((ws / "procedures/p1.json").read_text())  # before: added
        (ws / "procedures/p3.json").unlink()  # the cursor itself: gone
        ok, second = await run_job(app, "procedure_list", limit=4, cursor=first["next"])
        assert [e["path"] for e in second["experiences"]] == [f"procedures/p{i}.json" for i in (4, 5, 6, 7)]
        assert second["total"] == 9
        ok, empty = await run_job(app, "procedure_list", cursor="procedures/zzz.json")
        assert ok and empty["experiences"] == [] and empty["next"] is None


async def test_pending_invalid_and_unindexed_files_are_listed_as_such(make_app):
    async with make_app() as app:
        memory = memory_of(app)
        ws = memory.workspace_path
        source = add_trajectory(app)
        run = memory.grants.begin_attempt("req-1", [source])
        fields = {"description": "Indexed one", "when_to_use": "when it works", "content": "Do it."}
        ok, indexed = await call_tool(app, run, "procedure_create", filename="indexed.json", **fields)
        assert ok, indexed
        app.context.components["as_embedding"]["procedure"].model.reject = {"POISON"}
        ok, pending = await call_tool(
            app,
            run,
            "procedure_create",
            filename="pending.json",
            **{**fields, "content": "POISON the provider rejects"},
        )
        assert not ok and pending["status"] == "index_pending"
        (ws / "procedures/invalid.json").write_text('{"description": ')
        (ws / "procedures/Bad Name.json").write_text(json.dumps(experience_record("d", "w", "c", [source])))
        (ws / "procedures/link.json").symlink_to(ws / "procedures/indexed.json")
        (ws / "procedures/by-hand.json").write_text(json.dumps(experience_record("By hand", "w", "c", [source])))
        before = everything(ws)

        ok, answer = await run_job(app, "procedure_list")

        assert ok and everything(ws) == before
        states = {e["path"]: e for e in answer["experiences"]}
        assert list(states) == sorted(states)
        assert states["procedures/indexed.json"]["state"] == "indexed"
        assert states["procedures/pending.json"]["state"] == "pending"
        assert states["procedures/pending.json"]["description"] == "Indexed one"
        assert states["procedures/pending.json"]["error"] == memory.workspace.pending.error("procedures/pending.json")
        assert states["procedures/by-hand.json"]["state"] == "unindexed"
        assert "procedure_reindex" in states["procedures/by-hand.json"]["note"]
        for path, cause in (
            ("procedures/invalid.json", "invalid JSON"),
            ("procedures/Bad Name.json", "rename"),
            ("procedures/link.json", "symbolic link"),
        ):
            assert states[path]["state"] == "invalid" and cause in states[path]["error"], states[path]
            assert "description" not in states[path]
        # the same pending list as search, on every page
        assert answer["index_complete"] is False
        assert [p["path"] for p in answer["pending_indexes"]] == ["procedures/pending.json"]


async def test_a_listing_during_a_reindex_waits_for_complete_views(make_app, tmp_path):
    ws = tmp_path / "ws"
    place_unicorn_experiences(ws, 6)
    async with make_app(workspace=ws) as app:
        reindex, gate = await held_reindex(app)
        listing = asyncio.create_task(run_job(app, "procedure_list"))
        await asyncio.sleep(0.2)
        assert not listing.done()  # it waits for the rebuild instead of judging files on half-built views
        gate.set()
        ok, answer = await listing
        assert reindex.done() and (await reindex).success
        assert ok and [e["state"] for e in answer["experiences"]] == ["indexed"] * 6


async def test_only_the_pages_files_are_read(make_app, monkeypatch):
    async with make_app() as app:
        place_unicorn_experiences(memory_of(app).workspace_path, 30)
        read = []
        original = experience_files.read_entry
        monkeypatch.setattr(
            experience_files, "read_entry", lambda path, dir_fd=None: read.append(path) or original(path, dir_fd)
        )
        ok, answer = await run_job(app, "procedure_list", limit=4, cursor="procedures/p2.json")
        assert ok and read == ["p20.json", "p21.json", "p22.json", "p23.json"]
        assert answer["total"] == 30


# -- imports ----------------------------------------------------------------------------------------------------------


def state_dir(app) -> Path:
    return memory_of(app).workspace.state_dir


async def test_imports_list_their_file_status_segments_and_experiences(make_app, tmp_path):
    original = two_segment_original(tmp_path)

    async def stops(tools, prompt, kwargs):
        raise RuntimeError("model endpoint unavailable")

    scripts = [
        creates("one.json", "two.json"),
        stops,  # b-run: segment 1 writes two, segment 2 fails
        creates("three.json"),
    ]  # a-run: one segment
    async with make_app(scripts=scripts, components=TWO_SEGMENTS) as app:
        ok, _ = await import_file(app, original, request_id="b-run")
        assert not ok
        single = write(tmp_path, "short.jsonl", JSONL)
        ok, _ = await import_file(app, single, request_id="a-run")
        assert ok
        before = everything(memory_of(app).workspace_path)

        ok, answer = await run_job(app, "procedure_imports")

        assert ok and everything(memory_of(app).workspace_path) == before
        assert answer["total"] == 2 and answer["next"] is None and answer["damaged_records"] == []
        a_run, b_run = answer["imports"]
        assert {k: v for k, v in a_run.items() if k != "created_at"} == {
            "request_id": "a-run",
            "file": "session/trajectories/short.jsonl",
            "filename": "short.jsonl",
            "status": "complete",
            "segments": {"done": 1, "total": 1},
            "experiences": {"created": 1, "updated": 0},
        }
        assert a_run["created_at"].endswith("Z") and a_run["created_at"][:2] == "20"
        assert b_run["request_id"] == "b-run" and b_run["file"] == "session/trajectories/run.jsonl"
        assert b_run["status"] == "incomplete" and b_run["segments"] == {"done": 1, "total": 2}
        assert b_run["experiences"] == {"created": 2, "updated": 0}
        assert "source" not in json.dumps(answer)  # the original's absolute path is never answered
        assert str(tmp_path / "originals") not in json.dumps(answer)


async def test_an_import_of_content_that_cannot_be_imported_is_rejected_not_resumable(make_app, tmp_path):
    async with make_app(scripts=[]) as app:  # no model call: the content is refused first
        originals = {}
        for request_id, name, data in (("bad-json", "bad.json", b'{"messages": ['), ("pdf", "doc.pdf", b"%PDF-1.7")):
            originals[request_id] = write(tmp_path, name, data)
            ok, answer = await import_file(app, originals[request_id], request_id=request_id)
            assert not ok and "resume" not in answer, answer.get("error")
        ok, answer = await import_file(app, originals["bad-json"], request_id="bad-json")  # the same answer again
        assert not ok and answer["error"]["code"] == "malformed_input"

        ok, listed = await run_job(app, "procedure_imports")

        # the answer's status is the listing's; the pdf was refused before anything was copied: nothing to list
        assert answer["status"] == "rejected"
        assert ok and [
            (i["request_id"], i["status"], i.get("error_code"), i["segments"]) for i in listed["imports"]
        ] == [("bad-json", "rejected", "malformed_input", None)]


async def test_an_import_running_now_is_processing(make_app, tmp_path):
    seen = {}

    async def looks(tools, prompt, kwargs):
        seen["answer"] = await run_job(app, "procedure_imports")
        return summary("Nothing reusable here.")

    async with make_app(scripts=[looks]) as app:
        ok, _ = await import_file(app, write(tmp_path, "run.jsonl", JSONL), request_id="live")
        assert ok
        ok, during = seen["answer"]
        assert ok and [(i["request_id"], i["status"], i["segments"]) for i in during["imports"]] == [
            ("live", "processing", {"done": 0, "total": 1})
        ]
        ok, after = await run_job(app, "procedure_imports")
        assert after["imports"][0]["status"] == "complete"


async def test_imports_are_paged_by_request_id_and_a_numeric_cursor_works(make_app, tmp_path):
    ids = ["10", "9", "req-b", "req-a", "req-c"]
    async with make_app(scripts=[replies() for _ in ids]) as app:
        for number, request_id in enumerate(ids):
            ok, _ = await import_file(app, write(tmp_path, f"r{number}.jsonl", JSONL), request_id=request_id)
            assert ok
        entries, answers = await pages(app, "procedure_imports", "imports", 2)
        assert [e["request_id"] for e in entries] == sorted(ids)
        assert [a["next"] for a in answers] == ["9", "req-b", None]
        assert "damaged_records" in answers[0] and all("damaged_records" not in a for a in answers[1:])
        ok, after_ten = await run_job(app, "procedure_imports", cursor=10)  # the CLI sends cursor=10 as a number
        assert ok and [e["request_id"] for e in after_ten["imports"]] == ["9", "req-a", "req-b", "req-c"]


async def test_damaged_records_are_listed_as_damaged_and_left_in_place(make_app, tmp_path):
    async with make_app(scripts=[creates("kept.json"), replies(), replies(), replies()]) as app:
        memory = memory_of(app)
        for request_id in ("journal", "checkpoint", "record", "typed"):
            ok, _ = await import_file(app, write(tmp_path, f"{request_id}.jsonl", JSONL), request_id=request_id)
            assert ok
        # one journal record of "journal" unreadable; the checkpoint of "checkpoint"; the import record of "record"
        scope = next(d for d in (state_dir(app) / "operations").iterdir() if d.name.endswith(".v2"))  # not paths/
        journal_record = next(scope.glob("*.json"))
        journal_record.write_text("{not json")
        memory.workspace.checkpoints.path("checkpoint").write_text('{"request_id": "checkpoint", "surprise": 1}')
        memory.workspace.imports.path("record").write_text("[]")
        typed = json.loads(memory.workspace.imports.path("typed").read_text())
        memory.workspace.imports.path("typed").write_text(json.dumps({**typed, "request_id": ["not", "a", "string"]}))
        before = everything(memory.workspace_path)

        ok, answer = await run_job(app, "procedure_imports")

        assert ok, answer
        assert everything(memory.workspace_path) == before  # nothing set aside, renamed or rewritten
        by_id = {entry["request_id"]: entry for entry in answer["imports"]}
        assert by_id["journal"]["status"] == "complete" and by_id["journal"]["experiences"]["created"] == 0
        assert [d["path"] for d in by_id["journal"]["damaged_records"]] == [memory.workspace.relative(journal_record)]
        assert by_id["checkpoint"]["status"] == "damaged" and by_id["checkpoint"]["segments"] is None
        assert "surprise" in by_id["checkpoint"]["damaged_records"][0]["error"]
        assert "resume" in by_id["checkpoint"]["damaged_records"][0]["fix"].lower()
        # an unreadable import record: its checkpoint lists the import; the record itself is reported apart
        assert by_id["record"]["status"] == "complete" and "import record is missing" in by_id["record"]["note"]
        assert by_id["typed"]["note"]  # the same for a record of the wrong types
        damaged = {d["path"]: d["error"] for d in answer["damaged_records"]}
        assert damaged == {
            memory.workspace.relative(memory.workspace.imports.path("record")): "the JSON value is not an object",
            memory.workspace.relative(memory.workspace.imports.path("typed")): "`request_id` is not a string",
        }


async def test_an_import_without_its_record_is_listed_from_its_checkpoint(make_app, tmp_path):
    async with make_app(scripts=[replies()]) as app:
        memory = memory_of(app)
        ok, _ = await import_file(app, write(tmp_path, "run.jsonl", JSONL), request_id="orphan")
        assert ok
        memory.workspace.imports.path("orphan").unlink()
        (state_dir(app) / "processing" / "unrelated.json").write_text("{")  # no record names it, unreadable
        ok, answer = await run_job(app, "procedure_imports")
        assert ok and [(i["request_id"], i["file"], i["filename"], i["status"]) for i in answer["imports"]] == [
            ("orphan", "session/trajectories/run.jsonl", None, "complete")
        ]  # the given name was in the record
        assert answer["imports"][0]["created_at"] is None
        assert [d["path"].rsplit("/", 1)[-1] for d in answer["damaged_records"]] == ["unrelated.json"]


@pytest.mark.parametrize("job", ["procedure_list", "procedure_imports"])
async def test_an_empty_workspace_lists_nothing(make_app, job):
    async with make_app() as app:
        ok, answer = await run_job(app, job)
        key = "experiences" if job == "procedure_list" else "imports"
        assert ok and answer[key] == [] and answer["total"] == 0 and answer["next"] is None


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"limit": 0}, "`limit` must be between 1 and 500 (got 0)."),
        ({"limit": 501}, "`limit` must be between 1 and 500 (got 501)."),
        ({"cursor": "  "}, "`cursor` must be the `next` of an earlier answer"),
        ({"cursor": ["procedures/a.json"]}, "`cursor` must be the `next` of an earlier answer"),
        ({"cursor": "x" * 4097}, "`cursor` must be the `next` of an earlier answer"),
        ({"cursr": "procedures/a.json"}, "`cursr` is not an argument of procedure_list; did you mean `cursor`?"),
    ],
)
async def test_listing_arguments_are_validated(make_app, arguments, message):
    async with make_app() as app:
        ok, answer = await run_job(app, "procedure_list", **arguments)
        assert (
            not ok and answer["error"]["code"] == "invalid_argument" and answer["error"]["message"].startswith(message)
        )
        job_message = message.replace("procedure_list", "procedure_imports")
        ok, answer = await run_job(app, "procedure_imports", **arguments)
        assert not ok and answer["error"]["message"].startswith(job_message)
