"""Durable contracts: experience files and versions, the operation journal, and the workspace lock.

This is the only module that writes durable files. What only reads lives beside it: reading and validating
experience files in ``experiences.py``, choosing a copy's name in ``copies.py``.

* Files are published atomically: a temporary file ``.<name>.<8 random>.tmp`` in the same directory (created with the
  process umask, or the replaced file's mode), fsync, ``os.replace``, fsync of the directory. A reader sees the old
  bytes or the new bytes, never a mix. A kill can leave the temporary file behind; ``remove_temp_files`` (run at
  every start) removes them. A failed write raises ``StorageError`` (an OSError naming the destination) and leaves no
  temporary file.
* Metadata records (imports, checkpoints, journal records) that cannot be parsed raise ``DamagedRecord`` naming the
  file. A reader that owns the record (the import it belongs to) sets it aside as ``<file>.damaged`` — kept, never
  deleted — before raising; readers that only scan (start, other imports) skip it and report it.
* The operation journal is a write-ahead log: before an experience is published, its record (scoped operation key,
  destination, target bytes, expected version) is durable under ``operations/``. After a crash the journal says
  which publishes may be incomplete; ``recover`` rolls them forward when their precondition still holds, else drops them.
* One process per workspace: ``WorkspaceLock`` holds an exclusive ``flock`` while the component runs.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import time
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

from .cli_errors import StartupError
from .experiences import ExperienceDirectory, Link, entry_names, read_entry
from .paths import check_directory
from .schema import version_of


def fsync_dir(directory: Path) -> None:
    """Make a rename or create inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(directory: Path) -> None:
    """Create ``directory`` and its missing parents durably: the parent of each new directory is fsynced."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for new in reversed(missing):
        new.mkdir(exist_ok=True)
        fsync_dir(new.parent)


class StorageError(OSError):
    """A durable write failed; ``filename`` is the destination, ``errno``/``strerror`` the cause."""

    @property
    def disk_full(self) -> bool:
        return self.errno in DISK_FULL_ERRNOS


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def storage_failure(exc: OSError, what: str = "") -> tuple[str, str]:
    """The error code and sentence of a failed durable write: ``disk_full`` (what to free) or ``storage_error``.

    ``what`` names the write (e.g. "the copy of run.jsonl"); the destination comes from the exception.
    """
    target = exc.filename or "the workspace"
    cause = f"{exc.strerror or type(exc).__name__} (errno {errno.errorcode.get(exc.errno, exc.errno)})"
    subject = f"{what} ({target})" if what else str(target)
    if exc.errno in DISK_FULL_ERRNOS:
        return "disk_full", (
            f"Writing {subject} failed: {cause}. Free space on the file system that holds "
            f"{Path(str(target)).parent} (or raise the quota); nothing half-written was kept."
        )
    return "storage_error", (
        f"Writing {subject} failed: {cause}. Make sure {Path(str(target)).parent} exists and is writable by this "
        "process (permissions, a read-only mount, a failing disk); nothing half-written was kept."
    )


class StartStorageError(StartupError):
    """A start could not write what it must (the views' state, a directory of the workspace): one line on the CLI,
    ``<code>: <what failed and what to do>``, with the code (``disk_full`` or ``storage_error``) as ``code``."""

    def __init__(self, exc: OSError) -> None:
        self.code, message = storage_failure(exc)
        super().__init__(f"{self.code}: {message} Then start again.")


def atomic_write(path: Path, data: bytes | Callable[[BinaryIO], None], *, sync_dir: bool = True) -> None:
    """Replace ``path`` with ``data`` (bytes, or a function that writes them to a binary file) atomically and
    durably (creates parent directories durably). The one writer of every durable file of the plugin.

    The new file gets the mode of the file it replaces, else the process umask's default (like ReMe's own files).
    ``sync_dir=False`` skips the directory fsync after the rename: only for replacing a record whose old content is
    an acceptable state after a power loss (the data itself is always fsynced first, so either version is complete),
    or for files a later write in the same directory makes durable together (a view snapshot's parts).
    Raises StorageError naming ``path``; the temporary file is removed on any failure.
    """
    tmp: Path | None = None
    try:
        ensure_dir(path.parent)
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = None
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666 minus the umask
        with os.fdopen(fd, "wb") as handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            if callable(data):
                data(handle)
            else:
                handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        tmp = None
        if sync_dir:
            fsync_dir(path.parent)
    except OSError as exc:
        raise StorageError(exc.errno, exc.strerror or str(exc), str(path)) from exc
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def write_json(path: Path, obj: Any, *, sync_dir: bool = True) -> None:
    """Atomically write a JSON record (``sync_dir``: see ``atomic_write``)."""
    atomic_write(path, (json.dumps(obj, ensure_ascii=False, indent=1, sort_keys=True) + "\n").encode("utf-8"),
                 sync_dir=sync_dir)


# The atomic writer's temporary files (``.run.jsonl.1a2b3c4d.tmp``; older versions used mkstemp's 8 characters).
TEMP_FILE = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")


def remove_temp_files(directories: list[Path], pattern: re.Pattern = TEMP_FILE,
                      keep: frozenset[Path] = frozenset(), older_than: float | None = None) -> list[Path]:
    """Remove leftover temporary files matching ``pattern`` directly in ``directories`` (a kill during an atomic
    write leaves them), except the paths in ``keep`` and, with ``older_than`` (a time), files modified since then;
    the caller holds the workspace lock, so no write of ours is in progress. Returns the removed paths."""
    removed = []
    for directory in directories:
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if pattern.match(entry.name) and entry.is_file(follow_symlinks=False) and Path(entry.path) not in keep \
                    and (older_than is None or entry.stat(follow_symlinks=False).st_mtime < older_than):
                Path(entry.path).unlink(missing_ok=True)
                removed.append(Path(entry.path))
    return removed


class DamagedRecord(ValueError):
    """A metadata record that cannot be parsed; the message names the file and what to do."""

    def __init__(self, path: Path, cause: str, set_aside: Path | None = None) -> None:
        self.path, self.cause, self.set_aside = path, cause, set_aside
        where = f"; it was set aside as {set_aside} (kept for inspection)" if set_aside else ""
        super().__init__(f"The metadata file {path} is damaged ({cause}){where}")


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
        target = path.with_name(f"{path.name}.damaged" + (f"-{number}" if number > 1 else ""))
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
    return any(path.parent.glob(f"{glob_escape(path.name)}.damaged*"))


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


class WorkspaceBusy(StartupError, RuntimeError):
    """Another process (or another application in this process) holds the workspace."""


class WorkspaceLock:
    """An exclusive, non-blocking ``flock`` on a lock file; released on ``release``, when this object is collected,
    or at process exit. The file records the holder (``pid=... since=...``) for the refusal message."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._finalizer = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise WorkspaceBusy naming the holder and the fix."""
        ensure_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "unknown"
            os.close(fd)
            raise WorkspaceBusy(
                f"The procedure-memory workspace is in use by another ReMe process ({holder}; lock file "
                f"{self.path}). Stop that process (for example the `reme start` service) and "
                "run the command again; only one process may use a workspace.",
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid={os.getpid()} since={time.strftime('%Y-%m-%dT%H:%M:%S')}".encode())
        self._fd = fd
        self._finalizer = weakref.finalize(self, os.close, fd)  # an owner dropped without release frees it

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self._fd is not None:
            self._finalizer.detach()
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class ExperienceFiles(ExperienceDirectory):
    """The experience directory (names, reads and listing: ``experiences.py``) and its atomic publish."""

    def publish(self, rel_path: str, data: bytes) -> None:
        """Atomically publish experience bytes (only while the directory is a real one inside the workspace)."""
        check_directory(self.workspace, self.rel_dir, setting="procedure_dir")
        atomic_write(self.abs(rel_path), data)


# Journal record states. "intent" is written before the publish; the others after it.
INTENT, PUBLISHED, INDEXED, INDEX_PENDING, SUPERSEDED, ABANDONED = (
    "intent", "published", "indexed", "index_pending", "superseded", "abandoned",
)


OPEN_STATES = (INTENT, PUBLISHED, INDEX_PENDING)


@dataclass
class Operation:
    """One journaled write. ``scope`` is the extraction run's request id; ``key`` the agent's operation key."""

    scope: str
    key: str
    tool: str  # "create" | "update"
    request: str  # digest of the caller's arguments: an identical retry has the same digest
    path: str
    target: str  # the target file text (UTF-8)
    expected_version: str | None
    status: str = INTENT
    error: str = ""
    created_at: float = field(default_factory=time.time)
    segment: int | None = None  # the extraction segment whose run made this write (its operation ledger)

    @property
    def target_bytes(self) -> bytes:
        return self.target.encode("utf-8")

    @property
    def target_version(self) -> str:
        return version_of(self.target_bytes)

    def same_request(self, other: "Operation") -> bool:
        """Whether ``other`` is an identical retry of this operation."""
        return (self.tool, self.path, self.request) == (other.tool, other.path, other.request)


OPEN_SUFFIX = ".open.json"  # the file of an open record; its final record is ``<digest>.json``
SCOPE_SUFFIX = ".v2"  # a scope directory of this layout; an earlier one (``<digest>``) is converted at start


class OperationJournal:
    """Durable records of writes: ``operations/<scope digest>/<scoped key digest>.json``.

    One directory per scope (an import's request id) makes a scope's records — its operation ledger — cheap to list.

    An open record (intent, published, index_pending) is ``<digest>.open.json``; once final it is ``<digest>.json``,
    and the open file is then removed. A start-up therefore reads only the open files (a long journal costs one
    directory listing per scope, not one read per record). When both exist (the open file is removed only after the
    final one's rename is durable: at once when its directory was fsynced, else after the next fsync of that
    directory, at close, or at the next start), the final one is the record. A scope directory of the earlier
    layout (``<digest>``, where an open record may be ``<digest>.json``) is read in full once, its open records moved
    to their open files, and renamed ``<digest>.v2``. Damaged final records are not read by a start:
    ``check_records`` (the reindex) and the import that owns them find them.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        # Records whose outcome is not final, by (scope, key): scanned once, then kept current by ``put``, so a
        # write never lists the whole journal.
        self._open: dict[tuple[str, str], Operation] | None = None
        self._twins: dict[Path, set[Path]] = {}  # scope directory -> open files whose final record is not yet durable
        self.damaged: dict[str, str] = {}  # damaged records skipped by a scan: path -> cause

    def _scope_dir(self, scope: str) -> Path:
        return self.directory / (hashlib.sha256(scope.encode("utf-8")).hexdigest()[:32] + SCOPE_SUFFIX)

    def _path(self, scope: str, key: str) -> Path:
        """The file of the record of a scoped key once final."""
        digest = hashlib.sha256(f"{scope}\0{key}".encode("utf-8")).hexdigest()
        return self._scope_dir(scope) / f"{digest}.json"

    def _open_path(self, scope: str, key: str) -> Path:
        """The file of the record of a scoped key while it is open."""
        final = self._path(scope, key)
        return final.with_name(final.name[: -len(".json")] + OPEN_SUFFIX)

    def records(self, scope: str) -> list[Operation]:
        """Every record of a scope (its import's ledger), oldest first. A damaged record is set aside and raised:
        the import it belongs to stops once with ``metadata_damaged``."""
        self._scan()  # scope directories of the earlier layout are converted before any read
        chosen: dict[str, Path] = {}
        for path in sorted(self._scope_dir(scope).glob("*.json")):
            stem = _record_stem(path.name)
            if stem not in chosen or not path.name.endswith(OPEN_SUFFIX):  # the final file is the record
                chosen[stem] = path
        found = [load_owned_record(path, Operation) for path in chosen.values()]
        return sorted((op for op in found if op is not None), key=lambda op: op.created_at)

    def get(self, scope: str, key: str) -> Operation | None:
        """The record of a scoped key, or None (a damaged record is set aside and raised)."""
        self._scan()  # scope directories of the earlier layout are converted before any read
        op = load_owned_record(self._path(scope, key), Operation)
        return op if op is not None else load_owned_record(self._open_path(scope, key), Operation)

    def put(self, op: Operation, *, sync_dir: bool = True) -> None:
        """Durably write (or overwrite) a record (``sync_dir``: see ``set_status``); a final record's open file is
        removed once the final one's rename is durable. An open record may replace a final one (an abandoned write
        retried): its open file is written first, then the final file removed; a kill between leaves the final one
        as the record, which the next identical retry reopens again."""
        open_records = self._scan()  # scope directories of the earlier layout are converted before the first write
        scope_dir, key = self._scope_dir(op.scope), (op.scope, op.key)
        if op.status in OPEN_STATES:
            write_json(self._open_path(op.scope, op.key), op.__dict__, sync_dir=sync_dir)
            open_records[key] = op
            final = self._path(op.scope, op.key)
            if final.exists():  # a final record reopened (the identical retry of an abandoned write): the open
                final.unlink()  # file is durable first; until the final one is gone, that one is the record
                fsync_dir(scope_dir)
        else:
            write_json(self._path(op.scope, op.key), op.__dict__, sync_dir=sync_dir)
            open_records.pop(key, None)
            self._twins.setdefault(scope_dir, set()).add(self._open_path(op.scope, op.key))
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
        self.put(replace(op, status=status, error=error), sync_dir=not settled)
        op.status, op.error = status, error

    def open_records(self) -> list[Operation]:
        """Records whose outcome is not final (intent, published, index_pending), oldest first. Damaged records are
        skipped here (listed in ``damaged``): one import's damaged record never blocks a start or another import.

        The first call reads the open files only (a journal of the earlier layout: every record, once, converting
        it); it removes open files whose final record exists and reads (after fsyncing their directory); beside a
        damaged final record the open file stays (the import that owns it sets the final one aside, then reads it).
        """
        return sorted(self._scan().values(), key=lambda op: op.created_at)

    def _scan(self) -> dict[tuple[str, str], Operation]:
        """The open records by (scope, key): read (and the layout converted) by the first call, then kept current."""
        if self._open is None:
            self._open = {}
            for scope_dir, dir_fd, names in self._scopes():
                earlier = not scope_dir.name.endswith(SCOPE_SUFFIX)
                finals = {name for name in names if not name.endswith(OPEN_SUFFIX)}
                stale = {name for name in names if name.endswith(OPEN_SUFFIX) and _record_stem(name) + ".json" in finals}
                converted: list[tuple[Operation, Path]] = []
                for name in names:
                    is_open = name.endswith(OPEN_SUFFIX)
                    if name in stale or not (is_open or earlier):
                        continue
                    op = self._read(scope_dir, dir_fd, name)
                    if op is not None and op.status in OPEN_STATES:
                        self._open[(op.scope, op.key)] = op
                        if not is_open:
                            converted.append((op, scope_dir / name))
                settled = [name for name in sorted(stale) if self._read(scope_dir, dir_fd, _record_stem(name) + ".json")]
                if settled:
                    fsync_dir(scope_dir)  # their final records' renames are durable before the open files go
                    _unlink_all(scope_dir / name for name in settled)
                if earlier:
                    self._convert(scope_dir, converted)
        return self._open

    def _convert(self, scope_dir: Path, converted: list[tuple[Operation, Path]]) -> None:
        """Move the open records of a scope directory of the earlier layout to their open files, then rename it to
        this layout's name. A kill meanwhile leaves both files of a record with the same content (the final-named
        one is read) or the earlier name, and the next start converts again."""
        for op, path in converted:
            write_json(path.with_name(_record_stem(path.name) + OPEN_SUFFIX), op.__dict__)
            path.unlink(missing_ok=True)
        if converted:
            fsync_dir(scope_dir)  # no earlier-layout open record comes back once the directory is renamed
        target = scope_dir.with_name(scope_dir.name + SCOPE_SUFFIX)
        if target.exists():  # only by hand: left as it is, read in full at every start
            return
        try:
            os.rename(scope_dir, target)
        except OSError as exc:
            raise StorageError(exc.errno, exc.strerror or str(exc), str(target)) from exc
        fsync_dir(self.directory)

    def flush(self) -> None:
        """Make the final records written without a directory fsync durable and remove their open files (at close)."""
        for scope_dir in sorted(self._twins):
            fsync_dir(scope_dir)
            _unlink_all(self._twins.pop(scope_dir))

    def check_records(self) -> dict[str, str]:
        """Read every record (final ones too) and return the damaged ones (path -> cause), also kept in
        ``damaged``: the full check a reindex reports."""
        for scope_dir, dir_fd, names in self._scopes():
            for name in names:
                self._read(scope_dir, dir_fd, name)
        return dict(self.damaged)

    def _read(self, scope_dir: Path, dir_fd: int, name: str) -> Operation | None:
        """The record file ``name`` of a scope directory, read through its descriptor (a link by its path, as it
        is followed); None when absent or damaged (listed in ``damaged``)."""
        path = scope_dir / name
        raw = read_entry(name, dir_fd)  # None: removed meanwhile, or a directory
        if raw is None:
            return None
        try:
            return load_record(path, Operation, None if isinstance(raw, Link) else raw)
        except DamagedRecord as exc:
            self.damaged[str(path)] = exc.cause
            return None

    def _scopes(self) -> Iterator[tuple[Path, int, list[str]]]:
        """``(directory, descriptor, record file names)`` of every scope directory ``<scope>/``, each directory
        listed once and open while its step runs: a long journal is read without resolving a path per record."""
        try:
            with os.scandir(self.directory) as entries:
                scopes = sorted(e.name for e in entries if e.is_dir())
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


def _record_stem(name: str) -> str:
    """A record file's name without ``.open.json`` or ``.json``: the same for a record's open and final files."""
    return name[: -len(OPEN_SUFFIX)] if name.endswith(OPEN_SUFFIX) else name[: -len(".json")]


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
    applies = current is None if op.tool == "create" else (
        current is not None and version_of(current) == op.expected_version
    )
    if applies:
        files.publish(op.path, op.target_bytes)
        journal.set_status(op, PUBLISHED)
    else:
        journal.set_status(op, ABANDONED, "the file changed before this write was published")


# -- imports and checkpoints ----------------------------------------------------------------------------------------

RESERVED, COPIED = "reserved", "copied"


def _keyed(directory: Path, request_id: str) -> Path:
    return directory / f"{hashlib.sha256(request_id.encode('utf-8')).hexdigest()}.json"


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
        return _keyed(self.directory, request_id)

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
    atomic_write(target, data)


class CheckpointStore:
    """Processing checkpoints under ``processing/``, one JSON record per request id, replaced atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, request_id: str) -> Path:
        return _keyed(self.directory, request_id)

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
