"""Processing checkpoints: one typed, versioned JSON record per request id, replaced atomically at every step.

A ``Checkpoint`` saves what a resume needs: the segment boundaries (and their exact token counts) fixed once, the
position, the bounded rolling summary (and its token count), the processing fingerprint, the saved final reply of the
segment being processed, per segment its attempts and uncorrected failed writes, and the import's status. Its
``format`` says which layout the record has (``format.CHECKPOINT_FORMAT``); records written before the format
existed read as format 1 (the same fields). A record with unknown fields, missing required ones or wrong types is damaged (``DamagedRecord``), like
one that does not parse.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import DamagedRecord
from .atomic import write_json
from .format import CHECKPOINT_FORMAT, keyed_file
from .records import load_owned_record, read_json

PROCESSING, COMPLETE = "processing", "complete"


@dataclass
class Checkpoint:
    """The processing state of one import (see the module docstring)."""

    request_id: str
    path: str  # the copy, workspace-relative
    fingerprint: dict[str, Any]  # what fixes segmentation (importer.fingerprint)
    plugin_version: str
    segments: list[list[int]]  # [start, end) character offsets of each segment
    next_segment: int = 0
    summary: str = ""
    summary_tokens: int | None = None  # exact tokens of ``summary`` when validated
    memory_hint: str = ""
    segment_counts: list[int] | None = None  # exact tokens of each segment (older records: None)
    saved_reply: dict[str, Any] | None = None  # {segment, text} of a completed reply not yet advanced
    status: str = PROCESSING
    attempts: dict[str, int] = field(default_factory=dict)  # segment -> agent runs started
    failed_writes: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # segment -> uncorrected failures
    format: int = CHECKPOINT_FORMAT

    @classmethod
    def from_record(cls, path: Path, record: dict[str, Any]) -> Checkpoint:
        """The checkpoint of a parsed record; DamagedRecord when its fields do not fit."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(record) - known)
        if unknown:
            raise DamagedRecord(path, f"unexpected fields {unknown}")
        try:
            checkpoint = cls(**record)
        except TypeError as exc:
            raise DamagedRecord(path, f"missing fields: {exc}") from None
        if checkpoint.format != CHECKPOINT_FORMAT:
            raise DamagedRecord(
                path,
                f"checkpoint format {checkpoint.format!r} is not {CHECKPOINT_FORMAT} (written by "
                "another plugin version)",
            )
        if not (
            isinstance(checkpoint.segments, list)
            and isinstance(checkpoint.next_segment, int)
            and isinstance(checkpoint.summary, str)
            and isinstance(checkpoint.fingerprint, dict)
        ):
            raise DamagedRecord(path, "fields of the wrong type")
        checkpoint.segments = [list(span) for span in checkpoint.segments]
        return checkpoint

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    def span(self, index: int) -> tuple[int, int]:
        start, end = self.segments[index]
        return start, end

    @property
    def total(self) -> int:
        return len(self.segments)

    @property
    def done(self) -> bool:
        return self.next_segment >= len(self.segments)


class CheckpointStore:
    """Processing checkpoints under ``processing/``, one JSON record per request id, replaced atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, request_id: str) -> Path:
        return keyed_file(self.directory, request_id)

    def get(self, request_id: str) -> Checkpoint | None:
        """The checkpoint of ``request_id``, or None; a damaged one is set aside and raised (DamagedRecord)."""
        path = self.path(request_id)
        return load_owned_record(path, lambda **record: Checkpoint.from_record(path, record))

    def peek(self, name: str) -> Checkpoint | None:
        """The checkpoint in file ``name`` of the directory (``path(request_id).name``), or None, read only: a damaged
        one is raised (DamagedRecord) and left in place."""
        path = self.directory / name
        record = read_json(path)
        return Checkpoint.from_record(path, record) if record is not None else None

    def names(self) -> set[str]:
        """The file names of every checkpoint record."""
        return {path.name for path in self.directory.glob("*.json")} if self.directory.is_dir() else set()

    def put(self, checkpoint: Checkpoint) -> None:
        write_json(self.path(checkpoint.request_id), checkpoint.to_record())

    def completed(self, request_id: str) -> bool:
        """Whether the import ``request_id`` is complete, read without setting anything aside: a missing or damaged
        checkpoint is not complete (only the import it belongs to sets a damaged one aside)."""
        path = self.path(request_id)
        try:
            record = read_json(path)
            return record is not None and Checkpoint.from_record(path, record).status == COMPLETE
        except DamagedRecord:
            return False

    def check_records(self) -> dict[str, str]:
        """Every checkpoint that cannot be read (path -> cause): the full check a reindex reports (a checkpoint is
        read, and a damaged one set aside, only by the import it belongs to)."""
        damaged = {}
        for path in sorted(self.directory.glob("*.json")) if self.directory.is_dir() else []:
            try:
                record = read_json(path)
                if record is not None:
                    Checkpoint.from_record(path, record)
            except DamagedRecord as exc:
                damaged[str(path)] = exc.cause
        return damaged
