"""Import records: one per request id, the reservation of a copy's name and its checksum, and the copy's publish.

``ImportRegistry.scan`` reads every record without changing anything (the imports listing): a record that cannot be
read, or whose fields have other types than an import writes, is reported, never set aside.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..errors import DamagedRecord
from . import atomic
from .atomic import write_json
from .format import keyed_file
from .records import has_set_aside, load_owned_record, load_record

RESERVED, COPIED = "reserved", "copied"


@dataclass
class ImportRecord:
    """One import, keyed by request id: the original path and name, the reserved copy path and its checksum."""

    request_id: str
    source: str  # absolute path of the original file, as given
    filename: str
    path: str  # workspace-relative path of the copy
    sha256: str
    size: int
    status: str = RESERVED  # RESERVED until the copy is published and verified, then COPIED
    source_id: str = ""
    created_at: float = field(default_factory=time.time)
    # the answer code when the copy's content cannot be imported (malformed_input, unsupported_format): the copy
    # cannot change, so the import can never be resumed; "" otherwise (and in records written before this field)
    rejected: str = ""

    def check_types(self, path: Path) -> "ImportRecord":
        """This record, if every field has the type an import writes; DamagedRecord otherwise."""
        for spec in fields(self):
            value = getattr(self, spec.name)
            number = spec.name in ("size", "created_at")
            expected = (int, float) if number else str
            if isinstance(value, bool) or not isinstance(value, expected):
                raise DamagedRecord(path, f"`{spec.name}` is not a {'number' if number else 'string'}")
        return self


class ImportRegistry:
    """Durable import records under ``imports/``; a RESERVED record keeps its copy name from other imports."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.damaged: dict[str, str] = {}  # damaged records skipped by ``reserved_paths``: path -> cause

    def path(self, request_id: str) -> Path:
        return keyed_file(self.directory, request_id)

    def get(self, request_id: str) -> ImportRecord | None:
        """The record of ``request_id``, or None; a damaged record is set aside and raised (DamagedRecord)."""
        return load_owned_record(self.path(request_id), ImportRecord)

    def was_set_aside(self, request_id: str) -> bool:
        """Whether a damaged record of ``request_id`` was set aside (the import existed before)."""
        return has_set_aside(self.path(request_id))

    def put(self, record: ImportRecord) -> None:
        write_json(self.path(record.request_id), record.__dict__)

    def remove(self, request_id: str) -> None:
        """Durably remove the record of ``request_id`` (nothing when there is none)."""
        atomic.remove_file(self.path(request_id))

    def scan(self) -> tuple[list[ImportRecord], dict[str, str]]:
        """Every import record (by file name), read only, and the damaged ones (path -> cause): unreadable, other
        fields, or fields of other types (``check_types``). Nothing is set aside."""
        records: list[ImportRecord] = []
        damaged: dict[str, str] = {}
        for path in sorted(self.directory.glob("*.json")) if self.directory.is_dir() else []:
            try:
                record = load_record(path, ImportRecord)
                if record is not None:
                    records.append(record.check_types(path))
            except DamagedRecord as exc:
                damaged[str(path)] = exc.cause
        return records, damaged

    def reserved_paths(self) -> set[str]:
        """Copy paths held by any import record (published copies also exist on disk). Damaged records are skipped
        and listed in ``damaged``: they cannot block other imports (their copies still exist on disk)."""
        if not self.directory.is_dir():
            return set()
        paths = set()
        for path in self.directory.glob("*.json"):
            try:
                record = load_record(path, ImportRecord)
            except DamagedRecord as exc:
                self.damaged[str(path)] = exc.cause
                continue
            if record is not None:
                paths.add(record.path)
        return paths


def publish_copy(target: Path, data: bytes) -> None:
    """Publish the byte-exact copy of an original (atomic, durable)."""
    atomic.atomic_write(target, data)


def remove_copy(target: Path) -> None:
    """Durably remove a copy (only a rejected import's: ``operations/deletion.py``); nothing when it is gone."""
    atomic.remove_file(target)
