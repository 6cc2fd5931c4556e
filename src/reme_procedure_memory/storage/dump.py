"""A read-only dump of a workspace's metadata, for support (the ``procedure_dump`` job).

Contract: ``MetadataDump.answer`` lists every file under the workspace's ``<metadata_dir>/`` (the plugin's state and
ReMe's view state; ``format.py`` names them) with its ``kind``, its ``format`` (the layout or format version it was
written in, when it says so), its ``status`` (what the record says of itself) and its size in ``bytes``; a record
that cannot be read has ``status: "damaged"`` and the ``error``. Of the experience and trajectory directories only
the number of files and their total size are given. What a support request must never carry is never in it: no
experience or trajectory text, no record's text fields (a journal record's target, a checkpoint's summary, reply or
hint, an import's original path), so no credential either; a record is parsed only to read those three fields. It
writes nothing, and follows no symbolic link (a link is listed as ``kind: "link"``).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..answers import DumpAnswer
from .format import (
    BM25_FORMAT,
    BUILDING_DIR,
    CHECKPOINT_FORMAT,
    COMPACTED,
    DAMAGED,
    EXPORT_MARKER_FORMAT,
    IMPORTS_DIR,
    JOURNAL_LAYOUT,
    LOCK_FILE,
    MARKER,
    OPEN_SUFFIX,
    OPERATIONS_DIR,
    PATHS_DIR,
    PENDING,
    PROCESSING_DIR,
    SCOPE_SUFFIX,
    SEGMENTER_VERSION,
    STATE_PARENT,
    SUMMARIES_DIR,
    TEMP_FILE,
    TOKENIZER_RULES,
    VIEW_MANIFEST,
    VIEW_STATE_FORMAT,
)

# What this plugin version writes (the table of format.py), for the answer's ``formats``.
WRITES = {
    "checkpoint": CHECKPOINT_FORMAT,
    "journal_layout": JOURNAL_LAYOUT,
    "view_state": VIEW_STATE_FORMAT,
    "bm25": BM25_FORMAT,
    "tokenizer_rules": TOKENIZER_RULES,
    "segmenter": SEGMENTER_VERSION,
    "export_marker": EXPORT_MARKER_FORMAT,
}


@dataclass(frozen=True)
class Entry:
    """One file of the dump."""

    path: str  # workspace-relative
    kind: str
    bytes: int
    format: Any = None
    status: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None or k in ("format", "status")}


class MetadataDump:
    """The metadata of one component's workspace: ``root`` the workspace, ``metadata_dir``, ``state_dir`` (the
    component's), ``procedure_dir`` and ``trajectory_rel_dir`` (workspace-relative)."""

    def __init__(
        self, root: Path, metadata_dir: str, state_dir: Path, procedure_dir: str, trajectory_rel_dir: str
    ) -> None:
        self.root = root
        self.metadata_dir = metadata_dir
        self.state_dir = state_dir
        self.procedure_dir = procedure_dir
        self.trajectory_rel_dir = trajectory_rel_dir

    def answer(self) -> DumpAnswer:
        """The dump (see the module docstring): ``files`` sorted by path, ``kinds`` (how many of each), the two
        content directories' ``files``/``bytes``, and the formats this plugin version writes."""
        entries = [self._entry(path, size) for path, size in _walk(self.root / self.metadata_dir)]
        kinds: dict[str, int] = {}
        for entry in entries:
            kinds[entry.kind] = kinds.get(entry.kind, 0) + 1
        return {
            "status": "ok",
            "workspace": str(self.root),
            "state_dir": self.state_dir.relative_to(self.root).as_posix(),
            "formats": WRITES,
            "experiences": _content(self.root, self.procedure_dir),
            "trajectories": _content(self.root, self.trajectory_rel_dir),
            "kinds": dict(sorted(kinds.items())),
            "damaged": sum(1 for e in entries if e.status == "damaged"),
            "files": [e.to_json() for e in entries],
        }

    def _entry(self, path: Path, size: int | None) -> Entry:
        rel = path.relative_to(self.root).as_posix()
        if size is None:
            return Entry(rel, "link", 0)
        name, parent = path.name, path.parent.name
        if TEMP_FILE.match(name):
            return Entry(rel, "temporary", size)
        if DAMAGED in name:
            return Entry(rel, "set_aside", size, status="damaged")
        inside = path.parent if path.parent.is_relative_to(self.state_dir) else None
        if inside is None:
            return self._reme_entry(path, rel, size)
        where = path.relative_to(self.state_dir).parts
        if where == (LOCK_FILE,):
            return Entry(rel, "lock", size)
        if len(where) == 2 and where[0] == IMPORTS_DIR:
            return _record(path, rel, size, "import_record", None)
        if len(where) == 2 and where[0] == PROCESSING_DIR:
            return _record(path, rel, size, "checkpoint", "format")
        if where[0] == OPERATIONS_DIR and len(where) >= 3 and where[1] in (PATHS_DIR, BUILDING_DIR):
            if name == COMPACTED:
                return _summary(path, rel, size)
            pending = name.endswith(PENDING)
            if MARKER.match(name[: -len(PENDING)] if pending else name):
                return Entry(rel, "marker", size, status="pending" if pending else "confirmed")
        if where[0] == OPERATIONS_DIR and len(where) == 3 and where[1] == SUMMARIES_DIR:
            return _summary(path, rel, size)
        if where[0] == OPERATIONS_DIR and len(where) == 3 and name.endswith(".json"):
            layout = JOURNAL_LAYOUT if parent.endswith(SCOPE_SUFFIX) else 1
            kind = "journal_record_open" if name.endswith(OPEN_SUFFIX) else "journal_record"
            return replace(_record(path, rel, size, kind, None), format=layout)
        return Entry(rel, "other", size)

    def _reme_entry(self, path: Path, rel: str, size: int) -> Entry:
        """A file of ReMe's metadata: a view's state (its manifest says its format and generation), ReMe's
        embedding cache, or another component's file."""
        component_type = path.relative_to(self.root / self.metadata_dir).parts[0]
        if component_type == STATE_PARENT:  # another procedure_memory component's state
            return Entry(rel, "other_component", size)
        if path.parent.name.endswith(".view"):
            if path.name != VIEW_MANIFEST:
                return Entry(rel, "view_part", size)
            try:
                manifest = json.loads(path.read_text(encoding="utf-8"))
                return Entry(
                    rel,
                    "view_manifest",
                    size,
                    manifest.get("format"),
                    f"generation {manifest.get('generation')}, {manifest.get('records')} records",
                )
            except (OSError, ValueError, AttributeError) as exc:
                return Entry(rel, "view_manifest", size, status="damaged", error=type(exc).__name__)
        return Entry(rel, f"reme_{component_type}", size)


def _record(path: Path, rel: str, size: int, kind: str, format_field: str | None) -> Entry:
    """A JSON record: only its ``status`` (and ``format_field``) read; ``damaged`` with the cause when it does not
    parse as an object."""
    try:
        record = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return Entry(rel, kind, size, status="damaged", error=type(exc).__name__)
    if not isinstance(record, dict):
        return Entry(rel, kind, size, status="damaged", error="not a JSON object")
    status = record.get("status")
    fmt = record.get(format_field, 1) if format_field else None  # a checkpoint without it is format 1
    return Entry(
        rel, kind, size, fmt if isinstance(fmt, (int, str)) else None, status if isinstance(status, str) else None
    )


def _summary(path: Path, rel: str, size: int) -> Entry:
    """A compaction summary: how many versions it counts as removed, and whether a removal is under way."""
    try:
        found = json.loads(path.read_bytes().decode("utf-8"))
        status = f"{int(found['versions'])} versions compacted" + (", removing" if found.get("removing") else "")
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, KeyError, TypeError) as exc:
        return Entry(rel, "compaction_summary", size, status="damaged", error=type(exc).__name__)
    return Entry(rel, "compaction_summary", size, status=status)


def _walk(directory: Path) -> list[tuple[Path, int | None]]:
    """Every file under ``directory`` (no link followed: a link is listed with size None), sorted by path."""
    found = []
    for current, subdirs, names in os.walk(directory):
        base = Path(current)
        for name in list(subdirs):
            if os.path.islink(base / name):
                subdirs.remove(name)
                found.append((base / name, None))
        for name in names:
            try:
                info = os.lstat(base / name)
            except OSError:
                continue
            found.append((base / name, None if stat.S_ISLNK(info.st_mode) else info.st_size))
    return sorted(found)


def _content(root: Path, rel_dir: str) -> dict[str, Any]:
    """The number and total size of the regular files directly in ``root/rel_dir`` (names and contents unread)."""
    files = size = 0
    try:
        with os.scandir(root / rel_dir) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    files += 1
                    size += entry.stat(follow_symlinks=False).st_size
    except (FileNotFoundError, NotADirectoryError):
        pass
    return {"directory": rel_dir, "files": files, "bytes": size}
