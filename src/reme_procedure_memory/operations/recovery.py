"""Recovery and maintenance of the two views: start-up reconciliation, the reindex job, pending retries.

Contract (what every path below guarantees):

* The views agree with the experience files: every valid file is one record per view at its current version (with a
  vector), unless it is *pending* — listed in the workspace's ``pending`` with its version and error, excluded from
  search and reported — and no record survives for a vanished or invalid file. Invalid files are pending, never
  indexed.
* Journal intents left by a crash are resolved (rolled forward or dropped) before the views are touched; after the
  views are settled, every open journal record is resolved against the file (superseded / index_pending / indexed).
* Changes made by hand are recorded in the journal before the views take them in (``hand_changes.py``): files out of
  step with the views and files the views list that are gone, for experiences the journal knows; the retention
  bound is then applied to those experiences (``retention.py``). A reindex also applies it to every experience.
* Views holding records of another BM25 tokenizer are emptied and rebuilt; never mixed.
* Indexing is bulk: many files go to ``Views.index`` in big batches; a provider outage marks the rest pending at once
  (one timeout per round), a rejected text is isolated per file in its batch.
* Single pass: a process started to run the reindex job (``reme start job=procedure_reindex``) does not index at
  start-up; the job's rebuild is the one pass (journal recovery still runs at start). Nor does one started to run
  the export, which reads only the files. Anything else that needs the views in such a process reconciles first
  (``ensure_reconciled``).
* A reindex clears and rebuilds both views under the write lock while searches wait (``without_rebuild``); it never
  writes experience or trajectory files. Durable files are written by ``storage/`` only (``storage/__init__.py``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar

from ..answers import ReindexAnswer
from ..errors import IndexFailure, ProviderUnavailable
from ..schema import VIEW_NAMES, version_of
from ..storage.experiences import BadFile, StoredExperience
from ..storage.format import COMPACTED, PATHS_DIR, SUMMARIES_DIR
from ..storage.journal import INDEX_PENDING, INDEXED, INTENT, SUPERSEDED, recover_intent
from .hand_changes import HandChanges
from .retention import HistoryRetention

if TYPE_CHECKING:
    from ..workspace import Workspace

T = TypeVar("T")

# Files per ``Views.index`` call when indexing many: few calls (each embeds and upserts in bulk), bounded memory.
BATCH = 1000

DAMAGED_RECORD_FIX = (
    "Resume the import it belongs to (the same reme start job=procedure_auto_memory command): it stops once with "
    "metadata_damaged, sets the file aside as <file>.damaged and continues on the next resume."
)

MISSING_RECORD_FIX = (
    "This marker names a journal record that was removed outside the plugin: restore the record from "
    "a backup to bring its version back, or remove the marker once inspected."
)
SUMMARY_FIX = (
    "A compaction summary belongs to no import: repair it or move it aside; its other copy, if readable, "
    "keeps the history's numbers until the next compaction rewrites both."
)


def damaged_fix(path: Path) -> str:
    """What to do about one damaged metadata file: a marker or a compaction summary of the path index (under
    ``operations/paths/`` or ``operations/compacted/``), else a record of an import."""
    if path.parent.parent.name == PATHS_DIR or path.parent.name == SUMMARIES_DIR:
        return SUMMARY_FIX if path.name == COMPACTED or path.parent.name == SUMMARIES_DIR else MISSING_RECORD_FIX
    return DAMAGED_RECORD_FIX


# One-shot jobs whose process leaves start-up indexing alone: the reindex indexes every file itself (one pass instead
# of two); the export reads only the files and the dump only the metadata, so they need no embedding provider (the
# next start indexes).
DEFERRING_STEPS = ("procedure_reindex_step", "procedure_export_step", "procedure_dump_step")


def defers_indexing(app_context, name: str) -> bool:
    """Whether this process is ``reme start job=...`` of a job that rebuilds the views of component ``name`` or does
    not use them (``DEFERRING_STEPS``): its start-up then leaves the indexing to that job or to the next start."""
    if app_context is None:
        return False
    config = app_context.app_config
    service = config.service
    job = config.jobs.get(getattr(service, "job", None) or "") if service.backend == "cli" else None
    return job is not None and any(
        step.backend in DEFERRING_STEPS and (getattr(step, "procedure_memory", None) or "default") == name
        for step in job.steps
    )


class Recovery:
    """Recovery and maintenance of one ProcedureMemory component (see the module docstring)."""

    def __init__(self, workspace: Workspace, hand_changes: HandChanges, retention: HistoryRetention) -> None:
        self.workspace = workspace
        self.hand_changes = hand_changes
        self.retention = retention
        self.deferred = False  # start-up indexing left to the process's reindex job (single pass)
        self._rebuilds = 0  # incremented by every reindex: a search that overlapped one searches again
        self.retries = PendingRetries(self)

    # -- start and stop -----------------------------------------------------------------------------------------

    async def start(self, *, defer: bool) -> dict[str, Any]:
        """Recover the journal and reconcile the views; with ``defer`` (the process runs the reindex job), only
        recover the journal and leave the indexing to the job. Returns the start-up report."""
        if defer:
            self.recover_intents()
            self.deferred = True
            report = {"files": None, "indexing": "deferred to the procedure_reindex job of this process"}
        else:
            report = await self.reconcile()
        self.retries.last = time.monotonic()  # the start just tried every pending file
        return report

    async def stop(self) -> None:
        """Cancel a pending-retry round still running."""
        await self.retries.stop()

    async def ensure_reconciled(self) -> None:
        """Reconcile now if start-up deferred it and no reindex has run since (under the write lock)."""
        if not self.deferred:
            return
        async with self.workspace.write_lock:
            if self.deferred:
                await self.reconcile()

    # -- reconciliation -----------------------------------------------------------------------------------------

    def recover_intents(self) -> None:
        """Roll journal intents forward or drop them; note damaged journal records (skipped, reported)."""
        ws = self.workspace
        files, journal = ws.files, ws.journal
        for op in journal.open_records():
            if op.status == INTENT:
                recover_intent(op, files, journal)
        ws.damaged_metadata.update(journal.damaged)
        if journal.index_built:
            ws.logger.warning(
                f"procedure memory: the journal had no path index (operations/paths/): built it from "
                f"{journal.index_built} records (a journal written before the index, or the index was lost; the "
                "compaction summaries are also kept in operations/compacted/)"
            )
            journal.index_built = None

    async def reconcile(self) -> dict[str, Any]:
        """Make both views agree with the experience files, after recovering journal intents.

        Intents are rolled forward or dropped; views indexed by another BM25 tokenizer are emptied first (every file
        is then indexed again); files whose version (or vector) is missing from a view are indexed in bulk; records
        of vanished or invalid files are removed; failures are listed in ``pending``.
        """
        ws = self.workspace
        views = ws.views
        self.recover_intents()
        retokenize = views.foreign_tokenizer()
        if retokenize:
            ws.logger.info(f"rebuilding {retokenize} from the experience files: the BM25 tokenizer changed")
            await views.clear()
        indexed = {view: views.indexed(view) for view in VIEW_NAMES}
        on_disk: set[str] = set()
        stale: list[StoredExperience] = []
        invalid: dict[str, str] = {}
        ws.pending.clear()
        for item in ws.files.scan():
            on_disk.add(item.path)
            if isinstance(item, BadFile):
                self.mark_invalid(item)
                invalid[item.path] = item.version
            elif any(indexed[v].get(item.path) != (item.version, True) for v in VIEW_NAMES):
                stale.append(item)
        self.record_hand_changes(indexed, {**invalid, **{s.path: s.version for s in stale}}, on_disk)
        gone = sorted({p for v in VIEW_NAMES for p in indexed[v]} - (on_disk - set(ws.pending)))
        await views.remove(gone)
        await self.index_many(stale)
        self.settle_journal()
        if stale or gone or retokenize:
            await views.dump()
        self.deferred = False
        return {
            "files": len(on_disk),
            "reindexed": len(stale),
            "removed": len(gone),
            "pending": len(ws.pending),
            "tokenizer_changed": retokenize,
        }

    def record_hand_changes(
        self, indexed: dict[str, dict[str, tuple[str, bool]]], changed: dict[str, str], on_disk: set[str]
    ) -> None:
        """Record the changes made by hand among ``changed`` files (path -> version) and the files ``indexed`` lists
        that are no longer ``on_disk``, then apply the retention bound to them. A failure is logged: the change stays visible
        as the current, unrecorded version, and is recorded before the agent next writes over it."""
        gone = sorted({p for v in VIEW_NAMES for p in indexed[v]} - on_disk)
        try:
            recorded, earlier = self.hand_changes.found_at_start(changed, gone)
        except OSError as exc:
            self.workspace.logger.warning(f"procedure memory: changes made by hand were not recorded: {exc}")
            return
        if recorded:
            self.workspace.logger.info(f"procedure memory recorded changes made by hand: {recorded}")
        if recorded or earlier:  # earlier: recorded by a start killed before it compacted them
            self.retention.compact_paths(recorded + earlier)

    def settle_journal(self) -> None:
        """Resolve every open journal record against its file once the views are settled."""
        ws = self.workspace
        files, journal = ws.files, ws.journal
        for op in journal.open_records():
            current = files.read_bytes(op.path)
            if current is None or version_of(current) != op.target_version:
                journal.set_status(op, SUPERSEDED, "the file no longer holds this write's content")
            elif op.path in ws.pending:
                journal.set_status(op, INDEX_PENDING, ws.pending.error(op.path))
            else:
                journal.set_status(op, INDEXED)

    async def index_many(self, items: list[StoredExperience]) -> list[str]:
        """Index many experiences in bulk; isolate failures per file into ``pending``. Returns indexed paths.

        When the provider is unavailable (one call timed out, raised or returned nothing), the remaining files are
        marked pending at once: one outage costs one provider timeout per round, not one per file.
        """
        ws = self.workspace
        views = ws.views
        done: list[str] = []
        for start in range(0, len(items), BATCH):
            batch = items[start : start + BATCH]
            try:
                await views.index([(s, ws.mtime(s.path)) for s in batch])
                done.extend(s.path for s in batch)
                for s in batch:
                    ws.pending.clear(s.path)
                continue
            except ProviderUnavailable as exc:
                for stored in items[start:]:
                    ws.pending.mark(stored.path, stored.version, str(exc))
                return done
            except IndexFailure:
                pass
            for stored in batch:
                try:
                    await views.index([(stored, ws.mtime(stored.path))])
                    done.append(stored.path)
                    ws.pending.clear(stored.path)
                except IndexFailure as exc:
                    ws.pending.mark(stored.path, stored.version, str(exc))
        return done

    # -- reindex ------------------------------------------------------------------------------------------------

    async def reindex(self) -> ReindexAnswer:
        """Rebuild both views from the experience JSON files; never touches experience or trajectory files."""
        ready = self.workspace.views_ready
        async with self.workspace.write_lock:
            ready.clear()  # searches wait instead of answering from half-built views
            self._rebuilds += 1
            try:
                return await self._rebuild()
            finally:
                ready.set()

    async def _rebuild(self) -> dict[str, Any]:
        """The body of ``reindex`` (caller holds the write lock and has paused searches)."""
        ws = self.workspace
        views = ws.views
        ws.mark_changed()
        started = time.monotonic()
        before = {view: views.indexed(view) for view in VIEW_NAMES}  # what changed by hand is out of step with it
        await views.clear()
        ws.pending.clear()
        valid: list[StoredExperience] = []
        invalid: list[dict[str, str]] = []
        for item in ws.files.scan():
            if isinstance(item, BadFile):
                invalid.append({"path": item.path, "version": item.version, "error": item.error})
                self.mark_invalid(item)
            else:
                valid.append(item)
        changed = {i["path"]: i["version"] for i in invalid} | {
            s.path: s.version for s in valid if any(before[v].get(s.path, ("",))[0] != s.version for v in VIEW_NAMES)
        }
        self.record_hand_changes(before, changed, {i["path"] for i in invalid} | {s.path for s in valid})
        indexed = await self.index_many(valid)
        await views.dump()
        if self.deferred:  # the start left the journal's open records to this pass
            self.settle_journal()
            self.deferred = False
        damaged, recreated = ws.journal.check_records()  # the start read only open records
        ws.damaged_metadata.update(damaged)
        if recreated:
            ws.logger.warning(
                f"procedure memory recreated {recreated} missing markers of the journal's path index "
                "(operations/paths/): the versions of those records were missing from histories"
            )
        ws.damaged_metadata.update(ws.checkpoints.check_records())  # only their imports read them
        compacted = self.retention.sweep()
        invalid_paths = {i["path"] for i in invalid}
        failed = ws.pending.entries(p for p in ws.pending if p not in invalid_paths)
        return {
            "status": "complete" if not failed else "incomplete",
            "indexed": len(indexed),
            "invalid_files": invalid,
            "pending_indexes": failed,
            "damaged_metadata": self.damaged_records(),
            "journal_records_compacted": compacted,
            "journal_markers_recreated": recreated,
            "seconds": round(time.monotonic() - started, 3),
        }

    async def without_rebuild(self, search: Callable[[], Awaitable[T]]) -> T:
        """``await search()`` on complete views: wait while a reindex runs, and search again when one overlapped."""
        ready = self.workspace.views_ready
        while True:
            await ready.wait()
            rebuilds = self._rebuilds
            result = await search()
            if rebuilds == self._rebuilds and ready.is_set():
                return result

    # -- pending files ------------------------------------------------------------------------------------------

    def mark_invalid(self, item: BadFile) -> None:
        """An invalid file is excluded from both views and reported as pending until it is fixed."""
        self.workspace.pending.mark(item.path, item.version, f"invalid experience: {item.error}")

    def damaged_records(self) -> list[dict[str, str]]:
        """Damaged metadata records that were skipped and are still in place (not yet set aside by their import)."""
        ws = self.workspace
        return [
            {"path": ws.relative(path), "error": cause, "fix": damaged_fix(Path(path))}
            for path, cause in sorted(ws.damaged_metadata.items())
            if Path(path).exists()
        ]


class PendingRetries:
    """Background rounds that re-index pending valid files (searches start them; see ``maybe_start``)."""

    def __init__(self, recovery: Recovery) -> None:
        self.recovery = recovery
        self.last = 0.0  # when the last round (or the start) tried every pending file
        self._task: asyncio.Task | None = None

    async def maybe_start(self) -> None:
        """Start a round at most once per ``pending_retry_seconds`` and one round at a time. The round runs in the
        background under the write lock with the write timeout; the search that started it waits for it at most one
        search-embedding timeout, later searches do not wait."""
        ws = self.recovery.workspace
        if not ws.pending or (self._task is not None and not self._task.done()):
            return
        if time.monotonic() - self.last < ws.settings.pending_retry_seconds:
            return
        self.last = time.monotonic()
        self._task = asyncio.create_task(self._round())
        await asyncio.wait({self._task}, timeout=ws.settings.search_embedding_timeout_seconds)

    async def stop(self) -> None:
        """Cancel a round still running."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._task = None

    async def _round(self) -> None:
        recovery, ws = self.recovery, self.recovery.workspace
        try:
            async with ws.write_lock:
                self.last = time.monotonic()
                ws.mark_changed()
                retry = []
                for path in list(ws.pending):
                    item = ws.files.read(path)
                    if item is None:
                        ws.pending.clear(path)
                    elif isinstance(item, BadFile):
                        recovery.mark_invalid(item)
                    else:
                        retry.append(item)
                await recovery.index_many(retry)
        except Exception as exc:  # a structural failure: the files stay pending; the next round tries again
            ws.logger.exception(f"procedure memory: retrying pending indexes failed: {exc}")
