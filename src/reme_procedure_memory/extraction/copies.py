"""The byte-exact copy of an original trajectory, held by a reservation record before it exists.

Contract of ``copy_original(workspace, source, filename, request_id, source_id)``, keyed by ``request_id``:

* ``screen_original`` runs first, for a new import (no record of its request id): an unsupported extension, a file
  over ``max_file_bytes``, an empty, binary (NUL bytes) or non-UTF-8 file is refused before anything is reserved
  or copied (``rejected``, or ``file_too_large``: an ``error``), so such an import leaves nothing behind;
* the original's bytes are copied to ``<session_dir>/<trajectory_subdir>/<filename>`` (``-2``, ``-3``, ... before the
  last extension when the name is taken on disk or reserved by another import), after a reservation record that
  holds the name and the SHA-256; files over ``max_file_bytes`` are refused before anything is copied;
* the same request id reuses the copy (verified against its checksum); a still existing original with other bytes,
  or another file/filename, fail explicitly without changing anything; a file this import never wrote is never
  overwritten;
* a lost import record (damaged and set aside, or deleted by hand) is rebuilt from the verified copy this request id
  made (found through its checkpoint), never by copying the original a second time (``rebuild_lost_record``).

The files themselves are written by ``storage/imports.py`` (``ImportRegistry``, ``publish_copy``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ..errors import ErrorCode, MalformedTrajectory, ProcedureError, UnsupportedTrajectory
from ..storage.imports import COPIED, ImportRecord, publish_copy
from ..storage.paths import check_directory
from .formats import screen_text, trajectory_format

if TYPE_CHECKING:
    from ..workspace import Workspace

REJECTED = "rejected"  # the status of an import whose content can never be imported (answer and listing alike)


def rejected_code(exc: UnsupportedTrajectory | MalformedTrajectory) -> ErrorCode:
    """The answer code of a content check's failure."""
    return ErrorCode.UNSUPPORTED_FORMAT if isinstance(exc, UnsupportedTrajectory) else ErrorCode.MALFORMED_INPUT


def too_large(workspace: Workspace, source: str, size: int) -> ProcedureError:
    return ProcedureError(
        ErrorCode.FILE_TOO_LARGE,
        f"file={source} has {size} bytes; the limit is {workspace.settings.max_file_bytes} "
        "(components.procedure_memory.default.max_file_bytes). Nothing was copied.",
    )


def screen_original(workspace: Workspace, source: str, filename: str, request_id: str) -> None:
    """Refuse, before anything is reserved or copied, a new import whose original can never be imported: an
    unsupported extension, more than ``max_file_bytes``, an empty, binary or non-UTF-8 file (``formats.screen_text``)
    answers ``status: rejected`` (``file_too_large``: ``error``, a setting can change it) and leaves nothing behind.
    An import with a record (a resume) is left to ``copy_original`` and the read of its copy; so is an original that
    is missing or not a regular file (they answer for it)."""
    if workspace.imports.get(request_id) is not None:
        return
    original = Path(source)
    try:
        trajectory_format(filename)
        if not original.is_file():
            return
        size = original.stat().st_size
        if size > workspace.settings.max_file_bytes:
            raise too_large(workspace, source, size)
        screen_text(original.read_bytes(), filename)
    except (UnsupportedTrajectory, MalformedTrajectory) as exc:
        raise ProcedureError(
            rejected_code(exc),
            f"{exc}. Nothing was copied: this file cannot be imported as it is; convert it to "
            "text, Markdown, JSON or JSONL (UTF-8) and import that.",
            status=REJECTED,
            request_id=request_id,
            filename=filename,
        ) from None


def copy_original(workspace: Workspace, source: str, filename: str, request_id: str, source_id: str) -> ImportRecord:
    """Reserve a name, copy the original byte-exactly, verify it (or verify and reuse an earlier copy)."""
    original = Path(source)
    registry = workspace.imports
    record = registry.get(request_id)
    if record is not None and (record.source, record.filename) != (source, filename):
        raise ProcedureError(
            ErrorCode.REQUEST_ID_CONFLICT,
            f"request_id {request_id!r} was used for file={record.source} filename={record.filename}; resume "
            "with the same file and filename, or use a new request_id.",
            request_id=request_id,
        )
    data = None
    if original.exists():
        if not original.is_file():
            raise ProcedureError(ErrorCode.INVALID_ARGUMENT, f"file={source} is not a regular file.")
        size = original.stat().st_size
        if size > workspace.settings.max_file_bytes:
            raise too_large(workspace, source, size)
        data = original.read_bytes()
        if record is not None and hashlib.sha256(data).hexdigest() != record.sha256:
            raise ProcedureError(
                ErrorCode.ORIGINAL_CHANGED,
                f"file={source} changed since request_id {request_id!r} copied it (checksum differs); "
                "changed bytes are rejected. Use a new request_id to import the new content.",
                request_id=request_id,
                path=record.path,
            )
    if record is None:
        record = rebuild_lost_record(workspace, request_id, source, filename, source_id, data)
    if record is None:
        if data is None:
            raise ProcedureError(ErrorCode.NOT_FOUND, f"file={source} does not exist.")
        directory = workspace.root / workspace.trajectory_rel_dir
        name = allocate_copy_name(directory, filename, registry.reserved_paths(), workspace.trajectory_rel_dir)
        record = ImportRecord(
            request_id=request_id,
            source=source,
            filename=filename,
            path=f"{workspace.trajectory_rel_dir}/{name}",
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            source_id=source_id,
        )
        registry.put(record)  # the reservation keeps the name before the copy exists
    workspace.damaged_metadata.update(registry.damaged)
    copy = workspace.root / record.path
    existing = hashlib.sha256(copy.read_bytes()).hexdigest() if copy.is_file() else None
    if existing == record.sha256:  # a verified copy, also one published just before a crash left it RESERVED
        if record.status != COPIED:
            record.status = COPIED
            registry.put(record)
        return record
    if existing is not None and record.status != COPIED:
        raise ProcedureError(  # a file this import never wrote holds the reserved name: never overwrite it
            ErrorCode.COPY_PATH_TAKEN,
            f"{record.path} already exists with other bytes and was not written by request_id {request_id!r}; "
            "move that file away or import with a new request_id.",
            request_id=request_id,
            path=record.path,
        )
    if data is None:
        if existing is not None:
            raise ProcedureError(
                ErrorCode.COPY_CORRUPTED,
                f"The saved copy {record.path} no longer matches its recorded checksum and the original "
                f"file={source} is gone; it cannot be recovered.",
                request_id=request_id,
                path=record.path,
            )
        raise ProcedureError(
            ErrorCode.NOT_FOUND,
            f"file={source} does not exist and no verified copy was saved for request_id {request_id!r}; "
            "the original is required.",
            request_id=request_id,
        )
    check_directory(workspace.root, str(PurePosixPath(record.path).parent), setting="the trajectory directory")
    publish_copy(copy, data)  # first copy, or the repair of our own copy from the unchanged original
    if hashlib.sha256(copy.read_bytes()).hexdigest() != record.sha256:
        raise ProcedureError(
            ErrorCode.COPY_CORRUPTED,
            f"The copy {record.path} does not match the original's checksum.",
            request_id=request_id,
            path=record.path,
        )
    record.status = COPIED
    registry.put(record)
    return record


def rebuild_lost_record(
    workspace: Workspace, request_id: str, source: str, filename: str, source_id: str, data: bytes | None
) -> ImportRecord | None:
    """The import record of a request id that existed before (its checkpoint or a set-aside damaged record proves
    it) but whose record is gone: rebuilt around the copy it made — the checkpoint's path, else the first
    unreserved ``filename``, ``-2``, ... holding the same bytes — so a resume never copies the original again.
    None when there is no such import or no such copy."""
    registry = workspace.imports
    checkpoint = workspace.checkpoints.get(request_id)
    if checkpoint is None and not registry.was_set_aside(request_id):
        return None
    sha = hashlib.sha256(data).hexdigest() if data is not None else None
    if checkpoint is not None:
        saved = checkpoint.fingerprint.get("sha256")
        if sha is not None and saved != sha:
            return None  # the checkpoint belongs to other bytes: the original-changed check applies later
        sha = saved
    if sha is None:
        return None
    directory, rel_dir = workspace.root / workspace.trajectory_rel_dir, workspace.trajectory_rel_dir
    reserved = registry.reserved_paths()
    candidates = [checkpoint.path] if checkpoint is not None and checkpoint.path else []
    number = 1
    while (directory / numbered_name(filename, number)).exists():
        candidates.append(f"{rel_dir}/{numbered_name(filename, number)}")
        number += 1
    for rel in dict.fromkeys(candidates):
        copy = workspace.root / rel
        if rel in reserved or not copy.is_file() or hashlib.sha256(copy.read_bytes()).hexdigest() != sha:
            continue
        record = ImportRecord(
            request_id=request_id,
            source=source,
            filename=filename,
            path=rel,
            sha256=sha,
            size=copy.stat().st_size,
            status=COPIED,
            source_id=source_id,
        )
        registry.put(record)
        workspace.logger.warning(f"procedure import {request_id}: rebuilt its lost import record around {rel}")
        return record
    return None


def numbered_name(filename: str, number: int) -> str:
    """``run.jsonl`` -> ``run-2.jsonl`` (before the last extension); ``notes`` -> ``notes-2``."""
    if number == 1:
        return filename
    stem, dot, ext = filename.rpartition(".")
    if not dot or not stem:
        return f"{filename}-{number}"
    return f"{stem}-{number}.{ext}"


def allocate_copy_name(directory: Path, filename: str, taken: set[str], rel_dir: str) -> str:
    """The first of ``filename``, ``-2``, ``-3``, ... that neither exists in ``directory`` nor is reserved."""
    number = 1
    while True:
        name = numbered_name(filename, number)
        if not (directory / name).exists() and not (directory / name).is_symlink() and f"{rel_dir}/{name}" not in taken:
            return name
        number += 1
