"""The journal's index by experience path: which records belong to one experience, and what was compacted of it.

The journal keeps its records by import (``operations/<scope digest>.v2/``), which is what a write and a resumed
segment look up. An experience's history needs the other direction, so ``operations/paths/<path digest>/`` holds,
per experience:

* one empty *marker* per journal record of that path, named ``<scope digest>.<record digest>.<created µs>.<target
  version>``: the record's scope directory and file stem, when it was created and the version it writes (``none``
  for a deletion). A marker says where a record is, never what it holds (the journal stays the one copy of every
  write's text), so a record whose file cannot be parsed is still known to belong to its path; its time and version
  let a start tell from one directory listing that a file holds the newest record's content (``newest``);
* ``compacted.json`` once the retention bound removed records of the path: how many versions are gone, when the
  newest of them was written, and the refs being removed (written before the removal, cleared after it), so a kill
  in between neither counts a version twice nor shows a record that is being removed.

A marker is created before its record is written and without an fsync: a marker without a record (a kill in
between) is ignored; a record without a marker needs a power loss on a file system that does not commit metadata
in order, and the reindex's full read of the journal recreates it. Every journal written with this index has
``paths/`` from its first record on; a journal with records and no ``paths/`` was written before it and is indexed
once, in full, by the first start: into ``paths.building/``, renamed ``paths/`` once every marker is durable (a kill
before the rename builds it again). An empty journal needs no index, and gets none until its first record.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DamagedRecord
from .atomic import fsync_dir, remove_temp_files, write_json
from .records import read_json

PATHS_DIR = "paths"  # under ``operations/``: not a scope directory
BUILDING_DIR = "paths.building"  # the index of an older journal while the first start builds it (nor this one)
COMPACTED = "compacted.json"
MARKER = re.compile(r"^([0-9a-f]{32})\.([0-9a-f]{64})\.([0-9]{1,20})\.([0-9a-z]{1,64})$")
DELETED = "none"  # the version of a deletion's marker


@dataclass(frozen=True, order=True)
class Ref:
    """Where one journal record lives (its scope directory's digest and its file stem: the identity), when it was
    created (µs since the epoch) and the version it writes."""

    scope_digest: str
    stem: str
    created_us: int = field(default=0, compare=False)
    version: str = field(default=DELETED, compare=False)

    @property
    def name(self) -> str:
        return f"{self.scope_digest}.{self.stem}.{self.created_us}.{self.version}"

    @classmethod
    def parse(cls, name: str) -> "Ref | None":
        """The ref a marker's name stands for, or None when it is no marker's name."""
        found = MARKER.match(name)
        return cls(found[1], found[2], int(found[3]), found[4]) if found else None


@dataclass
class Compacted:
    """What the retention bound removed of one experience's records (``compacted.json``)."""

    path: str
    versions: int = 0  # durable versions whose records are gone
    newest_at: float | None = None  # when the newest of them was written
    removing: list[str] = field(default_factory=list)  # ref names being removed (a kill may leave them listed)


class PathIndex:
    """``operations/paths/``: the markers of each experience path's records and its compaction summary."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _dir(self, path: str) -> Path:
        return self.directory / self.digest(path)

    def add(self, path: str, ref: Ref) -> None:
        """Create the marker of ``ref`` under ``path`` (idempotent, no fsync: see the module docstring)."""
        directory = self._dir(path)
        try:
            fd = os.open(directory / ref.name, os.O_WRONLY | os.O_CREAT, 0o666)
        except FileNotFoundError:
            directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(directory / ref.name, os.O_WRONLY | os.O_CREAT, 0o666)
        os.close(fd)

    def refs(self, path: str) -> list[Ref]:
        """The refs of every marker of ``path``, sorted (an experience without records: none)."""
        return self.refs_in(self._dir(path))

    @staticmethod
    def refs_in(directory: Path) -> list[Ref]:
        """The refs of every marker in one per-path directory, sorted."""
        try:
            names = os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted({ref for name in names if (ref := Ref.parse(name)) is not None})  # one per record

    def newest(self, path: str) -> Ref | None:
        """The ref of ``path``'s most recently created record (one directory listing), or None."""
        return max(self.refs(path), key=lambda ref: ref.created_us, default=None)

    def known(self) -> set[str]:
        """The paths' directory names (``digest``) of every experience the journal has (or had) a record of: one
        directory listing, for checking many paths."""
        try:
            return set(os.listdir(self.directory))
        except (FileNotFoundError, NotADirectoryError):
            return set()

    @staticmethod
    def digest(path: str) -> str:
        """The name of ``path``'s directory."""
        return hashlib.sha256(path.encode("utf-8")).hexdigest()[:32]

    def remove(self, path: str, refs: list[Ref]) -> None:
        """Remove the markers of ``refs`` (their records are gone)."""
        directory = self._dir(path)
        for ref in refs:
            (directory / ref.name).unlink(missing_ok=True)

    def compacted(self, path: str) -> Compacted:
        """The compaction summary of ``path`` (nothing compacted: zero versions); ``DamagedRecord`` when it cannot
        be read (the caller reports it, and compacts nothing more of that path)."""
        file = self._dir(path) / COMPACTED
        found = read_json(file)
        if found is None:
            return Compacted(path)
        versions, newest, removing = found.get("versions"), found.get("newest_at"), found.get("removing")
        if not (isinstance(versions, int) and not isinstance(versions, bool) and versions >= 0
                and (newest is None or (isinstance(newest, (int, float)) and not isinstance(newest, bool)))
                and isinstance(removing, list) and all(isinstance(r, str) and MARKER.match(r) for r in removing)):
            raise DamagedRecord(file, "a field is missing or has the wrong type")
        return Compacted(path=path, versions=versions, newest_at=newest, removing=removing)

    def put_compacted(self, summary: Compacted) -> None:
        """Durably replace the compaction summary of its path. A temporary file a kill left in this directory
        (the start does not list every per-path directory) is removed here, by the next compaction of the path."""
        directory = self._dir(summary.path)
        write_json(directory / COMPACTED, summary.__dict__)
        remove_temp_files([directory])

    def paths(self) -> list[Path]:
        """Every per-path directory (for a full sweep)."""
        try:
            return sorted(p for p in self.directory.iterdir() if p.is_dir())
        except FileNotFoundError:
            return []

    def exists(self) -> bool:
        return self.directory.is_dir()

    def publish_as(self, target: Path) -> None:
        """Make this index (built aside) the journal's: its markers made durable, then renamed to ``target``."""
        for directory in self.paths():
            fsync_dir(directory)
        fsync_dir(self.directory)
        os.rename(self.directory, target)
        fsync_dir(target.parent)
