"""JSON metadata records (imports, checkpoints, journal records): reading, and what happens to a damaged one.

A record that cannot be parsed raises ``DamagedRecord`` naming the file. A reader that owns the record (the import it
belongs to) sets it aside as ``<file>.damaged`` (kept, never deleted) before raising (``load_owned_record``); readers
that only scan skip it and report it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from ..errors import DamagedRecord
from .atomic import fsync_dir
from .format import DAMAGED, damaged_name


def read_json(path: Path) -> Any | None:
    """Read a JSON object record, or None when it does not exist; DamagedRecord (naming the file) when unreadable."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return parse_json(path, raw)


def parse_json(path: Path, raw: bytes) -> dict:
    """The JSON object record ``raw`` read from ``path``; DamagedRecord (naming the file) when unreadable."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DamagedRecord(path, f"{type(exc).__name__}: {exc}") from None
    if not isinstance(obj, dict):
        raise DamagedRecord(path, "the JSON value is not an object")
    return obj


def load_record(path: Path, factory, raw: bytes | None = None):
    """``factory(**record)`` of a JSON record (``raw``: its bytes, already read), or None when absent;
    DamagedRecord when it has the wrong shape."""
    record = read_json(path) if raw is None else parse_json(path, raw)
    if record is None:
        return None
    try:
        return factory(**record)
    except TypeError as exc:
        raise DamagedRecord(path, f"unexpected fields: {exc}") from None


def set_aside(path: Path) -> Path:
    """Rename a damaged record to ``<name>.damaged`` (``.damaged-2``, ...): kept, but no longer read."""
    number = 1
    while True:
        target = damaged_name(path, number)
        if not target.exists():
            break
        number += 1
    os.replace(path, target)
    fsync_dir(path.parent)
    return target


def set_aside_and_raise(exc: DamagedRecord) -> None:
    """Set the record of ``exc`` aside and raise it again with the new name."""
    try:
        moved = set_aside(exc.path)
    except OSError:
        raise exc from None
    raise DamagedRecord(exc.path, exc.cause, moved) from None


def load_owned_record(path: Path, factory=None):
    """A record read by the import it belongs to: ``factory(**record)`` (or the raw object), None when absent; a
    damaged record is set aside and raised (DamagedRecord naming both names)."""
    try:
        return load_record(path, factory) if factory is not None else read_json(path)
    except DamagedRecord as exc:
        set_aside_and_raise(exc)


def has_set_aside(path: Path) -> bool:
    """Whether a damaged copy of ``path`` was set aside."""
    return any(path.parent.glob(f"{glob_escape(path.name)}{DAMAGED}*"))


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)
