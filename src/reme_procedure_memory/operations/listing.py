"""Listings: the answers of ``procedure_list`` (the experiences) and ``procedure_imports`` (the imports).

Contract: nothing here writes — no file, record or view changes, nothing is set aside or reconciled. Both answer one
page at a time in a stable order (experiences by path, imports by request id) with ``next``, the cursor of the
following page (the last key of this page; None at the end): a page starts after its cursor, so entries added or
removed meanwhile neither shift nor repeat the others.

* An experience entry is read and validated as search and read validate it (``ExperienceFiles.page``): path, version,
  description, number of sources and its state in search — ``indexed`` (both views hold this version), ``pending``
  (excluded from search until indexed: the error says why), ``unindexed`` (the views hold no record or another
  version: placed or changed by hand since the start, or a write of this process is indexing it now) or ``invalid``
  (not a valid experience: the error says what to fix). ``index_complete`` and ``pending_indexes`` are search's.
  Like search, a page waits while a reindex of this process rebuilds the views (``Recovery.without_rebuild``), so
  half-built views never make indexed files look unindexed.
* An import entry joins the import record, the checkpoint and the operation journal of one request id: the copy,
  ``status`` (``processing``: running in this process now; ``complete``; ``incomplete``: stopped or not yet segmented,
  resumable; ``rejected``: its content cannot be imported, ``error_code`` says why, never resumable; ``damaged``: its
  checkpoint cannot be read), segments done/total and the experiences it created and
  updated. A checkpoint without its import record (deleted by hand, or set aside as damaged) is listed from the
  checkpoint. Records that cannot be read are reported, never set aside: the import's own damaged journal records
  in its entry, damaged import records (and checkpoints of no readable record) in ``damaged_records`` on the first
  page. The original's absolute path is never answered (the guard hides import records from ReMe's file jobs for
  the same reason).
"""

from __future__ import annotations

import asyncio
import bisect
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ..answers import DamagedEntry, ImportsAnswer, ListAnswer, ListedExperience, ListedImport
from ..errors import DamagedRecord
from ..storage.checkpoints import COMPLETE, Checkpoint
from ..storage.experiences import BadFile
from ..storage.imports import ImportRecord
from ..storage.journal import written_paths
from ..storage.records import has_set_aside
from .recovery import DAMAGED_RECORD_FIX

if TYPE_CHECKING:
    from ..storage.experiences import StoredExperience
    from ..workspace import Workspace
    from .recovery import Recovery

UNINDEXED_NOTE = (
    "not in the search views at this version: placed or changed by hand since the start "
    "(procedure_reindex, or the next start, indexes it), or being written now"
)
NO_CHECKPOINT_NOTE = (
    "no checkpoint: the import stopped before its trajectory was segmented (resume it), or its "
    "checkpoint was removed before it wrote anything"
)
LOST_CHECKPOINT_FIX = (
    "Restore the checkpoint from a backup to continue where the import stopped, or resume the "
    "import: it restarts processing from segment 1 (the experiences written so far stay and the "
    "agent sees them)."
)
LOST_JOURNAL_FIX = (
    "Restore the directory from a backup. The experience files are intact; without it this import's "
    "ledger is empty and the histories of its experiences name their missing records."
)
ORPHAN_NOTE = (
    "its import record is missing (deleted by hand, or set aside as damaged): resuming the import "
    "rebuilds it from the saved copy"
)


class Listing:
    """The listings of one ProcedureMemory's workspace (read only)."""

    def __init__(self, workspace: Workspace, recovery: Recovery) -> None:
        self.workspace = workspace
        self.recovery = recovery  # only its wait for a rebuild of the views (nothing here reconciles)

    # -- experiences ----------------------------------------------------------------------------------------------

    async def experiences(self, cursor: str | None, limit: int) -> ListAnswer:
        """One page of the experience files by path (see the module docstring)."""
        ws = self.workspace

        async def page() -> tuple[list[ListedExperience], int, str | None]:
            items, total, following = await asyncio.to_thread(ws.files.page, cursor, limit)
            return [self._experience(item) for item in items], total, following  # states judged on complete views

        entries, total, following = await self.recovery.without_rebuild(page)
        return {
            "status": "ok",
            "experiences": entries,
            "total": total,
            "next": following,
            "index_complete": not ws.pending,
            "pending_indexes": ws.pending.entries(),
        }

    def _experience(self, item: StoredExperience | BadFile) -> ListedExperience:
        ws = self.workspace
        if isinstance(item, BadFile):
            return {"path": item.path, "version": item.version, "state": "invalid", "error": item.error}
        entry: ListedExperience = {
            "path": item.path,
            "version": item.version,
            "state": "indexed",
            "description": item.experience.description,
            "source_count": len(item.experience.sources),
        }
        if item.path in ws.pending:
            entry.update(state="pending", error=ws.pending.error(item.path))
        elif not ws.is_open or ws.views.held_version(item.path) != item.version:
            entry.update(state="unindexed", note=UNINDEXED_NOTE)
        return entry

    # -- imports --------------------------------------------------------------------------------------------------

    async def imports(self, cursor: str | None, limit: int) -> ImportsAnswer:
        """One page of the imports by request id (see the module docstring)."""
        importing = set(self.workspace.importing)
        entries, total, following, damaged = await asyncio.to_thread(self._import_page, cursor, limit, importing)
        answer: ImportsAnswer = {"status": "ok", "imports": entries, "total": total, "next": following}
        if cursor is None:
            answer["damaged_records"] = damaged
        return answer

    def _import_page(
        self, cursor: str | None, limit: int, importing: set[str]
    ) -> tuple[list[ListedImport], int, str | None, list[DamagedEntry]]:
        """(the page's entries, the number of imports, the next cursor, the unreadable records): blocking reads."""
        ws = self.workspace
        records, damaged = ws.imports.scan()
        checkpoints = ws.checkpoints
        # request id -> (its checkpoint's file name, its import record, its checkpoint when read already)
        found: dict[str, tuple[str, ImportRecord | None, Checkpoint | None]] = {}
        for record in records:
            found.setdefault(record.request_id, (checkpoints.path(record.request_id).name, record, None))
        for name in sorted(checkpoints.names() - {name for name, _, _ in found.values()}):  # of no readable record
            try:
                orphan = checkpoints.peek(name)
            except DamagedRecord as exc:
                damaged[str(exc.path)] = exc.cause
                continue
            if orphan is None:
                continue
            if isinstance(orphan.request_id, str) and isinstance(orphan.path, str):
                found.setdefault(orphan.request_id, (name, None, orphan))
            else:
                damaged[str(checkpoints.directory / name)] = "fields of the wrong type"
        ids = sorted(found)
        start = bisect.bisect_right(ids, cursor) if cursor is not None else 0
        chosen = ids[start : start + limit]
        marked: list[dict[str, int]] = []  # the markers' scopes, listed once and only when a scope directory is gone

        def marked_scopes() -> dict[str, int]:
            if not marked:
                marked.append(ws.journal.marked_scopes())
            return marked[0]

        entries = [
            self._import(request_id, *found[request_id], request_id in importing, marked_scopes)
            for request_id in chosen
        ]
        following = chosen[-1] if chosen and start + limit < len(ids) else None
        unreadable = [
            {"path": ws.relative(path), "error": cause, "fix": DAMAGED_RECORD_FIX}
            for path, cause in sorted(damaged.items())
        ]
        return entries, len(ids), following, unreadable

    def _import(
        self,
        request_id: str,
        name: str,
        record: ImportRecord | None,
        checkpoint: Checkpoint | None,
        running: bool,
        marked_scopes,
    ) -> ListedImport:
        """One import's entry: its record (or its checkpoint alone), checkpoint and journal. A missing scope
        directory or checkpoint is named when there is evidence it existed (``_missing``)."""
        ws = self.workspace
        entry: ListedImport = {"request_id": request_id}  # completed below
        if record is not None:
            entry.update(file=record.path, filename=record.filename, created_at=_timestamp(record.created_at))
        else:
            # the name given to the import is in its record only: the copy's own name may have a -2 suffix
            entry.update(file=checkpoint.path, filename=None, created_at=None, note=ORPHAN_NOTE)
        error = None
        if checkpoint is None and record is not None:
            try:
                checkpoint = ws.checkpoints.peek(name)
            except DamagedRecord as exc:
                error = {"path": ws.relative(exc.path), "error": exc.cause, "fix": DAMAGED_RECORD_FIX}
        scope_dir = ws.journal.scope_directory(request_id)
        missing = (
            [] if running else self._missing(request_id, name, record, checkpoint, error, scope_dir, marked_scopes)
        )
        if running:
            status = "processing"
        elif error is not None or missing:
            status = "damaged"
        elif record is not None and record.rejected:
            status = "rejected"
            entry["error_code"] = record.rejected
        else:
            status = "complete" if checkpoint is not None and checkpoint.status == COMPLETE else "incomplete"
        entry["status"] = status
        entry["segments"] = (
            {"done": min(checkpoint.next_segment, checkpoint.total), "total": checkpoint.total}
            if checkpoint is not None
            else None
        )
        ops, broken = ws.journal.read_scope(request_id)
        written = written_paths(ops)
        entry["experiences"] = {"created": len(written["created"]), "updated": len(written["updated"])}
        damaged = (
            ([error] if error is not None else [])
            + missing
            + [
                {"path": ws.relative(path), "error": cause, "fix": DAMAGED_RECORD_FIX}
                for path, cause in sorted(broken.items())
            ]
        )
        if damaged:
            entry["damaged_records"] = damaged
        if checkpoint is None and record is not None and not record.rejected and not missing and not running:
            entry["note"] = NO_CHECKPOINT_NOTE
        return entry

    def _missing(
        self,
        request_id: str,
        name: str,
        record: ImportRecord | None,
        checkpoint: Checkpoint | None,
        error: dict | None,
        scope_dir,
        marked_scopes,
    ) -> list[dict[str, str]]:
        """The import's metadata that is gone although it existed: its journal directory while markers of the path
        index still name records in it, and (with a record, not rejected) its checkpoint while its journal has
        records (a checkpoint is written before the first segment, so before any write), or its set-aside copy."""
        ws = self.workspace
        missing = []
        has_scope = scope_dir.is_dir()
        named = 0 if has_scope else marked_scopes().get(scope_dir.name, 0)
        if named:
            missing.append(
                {
                    "path": ws.relative(scope_dir),
                    "fix": LOST_JOURNAL_FIX,
                    "error": (
                        f"missing: this import's journal directory is gone (removed outside the plugin) while the path index "
                        f"still names {named} of its records; the experiences it created and updated cannot be counted"
                    ),
                }
            )
        if checkpoint is None and error is None and record is not None and not record.rejected:
            path = ws.checkpoints.path(request_id)
            if has_set_aside(path):
                missing.append(
                    {
                        "path": ws.relative(path),
                        "fix": LOST_CHECKPOINT_FIX,
                        "error": "set aside as damaged by its import, which has not been resumed since",
                    }
                )
            elif has_scope or named:
                missing.append(
                    {
                        "path": ws.relative(path),
                        "fix": LOST_CHECKPOINT_FIX,
                        "error": (
                            "missing: this import's journal holds records, so its checkpoint existed (removed outside the "
                            "plugin); whether it was complete is unknown"
                        ),
                    }
                )
        return missing


def _timestamp(seconds: float) -> str | None:
    """An import's creation time as ISO 8601 in UTC, to the second (None when it is no time: edited by hand)."""
    try:
        return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):
        return None
