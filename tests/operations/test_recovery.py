"""Single-pass maintenance and bulk start-up indexing (issue 9 item 2; recovery.py).

A process started as ``reme start job=procedure_reindex`` (the cli service with that job, built here in-process as
ReMe builds it) must index each experience once: its start-up recovers the journal but leaves the indexing to the job.
Every other start indexes missing or stale records in bulk (one ``Views.index`` call per 1,000 files), not per file.
The recovery guarantees hold in the deferred start too: journal intents rolled forward and settled, invalid files
pending, damaged journal records reported.
"""

import json
from collections import Counter

import pytest
from reme_procedure_memory.search import views as views_module
from reme_procedure_memory.storage.format import SCOPE_SUFFIX
from reme_procedure_memory.storage.journal import INDEXED, Operation, OperationJournal

from conftest import memory_of, run_job
from helpers import FakeEmbeddingModel, experience_record, place_trajectory

N = 40
ONE_SHOT_REINDEX = {"backend": "cli", "job": "procedure_reindex", "job_args": {}}


def write_library(ws, n: int = N) -> list[str]:
    """``n`` valid experience files written directly (no journal, no views) and one invalid file."""
    source = place_trajectory(ws)
    directory = ws / "procedures"
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        record = experience_record(
            f"Procedure {i}",
            f"When situation number{i} happens on host{i}",
            f"Step one for case{i}, then verify case{i}.",
            sources=[source],
        )
        (directory / f"procedure-{i:03d}.json").write_text(json.dumps(record, indent=2) + "\n")
        paths.append(f"procedures/procedure-{i:03d}.json")
    (directory / "broken.json").write_text("{ broken")
    return paths


@pytest.fixture
def indexed_batches(monkeypatch) -> list[list[str]]:
    """The paths of every ``Views.index`` call, one list per call (the real method still runs)."""
    calls: list[list[str]] = []
    original = views_module.Views.index

    async def spy(self, items):
        calls.append([stored.path for stored, _ in items])
        return await original(self, items)

    monkeypatch.setattr(views_module.Views, "index", spy)
    return calls


async def test_one_shot_reindex_indexes_and_embeds_each_file_once(make_app, tmp_path, indexed_batches):
    ws = tmp_path / "ws"
    paths = write_library(ws)
    # A create whose process was killed after its intent was journaled, before the publish (recovery rolls it
    # forward), and a damaged journal record (skipped and reported).
    target = experience_record(
        "Recovered",
        "When the intent survived a kill",
        "Publish it on start.",
        sources=["session/trajectories/run.jsonl"],
    )
    text = json.dumps(target, ensure_ascii=False, indent=2) + "\n"
    journal = OperationJournal(ws / "metadata" / "procedure" / "default" / "operations")
    journal.put(Operation("req-1", "op-1", "create", "r", "procedures/recovered.json", text, None))
    # a damaged final record: the start reads only open records; the reindex checks every record
    damaged = ws / "metadata" / "procedure" / "default" / "operations" / f"damaged-scope{SCOPE_SUFFIX}" / "bad.json"
    damaged.parent.mkdir(parents=True, exist_ok=True)
    damaged.write_text("{ not json")
    model = FakeEmbeddingModel(64)
    async with make_app(workspace=ws, embedding=model, service=ONE_SHOT_REINDEX) as app:
        assert indexed_batches == []  # the start left the indexing to the job
        assert (ws / "procedures/recovered.json").read_text() == text  # but recovered the journal first
        ok, answer = await run_job(app, "procedure_reindex")
        assert ok and answer["status"] == "complete", answer
        assert answer["indexed"] == N + 1
        assert [i["path"] for i in answer["invalid_files"]] == ["procedures/broken.json"]
        assert [d["path"] for d in answer["damaged_metadata"]] == [str(damaged.relative_to(ws))]
        indexed = Counter(path for batch in indexed_batches for path in batch)
        assert indexed == Counter([*paths, "procedures/recovered.json"])  # each file indexed exactly once
        assert len(indexed_batches) == 1  # in one bulk call
        embedded = Counter(t for call in model.calls for t in call)
        assert embedded and max(embedded.values()) == 1  # each text embedded at most once
        assert memory_of(app).workspace.journal.get("req-1", "op-1").status == INDEXED  # settled after the rebuild
        ok, found = await run_job(app, "procedure_search", query="intent survived a kill", index="when_to_use")
        assert ok and found["results"][0]["path"] == "procedures/recovered.json"
        assert [p["path"] for p in found["pending_indexes"]] == ["procedures/broken.json"]


async def test_deferred_start_reconciles_before_anything_else_uses_the_views(make_app, tmp_path, indexed_batches):
    ws = tmp_path / "ws"
    paths = write_library(ws)
    async with make_app(workspace=ws, service=ONE_SHOT_REINDEX) as app:
        assert indexed_batches == []
        ok, found = await run_job(app, "procedure_search", query="situation number7 host7", index="when_to_use")
        assert ok and found["results"][0]["path"] == "procedures/procedure-007.json"
        assert [p["path"] for p in found["pending_indexes"]] == ["procedures/broken.json"]
        assert sorted(p for batch in indexed_batches for p in batch) == paths  # reconciled once, in bulk
        assert len(indexed_batches) == 1


async def test_start_with_missing_views_indexes_in_bulk_and_a_service_start_never_defers(
    make_app, tmp_path, indexed_batches
):
    ws = tmp_path / "ws"
    paths = write_library(ws)
    async with make_app(workspace=ws) as app:  # a service process: the start reconciles (no reindex job)
        assert [sorted(batch) for batch in indexed_batches] == [paths]  # one Views.index call for every file
        assert not memory_of(app).recovery.deferred
        ok, answer = await run_job(app, "procedure_reindex")  # a reindex job on a running service still rebuilds
        assert ok and answer["indexed"] == N
        assert len(indexed_batches) == 2
    indexed_batches.clear()
    async with make_app(workspace=ws) as app:  # views present and current: nothing to index
        assert indexed_batches == []
        ok, found = await run_job(app, "procedure_search", query="situation number3 host3", index="when_to_use")
        assert found["results"][0]["path"] == "procedures/procedure-003.json"
