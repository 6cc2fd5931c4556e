"""The fault sweep: a kill before every mutating file-system call of an import, a start and a
reindex that record changes made by hand and reach the retention bound, then a restart and the work finished, compared
with an uninterrupted run.

Kill points are every mutating call below the workspace (``helpers.kills.MutatingCalls``: marker creation and
confirmation, record and summary writes, unlinks, renames, directory creations, view logs, ReMe's own files), not only
the atomic writer's (``test_fault_matrix.py`` covers those with half-written files and torn log tails). Every
application keeps one version per experience (``history.keep_versions: 1``), so the import's completion, the start
that records changes made by hand and the reindex each compact the journal.

What must hold after the restart and the finished work (the import resumed, the reindex run again): the same
experience files; the import scope's and the hand-change scope's records (those a compaction named for removal aside:
a history skips them and the next compaction removes them) with the clean run's statuses, versions and predecessors;
the same ``procedure_history`` answer (times aside) for every experience path the scenario touched; the same
``procedure_imports`` answer (times aside); no temporary file and no open record.

The default run kills at a sample of the calls (``sampled``: about 100, a minute and a half on 2 cores);
``pytest -m fault_sweep`` kills at every call (about 350, 4 minutes: too long for CI's ``pytest -q`` beside the rest).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from reme_procedure_memory.storage.journal import HAND_SCOPE

from conftest import app_factory, import_file, memory_of, run_job
from helpers.corpus import corpus, long_trajectory, write
from helpers.kills import Killed, MutatingCalls
from helpers.rollout import CREATED, REVISED, agent  # REVISED: placed by hand, revised by the import
from helpers.views import edit_by_hand, indexed_corpus

COMPONENTS = {"procedure_memory": {"default": {"token_limits": {"segment": 60}, "history": {"keep_versions": 1}}}}
TOUCHED = [f"procedures/{name}" for name in [REVISED, *CREATED, corpus()[1][0]]]
OPERATIONS = "metadata/procedure/default/operations"
STRIDE = 15


# -- the scenarios: what runs (and is killed) on which prepared workspace, and how its work is finished ------------


async def do_import(make_app, ws: Path):
    original = write(ws.parent, "run.jsonl", long_trajectory(6))
    app = make_app.build(workspace=ws, scripts=agent(), components=COMPONENTS)
    await app.start()
    ok, answer = await import_file(app, original, request_id="imp")
    assert ok and answer["status"] == "complete", json.dumps(answer)
    await app.close()


async def finish_import(make_app, ws: Path):
    async with make_app(workspace=ws, scripts=agent(), components=COMPONENTS) as app:
        ok, answer = await import_file(app, ws.parent / "originals" / "run.jsonl", request_id="imp")  # the resume
        assert ok and answer["status"] == "complete", json.dumps(answer)


def hand_changes(ws: Path) -> None:
    """Edits of experiences the journal knows, and the deletion of one."""
    edit_by_hand(ws, [REVISED, CREATED[0]])
    (ws / "procedures" / CREATED[1]).unlink()


async def do_start(make_app, ws: Path):
    app = make_app.build(workspace=ws, components=COMPONENTS)
    await app.start()  # records the changes, compacts their experiences, reconciles the views
    await app.close()


async def do_reindex(make_app, ws: Path):
    app = make_app.build(workspace=ws, components=COMPONENTS, service={"backend": "cli", "job": "procedure_reindex"})
    await app.start()
    ok, answer = await run_job(app, "procedure_reindex")
    assert ok and answer["status"] == "complete", answer
    await app.close()


async def finish_nothing(make_app, ws: Path):
    return None  # the restart records and reconciles what is left


async def finish_reindex(make_app, ws: Path):
    app = make_app.build(workspace=ws, components=COMPONENTS, service={"backend": "cli", "job": "procedure_reindex"})
    await app.start()
    try:
        ok, answer = await run_job(app, "procedure_reindex")  # what a user runs again after a failed reindex
        assert ok, answer
    finally:
        await app.close()


# scenario -> (the prepared workspace it starts from, the work, how the work is finished after a kill)
SCENARIOS = {
    "import": ("placed", do_import, finish_import),
    "start": ("changed by hand", do_start, finish_nothing),
    "reindex": ("changed by hand", do_reindex, finish_reindex),
}


async def prepared(make_app, kind: str, ws: Path) -> Path:
    """The corpus placed by hand and indexed; ``changed by hand``: then imported once (the journal knows the
    paths), and changed by hand while stopped (the user's writes: no kill point)."""
    await indexed_corpus(make_app, ws)
    if kind == "changed by hand":
        await do_import(make_app, ws)
        hand_changes(ws)
    return ws


# -- what a run leaves --------------------------------------------------------------------------------------------


def tree(ws: Path, directory: str) -> dict[str, bytes]:
    return {str(p.relative_to(ws)): p.read_bytes() for p in sorted((ws / directory).rglob("*")) if p.is_file()}


def without_times(value):
    """An answer without its clock times (``at``, ``newest_at``, ``created_at``): a resumed run has other ones."""
    if isinstance(value, dict):
        return {k: without_times(v) for k, v in value.items() if k not in ("at", "newest_at", "created_at")}
    if isinstance(value, list):
        return [without_times(v) for v in value]
    return value


async def outcome(make_app, ws: Path) -> dict:
    """Experiences, both scopes' records, every touched path's history and the imports listing, read by a fresh
    start from what was persisted."""
    async with make_app(workspace=ws, components=COMPONENTS) as app:
        memory = memory_of(app)
        journal = memory.workspace.journal
        assert journal.open_records() == []
        removing = {name for path in TOUCHED for name in journal.paths.compacted(path).removing}
        scopes = {}
        for scope in ("imp", HAND_SCOPE):
            ops, damaged = journal.read_scope(scope)
            assert damaged == {}
            scopes[scope or "by hand"] = sorted(
                (op.path, op.tool, op.key if op.scope else "", op.status, op.target_version, op.expected_version)
                for op in ops
                if journal.ref(op).name not in removing
            )
        histories = {}
        for path in TOUCHED:
            ok, answer = await run_job(app, "procedure_history", path=path, diff=True)
            histories[path] = without_times(answer)
        ok, imports = await run_job(app, "procedure_imports")
    return {
        "experiences": tree(ws, "procedures"),
        "scopes": scopes,
        "histories": histories,
        "imports": without_times(imports),
        "temp_files": sorted(str(p) for p in ws.rglob("*.tmp")),
    }


@pytest.fixture(scope="module")
def sweep_tokenizer(tmp_path_factory):
    from helpers import write_word_tokenizer

    return write_word_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")


@pytest.fixture(scope="module")
def clean(tmp_path_factory, sweep_tokenizer):
    """Per scenario: the uninterrupted run's outcome and every mutating call it makes (the kill points)."""

    async def run():
        root = tmp_path_factory.mktemp("clean")
        make_app = app_factory(root / "ws", sweep_tokenizer)
        results = {}
        for name, (kind, work, _) in SCENARIOS.items():
            ws = await prepared(make_app, kind, root / name / "ws")
            patch = pytest.MonkeyPatch()
            try:
                calls = MutatingCalls(patch, ws)
                await work(make_app, ws)
            finally:
                patch.undo()
            results[name] = {"calls": calls.done, "outcome": await outcome(make_app, ws)}
        return results

    return asyncio.run(run())


def test_the_clean_runs_record_hand_changes_and_reach_the_retention_bound(clean):
    imported = clean["import"]["outcome"]
    revised = imported["histories"][f"procedures/{REVISED}"]
    assert revised["compacted"]["versions"] == 1 and [v["change"] for v in revised["versions"]] == ["update"]
    assert revised["versions"][0]["number"] == 2  # the hand-placed text was recorded first, then compacted
    started = clean["start"]["outcome"]
    assert [v["change"] for v in started["histories"][f"procedures/{CREATED[1]}"]["versions"]] == ["hand_delete"]
    assert [v["change"] for v in started["histories"][f"procedures/{REVISED}"]["versions"]] == ["hand_edit"]
    assert started["histories"][f"procedures/{REVISED}"]["compacted"]["versions"] == 2
    assert started["scopes"]["by hand"] and clean["reindex"]["outcome"]["scopes"] == started["scopes"]
    for name, result in clean.items():
        assert result["outcome"]["temp_files"] == [], name
        calls = result["calls"]
        assert any("/paths/" in c and c.startswith("rename") for c in calls), name  # markers confirmed
        assert any(c.startswith("unlink") for c in calls), name  # compacted records removed


def sampled(calls: list[str]) -> list[int]:
    """The kill points of the default run: where a marker exists and its record not yet (the call after a pending
    marker's creation), where a record exists and its marker is pending (the confirming rename), every publish of a
    compaction summary and every removal of a record, and every ``STRIDE``-th other call."""
    keep = set()
    for k, call in enumerate(calls):
        if call.startswith("open ") and call.endswith(".pending"):
            keep.add(k + 1)
        elif (
            (call.startswith("rename ") and "/paths/" in call)
            or (call.startswith("replace ") and "compacted" in call)
            or (call.startswith("unlink ") and ".v2/" in call)
            or k % STRIDE == 0
        ):
            keep.add(k)
    return sorted(k for k in keep if k < len(calls))


# The number of mutating calls of each scenario on this code (a test checks it, so no new call goes unattacked): the
# full sweep's kill points are 0 .. count-1. The default run's are ``sampled`` ones, at most ``SAMPLES`` of each.
CALLS = {"import": 116, "start": 72, "reindex": 160}
SAMPLES = {"import": 28, "start": 29, "reindex": 38}


def test_every_mutating_call_of_each_scenario_is_a_kill_point_and_the_sample_fits(clean):
    assert {name: len(result["calls"]) for name, result in clean.items()} == CALLS
    assert {name: len(sampled(result["calls"])) for name, result in clean.items()} == SAMPLES


async def kill_and_finish(scenario: str, kill_at: int, clean: dict, tmp_path: Path, sweep_tokenizer) -> None:
    kind, work, finish = SCENARIOS[scenario]
    make_app = app_factory(tmp_path / "ws", sweep_tokenizer)
    ws = await prepared(make_app, kind, tmp_path / "ws")
    built = []
    real_build = make_app.build

    def build(*args, **kwargs):
        built.append(real_build(*args, **kwargs))
        return built[-1]

    make_app.build = build
    patch = pytest.MonkeyPatch()
    try:
        calls = MutatingCalls(patch, ws, kill_at)
        with pytest.raises(Killed):
            await work(make_app, ws)
    finally:
        patch.undo()
        make_app.build = real_build
    assert calls.done == clean[scenario]["calls"][:kill_at]  # the same calls as the clean run up to the kill
    if built:  # what the kernel does for the dead process (killed before its application was built: no lock)
        memory_of(built[-1]).workspace.lock_file.release()
    await finish(make_app, ws)
    got = await outcome(make_app, ws)
    expected = clean[scenario]["outcome"]
    assert got["experiences"] == expected["experiences"]
    assert got["scopes"] == expected["scopes"]
    for path in TOUCHED:
        assert got["histories"][path] == expected["histories"][path], path
    assert got["imports"] == expected["imports"]
    assert got["temp_files"] == []


@pytest.mark.parametrize("scenario,slot", [(name, slot) for name, count in SAMPLES.items() for slot in range(count)])
async def test_a_kill_at_a_sampled_mutating_call_then_finishing_equals_a_clean_run(
    scenario, slot, clean, tmp_path, sweep_tokenizer
):
    await kill_and_finish(scenario, sampled(clean[scenario]["calls"])[slot], clean, tmp_path, sweep_tokenizer)


@pytest.mark.fault_sweep
@pytest.mark.parametrize("scenario,kill_at", [(name, k) for name, count in CALLS.items() for k in range(count)])
async def test_a_kill_at_any_mutating_call_then_finishing_equals_a_clean_run(
    scenario, kill_at, clean, tmp_path, sweep_tokenizer
):
    await kill_and_finish(scenario, kill_at, clean, tmp_path, sweep_tokenizer)
