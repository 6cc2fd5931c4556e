"""The fault matrix: a kill at every durable write of an import, a reindex and a start, then a
restart (and a resume), compared with a clean run of the same work and with a fresh rebuild from the files alone.

Durable writes are every call of ``storage.atomic.atomic_write`` (journal records, experiences, checkpoints, import records,
the trajectory copy, every part and the manifest of a view snapshot) and of ``ViewState.append`` (a view's log). The
``k``-th one raises ``Killed`` (a BaseException no handler of the plugin catches): a write through the atomic writer
leaves its half-written temporary file behind, an append leaves half its bytes (a torn tail). The killed application
is abandoned without closing, as a dead process is, and its workspace lock released as the kernel would; every
durable write it still attempts (ReMe closes a component whose start failed) dies too. A second kill during the
resume (a double crash) is checked for a sample of first kill points.

What must hold after the restart (and the resume, for an import): the same experience files, byte for byte; every
journal record of the import final and with the clean run's status; no temporary file left; the same import answer;
and every search answer (per view and query: each result's path with its vector and BM25 scores, ranks aside) equal
to the clean run's, which itself equals a fresh rebuild's; and again after one more restart from what was persisted.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from reme_procedure_memory.search.view_store import state as viewstate
from reme_procedure_memory.storage import atomic
from reme_procedure_memory.storage.format import temp_name

from conftest import import_file, memory_of, run_job
from helpers.corpus import corpus, long_trajectory, write
from helpers.rollout import REVISED, agent
from helpers.views import branch_scores, edit_by_hand, fresh_copy, indexed_corpus

SEGMENTED = {"procedure_memory": {"default": {"token_limits": {"segment": 60}}}}
QUERIES = [q for _, _, q in corpus()[:4]] + ["rotate the canary deployment", "drain the rollout queue first"]
PROCESSING = "metadata/procedure/default/processing"  # the checkpoints


class Killed(BaseException):
    """The process died at a durable write."""


class DurableWrites:
    """Counts the durable writes and kills the process at the ``kill_at``-th (None: never)."""

    def __init__(self, monkeypatch, kill_at: int | None = None) -> None:
        self.kill_at, self.done = kill_at, []
        real_write, real_append = atomic.atomic_write, viewstate.ViewState.append

        def half_written(path: Path) -> None:  # what the atomic writer leaves when killed before its rename
            path.parent.mkdir(parents=True, exist_ok=True)
            temp_name(path).write_bytes(b"half")

        def atomic_write(path, data, **kwargs):
            self._maybe_die(path, lambda: half_written(Path(path)))
            return real_write(path, data, **kwargs)

        def append(state, entries):
            def torn():
                before = state.part_file("log").stat().st_size if state.part_file("log").exists() else 0
                real_append(state, entries)
                with open(state.part_file("log"), "r+b") as handle:  # half of what was appended reached the disk
                    handle.truncate(before + (state.part_file("log").stat().st_size - before) // 2)

            self._maybe_die(state.part_file("log"), torn)
            return real_append(state, entries)

        monkeypatch.setattr(atomic, "atomic_write", atomic_write)  # the one atomic writer of every durable file
        monkeypatch.setattr(viewstate.ViewState, "append", append)

    def _maybe_die(self, path, leave_behind) -> None:
        if len(self.done) == self.kill_at:
            leave_behind()
            raise Killed(f"killed at durable write {self.kill_at} ({path})")
        self.done.append(str(path))


def tree(ws: Path, *dirs: str) -> dict[str, bytes]:
    return {str(p.relative_to(ws)): p.read_bytes() for d in dirs for p in sorted((ws / d).rglob("*")) if p.is_file()}


def temp_files(ws: Path) -> list[str]:
    return sorted(str(p.relative_to(ws)) for p in ws.rglob("*.tmp"))


async def outcome(make_app, ws: Path, answer: dict | None) -> dict:
    """What a run leaves: experiences, the import's journal statuses, its answer, and the search answers (loaded
    from what was persisted: a fresh start)."""
    async with make_app(workspace=ws) as app:
        memory = memory_of(app)
        journal = {op.key: op.status for op in memory.workspace.journal.records("imp")}
        assert memory.workspace.journal.open_records() == []
        scores = await branch_scores(app, QUERIES)
    return {
        "experiences": tree(ws, "procedures"),
        "trajectories": tree(ws, "session"),
        "journal": journal,
        "answer": answer and {k: answer[k] for k in ("status", "experiences", "segments", "path")},
        "scores": scores,
        "temp_files": temp_files(ws),
    }


@pytest.fixture(scope="module")
def clean(tmp_path_factory, word_tokenizer_module):
    """The clean runs of the three scenarios, and a fresh rebuild of each."""
    import asyncio

    from conftest import app_factory

    async def run():
        root = tmp_path_factory.mktemp("clean")
        make_app = app_factory(root / "ws", word_tokenizer_module)
        results = {}
        for scenario in SCENARIOS:
            ws = await indexed_corpus(make_app, root / scenario / "ws")
            answer = await SCENARIOS[scenario](make_app, ws)
            results[scenario] = await outcome(make_app, ws, answer)
            fresh = fresh_copy(ws, root / scenario / "fresh")
            async with make_app(workspace=fresh) as app:
                results[scenario]["fresh_scores"] = await branch_scores(app, QUERIES)
        return results

    return asyncio.run(run())


@pytest.fixture(scope="module")
def word_tokenizer_module(tmp_path_factory):
    from helpers import write_word_tokenizer

    return write_word_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")


# -- the three scenarios: what runs (and is killed), and how the work is finished after a restart -------------------


async def do_import(make_app, ws: Path):
    original = write(ws.parent, "run.jsonl", long_trajectory(6))
    app = make_app.build(workspace=ws, scripts=agent(), components=SEGMENTED)
    await app.start()
    ok, answer = await import_file(app, original, request_id="imp")
    assert ok and answer["status"] == "complete" and answer["segments"]["total"] >= 2, json.dumps(answer)
    await app.close()
    return answer


async def finish_import(make_app, ws: Path):
    original = ws.parent / "originals" / "run.jsonl"
    async with make_app(workspace=ws, scripts=agent(), components=SEGMENTED) as app:
        ok, answer = await import_file(app, original, request_id="imp")  # the resume: the same command
        assert ok and answer["status"] == "complete", json.dumps(answer)
    return answer


async def do_reindex(make_app, ws: Path):
    edit_by_hand(ws, [corpus()[1][0], corpus()[2][0]])
    app = make_app.build(workspace=ws, service={"backend": "cli", "job": "procedure_reindex"})
    await app.start()  # a one-shot reindex process: its start leaves the indexing to the job
    ok, answer = await run_job(app, "procedure_reindex")
    assert ok and answer["status"] == "complete", answer
    await app.close()
    return None


async def finish_nothing(make_app, ws: Path):
    return None  # the restart reconciles; nothing else is owed to the user


async def do_start(make_app, ws: Path):
    edit_by_hand(ws, [corpus()[3][0]])
    (ws / "procedures" / corpus()[4][0]).unlink()
    (ws / "procedures" / "late.json").write_text(
        json.dumps(
            {
                "description": "Rotate a canary",
                "when-to-use": "When the canary deployment fails",
                "content": "Rotate the canary deployment and drain the rollout queue.",
                "sources": ["session/trajectories/run.jsonl"],
            }
        )
    )
    app = make_app.build(workspace=ws)
    await app.start()  # reconciles the changes into the views' logs
    await app.close()
    return None


async def do_start_rebuild(make_app, ws: Path):
    for directory in (ws / "metadata" / "file_store").glob("*_when_to_use_v*.view"):
        shutil.rmtree(directory)  # lost: the start rebuilds this view and writes its snapshot
    return await do_start(make_app, ws)


SCENARIOS = {"import": do_import, "reindex": do_reindex, "start": do_start, "start_rebuild": do_start_rebuild}
FINISH = {"import": finish_import, "reindex": finish_nothing, "start": finish_nothing, "start_rebuild": finish_nothing}


def test_the_clean_runs_equal_a_fresh_rebuild_and_leave_nothing_behind(clean):
    for scenario, result in clean.items():
        assert result["scores"] == result["fresh_scores"], scenario
        assert result["temp_files"] == [], scenario
    assert clean["import"]["journal"] == {"s1-1": "indexed", "s2-1": "indexed", "s2-2": "indexed"}
    assert clean["import"]["answer"]["experiences"] == {
        "created": ["procedures/canary-rollout.json", "procedures/drain-queue.json"],
        "updated": [f"procedures/{REVISED}"],
    }


def count_writes(scenario: str, tmp_path, word_tokenizer) -> int:
    import asyncio

    from conftest import app_factory

    async def run():
        make_app = app_factory(tmp_path / "count" / "ws", word_tokenizer)
        ws = await indexed_corpus(make_app, tmp_path / "count" / "ws")
        mp = pytest.MonkeyPatch()
        try:
            writes = DurableWrites(mp)
            await SCENARIOS[scenario](make_app, ws)
            return len(writes.done)
        finally:
            mp.undo()

    return asyncio.run(run())


# The number of durable writes of each scenario on this code (the test checks it, so a new write is never
# unattacked): the kill points are 0 .. count-1.
WRITES = {"import": 32, "reindex": 28, "start": 2, "start_rebuild": 28}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_durable_write_of_the_scenario_is_a_kill_point(scenario, tmp_path, word_tokenizer):
    assert count_writes(scenario, tmp_path, word_tokenizer) == WRITES[scenario]


async def killed(make_app, monkeypatch, kill_at: int, work, must_die: bool = True) -> None:
    """Run ``work()`` (which builds its application through ``make_app.build``) until the ``kill_at``-th durable
    write kills it; then release the dead application's workspace lock, as the kernel would. ``must_die=False``: the
    work may also end before its ``kill_at``-th write."""
    DurableWrites(monkeypatch, kill_at)
    built = []
    real_build = make_app.build

    def build(*args, **kwargs):
        built.append(real_build(*args, **kwargs))
        return built[-1]

    make_app.build = build
    try:
        try:
            await work()
        except Killed:
            memory_of(built[-1]).workspace.lock_file.release()
        else:
            assert not must_die, f"the work ended before its durable write {kill_at}"
    finally:
        make_app.build = real_build
        monkeypatch.undo()


@pytest.mark.parametrize("scenario,kill_at", [(s, k) for s in SCENARIOS for k in range(WRITES[s])])
async def test_a_kill_at_any_durable_write_then_restart_equals_a_clean_run(
    scenario, kill_at, clean, make_app, tmp_path, monkeypatch
):
    ws = await indexed_corpus(make_app, tmp_path / "ws")
    await killed(make_app, monkeypatch, kill_at, lambda: SCENARIOS[scenario](make_app, ws))
    await check_finished(scenario, clean, make_app, ws)


@pytest.mark.parametrize("kill_at", range(0, WRITES["import"], 5))
async def test_a_second_kill_during_the_resume_still_ends_like_a_clean_run(
    kill_at, clean, make_app, tmp_path, monkeypatch
):
    ws = await indexed_corpus(make_app, tmp_path / "ws")
    await killed(make_app, monkeypatch, kill_at, lambda: do_import(make_app, ws))

    async def resume():  # the resume as a one-shot process builds it, killed at its third durable write
        app = make_app.build(workspace=ws, scripts=agent(), components=SEGMENTED)
        await app.start()
        await import_file(app, ws.parent / "originals" / "run.jsonl", request_id="imp")
        await app.close()  # reached only when no kill came

    # an import whose checkpoint was complete before the kill has nothing left to do: no third write to kill
    complete = [json.loads(p.read_text())["status"] == "complete" for p in (ws / PROCESSING).glob("*.json")]
    await killed(make_app, monkeypatch, 2, resume, must_die=complete != [True])
    await check_finished("import", clean, make_app, ws)


async def check_finished(scenario: str, clean: dict, make_app, ws: Path) -> None:
    """Finish the scenario's work after the restart and compare what it leaves with the clean run's."""
    answer = await FINISH[scenario](make_app, ws)
    expected = clean[scenario]
    got = await outcome(make_app, ws, answer)
    assert got["experiences"] == expected["experiences"]
    assert got["trajectories"] == expected["trajectories"]
    assert got["journal"] == expected["journal"]
    assert got["answer"] == expected["answer"]
    assert got["temp_files"] == [], got["temp_files"]
    assert got["scores"] == expected["scores"] == expected["fresh_scores"]
