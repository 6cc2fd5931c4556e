"""Removing an experience, or a rejected import: the one-shot ``procedure_delete`` job (never served, never an agent
tool). A ``path`` inside the trajectory directory names a rejected import's copy (``delete_rejected_import``); any
other path an experience.

Contract of ``Deletion.delete(raw_path)`` for an experience, under the workspace's write lock:

* the path is checked as ``procedure_read`` checks it; nothing at that path is ``not_found`` and changes nothing;
* the content about to go is recorded first when the journal does not hold it (changed or placed by hand:
  ``HandChanges.record_edit``), so the experience's history keeps the version that was removed;
* the file (an invalid one or a link too) is removed durably, then the journal records the removal as a change made
  by hand — its ``delete`` record (``storage/journal.py``), noted "removed with procedure_delete by <user>" — so
  ``procedure_history`` shows who removed it and when; the path's open records are superseded, the path leaves both
  views and the pending list, and the retention bound is applied to its records;
* a record that cannot be written (a full disk) answers ``disk_full``/``storage_error`` saying the file is removed
  already, and leaves the views as they are; so does a kill between the removal and its record: the next start finds
  the file the views list gone and records the removal as a deletion by hand (``HandChanges.found_at_start``) — the
  same outcome without the note.

A later create of the same name is an ordinary create: the name is free.

For a rejected import (content found malformed while reading its copy, which the import keeps: docs/decisions.md
``[import-rejected]``): its copy is removed, then its import record, so ``procedure_imports`` no longer lists it. The
copy of any other import stays (it is the source of its experiences and of its resume): ``invalid_argument``; a path
no rejected import holds is ``not_found``; a copy whose bytes are no longer the import's is left (``invalid_argument``).
"""

from __future__ import annotations

import asyncio
import getpass
import time
from typing import TYPE_CHECKING

import hashlib
from pathlib import Path

from ..answers import DeleteAnswer, DeletedImportAnswer
from ..errors import ErrorCode, ProcedureError, storage_failure
from ..schema import version_of
from ..storage.experiences import Link, read_entry
from ..storage.imports import remove_copy
from ..storage.journal import HAND_DELETE
from ..storage.paths import resolve_inside
from .history import iso

if TYPE_CHECKING:
    from ..workspace import Workspace
    from .hand_changes import HandChanges
    from .reads import Reads
    from .recovery import Recovery
    from .retention import HistoryRetention

DELETE_JOB = "procedure_delete"


def who() -> str:
    """The note of a removal by the job: the job and the operating-system user that ran it."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container): the job is still named
        user = "an unknown user"
    return f"removed with {DELETE_JOB} by {user}"


class Deletion:
    """``procedure_delete`` of one ProcedureMemory (see the module docstring)."""

    def __init__(
        self,
        workspace: Workspace,
        recovery: Recovery,
        reads: Reads,
        hand_changes: HandChanges,
        retention: HistoryRetention,
    ) -> None:
        self.workspace = workspace
        self.recovery = recovery
        self.reads = reads
        self.hand_changes = hand_changes
        self.retention = retention

    async def delete(self, raw_path) -> DeleteAnswer | DeletedImportAnswer:
        """Remove the experience at ``raw_path`` (see the module docstring); the answer names it, the version
        removed and when."""
        ws = self.workspace
        await self.recovery.ensure_reconciled()
        if isinstance(raw_path, str) and raw_path.strip().startswith(f"{ws.trajectory_rel_dir}/"):
            return await self.delete_rejected_import(raw_path)
        rel = self.reads.experience_path(raw_path)
        async with ws.write_lock:
            version = await asyncio.to_thread(self._remove, rel)
            ws.mark_changed()
            try:
                await asyncio.to_thread(self._record, rel, version)
            except OSError as exc:  # the views keep the path: the next start finds the file gone and records it
                code, message = storage_failure(exc)
                raise ProcedureError(
                    code,
                    f"{rel} was removed, but the journal could not record the removal: "
                    f"{message} The next start records it as a deletion by hand and removes it "
                    "from the search views.",
                    path=rel,
                    version=version,
                ) from None
            ws.pending.clear(rel)
            await ws.views.remove([rel])
            ws.count_write()  # the close compacts BM25's lazily deleted documents
            await asyncio.to_thread(self.retention.compact_paths, [rel])
        return {
            "status": "deleted",
            "path": rel,
            "version": version,
            "deleted_at": iso(time.time()),
            "note": who(),
            "history": f"procedure_history path={rel} lists its versions, this removal last; a new experience "
            "may take the name.",
        }

    def _remove(self, rel: str) -> str:
        """Record the content if the journal lacks it and remove the file; the version removed."""
        ws = self.workspace
        data = read_entry(str(ws.root / rel))  # never follows a link
        if data is None:
            raise ProcedureError(
                ErrorCode.NOT_FOUND,
                f"No experience at {rel}; nothing was removed. Check the path (procedure_list lists the experiences).",
                path=rel,
            )
        version = version_of(data.target if isinstance(data, Link) else data)
        self.hand_changes.record_edit(rel, version)  # the history keeps what is removed
        ws.files.remove(rel)
        return version

    def _record(self, rel: str, version: str) -> None:
        """The removal in the journal (who, when); the path's open records superseded."""
        journal = self.workspace.journal
        op = journal.record_change(rel, HAND_DELETE, None, version, None, note=who())
        journal.supersede_path(rel, keep=op)

    async def delete_rejected_import(self, raw_path) -> DeletedImportAnswer:
        """Remove the copy and the record of the rejected import whose copy is ``raw_path`` (module docstring)."""
        ws = self.workspace
        rel, target = resolve_inside(ws.root, ws.trajectory_rel_dir, raw_path, what="trajectory")
        async with ws.write_lock:
            return await asyncio.to_thread(self._remove_rejected, rel, target)

    def _remove_rejected(self, rel: str, target: Path) -> DeletedImportAnswer:
        ws = self.workspace
        records, _ = ws.imports.scan()
        holders = [r for r in records if r.path == rel]
        record = next((r for r in holders if r.rejected), None)
        if record is None:
            if holders:
                raise ProcedureError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"{rel} is the copy of import {holders[0].request_id!r}, which was not rejected: an import's copy "
                    "stays (its experiences cite it, a resume reads it). Only a rejected import's copy is removed.",
                    path=rel,
                )
            raise ProcedureError(
                ErrorCode.NOT_FOUND,
                f"No rejected import holds {rel}; nothing was removed. "
                "procedure_imports lists the imports with their copies.",
                path=rel,
            )
        if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() != record.sha256:
            raise ProcedureError(
                ErrorCode.INVALID_ARGUMENT,
                f"{rel} no longer holds the bytes import "
                f"{record.request_id!r} copied; nothing was removed: move it away by hand.",
                path=rel,
            )
        remove_copy(target)  # first: a record without its copy can still be removed by a second run
        ws.imports.remove(record.request_id)
        return {
            "status": "deleted",
            "kind": "rejected_import",
            "path": rel,
            "request_id": record.request_id,
            "error_code": record.rejected,
        }
