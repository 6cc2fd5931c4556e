"""The trajectory import: arguments, the byte-exact copy with its reservation and checksum, the checkpoint and its
fingerprint, then the extraction over the remaining segments.

Contract of an import keyed by ``request_id``:

* the original's bytes are copied to ``<session_dir>/<trajectory_subdir>/<filename>`` (``-2``, ``-3``, ... before the
  last extension when the name is taken on disk or reserved by another import), after a reservation record that
  holds the name and the SHA-256; files over ``max_file_bytes`` are refused before anything is copied;
* the same request id reuses the copy (verified against its checksum) and the checkpoint; a still existing original
  with other bytes, another file/filename, or other segmentation settings fail explicitly without changing anything;
* malformed or unsupported content answers ``incomplete`` and keeps the copy;
* a lost import record (damaged and set aside, or deleted by hand) is rebuilt from the verified copy this request id
  made (found through its checkpoint), never by copying the original a second time;
* every resumable failure answers the exact command that resumes it, with the workspace and every setting override
  of this process (``resume_command``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shlex
from pathlib import Path, PurePosixPath
from typing import Any

from reme.config import resolve_app_config
from reme.plugin import resolve_plugin_runtime

from . import __version__
from .arguments import AutoMemoryArguments, validate
from .extraction import Extraction, ExtractionStopped, make_progress
from .formats import MalformedTrajectory, UnsupportedTrajectory, decode_trajectory, trajectory_format
from .schema import ErrorCode, ProcedureError
from .segmenter import SEGMENTER_VERSION, SegmentationError, segment_counted
from .paths import check_directory
from .store import (
    COPIED,
    DamagedRecord,
    ImportRecord,
    StorageError,
    allocate_copy_name,
    numbered_name,
    publish_copy,
    storage_failure,
)
from .tokens import SpanCounter, TokenizerUnavailable


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
        record = rebuild_lost_record(memory, request_id, source, filename, source_id, data)
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
    memory.damaged_metadata.update(registry.damaged)
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


def rebuild_lost_record(memory, request_id: str, source: str, filename: str, source_id: str,
                        data: bytes | None) -> ImportRecord | None:
    """The import record of a request id that existed before (its checkpoint or a set-aside damaged record proves
    it) but whose record is gone: rebuilt around the copy it made — the checkpoint's path, else the first
    unreserved ``filename``, ``-2``, ... holding the same bytes — so a resume never copies the original again.
    None when there is no such import or no such copy."""
    registry = memory.imports
    checkpoint = memory.checkpoints.get(request_id)
    if checkpoint is None and not registry.was_set_aside(request_id):
        return None
    sha = hashlib.sha256(data).hexdigest() if data is not None else None
    if checkpoint is not None:
        saved = (checkpoint.get("fingerprint") or {}).get("sha256")
        if sha is not None and saved != sha:
            return None  # the checkpoint belongs to other bytes: the original-changed check applies later
        sha = saved
    if sha is None:
        return None
    directory, rel_dir = memory.workspace_path / memory.trajectory_rel_dir, memory.trajectory_rel_dir
    reserved = registry.reserved_paths()
    candidates = [checkpoint["path"]] if checkpoint is not None and checkpoint.get("path") else []
    number = 1
    while (directory / numbered_name(filename, number)).exists():
        candidates.append(f"{rel_dir}/{numbered_name(filename, number)}")
        number += 1
    for rel in dict.fromkeys(candidates):
        copy = memory.workspace_path / rel
        if rel in reserved or not copy.is_file() or hashlib.sha256(copy.read_bytes()).hexdigest() != sha:
            continue
        record = ImportRecord(request_id=request_id, source=source, filename=filename, path=rel, sha256=sha,
                              size=copy.stat().st_size, status=COPIED, source_id=source_id)
        registry.put(record)
        memory.logger.warning(f"procedure import {request_id}: rebuilt its lost import record around {rel}")
        return record
    return None


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
    extraction: Extraction | None = None

    def incomplete(code: str, message: str, **details: Any) -> ProcedureError:
        progress = progress_of(memory, extraction) if extraction is not None else {}
        return ProcedureError(code, message, status="incomplete", **answer, **progress, **details,
                              resume=resume_command(memory, source, filename, request_id))

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
        raise incomplete(exc.code, exc.message, **exc.details) from None
    except DamagedRecord as exc:
        memory.logger.warning(f"procedure import {request_id}: {exc}")
        raise incomplete("metadata_damaged", f"{exc}. {damaged_record_fix(exc)}") from None
    except StorageError as exc:  # a full disk or an unwritable directory while copying or checkpointing
        memory.logger.exception(f"procedure import {request_id} failed: {exc}")
        code, message = storage_failure(exc)
        raise incomplete(code, f"{message} Then resume with the `resume` command.") from None
    except Exception as exc:  # unexpected: still answer with the request id
        memory.logger.exception(f"procedure import {request_id} failed: {exc}")
        raise incomplete("internal_error", f"{type(exc).__name__}: {exc}") from None
    return {"status": "complete", **answer, **progress_of(memory, extraction)}


async def load_checkpoint(memory, record: ImportRecord, text: str, hint: str) -> dict[str, Any]:
    """The import's checkpoint: the saved one if its fingerprint matches, else (first run) a new one with the
    segment boundaries (and their exact token counts) fixed once. Raises ExtractionStopped (incompatible, tokenizer, segmentation) changing nothing."""
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
        spans = SpanCounter(memory.tokens, text)
        counted = await asyncio.to_thread(segment_counted, text, memory.settings.token_limits.segment, spans.count)
    except TokenizerUnavailable as exc:
        raise ExtractionStopped(ErrorCode.TOKENIZER_UNAVAILABLE, str(exc)) from None
    except SegmentationError as exc:
        raise ExtractionStopped("segmentation_failed", str(exc)) from None
    checkpoint = {
        "request_id": record.request_id, "path": record.path, "fingerprint": expected, "plugin_version": __version__,
        "segments": [(start, end) for start, end, _ in counted], "next_segment": 0, "summary": "", "memory_hint": hint,
        "segment_counts": [tokens for _, _, tokens in counted],  # exact; the context check reuses them
        "saved_reply": None, "status": "processing",
    }
    memory.checkpoints.put(record.request_id, checkpoint)
    return checkpoint


def progress_of(memory, extraction: Extraction) -> dict[str, Any]:
    """Segments done, experiences written and writes still pending, for the answer."""
    checkpoint = extraction.checkpoint
    segments = {"segments": {"done": checkpoint["next_segment"], "total": len(checkpoint["segments"])}}
    try:
        paths = {op.path for op in memory.journal.records(extraction.record.request_id)}
        written = extraction.written()
    except DamagedRecord:  # reported by the failure this progress accompanies; set aside by now
        return segments
    return {
        **segments,
        "experiences": written,
        "pending_writes": [memory.pending_entry(p) for p in sorted(paths & set(memory.pending))],
    }


def damaged_record_fix(exc: DamagedRecord) -> str:
    """What to do after one of an import's metadata records was found damaged (and set aside)."""
    kind = exc.path.parent.name if exc.path.parent.name in ("imports", "processing") else "operations"
    if kind == "imports":
        return ("Run the same command again: the import record is rebuilt from the copy this request_id saved "
                "(no second copy is made).")
    if kind == "processing":
        return ("Run the same command again to process the trajectory again from segment 1 (experiences written so "
                "far are kept, and the agent sees them); to continue where it stopped instead, repair the file and "
                "move it back to its original name first.")
    return ("Run the same command again to continue; this import's operation ledger lacks that one record (the "
            "experience files are unaffected).")


# -- the resume command ---------------------------------------------------------------------------------------------

_SECRET_KEYS = {"api_key", "app_secret", "authorization", "cookie", "password", "private_key", "secret", "token",
                "credential", "credentials"}
_SECRET_SUFFIXES = ("_access_key", "_api_key", "_password", "_private_key", "_secret", "_token")
_PATH_KEYS = ("metadata_dir", "session_dir")  # application settings that move the plugin's files


def _is_secret(key: str) -> bool:
    """ReMe's own rule for secret config keys (``app_config`` redaction), plus credential blocks."""
    normalized = key.lower().replace("-", "_")
    return normalized in _SECRET_KEYS or normalized.endswith(_SECRET_SUFFIXES)


def _leaves(tree: Any, prefix: tuple[str, ...] = ()):
    """``(path, value)`` of every non-mapping value of a nested mapping."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _leaves(value, (*prefix, str(key)))
    else:
        yield prefix, tree


def _lookup(tree: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return _MISSING
        tree = tree[key]
    return tree


_MISSING = object()


def _cli_value(value: Any) -> str:
    """A value as ReMe's CLI parses it back (``key=value``: JSON scalars, lists and objects)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float, str)):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def _baseline_config(plugins: list[str]) -> dict:
    """The configuration a bare ``reme start plugins=...`` resolves to here (default.yaml + plugin defaults)."""
    try:
        return resolve_plugin_runtime(resolve_app_config(log_config=False, plugins=plugins)).config
    except ValueError:  # e.g. default.yaml references an undefined environment variable
        return resolve_plugin_runtime({"plugins": plugins}).config


def cli_overrides(memory) -> list[str]:
    """``key=value`` arguments that reproduce this process's effective configuration for an import: the workspace,
    the plugins, the application paths and every ``components...`` value that differs from what a bare command
    resolves to (CLI overrides, ``config=`` files, environment-derived values). Secret keys are never printed (they
    come from the environment or ``.env`` as before)."""
    config = memory.app_context.app_config
    effective = config.model_dump()
    baseline = _baseline_config(list(config.plugins))
    args = [f"workspace_dir={config.workspace_dir}", f"plugins={json.dumps(list(config.plugins))}"]
    args += [f"{key}={effective[key]}" for key in _PATH_KEYS if effective.get(key) != baseline.get(key, _MISSING)]
    for path, value in _leaves(effective.get("components") or {}, ("components",)):
        if any(_is_secret(key) or "." in key or "=" in key for key in path):
            continue
        if value == {} or _lookup(baseline, path) == value:
            continue
        args.append(f"{'.'.join(path)}={_cli_value(value)}")
    return args


def resume_command(memory, source: str, filename: str, request_id: str) -> str:
    """The exact, shell-quoted command that resumes this import in this workspace with these settings."""
    words = ["reme", "start", "job=procedure_auto_memory", *cli_overrides(memory), f"file={source}",
             f"filename={filename}", f"request_id={request_id}"]
    return " ".join(shlex.quote(word) for word in words)



def import_args(args: dict[str, Any]) -> tuple[str, str, str, str, str]:
    """(absolute source path, copy filename, request id, memory hint, source id), validated by their model."""
    valid = validate(AutoMemoryArguments, args)
    source = str(Path(valid.file).expanduser().absolute())
    return source, valid.filename, valid.request_id, valid.memory_hint, valid.source_id
