"""The read-only reads behind the listings: one page of the experience directory, every import
record, one scope of the journal — each reports what it cannot read and changes nothing."""

from __future__ import annotations

import json

import pytest

from reme_procedure_memory.errors import DamagedRecord
from reme_procedure_memory.storage import experiences as experience_files
from reme_procedure_memory.storage.atomic import write_json
from reme_procedure_memory.storage.checkpoints import Checkpoint, CheckpointStore
from reme_procedure_memory.storage.experiences import BadFile, ExperienceFiles, StoredExperience
from reme_procedure_memory.storage.imports import ImportRecord, ImportRegistry
from reme_procedure_memory.storage.journal import (
    ABANDONED,
    INDEXED,
    INTENT,
    Operation,
    OperationJournal,
    written_paths,
)

from helpers import experience_record, place_trajectory


def files(tmp_path, count: int = 0) -> ExperienceFiles:
    source = place_trajectory(tmp_path)
    (tmp_path / "procedures").mkdir(exist_ok=True)
    for i in range(count):
        (tmp_path / f"procedures/e{i:02d}.json").write_text(json.dumps(experience_record(f"d{i}", "w", "c", [source])))
    return ExperienceFiles(tmp_path, "procedures", "session/trajectories")


def test_a_page_is_a_slice_of_the_sorted_directory_after_the_cursor(tmp_path):
    directory = files(tmp_path, 7)
    items, total, following = directory.page(None, 3)
    assert [i.path for i in items] == ["procedures/e00.json", "procedures/e01.json", "procedures/e02.json"]
    assert (total, following) == (7, "procedures/e02.json")
    items, total, following = directory.page(following, 10)
    assert [i.path for i in items][0] == "procedures/e03.json" and len(items) == 4 and following is None
    assert directory.page("procedures/e06.json", 3) == ([], 7, None)
    assert all(isinstance(i, StoredExperience) for i in items)
    assert files(tmp_path / "none").page(None, 5) == ([], 0, None)  # no directory yet


def test_a_page_validates_as_read_does_and_reports_what_it_cannot_read(tmp_path, monkeypatch):
    directory = files(tmp_path, 3)
    (tmp_path / "procedures/e01.json").write_text("{")
    original = experience_files.read_entry

    def read_entry(path, dir_fd=None):
        if path == "e02.json":
            raise PermissionError(13, "Permission denied")
        return original(path, dir_fd)

    monkeypatch.setattr(experience_files, "read_entry", read_entry)
    items, _, _ = directory.page(None, 5)
    assert isinstance(items[0], StoredExperience)
    assert items[1] == directory.read("procedures/e01.json")  # the same BadFile as search and read give
    assert isinstance(items[2], BadFile) and "cannot be read (Permission denied)" in items[2].error


def record(request_id: str, changed: dict | None = None) -> dict:
    return {
        **ImportRecord(
            request_id=request_id,
            source="/abs/run.jsonl",
            filename="run.jsonl",
            path="session/trajectories/run.jsonl",
            sha256="0" * 64,
            size=1,
        ).__dict__,
        **(changed or {}),
    }


@pytest.mark.parametrize(
    "fields, cause",
    [
        ({"request_id": 5}, "`request_id` is not a string"),
        ({"size": "1"}, "`size` is not a number"),
        ({"created_at": True}, "`created_at` is not a number"),
        ({"extra": 1}, "unexpected fields"),
    ],
)
def test_import_records_of_other_types_are_reported_not_set_aside(tmp_path, fields, cause):
    registry = ImportRegistry(tmp_path / "imports")
    write_json(registry.path("good"), record("good"))
    write_json(registry.path("bad"), record("bad", fields))
    before = sorted(p.name for p in (tmp_path / "imports").iterdir())
    records, damaged = registry.scan()
    assert [r.request_id for r in records] == ["good"]
    assert list(damaged) == [str(registry.path("bad"))] and cause in damaged[str(registry.path("bad"))]
    assert sorted(p.name for p in (tmp_path / "imports").iterdir()) == before


def test_a_checkpoint_is_peeked_without_being_set_aside(tmp_path):
    store = CheckpointStore(tmp_path / "processing")
    store.put(
        Checkpoint(
            request_id="r",
            path="session/trajectories/r.jsonl",
            fingerprint={},
            plugin_version="0",
            segments=[[0, 1], [1, 2]],
            next_segment=1,
        )
    )
    assert store.peek(store.path("r").name).next_segment == 1 and store.peek("absent.json") is None
    store.path("r").write_text("{")
    with pytest.raises(DamagedRecord):
        store.peek(store.path("r").name)
    assert store.names() == {store.path("r").name}  # still in place


def op(scope: str, key: str, tool: str, path: str, status: str, created: float) -> Operation:
    return Operation(
        scope=scope,
        key=key,
        tool=tool,
        request="r",
        path=path,
        target="{}",
        expected_version=None,
        status=status,
        created_at=created,
    )


def test_a_scope_is_read_without_being_converted_or_set_aside(tmp_path):
    journal = OperationJournal(tmp_path / "operations")
    ops = [
        op("s", "1", "create", "procedures/a.json", INDEXED, 1),
        op("s", "2", "update", "procedures/a.json", INDEXED, 2),
        op("s", "3", "update", "procedures/b.json", INDEXED, 3),
        op("s", "4", "create", "procedures/c.json", ABANDONED, 4),
        op("s", "5", "create", "procedures/d.json", INTENT, 5),
    ]
    for one in ops:  # as put writes them: an open record in its open file
        write_json((journal.open_file if one.status == INTENT else journal.record_file)("s", one.key), one.__dict__)
    # a record with both files: the final one is the record
    write_json(journal.open_file("s", "2"), {**ops[1].__dict__, "status": "published", "path": "procedures/x.json"})
    write_json(journal.record_file("s", "6"), {**ops[0].__dict__, "key": "6", "path": ["not", "text"]})  # wrong type
    journal.record_file("s", "7").write_text("{")
    write_json(journal.record_file("s", "8"), {**ops[0].__dict__, "key": "8", "tool": "edit"})  # a development word
    before = sorted(p.name for p in journal.record_file("s", "1").parent.iterdir())

    found, damaged = journal.read_scope("s")

    assert [o.key for o in found] == ["1", "2", "3", "4", "5"] and found[1].path == "procedures/a.json"
    assert written_paths(found) == {"created": ["procedures/a.json"], "updated": ["procedures/b.json"]}
    assert sorted(damaged.values()) == [
        "JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        "fields of the wrong type",
        "the unknown tool 'edit'",
    ]
    assert sorted(p.name for p in journal.record_file("s", "1").parent.iterdir()) == before
    assert journal.damaged == {} and journal.read_scope("other") == ([], {})
