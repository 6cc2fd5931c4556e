"""The answer of ``procedure_history``: every durable version of one experience, oldest first.

Contract: nothing here writes (no record is set aside, repaired or compacted). The versions come from the journal
only (``storage/journal.py``: the records of the path, found through its path index) and the current file; which
records are versions and in what order is ``versions.py``. The answer follows ``procedure_read``'s conventions
(``status``, ``kind``, ``path``; ``next_offset`` for the next page) and says, besides the versions:

* ``compacted``: how many older versions the retention bound removed (numbers continue after them);
* ``damaged_records``: records of this experience that cannot be read, were set aside as damaged, or are missing
  (a confirmed marker names them: removed outside the plugin), a damaged copy of its compaction summary, and its
  marker directory when that was removed (the records found without it are listed) — reported, never hidden (a
  version may be missing between two listed ones: ``previous_version`` shows it);
* ``exists`` and ``current_version``: the file now. The current file is always the last version; when no record
  holds it, that version is ``recorded: false``.

A path the journal never knew that does not exist is ``not_found``; an invalid path is refused as ``procedure_read``
refuses it (``Reads.experience_path``).
"""

from __future__ import annotations

import asyncio
import json
import os
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..answers import HistoryAnswer, HistoryVersion
from ..errors import DamagedRecord, ErrorCode, ProcedureError
from ..schema import version_of
from ..storage.experiences import Link, read_entry
from ..storage.format import COMPACTED
from ..storage.journal import HAND_SCOPE
from ..storage.path_index import Compacted
from .versions import Version, diff, versions

if TYPE_CHECKING:
    from ..workspace import Workspace
    from .reads import Reads

DAMAGED_FIX = (
    "Resume the import it belongs to (the same reme start job=procedure_auto_memory command): it sets the "
    "file aside as <file>.damaged, kept for inspection. A record of a change made by hand, or "
    f"{COMPACTED}, belongs to no import: repair it or move it aside by hand. Until then the version it "
    "held, if any, is missing from this history."
)
MISSING_FIX = (
    "Restore the record from a backup to bring its version back. Its marker under operations/paths/ is "
    "what shows the loss; remove it once inspected (procedure_reindex reports it until then)."
)
LOST_MARKERS_FIX = (
    "Run procedure_reindex (the one-shot CLI, other workspace processes stopped): it reads every "
    "journal record and recreates the missing markers (journal_markers_recreated)."
)
SET_ASIDE_FIX = (
    "Kept for inspection; the version it held, if any, is missing from this history. Repair the file "
    "and move it back to its original name (without .damaged) to restore it."
)


def iso(at: float | None) -> str | None:
    """A time as ISO 8601 in UTC, to the millisecond."""
    return None if at is None else datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="milliseconds")


def version_entry(number: int, v: Version, path: str, previous: Version | None, with_diff: bool) -> HistoryVersion:
    """One version as the answer lists it (``diff``: from the version listed before it, None for the first)."""
    entry: HistoryVersion = {
        "number": number,
        "version": v.version,
        "change": v.change,
        "request_id": v.request_id,
        "segment": v.segment,
        "operation_key": v.operation_key,
        "at": iso(v.at),
        "status": v.status,
        "previous_version": v.previous_version,
        "recorded": v.recorded,
        "current": v.current,
        "text": v.text,
    }
    if v.note:
        entry["note"] = v.note
    if with_diff:
        entry["diff"] = diff(path, previous, v) if previous is not None else None
    return entry


def current_file(absolute: str) -> tuple[str, str | None, float | None] | None:
    """The file now: its version, text (None for a link, never followed; U+FFFD for bytes that are not UTF-8) and
    modification time; None when absent."""
    raw = read_entry(absolute)
    if raw is None:
        return None
    try:
        modified = os.lstat(absolute).st_mtime
    except FileNotFoundError:
        modified = None
    if isinstance(raw, Link):
        return version_of(raw.target), None, modified
    return version_of(raw), raw.decode("utf-8", "replace"), modified


class History:
    """``procedure_history`` answers of one ProcedureMemory (see the module docstring)."""

    def __init__(self, workspace: Workspace, reads: Reads) -> None:
        self.workspace = workspace
        self.reads = reads

    async def answer(self, raw_path, *, with_diff: bool, offset: int, limit: int) -> HistoryAnswer:
        """Every durable version of an experience, oldest first, a page at a time (read-only; in a worker thread)."""
        return await asyncio.to_thread(self.page, raw_path, with_diff=with_diff, offset=offset, limit=limit)

    def page(self, raw_path, *, with_diff: bool, offset: int, limit: int) -> HistoryAnswer:
        """The history page of one experience (blocking: reads files)."""
        ws = self.workspace
        rel = self.reads.experience_path(raw_path)
        journal = ws.journal
        # Records before the summary: a compaction writes its summary before it removes records, so whatever
        # this read sees, a record it lists is either counted there (and skipped) or not.
        records, damaged = journal.path_records(rel)
        try:
            summary = journal.paths.compacted(rel)
        except DamagedRecord:
            summary = Compacted(rel)
        reported = [
            {"record": ws.relative(exc.path), "error": exc.cause, "set_aside": False, "fix": DAMAGED_FIX}
            for exc in journal.paths.damaged_copies(rel)
        ]
        removing = set(summary.removing)
        ops = [op for ref, op in records if ref.name not in removing]
        current = current_file(str(ws.root / rel))
        if not journal.paths.has_directory(rel):
            found, lost = self._without_markers(rel, current)
            ops += found
            reported += lost
        damaged = [d for d in damaged if d.ref is None or d.ref.name not in removing]
        if not ops and current is None and not damaged and not reported and not summary.versions:
            raise ProcedureError(
                ErrorCode.NOT_FOUND,
                f"No experience at {rel}, and the journal has no history of "
                "it. Check the path (procedure_search finds experiences).",
                path=rel,
            )
        listed = versions(ops, current, compacted=summary.versions)
        page = listed[offset : offset + limit]
        entries = [
            version_entry(
                summary.versions + offset + n + 1, v, rel, listed[offset + n - 1] if offset + n > 0 else None, with_diff
            )
            for n, v in enumerate(page)
        ]
        reported = [
            {
                "record": ws.relative(d.file),
                "error": d.error,
                "set_aside": d.set_aside,
                "fix": SET_ASIDE_FIX if d.set_aside else MISSING_FIX if d.missing else DAMAGED_FIX,
            }
            for d in damaged
        ] + reported
        answer: HistoryAnswer = {  # versions last, after what is said about them
            "status": "ok",
            "kind": "history",
            "path": rel,
            "exists": current is not None,
            "current_version": current[0] if current else None,
            "total": len(listed),
            "offset": offset,
            "next_offset": offset + limit if offset + limit < len(listed) else None,
        }
        if summary.versions:
            answer["compacted"] = {
                "versions": summary.versions,
                "newest_at": iso(summary.newest_at),
                "note": f"the journal keeps the records of each experience's newest "
                f"{ws.settings.history.keep_versions} versions (history.keep_versions); older ones of "
                f"finished imports were removed ({COMPACTED})",
            }
        if reported:
            answer["damaged_records"] = reported
        answer["versions"] = entries
        return answer

    def _without_markers(self, rel: str, current) -> tuple[list, list[dict[str, Any]]]:
        """An experience without a marker directory: placed by hand and never written by an import (nothing to
        say), or its directory was removed. Evidence of the latter: a compaction summary beside the index, or a
        record of ``rel`` in the journal of an import that made one of the file's sources (those imports' records
        and the changes made by hand are then read: the versions a reindex would index again). Returns the records
        found and the damage to report."""
        ws = self.workspace
        journal = ws.journal
        sources = set()
        if current is not None and current[1] is not None:
            try:
                data = json.loads(current[1])
                sources = (
                    {s for s in data.get("sources", []) if isinstance(s, str)} if isinstance(data, dict) else set()
                )
            except (ValueError, RecursionError):
                pass
        found = []
        if sources:
            imports, _ = ws.imports.scan()
            for request_id in sorted({r.request_id for r in imports if r.path in sources}):
                found += [op for op in journal.read_scope(request_id)[0] if op.path == rel]
        summary = journal.paths.summary_files(rel)[1]
        if not found and not summary.exists():
            return [], []
        found += [op for op in journal.read_scope(HAND_SCOPE)[0] if op.path == rel]
        directory = journal.paths.directory / journal.paths.digest(rel)
        return found, [
            {
                "record": ws.relative(directory),
                "set_aside": False,
                "fix": LOST_MARKERS_FIX,
                "error": f"the marker directory of this experience is missing (removed outside the plugin): "
                f"{len(found)} of its records were found by reading the journals of the imports named in its "
                "sources and its changes made by hand; records of other imports may be missing here",
            }
        ]
