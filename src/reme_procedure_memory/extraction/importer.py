"""The trajectory import: arguments, the copy, the checkpoint and its fingerprint, then the extraction over the
remaining segments.

Contract of an import keyed by ``request_id``:

* before anything is copied, the original is screened (``copies.screen_original``: extension, size, an empty,
  binary or non-UTF-8 file answer ``rejected`` and leave nothing behind), then the model's settings, the embedding
  provider and the tokenizer are checked (``preflight.py``); neither for an import already complete; a failure
  answers ``error`` and changes nothing;
* the original is copied byte-exactly under a reservation and verified (``copies.py``); the same request id reuses
  the copy and the checkpoint; other segmentation settings fail explicitly without changing anything;
* content found malformed while reading the copy (JSON, JSONL structure) answers ``rejected`` — the status the
  imports listing gives it — and keeps the copy, without a resume command (the copy cannot change, so resuming
  cannot succeed);
* every resumable failure answers ``incomplete`` with the request id, the progress so far, the exact command that
  resumes it (what makes it the same import) and the names of the settings it reads from the environment
  (``resume.py``); a spent iteration budget names the setting and the resume command raises it;
* a completed import run again answers ``complete`` with ``already_complete: true`` and a ``note`` that nothing
  was done, whatever the current settings;
* an import whose original's bytes an earlier import (another request id) copied already says so
  (``same_bytes_as``, ``note``): new imports are not deduplicated, only told;
* SIGINT or SIGTERM during the import (``interrupts`` holds the signal) ends it with ``ImportInterrupted``: the
  ``incomplete`` answer with its resume command; every record stays as its last atomic write left it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..answers import ImportAnswer
from ..errors import (
    DamagedRecord,
    ErrorCode,
    ExtractionStopped,
    ImportInterrupted,
    MalformedTrajectory,
    ProcedureError,
    SegmentationError,
    StorageError,
    TokenizerUnavailable,
    UnsupportedTrajectory,
    storage_failure,
)
from ..interrupts import signal_name
from ..storage.checkpoints import COMPLETE, Checkpoint
from ..storage.format import IMPORTS_DIR, OPERATIONS_DIR, PROCESSING_DIR, SEGMENTER_VERSION
from ..storage.imports import ImportRecord
from ..tokens import SpanCounter
from .copies import REJECTED, copy_original, rejected_code, screen_original
from .formats import decode_trajectory, trajectory_format
from .loop import Extraction, make_progress
from .preflight import preflight
from .resume import resume_fields
from .segmenter import segment_counted

if TYPE_CHECKING:
    from ..operations.reads import Reads
    from ..operations.recovery import Recovery
    from ..operations.retention import HistoryRetention
    from ..operations.attempts import AttemptGrants
    from ..workspace import Workspace


def fingerprint(workspace: Workspace, record: ImportRecord) -> dict[str, Any]:
    """What fixes segmentation: a checkpoint resumes only under the same values."""
    return {
        "segmenter_version": SEGMENTER_VERSION,
        "tokenizer_source": workspace.settings.tokenizer_source,
        "segment_tokens": workspace.settings.token_limits.segment,
        "sha256": record.sha256,
    }


class Importer:
    """``procedure_auto_memory`` of one component: one import at a time per process (``Workspace.import_lock``),
    after a start that deferred its reconciliation has reconciled; a complete import's records are then bounded
    (``HistoryRetention.compact_import``)."""

    def __init__(
        self,
        workspace: Workspace,
        app_context,
        grants: AttemptGrants,
        reads: Reads,
        recovery: Recovery,
        retention: HistoryRetention,
    ) -> None:
        self.workspace = workspace
        self.app_context = app_context
        self.grants = grants
        self.reads = reads
        self.recovery = recovery
        self.retention = retention

    async def run(self, wrapper, args, interrupts: list[int] | None = None) -> dict[str, Any]:
        """Copy one local trajectory and extract from it (validated ``args``; see ``run_import``)."""
        ws = self.workspace
        await self.recovery.ensure_reconciled()
        async with ws.import_lock:
            ws.importing.add(args.request_id)
            try:
                answer = await run_import(ws, self.app_context, self.grants, self.reads, wrapper, args, interrupts)
            finally:
                ws.importing.discard(args.request_id)
            if answer.get("status") == "complete":  # its records are needed no more for retries: apply the bound
                async with ws.write_lock:
                    await asyncio.to_thread(self.retention.compact_import, args.request_id)
            return answer


async def run_import(
    workspace: Workspace,
    app_context,
    grants: AttemptGrants,
    reads: Reads,
    wrapper,
    args,
    interrupts: list[int] | None = None,
) -> ImportAnswer:
    """Copy one local trajectory and run the extraction over its remaining segments (resumable by request_id);
    ``args``: the job's validated arguments (``file``, ``filename``, ``request_id``, ``memory_hint``, ``source_id``);
    ``interrupts``: filled with the signal number by whoever cancels this task on SIGINT/SIGTERM.

    Every failure after the arguments are valid answers with the request id (generated or given) and, when resuming
    can succeed, the exact, shell-quoted command that resumes the import.
    """
    source, filename, request_id = str(Path(args.file).expanduser().absolute()), args.filename, args.request_id
    hint, source_id = args.memory_hint, args.source_id
    answer: dict[str, Any] = {"request_id": request_id, "filename": filename}
    extraction: Extraction | None = None

    def incomplete(code: ErrorCode, message: str, resumable: bool = True, **details: Any) -> ProcedureError:
        progress = progress_of(workspace, extraction) if extraction is not None else {}
        changes = {}
        if code == ErrorCode.AGENT_BUDGET_EXHAUSTED:  # resuming with the same budget would stop the same way
            key, now = workspace.setting("extraction.max_iters"), workspace.settings.extraction.max_iters
            changes[key] = 2 * now
            message += f" Raise {key} (now {now}); the resume command below uses {2 * now}."
        resume = resume_fields(app_context, source, filename, request_id, changes) if resumable else {}
        return ProcedureError(code, message, status="incomplete", **answer, **progress, **details, **resume)

    try:
        saved = workspace.checkpoints.get(request_id)
        if saved is None or saved.status != COMPLETE:  # a completed import needs none of them
            await asyncio.to_thread(screen_original, workspace, source, filename, request_id)
            await preflight(workspace, wrapper, request_id)
        record = await asyncio.to_thread(copy_original, workspace, source, filename, request_id, source_id)
        answer["path"] = record.path
        answer.update(await asyncio.to_thread(same_bytes, workspace, record))
        data = await asyncio.to_thread((workspace.root / record.path).read_bytes)
        try:
            text = decode_trajectory(data, filename)
        except (UnsupportedTrajectory, MalformedTrajectory) as exc:
            code = rejected_code(exc)
            if record.rejected != code:  # the listing tells it from a resumable stop
                record.rejected = code
                await asyncio.to_thread(workspace.imports.put, record)
            raise ProcedureError(
                code,
                f"{exc}. The saved copy {record.path} is kept (malformed input keeps its copy); this content "
                "cannot be imported as it is: fix the file and import it with a new request_id. To remove the copy "
                f"and this import: reme start job=procedure_delete path={record.path} (one-shot).",
                status=REJECTED,
                **answer,
            ) from None
        answer["format"] = trajectory_format(filename)
        checkpoint = await load_checkpoint(workspace, record, text, hint)
        extraction = Extraction(
            workspace,
            grants,
            reads.search,
            app_context.jobs,
            wrapper,
            record,
            text,
            answer["format"],
            checkpoint,
            make_progress(workspace.logger),
        )
        if checkpoint.status == COMPLETE:  # nothing to do, whatever the settings of this run
            return {
                "status": "complete",
                **answer,
                **progress_of(workspace, extraction),
                "already_complete": True,
                "note": f"request_id {request_id!r} was complete already: nothing was done again (no model "
                "call); the segments and experiences are those of its run. Import the file with a new "
                "request_id to extract from it again.",
            }
        if hint and hint != checkpoint.memory_hint:  # a new focus applies to the remaining segments
            checkpoint.memory_hint = hint
            workspace.checkpoints.put(checkpoint)
        if not checkpoint.done:
            await extraction.run()
        checkpoint.status = COMPLETE
        workspace.checkpoints.put(checkpoint)
    except asyncio.CancelledError:
        if not interrupts:  # not a signal of ours: cancellation as usual
            raise
        asyncio.current_task().uncancel()  # absorbed: the task goes on to answer and close the application
        error = incomplete(
            ErrorCode.INTERRUPTED,
            f"Interrupted by {signal_name(interrupts[0])}. Every record is as its last atomic write "
            "left it; run the `resume` command to continue.",
        )
        raise ImportInterrupted(error.answer(), interrupts[0]) from None
    except ProcedureError as exc:
        if exc.status in ("error", REJECTED):  # refused before anything could be resumed (conflicts, bad files)
            exc.details = {**answer, **exc.details}
        raise  # or an incomplete answer made above
    except ExtractionStopped as exc:
        raise incomplete(exc.code, exc.message, **exc.details) from None
    except DamagedRecord as exc:
        workspace.logger.warning(f"procedure import {request_id}: {exc}")
        raise incomplete(ErrorCode.METADATA_DAMAGED, f"{exc}. {damaged_record_fix(exc)}") from None
    except StorageError as exc:  # a full disk or an unwritable directory while copying or checkpointing
        workspace.logger.exception(f"procedure import {request_id} failed: {exc}")
        code, message = storage_failure(exc)
        raise incomplete(code, f"{message} Then resume with the `resume` command.") from None
    except Exception as exc:  # unexpected: still answer with the request id
        workspace.logger.exception(f"procedure import {request_id} failed: {exc}")
        raise incomplete(ErrorCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}") from None
    return {"status": "complete", **answer, **progress_of(workspace, extraction)}


async def load_checkpoint(workspace: Workspace, record: ImportRecord, text: str, hint: str) -> Checkpoint:
    """The import's checkpoint: the saved one if it is complete or its fingerprint matches, else (first run) a new one
    with the segment boundaries (and their exact token counts) fixed once. Raises ExtractionStopped (incompatible,
    tokenizer, segmentation) changing nothing."""
    saved = workspace.checkpoints.get(record.request_id)
    expected = fingerprint(workspace, record)
    if saved is not None and saved.status == COMPLETE:
        return saved
    if saved is not None:
        if saved.fingerprint != expected:
            changed = {k: (saved.fingerprint.get(k), v) for k, v in expected.items() if saved.fingerprint.get(k) != v}
            raise ExtractionStopped(
                ErrorCode.INCOMPATIBLE_CHECKPOINT,
                f"request_id {record.request_id!r} was processed with different segmentation settings {changed} "
                "(recorded, current). Resume with the recorded settings (and the plugin version that created the "
                "checkpoint), or import with a new request_id. Nothing was changed.",
            )
        return saved
    try:
        spans = SpanCounter(workspace.tokens, text)
        budget = workspace.settings.token_limits.segment
        counted = await asyncio.to_thread(segment_counted, text, budget, spans.count)
    except TokenizerUnavailable as exc:
        raise ExtractionStopped(ErrorCode.TOKENIZER_UNAVAILABLE, str(exc)) from None
    except SegmentationError as exc:
        raise ExtractionStopped(ErrorCode.SEGMENTATION_FAILED, str(exc)) from None
    checkpoint = Checkpoint(
        request_id=record.request_id,
        path=record.path,
        fingerprint=expected,
        plugin_version=__version__,
        segments=[[start, end] for start, end, _ in counted],
        memory_hint=hint,
        segment_counts=[tokens for _, _, tokens in counted],  # exact; the context check reuses them
    )
    workspace.checkpoints.put(checkpoint)
    return checkpoint


def same_bytes(workspace: Workspace, record: ImportRecord) -> dict[str, Any]:
    """``same_bytes_as`` (``[{request_id, path}]``) and a ``note`` when other imports copied the same bytes (new
    imports are not deduplicated: the answer only says so); {} otherwise. Damaged records are skipped."""
    records, _ = workspace.imports.scan()
    earlier = [
        {"request_id": r.request_id, "path": r.path}
        for r in sorted(records, key=lambda r: r.created_at)
        if r.sha256 == record.sha256 and r.request_id != record.request_id
    ]
    if not earlier:
        return {}
    named = ", ".join(f"{e['request_id']} ({e['path']})" for e in earlier[:3]) + (" ..." if len(earlier) > 3 else "")
    return {
        "same_bytes_as": earlier,
        "note": f"These bytes were imported before as {named}; this import is a new one all the same (imports "
        "are not deduplicated). To resume an import, give its request_id.",
    }


def progress_of(workspace: Workspace, extraction: Extraction) -> dict[str, Any]:
    """Segments done, experiences written and writes still pending, for the answer."""
    checkpoint = extraction.checkpoint
    segments = {"segments": {"done": checkpoint.next_segment, "total": checkpoint.total}}
    try:
        paths = {op.path for op in workspace.journal.records(extraction.record.request_id)}
        written = extraction.written()
    except DamagedRecord:  # reported by the failure this progress accompanies; set aside by now
        return segments
    return {
        **segments,
        "experiences": written,
        "pending_writes": workspace.pending.entries(paths),
    }


def damaged_record_fix(exc: DamagedRecord) -> str:
    """What to do after one of an import's metadata records was found damaged (and set aside)."""
    kind = exc.path.parent.name if exc.path.parent.name in (IMPORTS_DIR, PROCESSING_DIR) else OPERATIONS_DIR
    if kind == IMPORTS_DIR:
        return (
            "Run the same command again: the import record is rebuilt from the copy this request_id saved "
            "(no second copy is made)."
        )
    if kind == PROCESSING_DIR:
        return (
            "Run the same command again to process the trajectory again from segment 1 (experiences written so "
            "far are kept, and the agent sees them); to continue where it stopped instead, repair the file and "
            "move it back to its original name first."
        )
    return (
        "Run the same command again to continue; this import's operation ledger lacks that one record (the "
        "experience files are unaffected)."
    )
