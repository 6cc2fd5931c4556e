"""The journal's retention bound: per experience, the records of its newest ``history.keep_versions`` versions.

Contract:

* What is removed (``versions.compactable``): final records of finished imports (and changes made by hand) that
  hold versions older than the experience's newest ``keep_versions``, and final records of finished imports that
  hold no version (abandoned writes, writes overtaken before they were published). An unfinished import keeps every
  record (its retries replay from them, its resumed segments list them), and so does an open record.
* When: for the experiences an import wrote, once it is complete (also when a completed import is run again); for
  an experience whose change by hand was recorded at start; for every experience at a reindex.
* How: the path's ``compacted.json`` first counts the versions removed and names the records being removed; then
  the records and their markers go; then the names are cleared. A kill in between leaves names that the next
  compaction removes and that a history answer skips, so no version is counted twice or shown after it was
  counted. The summary is kept twice (``path_index.py``), so losing one copy renumbers no history. Pending markers
  of records a kill kept from being written are removed too. Nothing else is touched: experience files, the views
  and other paths' records stay as they are.
* A failure to compact (a full disk, a damaged ``compacted.json``) is logged and leaves the records in place: the
  bound is re-applied at the next occasion. Nothing that depends on a removed record breaks: a completed import run
  again lists only the writes whose records remain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import DamagedRecord
from ..storage.journal import HAND_SCOPE
from ..storage.path_index import Compacted, Ref
from .versions import compactable

if TYPE_CHECKING:
    from ..workspace import Workspace


class HistoryRetention:
    """Apply ``history.keep_versions``, the bound on each experience's history in one component's journal (see the
    module docstring)."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    @property
    def keep(self) -> int:
        return self.workspace.settings.history.keep_versions

    def compact(self, path: str) -> int:
        """Apply the bound to one experience's records; the number of records removed (blocking: file I/O)."""
        ws = self.workspace
        journal, checkpoints = ws.journal, ws.checkpoints
        finished: dict[str, bool] = {HAND_SCOPE: True}

        def is_finished(scope: str) -> bool:
            if scope not in finished:
                finished[scope] = checkpoints.completed(scope)
            return finished[scope]

        summary = journal.paths.compacted(path)
        if summary.removing:  # a compaction that was killed half way: finish it
            journal.remove_records(path, [Ref.parse(name) for name in summary.removing])
            summary.removing = []
            journal.paths.put_compacted(summary)
        records, _ = journal.path_records(path)  # damaged records are never removed: they stay for inspection
        refs, versions, newest = compactable(records, self.keep, is_finished)
        if not refs:
            return 0
        times = [t for t in (newest, summary.newest_at) if t is not None]
        newest = max(times) if times else None
        summary = Compacted(path, summary.versions + versions, newest, [ref.name for ref in refs])
        journal.paths.put_compacted(summary)
        journal.remove_records(path, refs)
        journal.paths.remove_orphans(path, [r for r in journal.paths.refs(path) if not journal.has_record(r)])
        summary.removing = []
        journal.paths.put_compacted(summary)
        return len(refs)

    def compact_paths(self, paths) -> int:
        """``compact`` each path; a failure is logged and leaves that path's records. Records removed in all."""
        removed = 0
        for path in sorted(set(paths)):
            try:
                removed += self.compact(path)
            except (OSError, DamagedRecord) as exc:
                self.workspace.logger.warning(f"procedure memory: the journal of {path} was not compacted: {exc}")
        return removed

    def compact_import(self, request_id: str) -> int:
        """Apply the bound to every experience a completed import wrote."""
        try:
            paths = {op.path for op in self.workspace.journal.records(request_id)}
        except DamagedRecord as exc:  # its import answered (and set it aside) already; the next occasion compacts
            self.workspace.logger.warning(f"procedure memory: the journal of {request_id} was not compacted: {exc}")
            return 0
        return self.compact_paths(paths)

    def sweep(self) -> int:
        """Apply the bound to every experience the journal knows (the reindex)."""
        return self.compact_paths(self.workspace.journal.known_paths())
