"""The operation journal: a write-ahead log of the extraction agent's writes.

Before an experience is published, its record (scoped operation key, destination, target bytes, expected version)
is durable (``intent``); after it, the record moves to ``published``, then ``indexed`` / ``index_pending``, or ends
``superseded`` / ``abandoned``. After a crash ``recover_intent`` rolls an intent forward when its precondition still
holds, else drops it. Layout and fsync discipline: ``OperationJournal``.

What each status says about the file: ``intent`` — not published yet (a write in flight, or a crash to resolve);
``published`` / ``index_pending`` / ``indexed`` — the file held the target (it may have changed since);
``abandoned`` — never published; ``superseded`` — a later write or a change of the file overtook it, published or
not: ``published_at`` (set with ``published``) tells which. Changes made by hand (an edit, a deletion) are recorded
too, as ``recorded`` records of the scope ``HAND_SCOPE`` (no import), by whoever finds them
(``operations/hand_changes.py``). Records are also indexed by experience path (``path_index.py``), for an
experience's history and the retention bound.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator

from ..errors import DamagedRecord, StorageError, UnsupportedWorkspace
from ..schema import version_of
from .atomic import fsync_dir, write_json
from .experiences import ExperienceFiles, Link, entry_names, read_entry
from .format import (
    BUILDING_DIR,
    DELETED,
    OPEN_SUFFIX,
    PATHS_DIR,
    PENDING,
    RECORD_SUFFIX,
    SCOPE_SUFFIX,
    SUMMARIES_DIR,
    open_record_file,
    record_file,
    record_stem,
    scope_dir as scope_dir_of,
)
from .path_index import PathIndex, Ref
from .records import glob_escape, load_owned_record, load_record

# Journal record states. "intent" is written before the publish; the others after it.
INTENT, PUBLISHED, INDEXED, INDEX_PENDING, SUPERSEDED, ABANDONED = (
    "intent",
    "published",
    "indexed",
    "index_pending",
    "superseded",
    "abandoned",
)
RECORDED = "recorded"  # a change made by hand, found and recorded (final at once)


OPEN_STATES = (INTENT, PUBLISHED, INDEX_PENDING)

# The tools of records: the agent's writes, and changes made by hand (scope ``HAND_SCOPE``: no import; a request id
# is never blank, so no import can have this scope).
# What a record did; a history answer names a version's ``change`` with the same words (operations/versions.py).
CREATE, UPDATE, HAND_EDIT, HAND_DELETE = "create", "update", "hand_edit", "hand_delete"
TOOLS = (CREATE, UPDATE, HAND_EDIT, HAND_DELETE)
HAND_SCOPE = ""


@dataclass
class Operation:
    """One journaled write. ``scope`` is the extraction run's request id; ``key`` the agent's operation key.

    A change made by hand is a ``hand_edit`` (``target``: the file's text then; ``expected_version``: the version the
    journal knew before) or a ``hand_delete`` (empty ``target``), of scope ``HAND_SCOPE``, status ``recorded``."""

    scope: str
    key: str
    tool: str  # "create" | "update" (the agent) | "hand_edit" | "hand_delete"
    request: str  # digest of the caller's arguments: an identical retry has the same digest
    path: str
    target: str  # the target file text (UTF-8)
    expected_version: str | None
    status: str = INTENT
    error: str = ""
    created_at: float = field(default_factory=time.time)
    segment: int | None = None  # the extraction segment whose run made this write (its operation ledger)
    # When the target was published (set with ``published``; a hand edit: the file's modification time). Records
    # written before this field existed have None.
    published_at: float | None = None
    # A hand edit of a file that is not UTF-8: the file's version (``target`` holds its text with U+FFFD).
    file_version: str | None = None

    @property
    def target_bytes(self) -> bytes:
        return self.target.encode("utf-8")

    @property
    def target_version(self) -> str:
        return self.file_version or version_of(self.target_bytes)

    @property
    def by_hand(self) -> bool:
        """Whether this records a change made by hand (no import)."""
        return self.tool in (HAND_EDIT, HAND_DELETE)

    def same_request(self, other: "Operation") -> bool:
        """Whether ``other`` is an identical retry of this operation."""
        return (self.tool, self.path, self.request) == (other.tool, other.path, other.request)


class OperationJournal:
    """Durable records of writes, one file per scoped operation key (names: ``format.py``).

    One directory per scope (an import's request id) makes a scope's records — its operation ledger — cheap to list.

    An open record (intent, published, index_pending) is ``<digest>.open.json``; once final it is ``<digest>.json``,
    and the open file is then removed. A start-up therefore reads only the open files (a long journal costs one
    directory listing per scope, not one read per record). When both exist (the open file is removed only after the
    final one's rename is durable: at once when its directory was fsynced, else after the next fsync of that
    directory, at close, or at the next start), the final one is the record. A scope directory not named
    ``<digest>.v2`` (the layout of unreleased development builds) is not read: the first scan raises
    ``UnsupportedWorkspace``. Damaged final records are not read by a start:
    ``check_records`` (the reindex) and the import that owns them find them.

    Every record also has a marker under ``paths/`` (``path_index.py``), made pending before the record is first
    written and confirmed after it: ``path_records`` reads one experience's records without listing the journal.
    A journal without that index is indexed in full once, by the first scan (``index_built``: how many records it
    indexed, for the start's log).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.paths = PathIndex(directory / PATHS_DIR)
        self._marked: set[Ref] = set()  # records whose marker this process made or saw: ``put`` makes it once
        # Records whose outcome is not final, by (scope, key): scanned once, then kept current by ``put``, so a
        # write never lists the whole journal.
        self._open: dict[tuple[str, str], Operation] | None = None
        self._twins: dict[Path, set[Path]] = {}  # scope directory -> open files whose final record is not yet durable
        self.damaged: dict[str, str] = {}  # damaged records skipped by a scan: path -> cause
        self.index_built: int | None = None  # records the first scan indexed when ``paths/`` was missing

    def record_file(self, scope: str, key: str) -> Path:
        """The file of the record of a scoped key once final (``format.record_file``)."""
        return record_file(self.directory, scope, key)

    def open_file(self, scope: str, key: str) -> Path:
        """The file of the record of a scoped key while it is open (``format.open_record_file``)."""
        return open_record_file(self.directory, scope, key)

    def ref(self, op: Operation) -> Ref:
        """Where the record of ``op`` lives, when it was created and what it writes (its marker's name)."""
        final = self.record_file(op.scope, op.key)
        return Ref(
            final.parent.name[: -len(SCOPE_SUFFIX)],
            final.name[: -len(RECORD_SUFFIX)],
            round(op.created_at * 1e6),
            DELETED if op.tool == HAND_DELETE else op.target_version,
        )

    def scope_directory(self, scope: str) -> Path:
        """The directory of a scope's records (it exists once the scope has had a record)."""
        return scope_dir_of(self.directory, scope)

    def marked_scopes(self) -> dict[str, int]:
        """Scope directory name -> how many markers name a record in it: one listing per experience the journal
        knows (the evidence that a scope directory that is gone had records)."""
        counts: dict[str, int] = {}
        for directory in self.paths.paths():
            for ref in self.paths.refs_in(directory):
                if ref.confirmed:
                    name = ref.scope_digest + SCOPE_SUFFIX
                    counts[name] = counts.get(name, 0) + 1
        return counts

    def record_files(self, ref: Ref) -> tuple[Path, Path]:
        """The final and the open file of the record ``ref`` names."""
        scope_dir = self.directory / (ref.scope_digest + SCOPE_SUFFIX)
        return scope_dir / (ref.stem + RECORD_SUFFIX), scope_dir / (ref.stem + OPEN_SUFFIX)

    def has_record(self, ref: Ref) -> bool:
        """Whether the record ``ref`` names exists (its final or open file): the proof that what its marker says is
        recorded (a marker alone proves nothing: ``path_index.py``). Two ``stat`` calls at most."""
        return any(os.path.lexists(file) for file in self.record_files(ref))

    def records(self, scope: str) -> list[Operation]:
        """Every record of a scope (its import's ledger), oldest first. A damaged record is set aside and raised:
        the import it belongs to stops once with ``metadata_damaged``."""
        self._scan()  # the first scan checks the layout before any read
        chosen: dict[str, Path] = {}
        for path in sorted(self.scope_directory(scope).glob("*.json")):
            stem = record_stem(path.name)
            if stem not in chosen or not path.name.endswith(OPEN_SUFFIX):  # the final file is the record
                chosen[stem] = path
        found = [load_owned_record(path, _stated(path)) for path in chosen.values()]
        return sorted((op for op in found if op is not None), key=lambda op: op.created_at)

    def read_scope(self, scope: str) -> tuple[list[Operation], dict[str, str]]:
        """Every readable record of a scope, oldest first, and its damaged ones (path -> cause), read only: nothing
        is set aside or remembered (the import that owns a damaged record sets it aside)."""
        scope_dir = self.scope_directory(scope)
        try:
            dir_fd = os.open(scope_dir, os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            return [], {}
        try:
            chosen: dict[str, str] = {}
            for name in entry_names(dir_fd):
                stem = record_stem(name)
                if stem not in chosen or not name.endswith(OPEN_SUFFIX):  # the final file is the record
                    chosen[stem] = name
            found, damaged = [], {}
            for name in chosen.values():
                try:
                    op = self._checked(scope_dir / name, read_entry(name, dir_fd))
                except DamagedRecord as exc:
                    damaged[str(exc.path)] = exc.cause
                    continue
                if op is not None:
                    found.append(op)
            return sorted(found, key=lambda op: op.created_at), damaged
        finally:
            os.close(dir_fd)

    @staticmethod
    def _checked(path: Path, raw: bytes | Link | None) -> Operation | None:
        """The record read from ``path`` (a link by its path, as ``_read`` does), its fields of the types a reader
        relies on; DamagedRecord otherwise."""
        if raw is None:
            return None
        op = load_record(path, Operation, None if isinstance(raw, Link) else raw)
        _check_shape(path, op)
        _check_state(path, op)
        return op

    def get(self, scope: str, key: str) -> Operation | None:
        """The record of a scoped key, or None (a damaged record is set aside and raised)."""
        self._scan()  # the first scan checks the layout before any read
        final = self.record_file(scope, key)
        op = load_owned_record(final, _stated(final))
        return op if op is not None else load_owned_record(self.open_file(scope, key), Operation)

    def put(self, op: Operation, *, sync_dir: bool = True) -> None:
        """Durably write (or overwrite) a record (``sync_dir``: see ``set_status``); a final record's open file is
        removed once the final one's rename is durable. An open record may replace a final one (an abandoned write
        retried): its open file is written first, then the final file removed; a kill between leaves the final one
        as the record, which the next identical retry reopens again."""
        open_records = self._scan()  # the first scan checks the layout before the first write
        scope_dir, key = self.scope_directory(op.scope), (op.scope, op.key)
        ref = self.ref(op)
        first = ref not in self._marked  # this process makes the marker of each record once
        if first:  # pending before the record, confirmed after it: path_index.py
            self.paths.begin(op.path, ref)
        self._write(op, scope_dir, key, open_records, sync_dir)
        if first:
            self.paths.confirm(op.path, ref)
            self._marked.add(ref)

    def _write(
        self,
        op: Operation,
        scope_dir: Path,
        key: tuple[str, str],
        open_records: dict[tuple[str, str], Operation],
        sync_dir: bool,
    ) -> None:
        """The record's write of ``put``."""
        if op.status in OPEN_STATES:
            write_json(self.open_file(op.scope, op.key), op.__dict__, sync_dir=sync_dir)
            open_records[key] = op
            final = self.record_file(op.scope, op.key)
            if final.exists():  # a final record reopened (the identical retry of an abandoned write): the open
                final.unlink()  # file is durable first; until the final one is gone, that one is the record
                fsync_dir(scope_dir)
        else:
            write_json(self.record_file(op.scope, op.key), op.__dict__, sync_dir=sync_dir)
            open_records.pop(key, None)
            self._twins.setdefault(scope_dir, set()).add(self.open_file(op.scope, op.key))
        if sync_dir and scope_dir in self._twins:  # every rename in this directory is durable now
            _unlink_all(self._twins.pop(scope_dir))

    def set_status(self, op: Operation, status: str, error: str = "") -> None:
        """Durably move a record to a new status (``op`` changes only once the record is on disk).

        ``indexed`` after ``published``/``index_pending`` is written without the directory fsync: a power loss that
        undoes its rename leaves the earlier record (complete, fsynced, and its open file still there), which every
        start settles from the file and the views (``recovery.Recovery.settle_journal``), never rolls forward. See
        docs/decisions.md.
        """
        settled = status == INDEXED and op.status in (PUBLISHED, INDEX_PENDING)
        published_at = time.time() if status == PUBLISHED and op.published_at is None else op.published_at
        self.put(replace(op, status=status, error=error, published_at=published_at), sync_dir=not settled)
        op.status, op.error, op.published_at = status, error, published_at

    def open_records(self) -> list[Operation]:
        """Records whose outcome is not final (intent, published, index_pending), oldest first. Damaged records are
        skipped here (listed in ``damaged``): one import's damaged record never blocks a start or another import.

        The first call reads the open files only; it removes open files whose final record exists and reads (after fsyncing their directory); beside a
        damaged final record the open file stays (the import that owns it sets the final one aside, then reads it).
        """
        return sorted(self._scan().values(), key=lambda op: op.created_at)

    def _scan(self) -> dict[tuple[str, str], Operation]:
        """The open records by (scope, key): read by the first call, then kept current.

        A journal with records but without the path index (written before it existed) is read in full by that
        call, once: every record gets its marker, built aside and then renamed into place (``path_index.py``); a
        damaged record cannot be attributed to a path: it stays listed in ``damaged``."""
        if self._open is None:
            self._check_layout()
            if os.path.lexists(self.paths.directory) and not self.paths.exists():  # no write could name the cause
                raise StorageError(errno.ENOTDIR, "Not a directory", str(self.paths.directory))
            self._open = {}
            builder = None if self.paths.exists() else PathIndex(self.directory / BUILDING_DIR)
            built = 0
            if builder is not None:
                shutil.rmtree(builder.directory, ignore_errors=True)  # a build a kill interrupted: again
            for scope_dir, dir_fd, names in self._scopes():
                finals = {name for name in names if not name.endswith(OPEN_SUFFIX)}
                stale = {name for name in names if name.endswith(OPEN_SUFFIX) and record_stem(name) + ".json" in finals}
                read: dict[str, Operation | None] = {}
                for name in names:
                    is_open = name.endswith(OPEN_SUFFIX)
                    if name in stale or not (is_open or builder is not None):
                        continue
                    op = read[name] = self._read(scope_dir, dir_fd, name)
                    if op is not None and builder is not None and _has_shape(op):
                        builder.add(op.path, self.ref(op))
                        built += 1
                    if op is not None and op.status in OPEN_STATES:
                        self._open[(op.scope, op.key)] = op
                settled = [
                    name
                    for name in sorted(stale)
                    if (
                        read[final]
                        if (final := record_stem(name) + ".json") in read
                        else self._read(scope_dir, dir_fd, final)
                    )
                ]
                if settled:
                    fsync_dir(scope_dir)  # their final records' renames are durable before the open files go
                    _unlink_all(scope_dir / name for name in settled)
            if builder is not None and builder.exists():
                builder.publish_as(self.paths.directory)
                self.index_built = built
        return self._open

    def _check_layout(self) -> None:
        """``UnsupportedWorkspace`` when a directory of the journal is not one of this layout (a scope directory of
        unreleased development builds, ``<digest>`` without ``SCOPE_SUFFIX``): nothing of it is read or changed."""
        try:
            with os.scandir(self.directory) as entries:
                unknown = sorted(
                    e.name
                    for e in entries
                    if e.is_dir()
                    and not e.name.endswith(SCOPE_SUFFIX)
                    and e.name not in (PATHS_DIR, BUILDING_DIR, SUMMARIES_DIR)
                )
        except (FileNotFoundError, NotADirectoryError):
            return
        if unknown:
            raise UnsupportedWorkspace(
                f"{self.directory / unknown[0]} is a journal directory of an unreleased development build, which this "
                f"version does not read: move {self.directory} aside (the experiences stay; the history of their "
                "earlier versions and the ledgers of unfinished imports go with it), then start again."
            )

    def flush(self) -> None:
        """Make the final records written without a directory fsync durable and remove their open files (at close)."""
        for scope_dir in sorted(self._twins):
            fsync_dir(scope_dir)
            _unlink_all(self._twins.pop(scope_dir))

    def check_records(self) -> tuple[dict[str, str], int]:
        """Read every record (final ones too) and return the damaged ones (path -> cause), also kept in
        ``damaged``, and how many markers were recreated: the full check a reindex reports. A record found without
        its marker gets it again; a confirmed marker whose record is gone (and not being compacted) is reported as
        damaged under the marker's name; a pending marker whose record was never written is removed."""
        self._scan()
        recreated = 0
        for scope_dir, dir_fd, names in self._scopes():
            for name in names:
                op = self._read(scope_dir, dir_fd, name)
                if op is not None and _has_shape(op):
                    ref = self.ref(op)
                    if (scope_dir.name, record_stem(name)) != (ref.scope_digest + SCOPE_SUFFIX, ref.stem):
                        continue  # a copy under another name (not where the journal keeps it): no marker
                    marker = self.paths.directory / self.paths.digest(op.path) / ref.name
                    if not (os.path.lexists(marker) or os.path.lexists(f"{marker}{PENDING}")):
                        self.paths.add(op.path, ref)
                        recreated += 1
        for directory in self.paths.paths():
            try:
                removing = set(self.paths.compacted_in(directory).removing)
            except DamagedRecord as exc:
                self.damaged[str(exc.path)] = exc.cause
                removing = set()
            orphans = []
            for ref in self.paths.refs_in(directory):
                if ref.name in removing or self.has_record(ref) or self._set_aside(ref):
                    continue
                if ref.confirmed:
                    self.damaged[str(directory / ref.name)] = missing_cause(self, ref)
                else:
                    orphans.append(directory / (ref.name + PENDING))
            _unlink_all(orphans)
        return dict(self.damaged), recreated

    def _set_aside(self, ref: Ref) -> list[Path]:
        """The set-aside (``.damaged``) copies of the record ``ref`` names."""
        return [
            aside
            for file in self.record_files(ref)
            for aside in sorted(file.parent.glob(f"{glob_escape(file.name)}.damaged*"))
        ]

    def relative(self, file: Path) -> str:
        """``file`` relative to the journal's directory's parent (``operations/...``)."""
        return str(file.relative_to(self.directory.parent))

    def _read(self, scope_dir: Path, dir_fd: int, name: str) -> Operation | None:
        """The record file ``name`` of a scope directory, read through its descriptor (a link by its path, as it
        is followed); None when absent or damaged (listed in ``damaged``)."""
        path = scope_dir / name
        raw = read_entry(name, dir_fd)  # None: removed meanwhile, or a directory
        if raw is None:
            return None
        try:
            return _check_state(path, load_record(path, Operation, None if isinstance(raw, Link) else raw))
        except DamagedRecord as exc:
            self.damaged[str(path)] = exc.cause
            return None

    def _scopes(self) -> Iterator[tuple[Path, int, list[str]]]:
        """``(directory, descriptor, record file names)`` of every scope directory ``<scope>/``, each directory
        listed once and open while its step runs: a long journal is read without resolving a path per record."""
        try:
            with os.scandir(self.directory) as entries:
                scopes = sorted(
                    e.name for e in entries if e.is_dir() and e.name not in (PATHS_DIR, BUILDING_DIR, SUMMARIES_DIR)
                )
        except (FileNotFoundError, NotADirectoryError):
            return
        for scope in scopes:
            try:
                dir_fd = os.open(self.directory / scope, os.O_RDONLY | os.O_DIRECTORY)
            except (FileNotFoundError, NotADirectoryError):
                continue
            try:
                yield self.directory / scope, dir_fd, entry_names(dir_fd)
            finally:
                os.close(dir_fd)

    def supersede_path(self, path: str, keep: Operation) -> None:
        """Mark every open record of ``path`` except ``keep`` as superseded (a later write replaced its intent)."""
        for op in self.open_records():
            if op.path == path and (op.scope, op.key) != (keep.scope, keep.key):
                self.set_status(op, SUPERSEDED, f"superseded by operation {keep.key!r}")

    # -- by experience path: history, hand changes, retention ----------------------------------------------------

    def path_records(self, path: str) -> tuple[list[tuple[Ref, Operation]], list[DamagedEntry]]:
        """Every readable record of experience ``path`` with its ref (in no particular order), and the damaged
        ones: a record that does not parse (or has the wrong shape, or is final with an open status), one already
        set aside as ``<file>.damaged``, and one a confirmed marker names that is gone (``missing``; a pending
        marker without its record is a kill before the record: skipped). Reads only: nothing is set aside or
        repaired here (a history answer never changes the workspace). Beside a damaged final record the open one,
        if readable, is the record."""
        found: list[tuple[Ref, Operation]] = []
        damaged: list[DamagedEntry] = []
        for ref in self.paths.refs(path):
            files = self.record_files(ref)
            unreadable = []
            for file in files:
                try:
                    op = load_record(file, Operation)
                    if op is not None:
                        _check_shape(file, op)
                        _check_state(file, op)
                except DamagedRecord as exc:
                    unreadable.append(DamagedEntry(file, exc.cause, set_aside=False, ref=ref))
                    op = None
                    continue
                if op is not None:
                    if op.path == path:  # else: another path's record under a colliding digest (not this history)
                        found.append((ref, op))
                    break
            damaged += unreadable  # beside a damaged final record the open one, if readable, is the record
            if op is None:
                aside = self._set_aside(ref)
                damaged += [
                    DamagedEntry(file, "set aside as damaged by the import it belongs to", set_aside=True, ref=ref)
                    for file in aside
                ]
                if not unreadable and not aside and ref.confirmed:  # a pending one: a kill before its record
                    damaged.append(
                        DamagedEntry(files[0], missing_cause(self, ref), set_aside=False, ref=ref, missing=True)
                    )
        return found, damaged

    def record_change(
        self,
        path: str,
        tool: str,
        data: bytes | Link | None,
        previous: str | None,
        modified_at: float | None,
        *,
        note: str = "",
    ) -> Operation:
        """Durably record a change made by hand (``HAND_EDIT``: the file's content ``data``; ``HAND_DELETE``: none) of
        ``path``, which the journal last knew at version ``previous``. The text of a file that is not UTF-8 is kept
        with U+FFFD and its real version in ``file_version``; a symbolic link is recorded with an empty text.
        ``note`` (who made the change, e.g. the ``procedure_delete`` job) is what a history shows as its note."""
        target, file_version = "", None
        if tool == HAND_EDIT:
            raw = data.target if isinstance(data, Link) else (data or b"")
            target = "" if isinstance(data, Link) else raw.decode("utf-8", "replace")
            if isinstance(data, Link) or target.encode("utf-8") != raw:
                file_version = version_of(raw)
        now = time.time()
        op = Operation(
            scope=HAND_SCOPE,
            key=f"{tool}:{path}:{time.time_ns()}",
            tool=tool,
            request="",
            path=path,
            target=target,
            expected_version=previous,
            status=RECORDED,
            created_at=now,
            published_at=modified_at if modified_at is not None else now,
            file_version=file_version,
            error="a symbolic link: experiences are regular files" if isinstance(data, Link) else note,
        )
        self.put(op)
        return op

    def known_paths(self) -> list[str]:
        """Every experience path with a readable record (one record read per path)."""
        found = []
        for directory in self.paths.paths():
            for ref in self.paths.refs_in(directory):
                op = None
                for file in self.record_files(ref):
                    try:
                        op = load_record(file, Operation)
                    except DamagedRecord:
                        continue
                    if op is not None:
                        break
                if op is not None and isinstance(op.path, str):
                    found.append(op.path)
                    break
        return sorted(set(found))

    def remove_records(self, path: str, refs: list[Ref]) -> None:
        """Remove the final records of ``refs`` and their markers (the retention bound; the caller has recorded
        the removal in the path's ``compacted.json`` first). Open records are never removed."""
        touched: set[Path] = set()
        removed: list[Ref] = []
        for ref in refs:
            final, opened = self.record_files(ref)
            if final.exists() or not opened.exists():
                final.unlink(missing_ok=True)
                opened.unlink(missing_ok=True)  # a twin not yet removed
                touched.add(final.parent)
                removed.append(ref)
        for scope_dir in sorted(d for d in touched if d.is_dir()):
            fsync_dir(scope_dir)
        self.paths.remove(path, removed)
        self._marked.difference_update(removed)


@dataclass(frozen=True)
class DamagedEntry:
    """A journal record of an experience that cannot be read: its file (or its set-aside name) and why; ``missing``:
    its confirmed marker names a record that is gone (``path_index.py``)."""

    file: Path
    error: str
    set_aside: bool
    ref: Ref | None = None
    missing: bool = False


def missing_cause(journal: OperationJournal, ref: Ref) -> str:
    """Why a confirmed marker without its record is damage (the marker was made after the record was written)."""
    final = journal.record_files(ref)[0]
    return (
        f"the journal record {journal.relative(final)} is missing: its marker was made after it was written, so "
        "it was removed outside the plugin; the version it held is missing from this history"
    )


def _stated(path: Path):
    """The record factory of a read by its import: an ``Operation`` whose state fits ``path``'s name."""
    return lambda **record: _check_state(path, Operation(**record))


def _check_state(path: Path, op: Operation) -> Operation:
    """``op``, unless its file ``path`` is a final record (``<digest>.json`` of a scope directory of this layout)
    holding an open status: never written so (``put``), so changed by hand; DamagedRecord then."""
    if path.parent.name.endswith(SCOPE_SUFFIX) and not path.name.endswith(OPEN_SUFFIX) and op.status in OPEN_STATES:
        raise DamagedRecord(
            path,
            f"a final record with the open status {op.status!r} (changed by hand?): a record "
            "is final once its file is <digest>.json",
        )
    return op


def _has_shape(op: Operation) -> bool:
    """Whether the fields a history (and a marker) reads have their types."""
    try:
        _check_shape(Path(), op)
    except DamagedRecord:
        return False
    return True


def _check_shape(file: Path, op: Operation) -> None:
    """DamagedRecord unless the fields a reader relies on (a listing, a history) have their types (a record is JSON
    anyone can edit) and the tool is one of ``TOOLS``."""
    texts = (op.scope, op.key, op.tool, op.path, op.target, op.status)
    times = (op.created_at,) + (() if op.published_at is None else (op.published_at,))
    if (
        not all(isinstance(t, str) for t in texts)
        or not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in times)
        or not (op.segment is None or (isinstance(op.segment, int) and not isinstance(op.segment, bool)))
        or not (op.expected_version is None or isinstance(op.expected_version, str))
        or not (op.file_version is None or isinstance(op.file_version, str))
    ):
        raise DamagedRecord(file, "fields of the wrong type")
    if op.tool not in TOOLS:  # e.g. "edit" of a development build: named, never read as an agent's write
        raise DamagedRecord(file, f"the unknown tool {op.tool!r}")


def written_paths(ops) -> dict[str, list[str]]:
    """Paths created and updated by journaled operations (oldest first) that were published, each path once."""
    created, updated = {}, {}
    for op in ops:
        if op.status in (INTENT, ABANDONED):
            continue
        if op.tool == "create":
            created[op.path] = True
        elif op.path not in created:
            updated[op.path] = True
    return {"created": list(created), "updated": list(updated)}


def _unlink_all(paths) -> None:
    """Remove open files whose final records are durable; one that cannot be removed stays (the final file is read
    first, and the next start tries again)."""
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass


def recover_intent(op: Operation, files: ExperienceFiles, journal: OperationJournal) -> None:
    """Resolve an ``intent`` left by a crash: roll the publish forward if its precondition holds, else drop it.

    A create still applies when the file is absent; an update when the file still has ``expected_version``.
    A file that already holds the target bytes means the publish happened before the crash.
    """
    current = files.read_bytes(op.path)
    if current == op.target_bytes:
        journal.set_status(op, PUBLISHED)
        return
    applies = (
        current is None if op.tool == "create" else (current is not None and version_of(current) == op.expected_version)
    )
    if applies:
        files.publish(op.path, op.target_bytes)
        journal.set_status(op, PUBLISHED)
    else:
        journal.set_status(op, ABANDONED, "the file changed before this write was published")
