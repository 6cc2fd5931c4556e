"""The checkpoint is a typed record with its own format: what it holds, and what makes one damaged."""

from __future__ import annotations

import json

import pytest
from reme_procedure_memory.errors import DamagedRecord
from reme_procedure_memory.storage.checkpoints import Checkpoint, CheckpointStore
from reme_procedure_memory.storage.format import CHECKPOINT_FORMAT


def sample(**changes) -> Checkpoint:
    checkpoint = Checkpoint(
        request_id="r1",
        path="session/trajectories/run.jsonl",
        fingerprint={"sha256": "x"},
        plugin_version="0.1.0",
        segments=[[0, 10], [10, 25]],
        segment_counts=[3, 4],
    )
    for name, value in changes.items():
        setattr(checkpoint, name, value)
    return checkpoint


def test_a_checkpoint_round_trips_and_records_its_format(tmp_path):
    store = CheckpointStore(tmp_path / "processing")
    checkpoint = sample(
        next_segment=1,
        summary="read segment 1",
        summary_tokens=3,
        attempts={"0": 1},
        failed_writes={"1": [{"tool": "create", "path": "procedures/a.json"}]},
    )
    store.put(checkpoint)
    record = json.loads(store.path("r1").read_text())
    assert record["format"] == CHECKPOINT_FORMAT and record["segments"] == [[0, 10], [10, 25]]
    assert store.get("r1") == checkpoint
    assert checkpoint.span(1) == (10, 25) and checkpoint.total == 2 and not checkpoint.done
    assert sample(next_segment=2).done
    assert store.get("other") is None


def test_a_record_written_before_the_format_field_reads_as_format_one(tmp_path):
    store = CheckpointStore(tmp_path / "processing")
    record = sample().to_record()
    del record["format"], record["summary_tokens"], record["segment_counts"], record["attempts"]
    store.path("r1").parent.mkdir(parents=True)
    store.path("r1").write_text(json.dumps(record))
    checkpoint = store.get("r1")
    assert checkpoint.format == CHECKPOINT_FORMAT and checkpoint.segment_counts is None and checkpoint.attempts == {}


@pytest.mark.parametrize(
    "damage, cause",
    [
        (lambda r: r.update(unexpected=1), "unexpected fields"),
        (lambda r: r.pop("segments"), "missing fields"),
        (lambda r: r.update(format=99), "format 99"),
        (lambda r: r.update(next_segment="1"), "wrong type"),
    ],
)
def test_a_checkpoint_that_does_not_fit_is_damaged_and_set_aside(tmp_path, damage, cause):
    store = CheckpointStore(tmp_path / "processing")
    record = sample().to_record()
    damage(record)
    store.path("r1").parent.mkdir(parents=True)
    store.path("r1").write_text(json.dumps(record))
    assert cause in store.check_records()[str(store.path("r1"))]  # the reindex's full check lists it
    with pytest.raises(DamagedRecord, match=cause):
        store.get("r1")  # its import reads it: set aside, then raised
    assert not store.path("r1").exists() and list(store.path("r1").parent.glob("*.damaged"))
