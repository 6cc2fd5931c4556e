"""Import records: one per request id, the reservation of a copy's name and its checksum, and the copy's publish."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DamagedRecord
from . import atomic
from .atomic import write_json
from .records import keyed_path, has_set_aside, load_owned_record, load_record

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


class ImportRegistry:
    """Durable import records under ``imports/``; a RESERVED record keeps its copy name from other imports."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.damaged: dict[str, str] = {}  # damaged records skipped by ``reserved_paths``: path -> cause

    def path(self, request_id: str) -> Path:
        return keyed_path(self.directory, request_id)

    def get(self, request_id: str) -> ImportRecord | None:
        """The record of ``request_id``, or None; a damaged record is set aside and raised (DamagedRecord)."""
        return load_owned_record(self.path(request_id), ImportRecord)

    def was_set_aside(self, request_id: str) -> bool:
        """Whether a damaged record of ``request_id`` was set aside (the import existed before)."""
        return has_set_aside(self.path(request_id))

    def put(self, record: ImportRecord) -> None:
        write_json(self.path(record.request_id), record.__dict__)

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
