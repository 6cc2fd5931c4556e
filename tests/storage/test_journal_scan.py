"""The start-up scan of the operation journal (a start reads a long journal through one descriptor per scope
directory, and only the files of open records): the same open records as reading every record by its path; a scope
directory of the unreleased development layout stops the scan, naming it; final records are checked by
``check_records`` (the reindex) and by the import that owns them."""

import json
import os

import pytest
from reme_procedure_memory.errors import DamagedRecord, ErrorCode, UnsupportedWorkspace
from reme_procedure_memory.storage import journal as journal_module
from reme_procedure_memory.storage.atomic import write_json
from reme_procedure_memory.storage.journal import (
    INDEX_PENDING,
    INDEXED,
    INTENT,
    OPEN_STATES,
    OPEN_SUFFIX,
    PUBLISHED,
    SCOPE_SUFFIX,
    SUPERSEDED,
    Operation,
    OperationJournal,
)
from reme_procedure_memory.storage.records import load_record


def op(scope: str, key: str, status: str, created: float) -> Operation:
    return Operation(
        scope=scope,
        key=key,
        tool="create",
        request="r",
        path=f"procedures/{key}.json",
        target="{}",
        expected_version=None,
        status=status,
        created_at=created,
    )


def stem(name: str) -> str:
    return name[: -len(OPEN_SUFFIX)] if name.endswith(OPEN_SUFFIX) else name[: -len(".json")]


def by_path(directory) -> tuple[list[tuple[str, str]], set[str]]:
    """(open records, damaged files) read record by record through ``load_record`` (the reference): of a record's
    two files the final one is the record."""
    chosen = {}
    for path in sorted(directory.glob("*/*.json")):
        key = (path.parent, stem(path.name))
        if key not in chosen or not path.name.endswith(OPEN_SUFFIX):
            chosen[key] = path
    found, damaged = [], set()
    for path in chosen.values():
        if path.is_dir():
            continue
        try:
            record = load_record(path, Operation)
        except DamagedRecord:
            damaged.add(str(path))
            continue
        if record is not None and record.status in OPEN_STATES:
            found.append((record.created_at, record.scope, record.key))
    return [(s, k) for _, s, k in sorted(found)], damaged


@pytest.fixture
def reads(monkeypatch):
    """Names of the record files the journal reads through a directory descriptor."""
    names: list[str] = []
    real = journal_module.read_entry
    monkeypatch.setattr(
        journal_module, "read_entry", lambda name, dir_fd=None: (names.append(name), real(name, dir_fd))[1]
    )
    return names


def write_records(directory, count: int = 60) -> OperationJournal:
    writer = OperationJournal(directory)
    statuses = [INTENT, PUBLISHED, INDEXED, INDEX_PENDING, SUPERSEDED]
    for number in range(count):
        writer.put(op(f"scope-{number % 7}", f"key-{number}", statuses[number % 5], 1000.0 - number))
    writer.flush()
    return writer


def test_open_records_equal_a_read_by_path_and_read_only_open_files(tmp_path, reads):
    directory = tmp_path / "operations"
    directory.mkdir()
    write_records(directory)
    scope_dir = next(p for p in sorted(directory.iterdir()) if p.is_dir())
    (scope_dir / f"broken{OPEN_SUFFIX}").write_bytes(b'{"scope": "s", "key": ')  # truncated
    (scope_dir / f"list{OPEN_SUFFIX}").write_text("[]")  # not an object
    (scope_dir / f"extra{OPEN_SUFFIX}").write_text(json.dumps({"nonsense": 1}))  # unexpected fields
    (scope_dir / "final-broken.json").write_bytes(b"{")  # a damaged final record: not read at start
    (scope_dir / f"folder{OPEN_SUFFIX}").mkdir()  # a directory is not a record
    target = scope_dir / "target.txt"
    target.write_text(json.dumps(op("linked", "key-link", INTENT, 1.0).__dict__))
    os.symlink(target, scope_dir / f"link{OPEN_SUFFIX}")  # read by its path, as before
    (directory / "stray.json").write_text("{}")  # not inside a scope directory: not a record
    reads.clear()

    journal = OperationJournal(directory)
    opened = [(o.scope, o.key) for o in journal.open_records()]
    expected_open, expected_damaged = by_path(directory)
    assert opened == expected_open
    assert ("linked", "key-link") in opened and len(opened) == 36 + 1
    assert reads and all(name.endswith(OPEN_SUFFIX) for name in reads)  # no final record was read
    assert {os.path.basename(p) for p in journal.damaged} == {
        f"broken{OPEN_SUFFIX}",
        f"list{OPEN_SUFFIX}",
        f"extra{OPEN_SUFFIX}",
    }
    assert set(journal.check_records()[0]) == expected_damaged  # the reindex's full check: final ones too
    assert {os.path.basename(p) for p in expected_damaged} >= {"final-broken.json"}


def test_a_final_record_keeps_its_open_file_until_its_directory_is_synced(tmp_path, monkeypatch):
    directory = tmp_path / "operations"
    journal = OperationJournal(directory)
    first = op("s", "a", INTENT, 1.0)
    journal.put(first)
    journal.set_status(first, PUBLISHED)
    journal.set_status(first, INDEXED)  # no directory fsync: the open file stays (a power loss may undo the rename)
    final, opened = journal.record_file("s", "a"), journal.open_file("s", "a")
    assert final.exists() and json.loads(opened.read_text())["status"] == PUBLISHED
    assert journal.get("s", "a").status == INDEXED and journal.open_records() == []
    assert [o.status for o in journal.records("s")] == [INDEXED]
    # a start now (a kill, no power loss) reads the final file, fsyncs the directory, then removes the open file
    synced = []
    real = journal_module.fsync_dir
    monkeypatch.setattr(journal_module, "fsync_dir", lambda d: (synced.append(d), real(d)))
    restarted = OperationJournal(directory)
    assert restarted.open_records() == [] and final.parent in synced and not opened.exists()
    # in one session: the next write that fsyncs the directory removes it
    second = op("s", "b", INTENT, 2.0)
    journal.put(second)
    journal.set_status(second, PUBLISHED)
    journal.set_status(second, INDEXED)
    assert journal.open_file("s", "b").exists()
    journal.put(op("s", "c", INTENT, 3.0))
    assert not journal.open_file("s", "b").exists() and journal.open_file("s", "c").exists()
    assert [(o.key, o.status) for o in OperationJournal(directory).open_records()] == [("c", INTENT)]


def test_a_final_status_synced_at_once_removes_its_open_file_at_once(tmp_path):
    journal = OperationJournal(tmp_path / "operations")
    record = op("s", "a", INTENT, 1.0)
    journal.put(record)
    journal.set_status(record, SUPERSEDED, "replaced")
    assert not journal.open_file("s", "a").exists() and journal.get("s", "a").status == SUPERSEDED


def test_no_journal_directory_means_no_open_records(tmp_path):
    assert OperationJournal(tmp_path / "absent").open_records() == []


def test_beside_a_damaged_final_record_the_open_file_stays(tmp_path):
    directory = tmp_path / "operations"
    journal = OperationJournal(directory)
    record = op("s", "a", INTENT, 1.0)
    journal.put(record)
    journal.set_status(record, PUBLISHED)
    journal.set_status(record, INDEXED)  # its open file stays until the directory is synced
    final, opened = journal.record_file("s", "a"), journal.open_file("s", "a")
    final.write_bytes(b"{")  # damaged afterwards, by something else
    restarted = OperationJournal(directory)
    assert restarted.open_records() == [] and opened.exists()  # not open (a final file exists), but kept
    assert set(restarted.damaged) == {str(final)}  # and the damaged final record is reported
    with pytest.raises(DamagedRecord):  # its import sets the final record aside ...
        restarted.get("s", "a")
    assert restarted.get("s", "a").status == PUBLISHED  # ... and then reads the earlier state


def test_a_scope_directory_of_an_unreleased_layout_stops_the_first_scan_naming_it(tmp_path):
    """Development builds kept a scope's records in ``<digest>/`` (an open record could be ``<digest>.json``): such
    a journal is never read as if it were today's; the first scan stops, naming the directory and what to do."""
    directory = tmp_path / "operations"
    journal = OperationJournal(directory)
    record = op("s", "k", PUBLISHED, 1.0)
    current = journal.record_file("s", "k")
    earlier = current.parent.with_name(current.parent.name[: -len(SCOPE_SUFFIX)])
    write_json(earlier / current.name, record.__dict__)
    for read in (
        journal.open_records,
        lambda: journal.get("s", "k"),
        lambda: journal.put(op("s", "x", INTENT, 2.0)),
        journal.check_records,
    ):
        with pytest.raises(UnsupportedWorkspace) as caught:
            read()
        message = str(caught.value)
        assert str(earlier) in message and f"move {directory} aside" in message and "\n" not in message
        assert caught.value.code == ErrorCode.UNSUPPORTED_WORKSPACE
    assert sorted(p.name for p in directory.iterdir()) == [earlier.name]  # nothing written
    assert sorted(p.name for p in earlier.iterdir()) == [current.name]
