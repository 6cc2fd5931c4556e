"""The pure functions of ``operations/versions.py``: which journal records are versions, their order, diffs, and
what the retention bound lets go."""

from __future__ import annotations

import json

import pytest
from reme_procedure_memory.operations.versions import (
    UNRECORDED,
    Version,
    compactable,
    diff,
    is_version,
    order,
    readable,
    versions,
)
from reme_procedure_memory.schema import version_of
from reme_procedure_memory.storage.journal import (
    ABANDONED,
    CREATE,
    HAND_DELETE,
    HAND_EDIT,
    HAND_SCOPE,
    INDEX_PENDING,
    INDEXED,
    INTENT,
    PUBLISHED,
    RECORDED,
    SUPERSEDED,
    UPDATE,
    Operation,
)
from reme_procedure_memory.storage.path_index import Ref

PATH = "procedures/a.json"


def text(content: str) -> str:
    return json.dumps({"description": "d", "when-to-use": "w", "content": content, "sources": ["s"]}, indent=2) + "\n"


def op(
    key: str,
    status: str,
    content: str,
    at: float,
    *,
    tool: str = "update",
    expected=None,
    scope="imp",
    published=True,
    segment=0,
) -> Operation:
    return Operation(
        scope=scope,
        key=key,
        tool=tool,
        request="r",
        path=PATH,
        target=text(content),
        expected_version=expected,
        status=status,
        created_at=at,
        segment=segment,
        published_at=at + 0.5 if published and status not in (INTENT, ABANDONED) else None,
    )


@pytest.mark.parametrize(
    "status, published, expected",
    [
        (INTENT, False, False),
        (ABANDONED, False, False),
        (PUBLISHED, True, True),
        (INDEX_PENDING, True, True),
        (INDEXED, True, True),
        (RECORDED, True, True),
        (SUPERSEDED, True, True),
        (SUPERSEDED, False, False),
    ],
)
def test_which_statuses_are_versions(status, published, expected):
    record = op("k", status, "c", 1.0, published=published)
    assert is_version(record, [record]) is expected


def test_an_old_superseded_record_is_a_version_when_a_later_write_was_made_on_it():
    old = op("k1", SUPERSEDED, "one", 1.0, published=False)
    on_it = op("k2", INDEXED, "two", 2.0, expected=old.target_version)
    elsewhere = op("k3", INDEXED, "three", 3.0, expected="0" * 16)
    assert is_version(old, [old, on_it]) and not is_version(old, [old, elsewhere])
    earlier = op("k0", INDEXED, "zero", 0.5, expected=old.target_version)  # before it: no evidence
    assert not is_version(old, [old, earlier])


def test_order_is_publication_for_writes_and_finding_for_hand_changes():
    retried = op("k1", INDEXED, "one", 1.0)
    retried.published_at = 9.0  # an abandoned write retried later keeps its first intent's created_at
    later = op("k2", INDEXED, "two", 5.0)
    hand = op("k3", RECORDED, "three", 7.0, tool=HAND_EDIT, scope=HAND_SCOPE)
    hand.published_at = 0.1  # the file's modification time may be anything
    assert sorted([retried, later, hand], key=order) == [later, hand, retried]


def test_versions_mark_the_current_file_or_add_it_unrecorded():
    a = op("k1", INDEXED, "one", 1.0, tool="create")
    b = op("k2", INDEXED, "two", 2.0, expected=a.target_version, segment=1)
    listed = versions([b, a], (b.target_version, b.target, 3.0))
    assert [(v.change, v.current, v.recorded, v.segment, v.request_id) for v in listed] == [
        (CREATE, False, True, 1, "imp"),
        (UPDATE, True, True, 2, "imp"),
    ]
    listed = versions([a, b], (version_of(b"edited"), "edited", 4.0))
    assert [(v.change, v.current, v.recorded, v.at) for v in listed[1:]] == [
        (UPDATE, False, True, 2.5),
        (UNRECORDED, True, False, 4.0),
    ]
    assert listed[-1].previous_version == b.target_version
    assert versions([a, b], None)[-1].current is False  # gone: nothing added
    assert [v.change for v in versions([], (version_of(b"x"), "x", 1.0))] == [UNRECORDED]


def test_a_first_version_made_on_an_unknown_one_is_preceded_by_it_unless_compacted():
    b = op("k2", INDEXED, "two", 2.0, expected="f" * 16)
    listed = versions([b], None)
    assert [(v.version, v.change, v.text, v.recorded) for v in listed] == [
        ("f" * 16, UNRECORDED, None, False),
        (b.target_version, UPDATE, b.target, True),
    ]
    assert [v.change for v in versions([b], None, compacted=3)] == [UPDATE]


def test_hand_changes_have_no_import_and_a_deletion_no_text():
    edit = op("e", RECORDED, "by hand", 1.0, tool=HAND_EDIT, scope=HAND_SCOPE)
    gone = Operation(
        scope=HAND_SCOPE,
        key="d",
        tool=HAND_DELETE,
        request="",
        path=PATH,
        target="",
        expected_version=edit.target_version,
        status=RECORDED,
        created_at=2.0,
        published_at=2.0,
    )
    listed = versions([edit, gone], None)
    assert [(v.change, v.request_id, v.operation_key, v.segment) for v in listed] == [
        (HAND_EDIT, None, None, 1),
        (HAND_DELETE, None, None, None),
    ]
    assert listed[1].version is None and listed[1].text is None


def test_readable_splits_an_experience_into_field_sections_and_leaves_other_text():
    assert readable(text("a\nb")) == [
        "[description]\n",
        "d\n",
        "[when-to-use]\n",
        "w\n",
        "[content]\n",
        "a\n",
        "b\n",
        "[sources]\n",
        "- s\n",
    ]
    assert readable("not json\nat all") == ["not json\n", "at all"]
    assert readable("[1, 2]") == ["[1, 2]"]


def test_diff_between_versions_deletions_and_unknown_texts():
    one, two = (Version(version=v, change=UPDATE, text=text(c), at=None) for v, c in (("v1", "a"), ("v2", "a\nb")))
    changed = diff(PATH, one, two)
    assert changed.startswith(f"--- {PATH}@v1\n+++ {PATH}@v2\n") and "+b\n" in changed.splitlines(keepends=True)
    deleted = diff(PATH, two, Version(version=None, change=HAND_DELETE, text=None, at=None))
    assert "+++ /dev/null" in deleted and all(
        not line.startswith("+") or line == "+++ /dev/null" for line in deleted.splitlines()
    )
    assert diff(PATH, Version(version="v0", change=UNRECORDED, text=None, at=None), one) is None
    assert diff(PATH, one, one) == ""


def ref(n: int) -> Ref:
    return Ref(f"{n:032x}", f"{n:064x}")


def test_compactable_keeps_the_newest_versions_and_everything_an_unfinished_import_needs():
    records = [
        (ref(1), op("c", INDEXED, "1", 1.0, tool="create", scope="done")),
        (ref(2), op("u1", INDEXED, "2", 2.0, scope="open")),  # an unfinished import: kept
        (ref(3), op("u2", INDEXED, "3", 3.0, scope="done")),
        (ref(4), op("x", ABANDONED, "never", 3.5, scope="done")),  # no version: let go
        (ref(5), op("y", ABANDONED, "never", 3.6, scope="open")),  # kept for its import's retry
        (ref(6), op("h", RECORDED, "4", 4.0, tool=HAND_EDIT, scope=HAND_SCOPE)),
        (ref(7), op("u3", INDEXED, "5", 5.0, scope="done")),
        (ref(8), op("p", PUBLISHED, "6", 6.0, scope="done")),  # open: never removed, and one of the newest
    ]
    finished = {"done": True, "open": False}.__getitem__
    refs, count, newest = compactable(records, 3, finished)
    assert refs == [ref(1), ref(3), ref(4)] and count == 2 and newest == 3.5  # u2's publication time
    assert compactable(records, 100, finished)[0] == [ref(4)]
    refs, count, _ = compactable(records, 1, finished)
    assert refs == [ref(1), ref(3), ref(4), ref(6), ref(7)] and count == 4
