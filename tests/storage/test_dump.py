"""procedure_dump (issue 33 item 1): every metadata file of a workspace with its kind, format, status and size, for
support; damaged records reported with why; no experience or trajectory text and no record's text field; nothing
written.

On the real Application: experiences written by the real create tool inside an extraction run, an import record and a
checkpoint put by the workspace's own stores, a damaged checkpoint, a set-aside record and a leftover temporary file
placed as a kill or a hand would leave them.
"""

from __future__ import annotations

import json
import os

from conftest import add_trajectory, call_tool, memory_of, run_job
from helpers.cli import snapshot
from helpers.revisions import FIELDS, NAME, PATH
from reme_procedure_memory.storage.checkpoints import Checkpoint
from reme_procedure_memory.storage.format import CHECKPOINT_FORMAT, JOURNAL_LAYOUT, VIEW_STATE_FORMAT, keyed_file
from reme_procedure_memory.storage.imports import COPIED, ImportRecord

SECRET = "sk-proj-dumpTESTsecret0123456789abcdefABCDEF"  # placed in text fields the dump must never show
SUMMARY = "the rolling summary of segment one, which quotes the trajectory"
TRAJECTORY = b'{"role": "user", "content": "the trajectory text itself"}\n'


async def populate(make_app) -> None:
    """A workspace with a journal, an import, a checkpoint and the views' persisted state (one run, closed)."""
    async with make_app() as app:
        memory = memory_of(app)
        ws = memory.workspace
        source = add_trajectory(app, data=TRAJECTORY)
        run = memory.grants.begin_attempt("req-1", [source])
        ok, created = await call_tool(app, run, "procedure_create", filename=NAME, **FIELDS)
        assert ok, created
        ws.imports.put(
            ImportRecord(
                request_id="req-1",
                source=f"/home/u/{SECRET}/run.jsonl",
                filename="run.jsonl",
                path=source,
                sha256="0" * 64,
                size=len(TRAJECTORY),
                status=COPIED,
            )
        )
        ws.checkpoints.put(
            Checkpoint(
                request_id="req-1",
                path=source,
                fingerprint={},
                plugin_version="0",
                segments=[[0, len(TRAJECTORY)]],
                summary=f"{SUMMARY} {SECRET}",
                memory_hint=SECRET,
            )
        )


def place_damage(app) -> dict:
    """What a kill or a hand leaves: a cut-off checkpoint, a set-aside record, a temporary file."""
    ws = memory_of(app).workspace
    damaged = keyed_file(ws.checkpoints.directory, "req-2")
    damaged.write_text('{"request_id": "req-2", "summary": "' + SECRET)  # cut off: not JSON
    aside = keyed_file(ws.imports.directory, "req-3")
    aside = aside.with_name(aside.name + ".damaged")
    aside.write_text(SECRET)
    temporary = ws.imports.directory / ".x.json.1a2b3c4d.tmp"
    temporary.write_text(SECRET)
    return {"damaged": damaged, "aside": aside, "temporary": temporary}


async def test_the_dump_lists_every_metadata_file_with_kind_format_status_and_size(make_app, tmp_path):
    ws_dir = tmp_path / "ws"
    await populate(make_app)
    async with make_app() as app:
        placed = place_damage(app)
        metadata = ws_dir / "metadata"
        on_disk = sorted(p.relative_to(ws_dir).as_posix() for p in metadata.rglob("*") if p.is_file())
        before = snapshot(ws_dir)

        ok, answer = await run_job(app, "procedure_dump")

        assert ok and answer["status"] == "ok", answer
        assert snapshot(ws_dir) == before  # read-only
        files = {f["path"]: f for f in answer["files"]}
        assert sorted(files) == on_disk
        for path, entry in files.items():
            assert entry["bytes"] == os.path.getsize(ws_dir / path), path
        by_kind: dict[str, list[dict]] = {}
        for entry in answer["files"]:
            by_kind.setdefault(entry["kind"], []).append(entry)
        assert answer["kinds"] == {kind: len(entries) for kind, entries in sorted(by_kind.items())}

        assert [(r["format"], r["status"]) for r in by_kind["journal_record"]] == [(JOURNAL_LAYOUT, "indexed")]
        # its open twin (published) stays until the directory's next fsync: shown as it is
        assert [r["status"] for r in by_kind.get("journal_record_open", [])] in ([], ["published"])
        assert [m["status"] for m in by_kind["marker"]] == ["confirmed"]
        assert [(r["status"], r["format"]) for r in by_kind["import_record"]] == [("copied", None)]
        checkpoints = {c["path"]: c for c in by_kind["checkpoint"]}
        rel = lambda path: path.relative_to(ws_dir).as_posix()  # noqa: E731
        assert checkpoints.pop(rel(placed["damaged"]))["status"] == "damaged"
        assert [(c["status"], c["format"]) for c in checkpoints.values()] == [("processing", CHECKPOINT_FORMAT)]
        assert files[rel(placed["aside"])]["kind"] == "set_aside"
        assert files[rel(placed["temporary"])]["kind"] == "temporary"
        assert [f["path"].rsplit("/", 1)[1] for f in by_kind["lock"]] == ["workspace.lock"]
        manifests = by_kind["view_manifest"]
        assert len(manifests) == 2 and {m["format"] for m in manifests} == {VIEW_STATE_FORMAT}
        assert answer["damaged"] == 2  # the cut-off checkpoint and the set-aside record
        assert answer["experiences"] == {"directory": "procedures", "files": 1, "bytes": os.path.getsize(ws_dir / PATH)}
        assert answer["trajectories"]["files"] == 1 and answer["trajectories"]["bytes"] == len(TRAJECTORY)
        assert answer["formats"]["view_state"] == VIEW_STATE_FORMAT


async def test_the_dump_holds_no_experience_or_trajectory_text_and_no_secret(make_app):
    await populate(make_app)
    async with make_app() as app:
        place_damage(app)
        ok, answer = await run_job(app, "procedure_dump")
    assert ok, answer
    text = json.dumps(answer)
    for shown_nowhere in (
        SECRET,
        SUMMARY,
        FIELDS["content"],
        FIELDS["when_to_use"],
        FIELDS["description"],
        "the trajectory text itself",
        "run.jsonl",
    ):
        assert shown_nowhere not in text, shown_nowhere


async def test_the_dump_takes_no_argument(make_app):
    await populate(make_app)
    async with make_app() as app:
        ok, answer = await run_job(app, "procedure_dump", verbose=True)
    assert not ok and answer["error"]["code"] == "invalid_argument" and "`verbose`" in answer["error"]["message"]
