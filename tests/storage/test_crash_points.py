"""Kill at every durable write of a create and an update, resume: nothing lost, nothing duplicated.

A kill is simulated in-process: the k-th durable write (``storage.atomic.atomic_write``: the journal intent, the experience
publish, the ``published`` and ``indexed`` records) raises ``Killed`` (a BaseException, which no handler of the plugin
catches) instead of happening, and the application is abandoned without closing (its views are never persisted); the
workspace lock is released as the kernel releases a dead process's ``flock``. The resume is a new application on the
same workspace whose run replays the same operation keys with the same arguments, as a resumed segment does.

Also: the ``indexed`` record is written without a directory fsync (docs/decisions.md); a power loss that undoes that
rename leaves the ``published`` record (its open file is removed only once the rename is durable), which the next
start settles from the file (simulated by removing the final file of a process that never closed).
"""

import json
import os

import pytest
from reme_procedure_memory.schema import ARG_TO_FIELD, Experience, version_of
from reme_procedure_memory.storage import atomic
from reme_procedure_memory.storage.journal import INDEXED, PUBLISHED, SUPERSEDED

from conftest import add_trajectory, call_tool, memory_of, run_job

NAME = "rebuild-search.json"
PATH = f"procedures/{NAME}"
FIELDS = {
    "description": "Rebuild search after a configuration change",
    "when_to_use": "After changing search configuration when results appear stale",
    "content": "Rebuild the affected indexes, then verify a known query before resuming.",
}
UPDATED = {"content": "Rebuild the affected indexes, verify a known query, then tell the team."}
WRITES = 8  # durable writes of the create and the update: intent, publish, published, indexed (each)


class Killed(BaseException):
    """The process died at a durable write."""


def target(fields: dict, source: str) -> bytes:
    named = {ARG_TO_FIELD[arg]: value for arg, value in fields.items()}
    return Experience.model_validate({**named, "sources": [source]}).to_bytes()


async def write_both(app, run, created_version: str) -> tuple[dict, dict]:
    """The create and the update, with fixed operation keys (a resumed segment sends the same calls)."""
    ok, created = await call_tool(app, run, "procedure_create", filename=NAME, operation_key="op-1", **FIELDS)
    assert ok, created
    ok, updated = await call_tool(
        app, run, "procedure_update", path=PATH, expected_version=created_version, operation_key="op-2", **UPDATED
    )
    assert ok, updated
    return created, updated


async def check_nothing_lost_or_duplicated(app, source: str) -> None:
    memory = memory_of(app)
    final = target({**FIELDS, **UPDATED}, source)
    assert sorted(os.listdir(memory.workspace_path / "procedures")) == [NAME]  # no duplicate, no leftover temp file
    assert (memory.workspace_path / PATH).read_bytes() == final
    for view in ("when_to_use", "when_to_use_content"):
        assert memory.workspace.views.indexed(view) == {PATH: (version_of(final), True)}  # one record per view, current
    assert memory.workspace.journal.get("req-1", "op-2").status == INDEXED
    assert memory.workspace.journal.get("req-1", "op-1").status in (INDEXED, SUPERSEDED)
    assert memory.workspace.journal.open_records() == []
    ok, found = await run_job(
        app, "procedure_search", query="verify a known query tell the team", index="when_to_use_content"
    )
    assert ok and [r["path"] for r in found["results"]] == [PATH] and found["index_complete"]


@pytest.mark.parametrize("kill_at", range(WRITES + 1))
async def test_kill_at_every_durable_write_then_resume(make_app, tmp_path, monkeypatch, kill_at):
    ws = tmp_path / "ws"
    app = make_app.build(workspace=ws)
    await app.start()
    memory = memory_of(app)
    source = add_trajectory(app)
    created_version = version_of(target(FIELDS, source))
    done = []
    real = atomic.atomic_write

    def dying_write(path, data, **kwargs):
        if len(done) == kill_at:
            raise Killed(f"killed at durable write {kill_at} ({path})")
        done.append(path)
        return real(path, data, **kwargs)

    monkeypatch.setattr(atomic, "atomic_write", dying_write)
    try:
        await write_both(app, memory.grants.begin_attempt("req-1", [source]), created_version)
    except Killed:
        pass
    monkeypatch.undo()
    assert len(done) == kill_at  # the kill happened exactly there (WRITES: after the last write, nothing died)
    memory.workspace.lock_file.release()  # the kernel releases a killed process's lock; nothing else of it runs again

    async with make_app(workspace=ws) as resumed:
        run = memory_of(resumed).grants.begin_attempt("req-1", [source])
        created, updated = await write_both(resumed, run, created_version)
        assert created["version"] == created_version
        assert updated["version"] == version_of(target({**FIELDS, **UPDATED}, source))
        await check_nothing_lost_or_duplicated(resumed, source)


async def test_an_indexed_record_undone_by_a_power_loss_is_settled_at_start(make_app, tmp_path):
    ws = tmp_path / "ws"
    app = make_app.build(workspace=ws)
    await app.start()
    memory = memory_of(app)
    source = add_trajectory(app)
    created_version = version_of(target(FIELDS, source))
    await write_both(app, memory.grants.begin_attempt("req-1", [source]), created_version)
    journal = memory.workspace.journal
    final, opened = journal.record_file("req-1", "op-2"), journal.open_file("req-1", "op-2")
    # the last rename (indexed, no directory fsync) is not durable yet: the published record's open file is kept
    assert json.loads(opened.read_text())["status"] == PUBLISHED and final.exists()
    # a power loss now undoes that rename; the process is gone (never closed)
    final.unlink()
    memory.workspace.lock_file.release()
    async with make_app(workspace=ws) as app:
        assert memory_of(app).workspace.journal.get("req-1", "op-2").status == INDEXED  # settled from the file at start
        run = memory_of(app).grants.begin_attempt("req-1", [source])
        created, updated = await write_both(app, run, created_version)
        assert created.get("replayed") and updated.get("replayed")
        await check_nothing_lost_or_duplicated(app, source)
    scope_files = sorted(p.name for p in final.parent.iterdir())
    assert not any(name.endswith(".open.json") for name in scope_files), scope_files  # close removed them


async def test_a_create_makes_seven_fsyncs(make_app, monkeypatch):
    """Intent (file + directory), publish (file + directory), published (file + directory), indexed (file only)."""
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-1", [add_trajectory(app)])
        ok, _ = await call_tool(app, run, "procedure_create", filename="warm-up.json", operation_key="w", **FIELDS)
        assert ok  # the run's journal directory exists now (its creation is one more fsync, once per run)
        synced = []
        real = os.fsync
        monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
        ok, _ = await call_tool(app, run, "procedure_create", filename=NAME, operation_key="op-1", **FIELDS)
        assert ok and len(synced) == 7
