"""Changes made by hand to experience files, recorded in the journal when they are found.

The plugin does not watch the files. It finds what changed by hand:

* at start (and at a reindex): a file whose version differs from the views' record of it, and a file the views
  listed that is gone, are checked against the journal; when the journal's latest version of that experience is
  not the file's content, a ``hand_edit`` (the file's text) or a ``hand_delete`` is recorded;
* before the agent updates a file whose content the journal does not hold (an edit while the import ran, or a
  file placed by hand), that content is recorded first, so the update's diff has its predecessor.

Only experiences the journal already knows are checked at start: a file placed by hand is recorded when an import
first writes over it, not at every start (a library of files placed by hand would otherwise be copied into the
journal by the first start). Until then its history is its current file, unrecorded. A change recorded here is a
version without an import (``versions.py``). Recording is idempotent: a change already recorded is the journal's
latest version and is not recorded again.

Proof: a content counts as recorded only when a record holding it exists, never on a marker alone (a marker is made
before its record: ``storage/path_index.py``). A kill between the two therefore leaves the content unrecorded only
until it is next found, at the next start, reindex or update, which records it then.

Cost: a file that holds what the experience's newest record writes is told from one listing of its markers (their
names carry each record's time and version) and one ``stat`` of that record's file, so a start whose views were
rebuilt checks every file the journal knows without reading records; only the others read the experience's records.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..schema import version_of
from ..storage.experiences import Link, read_entry
from ..storage.format import DELETED, scope_digest
from ..storage.journal import HAND_DELETE, HAND_EDIT, HAND_SCOPE, Operation
from ..storage.path_index import Ref
from .versions import is_version, order

if TYPE_CHECKING:
    from ..workspace import Workspace


def latest_version(ops: list[Operation]) -> Operation | None:
    """The record of an experience's newest durable version, or None."""
    durable = [op for op in ops if is_version(op, ops)]
    return max(durable, key=order) if durable else None


class HandChanges:
    """Record changes made by hand (see the module docstring). Callers hold the write lock or run at start."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def _newest_is(self, path: str, version: str) -> Ref | None:
        """The newest record of ``path`` if it writes ``version`` and exists (its marker's name says what it writes,
        its file that it was written: the cheap proof; see the module docstring), else None."""
        journal = self.workspace.journal
        newest = journal.paths.newest(path)
        return newest if newest is not None and newest.version == version and journal.has_record(newest) else None

    def _latest(self, path: str) -> Operation | None:
        records, _ = self.workspace.journal.path_records(path)
        return latest_version([op for _, op in records])

    def found_at_start(self, changed: dict[str, str], gone: list[str]) -> tuple[list[str], list[str]]:
        """Record the edits of ``changed`` files (path -> version, as the start's scan read them) and the deletion
        of ``gone`` ones (both out of step with the views) that the journal does not hold yet, for experiences the
        journal knows. Returns the paths recorded, and those whose change by hand an earlier start had recorded
        already (killed before its views took the change in: its compaction may be owed too)."""
        journal = self.workspace.journal
        known = journal.paths.known()  # one listing, however many files are out of step (a rebuild: all of them)
        recorded, earlier = [], []
        for path, version in changed.items():
            if journal.paths.digest(path) not in known:
                continue
            if self.record_edit(path, version):
                recorded.append(path)
            elif self._by_hand(self._newest_is(path, version)):
                earlier.append(path)
        for path in gone:
            if journal.paths.digest(path) not in known or self.workspace.files.read_bytes(path) is not None:
                continue
            if self._newest_is(path, DELETED):  # recorded already
                earlier.append(path)
                continue
            latest = self._latest(path)
            if latest is not None and latest.tool != HAND_DELETE:
                journal.record_change(path, HAND_DELETE, None, latest.target_version, None)
                recorded.append(path)
        return recorded, earlier

    def _by_hand(self, ref: Ref | None) -> bool:
        """Whether ``ref`` names a record of a change made by hand."""
        return ref is not None and ref.scope_digest == scope_digest(HAND_SCOPE)

    def record_edit(self, path: str, seen: str | None = None) -> bool:
        """Record the current content of ``path`` as an edit made by hand unless the journal's latest version of it
        is that content (or the file is gone); ``seen``: the file's version as just read, if known. Returns whether
        it recorded one."""
        if seen is not None and self._newest_is(path, seen):  # what the newest record wrote
            return False
        absolute = str(self.workspace.root / path)
        data = read_entry(absolute)  # never follows a link
        if data is None:
            return False
        version = version_of(data.target if isinstance(data, Link) else data)
        if version != seen and self._newest_is(path, version):
            return False
        latest = self._latest(path)
        if latest is not None and latest.tool != HAND_DELETE and latest.target_version == version:
            return False
        try:
            modified = os.lstat(absolute).st_mtime
        except FileNotFoundError:
            return False
        self.workspace.journal.record_change(
            path,
            HAND_EDIT,
            data,
            None if latest is None or latest.tool == HAND_DELETE else latest.target_version,
            modified,
        )
        return True
