"""The journal's index by experience path: which records belong to one experience, and what was compacted of it.

The journal keeps its records by import (one directory per scope), which is what a write and a resumed segment look
up. An experience's history needs the other direction, so ``operations/paths/<path digest>/`` holds, per experience
(the names, and the other directories below, are ``format.py``'s):

* one empty *marker* per journal record of that path, named ``<scope digest>.<record digest>.<created µs>.<target
  version>``: the record's scope directory and file stem, when it was created and the version it writes (``none``
  for a deletion). A marker says where a record is, never what it holds (the journal stays the one copy of every
  write's text), so a record whose file cannot be parsed is still known to belong to its path; its time and version
  let a start tell from one directory listing that a file holds the newest record's content (``newest``);
* ``compacted.json`` once the retention bound removed records of the path: how many versions are gone, when the
  newest of them was written, and the refs being removed (written before the removal, cleared after it), so a kill
  in between neither counts a version twice nor shows a record that is being removed.

A marker is made in two steps around its record's first write (``OperationJournal.put``): created as
``<name>.pending`` before the record is written, renamed to ``<name>`` after it (no fsync: see below). So:

* a *confirmed* marker (``<name>``) was made after its record: a confirmed marker whose record is gone means the
  record was removed outside the plugin (a history names it, ``missing``), unless ``compacted.json`` names it as being
  removed by the retention bound;
* a *pending* marker whose record exists is a kill after the record was written: the record is read as usual;
* a pending marker without its record is a kill before the record was written: it is ignored (and removed with the
  path's next compaction).

What proves that a content is recorded is the record itself, never a marker alone: a start (or an update of the
agent) that finds the file holding the newest marker's version trusts it only once that record's file exists (one
``stat``; the atomic writer makes a present record complete), else it reads the path's records. A kill between a
marker and its record therefore never leaves a content unrecorded: it is recorded when next found.

A record without any marker needs a power loss on a file system that does not commit metadata in order, or a marker
directory removed by hand; the reindex's full read of the journal recreates the markers (and names how many). Every
journal written with this index has ``paths/`` from its first record on; a journal with records and no ``paths/``
(written before it, or the index lost) is indexed once, in full, by the first start: into ``paths.building/``, renamed
``paths/`` once every marker is durable (a kill before the rename builds it again); that start logs it. The
compaction summaries are also kept outside ``paths/`` (``compacted/<digest>.json`` beside it, written first), so
losing either copy renumbers no history; a history whose records show compacted predecessors but that has no summary
left says so. An empty journal needs no index, and gets none until its first record.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DamagedRecord
from .atomic import fsync_dir, remove_temp_files, write_json
from .format import COMPACTED, DELETED, MARKER, PENDING, SUMMARIES_DIR, path_digest
from .records import read_json


@dataclass(frozen=True, order=True)
class Ref:
    """Where one journal record lives (its scope directory's digest and its file stem: the identity), when it was
    created (µs since the epoch), the version it writes, and whether its marker was confirmed after the record was
    written (``confirmed``) or is still pending (see the module docstring)."""

    scope_digest: str
    stem: str
    created_us: int = field(default=0, compare=False)
    version: str = field(default=DELETED, compare=False)
    confirmed: bool = field(default=True, compare=False)

    @property
    def name(self) -> str:
        """The confirmed marker's name (also the record's name in ``compacted.json``)."""
        return f"{self.scope_digest}.{self.stem}.{self.created_us}.{self.version}"

    @classmethod
    def parse(cls, name: str) -> "Ref | None":
        """The ref a marker's name stands for (confirmed or pending), or None when it is no marker's name."""
        pending = name.endswith(PENDING)
        found = MARKER.match(name[: -len(PENDING)] if pending else name)
        return cls(found[1], found[2], int(found[3]), found[4], not pending) if found else None


@dataclass
class Compacted:
    """What the retention bound removed of one experience's records (``compacted.json``)."""

    path: str
    versions: int = 0  # durable versions whose records are gone
    newest_at: float | None = None  # when the newest of them was written
    removing: list[str] = field(default_factory=list)  # ref names being removed (a kill may leave them listed)


class PathIndex:
    """``operations/paths/``: the markers of each experience path's records and its compaction summary (kept twice:
    ``paths/<digest>/compacted.json`` and ``compacted/<digest>.json``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.summaries = directory.parent / SUMMARIES_DIR

    def _dir(self, path: str) -> Path:
        return self.directory / self.digest(path)

    def _create(self, path: str, name: str) -> None:
        directory = self._dir(path)
        try:
            fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT, 0o666)
        except FileNotFoundError:
            directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT, 0o666)
        os.close(fd)

    def begin(self, path: str, ref: Ref) -> None:
        """Create the pending marker of ``ref`` under ``path``, before its record is first written (idempotent)."""
        self._create(path, ref.name + PENDING)

    def confirm(self, path: str, ref: Ref) -> None:
        """Confirm the marker of ``ref`` once its record is written: the pending marker renamed (no fsync)."""
        directory = self._dir(path)
        try:
            os.rename(directory / (ref.name + PENDING), directory / ref.name)
        except FileNotFoundError:  # no pending marker (removed meanwhile): the confirmed one at once
            self._create(path, ref.name)

    def add(self, path: str, ref: Ref) -> None:
        """Create the confirmed marker of ``ref``, whose record exists (idempotent, no fsync)."""
        self._create(path, ref.name)

    def refs(self, path: str) -> list[Ref]:
        """The refs of every marker of ``path``, sorted (an experience without records: none)."""
        return self.refs_in(self._dir(path))

    @staticmethod
    def refs_in(directory: Path) -> list[Ref]:
        """The refs of every marker in one per-path directory, sorted, one per record: a confirmed marker before a
        pending one, then the newest (an identical retry after a kill may have made one of each)."""
        try:
            names = os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        chosen: dict[Ref, Ref] = {}
        for name in names:
            ref = Ref.parse(name)
            if ref is not None and (
                ref not in chosen or (ref.confirmed, ref.created_us) > (chosen[ref].confirmed, chosen[ref].created_us)
            ):
                chosen.pop(ref, None)
                chosen[ref] = ref
        return sorted(chosen.values())

    def newest(self, path: str) -> Ref | None:
        """The ref of ``path``'s most recently created record (one directory listing), or None. Its record may be
        missing (a pending marker: see the module docstring): the caller checks before trusting it."""
        return max(self.refs(path), key=lambda ref: ref.created_us, default=None)

    def known(self) -> set[str]:
        """The paths' directory names (``digest``) of every experience the journal has (or had) a record of: one
        directory listing, for checking many paths."""
        try:
            return set(os.listdir(self.directory))
        except (FileNotFoundError, NotADirectoryError):
            return set()

    def has_directory(self, path: str) -> bool:
        """Whether ``path`` has its marker directory."""
        return self._dir(path).is_dir()

    @staticmethod
    def digest(path: str) -> str:
        """The name of ``path``'s directory (``format.path_digest``)."""
        return path_digest(path)

    def remove(self, path: str, refs: list[Ref]) -> None:
        """Remove the markers of ``refs`` (their records are gone), pending or confirmed."""
        directory = self._dir(path)
        for ref in refs:
            (directory / ref.name).unlink(missing_ok=True)
            (directory / (ref.name + PENDING)).unlink(missing_ok=True)

    def remove_orphans(self, path: str, refs: list[Ref]) -> None:
        """Remove pending markers whose records were never written (``refs``: checked by the caller)."""
        directory = self._dir(path)
        for ref in refs:
            if not ref.confirmed:
                (directory / (ref.name + PENDING)).unlink(missing_ok=True)

    def summary_files(self, path: str) -> tuple[Path, Path]:
        """The two copies of ``path``'s compaction summary: in its marker directory, and beside ``paths/``."""
        return self._summary_files(self._dir(path))

    def _summary_files(self, directory: Path) -> tuple[Path, Path]:
        return directory / COMPACTED, self.summaries / f"{directory.name}.json"

    def compacted(self, path: str) -> Compacted:
        """The compaction summary of ``path`` (nothing compacted: zero versions), from whichever copy is readable
        (both: the one that counts more, then the one naming records being removed: the later write of a
        compaction a kill interrupted). ``DamagedRecord`` when a copy exists and none can be read (the caller
        reports it, and compacts nothing more of that path); ``damaged_copies`` names a damaged copy beside a good
        one."""
        summary = self.compacted_in(self._dir(path))
        summary.path = path
        return summary

    def compacted_in(self, directory: Path) -> Compacted:
        """``compacted`` of the path whose marker directory is ``directory`` (its ``path`` left blank)."""
        found, damaged = [], []
        for file in self._summary_files(directory):
            try:
                summary = self._read_summary("", file)
            except DamagedRecord as exc:
                damaged.append(exc)
                continue
            if summary is not None:
                found.append(summary)
        if not found and damaged:
            raise damaged[0]
        if not found:
            return Compacted("")
        return max(found, key=lambda s: (s.versions, bool(s.removing)))

    def damaged_copies(self, path: str) -> list[DamagedRecord]:
        """The copies of ``path``'s compaction summary that exist and cannot be read."""
        damaged = []
        for file in self.summary_files(path):
            try:
                self._read_summary(path, file)
            except DamagedRecord as exc:
                damaged.append(exc)
        return damaged

    @staticmethod
    def _read_summary(path: str, file: Path) -> Compacted | None:
        found = read_json(file)
        if found is None:
            return None
        versions, newest, removing = found.get("versions"), found.get("newest_at"), found.get("removing")
        if not (
            isinstance(versions, int)
            and not isinstance(versions, bool)
            and versions >= 0
            and (newest is None or (isinstance(newest, (int, float)) and not isinstance(newest, bool)))
            and isinstance(removing, list)
            and all(isinstance(r, str) and MARKER.match(r) for r in removing)
        ):
            raise DamagedRecord(file, "a field is missing or has the wrong type")
        return Compacted(path=path, versions=versions, newest_at=newest, removing=removing)

    def put_compacted(self, summary: Compacted) -> None:
        """Durably replace both copies of the compaction summary of its path (the one beside ``paths/`` first: a
        kill between leaves it the later one, which ``compacted`` prefers). A temporary file a kill left in the
        marker directory (the start does not list every per-path directory) is removed here, by the next
        compaction of the path."""
        second, first = self.summary_files(summary.path)
        write_json(first, summary.__dict__)
        write_json(second, summary.__dict__)
        remove_temp_files([second.parent])

    def paths(self) -> list[Path]:
        """Every per-path directory (for a full sweep)."""
        try:
            return sorted(p for p in self.directory.iterdir() if p.is_dir())
        except (FileNotFoundError, NotADirectoryError):
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
