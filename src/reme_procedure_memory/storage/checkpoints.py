"""Processing checkpoints: one JSON record per request id, replaced atomically at every step of an import."""

from __future__ import annotations

from pathlib import Path

from ..errors import DamagedRecord
from .atomic import write_json
from .records import keyed_path, load_owned_record, read_json


class CheckpointStore:
    """Processing checkpoints under ``processing/``, one JSON record per request id, replaced atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, request_id: str) -> Path:
        return keyed_path(self.directory, request_id)

    def get(self, request_id: str) -> dict | None:
        """The checkpoint of ``request_id``, or None; a damaged one is set aside and raised (DamagedRecord)."""
        return load_owned_record(self.path(request_id))

    def put(self, request_id: str, checkpoint: dict) -> None:
        write_json(self.path(request_id), checkpoint)

    def check_records(self) -> dict[str, str]:
        """Every checkpoint that cannot be read (path -> cause): the full check a reindex reports (a checkpoint is
        read, and a damaged one set aside, only by the import it belongs to)."""
        damaged = {}
        for path in sorted(self.directory.glob("*.json")) if self.directory.is_dir() else []:
            try:
                read_json(path)
            except DamagedRecord as exc:
                damaged[str(path)] = exc.cause
        return damaged
