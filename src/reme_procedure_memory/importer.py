"""The trajectory import: arguments, the byte-exact copy with its reservation and checksum, the checkpoint and its
fingerprint, then the extraction over the remaining segments.

Contract of an import keyed by ``request_id``:

* the original's bytes are copied to ``<session_dir>/<trajectory_subdir>/<filename>`` (``-2``, ``-3``, ... before the
  last extension when the name is taken on disk or reserved by another import), after a reservation record that
  holds the name and the SHA-256; files over ``max_file_bytes`` are refused before anything is copied;
* the same request id reuses the copy (verified against its checksum) and the checkpoint; a still existing original
  with other bytes, another file/filename, or other segmentation settings fail explicitly without changing anything;
* malformed or unsupported content answers ``incomplete`` and keeps the copy.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import shlex
import time
from pathlib import Path, PurePosixPath
from typing import Any

from reme.steps.file_io import validate_filename_component

from . import __version__
from .extraction import Extraction, ExtractionStopped, make_progress
from .formats import MalformedTrajectory, UnsupportedTrajectory, decode_trajectory, trajectory_format
from .schema import ErrorCode, ProcedureError
from .segmenter import SEGMENTER_VERSION, SegmentationError, segment
from .paths import check_directory
from .store import COPIED, ImportRecord, allocate_copy_name, publish_copy
from .tokens import TokenizerUnavailable


MAX_FILENAME_BYTES = 200  # leaves room under NAME_MAX (255) for "-N" and the atomic writer's ".<name>.<rand>.tmp"


def copy_original(memory, source: str, filename: str, request_id: str, source_id: str) -> ImportRecord:
    """Reserve a name, copy the original byte-exactly, verify it (or verify and reuse an earlier copy)."""
    original = Path(source)
    registry = memory.imports
    record = registry.get(request_id)
    if record is not None and (record.source, record.filename) != (source, filename):
        raise ProcedureError(
            "request_id_conflict",
            f"request_id {request_id!r} was used for file={record.source} filename={record.filename}; resume "
            "with the same file and filename, or use a new request_id.",
            request_id=request_id,
        )
    data = None
    if original.exists():
        if not original.is_file():
            raise ProcedureError(ErrorCode.INVALID_ARGUMENT, f"file={source} is not a regular file.")
        size = original.stat().st_size
        if size > memory.settings.max_file_bytes:
            raise ProcedureError(
                "file_too_large",
                f"file={source} has {size} bytes; the limit is {memory.settings.max_file_bytes} "
                "(components.procedure_memory.default.max_file_bytes). Nothing was copied.",
            )
        data = original.read_bytes()
        if record is not None and hashlib.sha256(data).hexdigest() != record.sha256:
            raise ProcedureError(
                "original_changed",
                f"file={source} changed since request_id {request_id!r} copied it (checksum differs); "
                "changed bytes are rejected. Use a new request_id to import the new content.",
                request_id=request_id, path=record.path,
            )
    if record is None:
        if data is None:
            raise ProcedureError(ErrorCode.NOT_FOUND, f"file={source} does not exist.")
        directory = memory.workspace_path / memory.trajectory_rel_dir
        name = allocate_copy_name(directory, filename, registry.reserved_paths(), memory.trajectory_rel_dir)
        record = ImportRecord(
            request_id=request_id, source=source, filename=filename, path=f"{memory.trajectory_rel_dir}/{name}",
            sha256=hashlib.sha256(data).hexdigest(), size=len(data), source_id=source_id,
        )
        registry.put(record)  # the reservation keeps the name before the copy exists
    copy = memory.workspace_path / record.path
    existing = hashlib.sha256(copy.read_bytes()).hexdigest() if copy.is_file() else None
    if existing == record.sha256:  # a verified copy, also one published just before a crash left it RESERVED
        if record.status != COPIED:
            record.status = COPIED
            registry.put(record)
        return record
    if existing is not None and record.status != COPIED:
        raise ProcedureError(  # a file this import never wrote holds the reserved name: never overwrite it
            "copy_path_taken",
            f"{record.path} already exists with other bytes and was not written by request_id {request_id!r}; "
            "move that file away or import with a new request_id.",
            request_id=request_id, path=record.path,
        )
    if data is None:
        if existing is not None:
            raise ProcedureError(
                "copy_corrupted",
                f"The saved copy {record.path} no longer matches its recorded checksum and the original "
                f"file={source} is gone; it cannot be recovered.",
                request_id=request_id, path=record.path,
            )
        raise ProcedureError(
            ErrorCode.NOT_FOUND,
            f"file={source} does not exist and no verified copy was saved for request_id {request_id!r}; "
            "the original is required.",
            request_id=request_id,
        )
    check_directory(memory.workspace_path, str(PurePosixPath(record.path).parent), setting="the trajectory directory")
    publish_copy(copy, data)  # first copy, or the repair of our own copy from the unchanged original
    if hashlib.sha256(copy.read_bytes()).hexdigest() != record.sha256:
        raise ProcedureError(
            "copy_corrupted", f"The copy {record.path} does not match the original's checksum.",
            request_id=request_id, path=record.path,
        )
    record.status = COPIED
    registry.put(record)
    return record


def fingerprint(memory, record: ImportRecord) -> dict[str, Any]:
    """What fixes segmentation: a checkpoint resumes only under the same values."""
    return {
        "segmenter_version": SEGMENTER_VERSION,
        "tokenizer_source": memory.settings.tokenizer_source,
        "segment_tokens": memory.settings.token_limits.segment,
        "sha256": record.sha256,
    }


async def run_import(memory, wrapper, args: dict[str, Any]) -> dict[str, Any]:
    """Copy one local trajectory and run the extraction over its remaining segments (resumable by request_id).

    Every failure after the arguments are valid answers with the request id (generated or given) and the exact,
    shell-quoted command that resumes the import.
    """
    source, filename, request_id, hint, source_id = import_args(args)
    answer: dict[str, Any] = {"request_id": request_id, "filename": filename}
    resume = "reme start job=procedure_auto_memory " + " ".join(
        shlex.quote(arg) for arg in ('plugins=["procedure-memory"]', f"file={source}", f"filename={filename}",
                                     f"request_id={request_id}")
    )
    extraction: Extraction | None = None

    def incomplete(code: str, message: str) -> ProcedureError:
        progress = progress_of(memory, extraction) if extraction is not None else {}
        return ProcedureError(code, message, status="incomplete", **answer, **progress, resume=resume)

    try:
        record = await asyncio.to_thread(copy_original, memory, source, filename, request_id, source_id)
        answer["path"] = record.path
        data = await asyncio.to_thread((memory.workspace_path / record.path).read_bytes)
        try:
            text = decode_trajectory(data, filename)
        except UnsupportedTrajectory as exc:
            raise ExtractionStopped("unsupported_format", f"{exc}. The saved copy {record.path} is kept.") from None
        except MalformedTrajectory as exc:
            raise ExtractionStopped("malformed_input", f"{exc}. The saved copy {record.path} is kept.") from None
        answer["format"] = trajectory_format(filename)
        checkpoint = await load_checkpoint(memory, record, text, hint)
        if hint and hint != checkpoint.get("memory_hint"):  # a new focus applies to the remaining segments
            checkpoint["memory_hint"] = hint
            memory.checkpoints.put(request_id, checkpoint)
        extraction = Extraction(memory, wrapper, record, text, answer["format"], checkpoint, memory.checkpoints,
                                make_progress(memory.logger))
        if checkpoint["next_segment"] < len(checkpoint["segments"]):
            if wrapper is None:
                raise ExtractionStopped("agent_unavailable", "No agent_wrapper component is configured.")
            await extraction.run()
        checkpoint["status"] = "complete"
        memory.checkpoints.put(request_id, checkpoint)
    except ProcedureError as exc:
        if exc.status == "error":  # refused before anything could be resumed (conflicts, bad files): keep it so
            exc.details = {**answer, **exc.details}
            raise
        raise incomplete(exc.code, exc.message) from None
    except ExtractionStopped as exc:
        raise incomplete(exc.code, exc.message) from None
    except Exception as exc:  # unexpected (e.g. a disk full): still answer with the request id
        memory.logger.exception(f"procedure import {request_id} failed: {exc}")
        raise incomplete("internal_error", f"{type(exc).__name__}: {exc}") from None
    return {"status": "complete", **answer, **progress_of(memory, extraction)}


async def load_checkpoint(memory, record: ImportRecord, text: str, hint: str) -> dict[str, Any]:
    """The import's checkpoint: the saved one if its fingerprint matches, else (first run) a new one with the
    segment boundaries fixed once. Raises ExtractionStopped (incompatible, tokenizer, segmentation) changing nothing."""
    saved = memory.checkpoints.get(record.request_id)
    expected = fingerprint(memory, record)
    if saved is not None:
        if saved["fingerprint"] != expected:
            changed = {k: (saved["fingerprint"].get(k), v) for k, v in expected.items()
                       if saved["fingerprint"].get(k) != v}
            raise ExtractionStopped(
                "incompatible_checkpoint",
                f"request_id {record.request_id!r} was processed with different segmentation settings {changed} "
                "(recorded, current). Resume with the recorded settings (and the plugin version that created the "
                "checkpoint), or import with a new request_id. Nothing was changed.",
            )
        return saved
    try:
        bounds = await asyncio.to_thread(segment, text, memory.settings.token_limits.segment, memory.tokens.count)
    except TokenizerUnavailable as exc:
        raise ExtractionStopped(ErrorCode.TOKENIZER_UNAVAILABLE, str(exc)) from None
    except SegmentationError as exc:
        raise ExtractionStopped("segmentation_failed", str(exc)) from None
    checkpoint = {
        "request_id": record.request_id, "fingerprint": expected, "plugin_version": __version__,
        "segments": bounds, "next_segment": 0, "summary": "", "memory_hint": hint,
        "saved_reply": None, "status": "processing",
    }
    memory.checkpoints.put(record.request_id, checkpoint)
    return checkpoint


def progress_of(memory, extraction: Extraction) -> dict[str, Any]:
    """Segments done, experiences written and writes still pending, for the answer."""
    checkpoint = extraction.checkpoint
    paths = {op.path for op in memory.journal.records(extraction.record.request_id)}
    return {
        "segments": {"done": checkpoint["next_segment"], "total": len(checkpoint["segments"])},
        "experiences": extraction.written(),
        "pending_writes": [memory.pending_entry(p) for p in sorted(paths & set(memory.pending))],
    }



def import_args(args: dict[str, Any]) -> tuple[str, str, str, str, str]:
    file, filename = args.get("file"), args.get("filename")
    if not isinstance(file, str) or not file.strip():
        raise ProcedureError(ErrorCode.INVALID_ARGUMENT, "`file` is required: the path of the local trajectory.")
    if not isinstance(filename, str) or not filename:
        raise ProcedureError(ErrorCode.INVALID_ARGUMENT, "`filename` is required, e.g. filename=run.jsonl.")
    problem = validate_filename_component(filename, kind="filename")
    if problem:
        raise ProcedureError(ErrorCode.INVALID_ARGUMENT, problem)
    size = len(filename.encode("utf-8"))
    if size > MAX_FILENAME_BYTES:
        raise ProcedureError(
            ErrorCode.INVALID_ARGUMENT,
            f"`filename` has {size} bytes in UTF-8; at most {MAX_FILENAME_BYTES} (file systems allow 255, and the "
            "copy may need a -2, -3, ... suffix and a temporary name). Give a shorter filename; nothing was reserved.",
        )
    request_id = args.get("request_id")
    if request_id is None or request_id == "":
        request_id = f"req-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"
    if isinstance(request_id, (int, float)) and not isinstance(request_id, bool):
        request_id = str(request_id)
    if not isinstance(request_id, str) or len(request_id) > 128 or not request_id.strip():
        raise ProcedureError(ErrorCode.INVALID_ARGUMENT, "`request_id` must be a string of 1-128 characters.")
    hint = args.get("memory_hint") or ""
    source_id = args.get("source_id") or ""
    if not isinstance(hint, str) or not isinstance(source_id, (str, int)):
        raise ProcedureError(ErrorCode.INVALID_ARGUMENT, "`memory_hint` and `source_id` must be strings.")
    return str(Path(file).expanduser().absolute()), filename, request_id, hint, str(source_id)
