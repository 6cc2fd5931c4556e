"""The start-up scan of the operation journal (issue 9: a start reads a long journal through one descriptor per
scope directory): the same open records and damaged files as reading every record by its path."""

import json
import os

from reme_procedure_memory import store
from reme_procedure_memory.store import INDEXED, INTENT, PUBLISHED, Operation, OperationJournal


def op(scope: str, key: str, status: str, created: float) -> Operation:
    return Operation(scope=scope, key=key, tool="create", request="r", path=f"procedures/{key}.json", target="{}",
                     expected_version=None, status=status, created_at=created)


def by_path(directory) -> tuple[list[tuple[str, str]], set[str]]:
    """(open records, damaged files) read record by record through ``load_record`` (the reference)."""
    found, damaged = [], set()
    for path in sorted(directory.glob("*/*.json")):
        if path.is_dir():
            continue
        try:
            record = store.load_record(path, Operation)
        except store.DamagedRecord:
            damaged.add(str(path))
            continue
        if record is not None and record.status in store.OPEN_STATES:
            found.append((record.created_at, record.scope, record.key))
    return [(s, k) for _, s, k in sorted(found)], damaged


def test_open_records_equal_a_read_by_path_with_damaged_links_and_directories(tmp_path):
    directory = tmp_path / "operations"
    directory.mkdir()
    writer = OperationJournal(directory)
    statuses = [INTENT, PUBLISHED, INDEXED]
    for number in range(60):
        writer.put(op(f"scope-{number % 7}", f"key-{number}", statuses[number % 3], 1000.0 - number))
    scope_dir = next(p for p in sorted(directory.iterdir()))
    (scope_dir / "broken.json").write_bytes(b'{"scope": "s", "key": ')  # truncated
    (scope_dir / "list.json").write_text("[]")  # not an object
    (scope_dir / "extra.json").write_text(json.dumps({"nonsense": 1}))  # unexpected fields
    (scope_dir / "folder.json").mkdir()  # a directory is not a record
    target = scope_dir / "target.txt"
    target.write_text(json.dumps(op("linked", "key-link", INTENT, 1.0).__dict__))
    os.symlink(target, scope_dir / "link.json")  # read by its path, as before
    (directory / "stray.json").write_text("{}")  # not inside a scope directory: not a record

    journal = OperationJournal(directory)
    opened = [(o.scope, o.key) for o in journal.open_records()]
    expected_open, expected_damaged = by_path(directory)
    assert opened == expected_open
    assert ("linked", "key-link") in opened and len(opened) == 40 + 1
    assert set(journal.damaged) == expected_damaged
    assert {os.path.basename(p) for p in journal.damaged} == {"broken.json", "list.json", "extra.json"}


def test_no_journal_directory_means_no_open_records(tmp_path):
    assert OperationJournal(tmp_path / "absent").open_records() == []
