"""An experience's versions, from its journal records: which records are versions, their order, the diff between
consecutive ones, and which records the retention bound lets go. Pure functions: no file is read or written here.

A *durable version* is content the experience file held: a record the file was published with (``published``,
``index_pending``, ``indexed``), a ``superseded`` one that had been published before it was overtaken (its
``published_at``; a record written before that field existed counts when a later write of the path was made on top
of its version), and a change made by hand (``recorded``: an edit or a deletion). An ``intent`` (not published yet)
and an ``abandoned`` write (never published) are not versions.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Callable, Iterable

from ..storage.journal import (
    HAND_DELETE,
    INDEX_PENDING,
    INDEXED,
    OPEN_STATES,
    PUBLISHED,
    RECORDED,
    SUPERSEDED,
    Operation,
)
from ..storage.path_index import Ref

# What a version's ``change`` says: the journal record's ``tool`` (the agent's create or update, a change made by
# hand, recorded when found: storage/journal.py), or this, for content the journal has no record of (the current
# file changed since the last start, or a version an update was made on that was never recorded).
UNRECORDED = "unrecorded"

# The first version when the oldest record names a predecessor no record holds and nothing is counted as compacted.
PREDECESSOR_NOTE = (
    "no journal record holds this version: it was placed or changed by hand before the journal "
    "recorded such changes, or its record was removed by the retention bound and the compaction "
    "summary (compacted.json, in both its copies) is lost; then the versions before it are not "
    "counted and this history's numbers start too low"
)


@dataclass
class Version:
    """One version of an experience as a history answer shows it (times as seconds since the epoch)."""

    version: str | None  # None: the file was deleted, or an unrecorded version's id is unknown
    change: str
    text: str | None  # the file's text; None when deleted or unknown
    at: float | None  # when the file got this content (a hand change: the file's modification time, as found)
    request_id: str | None = None
    segment: int | None = None  # 1-based
    operation_key: str | None = None
    status: str | None = None  # the journal record's status
    previous_version: str | None = None  # the version this one replaced, as its writer saw it
    recorded: bool = True  # False: no journal record holds this version
    current: bool = False  # the file holds this version now
    note: str = ""


def order(op: Operation) -> tuple[float, float, str]:
    """The journal order of records of one path: publication time for the agent's writes (a retried write keeps
    its first intent's ``created_at``), the time a change made by hand was found (its file time may be anything)."""
    at = op.created_at if op.by_hand or op.published_at is None else op.published_at
    return at, op.created_at, op.key


def is_version(op: Operation, others: Iterable[Operation]) -> bool:
    """Whether ``op`` is a durable version (see the module docstring); ``others``: the path's other records."""
    if op.status in (PUBLISHED, INDEX_PENDING, INDEXED, RECORDED):
        return True
    if op.status != SUPERSEDED:
        return False
    if op.published_at is not None:
        return True
    mine = op.target_version
    return any(o is not op and o.expected_version == mine and order(o) > order(op) for o in others)


def versions(
    ops: list[Operation], current: tuple[str, str | None, float | None] | None, *, compacted: int = 0
) -> list[Version]:
    """The versions of one experience, oldest first: its durable versions in journal order, then the current file
    (``(version, text, modification time)``, None when absent) when no record holds it (marked ``recorded=False``; it is always the
    last version). The file's version marks its version ``current``. A first version made on top of a version the
    journal never held (``previous_version``; nothing ``compacted``) is preceded by that version, unrecorded."""
    durable = sorted((op for op in ops if is_version(op, ops)), key=order)
    found = [_version(op) for op in durable]
    if found and found[0].previous_version is not None and not compacted:
        found.insert(
            0,
            Version(
                version=found[0].previous_version,
                change=UNRECORDED,
                text=None,
                at=None,
                recorded=False,
                note=PREDECESSOR_NOTE,
            ),
        )
    if current is not None:
        version, text, modified = current
        if found and found[-1].version == version:
            found[-1].current = True
        else:
            found.append(
                Version(
                    version=version,
                    change=UNRECORDED,
                    text=text,
                    at=modified,
                    recorded=False,
                    current=True,
                    previous_version=found[-1].version if found else None,
                    note="the current file; no journal record holds it (changed by hand since the "
                    "last start, or placed by hand and never written by an import)",
                )
            )
    return found


def _version(op: Operation) -> Version:
    deleted = op.tool == HAND_DELETE
    change = op.tool  # the journal and the history name a change with the same word
    return Version(
        version=None if deleted else op.target_version,
        change=change,
        text=None if deleted else op.target,
        at=op.published_at if op.published_at is not None else op.created_at,
        request_id=None if op.by_hand else op.scope,
        segment=None if op.segment is None else op.segment + 1,
        operation_key=None if op.by_hand else op.key,
        status=op.status,
        previous_version=op.expected_version,
        note=op.error if op.by_hand else "",
    )


def readable(text: str) -> list[str]:
    """The lines a diff compares: an experience's fields one section each (``[content]`` then its lines), so a
    change inside a long JSON string shows as the lines that changed; any other text as it is."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return text.splitlines(keepends=True)
    lines = []
    for key, value in data.items():
        lines.append(f"[{key}]\n")
        if isinstance(value, str):
            lines += [line + "\n" for line in value.split("\n")]
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            lines += [f"- {v}\n" for v in value]
        else:
            lines.append(json.dumps(value, ensure_ascii=False) + "\n")
    return lines


def diff(path: str, before: Version, after: Version) -> str | None:
    """The unified diff from ``before`` to ``after`` (a deletion compares with no text), or None when either text
    is unknown."""
    texts = []
    for v in (before, after):
        if v.change == HAND_DELETE:
            texts.append([])
        elif v.text is None:
            return None
        else:
            texts.append(readable(v.text))
    names = [f"{path}@{v.version}" if v.version else "/dev/null" for v in (before, after)]
    return "".join(difflib.unified_diff(texts[0], texts[1], fromfile=names[0], tofile=names[1]))


def compactable(
    records: list[tuple[Ref, Operation]], keep: int, finished: Callable[[str], bool]
) -> tuple[list[Ref], int, float | None]:
    """What the retention bound lets go of one experience's records: the records of durable versions older than
    its newest ``keep`` ones, and records that are no version at all, in both cases only final records of finished
    imports (or changes made by hand): an unfinished import may still replay or resume from its records. Returns
    the refs, how many of them are versions, and when the newest of those was written."""
    ops = [op for _, op in records]
    durable = sorted((op for op in ops if is_version(op, ops)), key=order)
    kept = {id(op) for op in durable[-keep:]} if keep > 0 else set()
    refs, count, newest = [], 0, None
    for ref, op in records:
        if id(op) in kept or op.status in OPEN_STATES or not (op.by_hand or finished(op.scope)):
            continue
        refs.append(ref)
        if is_version(op, ops):
            count += 1
            at = order(op)[0]
            newest = at if newest is None else max(newest, at)
    return sorted(refs), count, newest
