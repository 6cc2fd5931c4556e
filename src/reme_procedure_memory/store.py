"""Durable contracts: experience files and versions, the operation journal, and the workspace lock.

This is the only module that writes durable files.

* Files are published atomically: a temporary file in the same directory, fsync, ``os.replace``, fsync of the
  directory. A reader sees the old bytes or the new bytes, never a mix.
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
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

from .paths import check_directory, source_problem
from .schema import Experience, InvalidExperience, check_name, parse_experience, version_of


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


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably (creates parent directories durably)."""
    ensure_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_json(path: Path, obj: Any) -> None:
    """Atomically write a JSON record."""
    atomic_write(path, (json.dumps(obj, ensure_ascii=False, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def read_json(path: Path) -> Any | None:
    """Read a JSON record, or None when it does not exist."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


class WorkspaceBusy(RuntimeError):
    """Another process holds the workspace."""


class WorkspaceLock:
    """An exclusive, non-blocking ``flock`` on a lock file; released on close or process exit."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise WorkspaceBusy naming the holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "unknown"
            os.close(fd)
            raise WorkspaceBusy(
                f"The procedure-memory workspace is in use by another ReMe process ({holder}); lock file {self.path}. "
                "Stop that process (for example the `reme start` service) before running a one-shot import or rebuild.",
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid={os.getpid()} since={time.strftime('%Y-%m-%dT%H:%M:%S')}".encode())
        self._fd = fd

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


@dataclass(frozen=True)
class StoredExperience:
    """An experience file as read from disk."""

    path: str  # workspace-relative, POSIX
    version: str
    experience: Experience


@dataclass(frozen=True)
class BadFile:
    """A file under the experience directory that is not a valid experience."""

    path: str
    version: str
    error: str


class ExperienceFiles:
    """The experience directory: names, reads, listing and atomic publish. Paths are workspace-relative."""

    def __init__(self, workspace: Path, procedure_dir: str, trajectory_dir: str) -> None:
        self.workspace = workspace
        self.rel_dir = procedure_dir
        self.root = workspace / procedure_dir
        self.trajectory_dir = trajectory_dir
        # Per instance (one search, scan or write): the workspace's real path, and each source checked once.
        self._real_root: str | None = None
        self._source_problems: dict[str, str | None] = {}

    def rel(self, name: str) -> str:
        """Workspace-relative path of experience ``name``."""
        return f"{self.rel_dir}/{name}"

    def abs(self, rel_path: str) -> Path:
        """Absolute path of a workspace-relative experience path (already validated by the caller)."""
        return self.workspace / rel_path

    def read_bytes(self, rel_path: str) -> bytes | None:
        """Current bytes, or None when absent."""
        try:
            return self.abs(rel_path).read_bytes()
        except FileNotFoundError:
            return None

    def read(self, rel_path: str) -> StoredExperience | BadFile | None:
        """Read and validate one file: a StoredExperience, a BadFile, or None when absent.

        This is the one validation every reader shares (search, read, update, reconcile, reindex): a hand-placed
        file follows the rules of a written one. It is a BadFile when its name is not a valid experience name,
        its bytes are not an experience, or a source is not an existing trajectory copy; the error says what to fix.
        """
        self._check()
        return self._read(rel_path)

    def _check(self) -> None:
        """The experience directory is a real directory inside the workspace (``paths.check_directory``); checked
        once per instance."""
        if self._real_root is None:
            root = os.path.realpath(self.workspace)
            check_directory(self.workspace, self.rel_dir, setting="procedure_dir", root=root)
            self._real_root = root

    def _read(self, rel_path: str) -> StoredExperience | BadFile | None:
        """``read`` in a directory already checked."""
        path = f"{self.workspace}/{rel_path}"
        try:  # a link is never followed: it would give one file two names, or lead outside
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            link = os.readlink(path).encode("utf-8", "surrogateescape")  # its version; the target is never shown
            return BadFile(rel_path, version_of(link), "it is a symbolic link; experiences are regular files: "
                           "replace the link with the file itself")
        try:
            with os.fdopen(fd, "rb") as handle:
                data = handle.read()
        except IsADirectoryError:
            return None
        problems = []
        name_problem = check_name(rel_path.rpartition("/")[2])
        if name_problem:
            problems.append(f"{name_problem}; rename the file")
        try:
            experience = parse_experience(data)
        except InvalidExperience as exc:
            problems.append(str(exc))
        else:
            problems += [p for s in experience.sources if (p := self._source_problem(s))]
        if problems:
            return BadFile(rel_path, version_of(data), "; ".join(problems))
        return StoredExperience(rel_path, version_of(data), experience)

    def _source_problem(self, source: str) -> str | None:
        if source not in self._source_problems:
            self._check()
            self._source_problems[source] = source_problem(self.workspace, self.trajectory_dir, source,
                                                           root=self._real_root)
        return self._source_problems[source]

    def paths(self) -> list[str]:
        """Every ``*.json`` file or symbolic link directly in the experience directory, sorted. (The atomic
        writer's temporary files end in ``.tmp``; links are listed so that ``read`` reports them.)"""
        self._check()
        if not self.root.is_dir():
            return []
        return sorted(self.rel(p.name) for p in self.root.glob("*.json") if p.is_symlink() or p.is_file())

    def listed(self, raw) -> str | None:
        """``raw`` when it names an entry ``paths()`` lists (whatever its name), else None: such a path is
        answered by ``read``'s validation, so read and update say what search reports in pending_indexes."""
        prefix = f"{self.rel_dir}/"
        if not isinstance(raw, str) or not raw.startswith(prefix):
            return None
        name = raw[len(prefix):]
        if not name.endswith(".json") or "/" in name or "\x00" in name:
            return None
        self._check()
        entry = self.root / name
        try:
            return raw if entry.is_symlink() or entry.is_file() else None
        except OSError:  # e.g. a name too long for the file system: not an entry
            return None

    def scan(self) -> Iterator[StoredExperience | BadFile]:
        """Read and validate every experience file (the directory is checked once, by ``paths``)."""
        for rel_path in self.paths():
            item = self._read(rel_path)
            if item is not None:
                yield item

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


class OperationJournal:
    """Durable records of writes: ``operations/<scope digest>/<scoped key digest>.json``.

    One directory per scope (an import's request id) makes a scope's records — its operation ledger — cheap to list.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        # Records whose outcome is not final, by (scope, key): scanned once, then kept current by ``put``, so a
        # write never lists the whole journal.
        self._open: dict[tuple[str, str], Operation] | None = None

    def _scope_dir(self, scope: str) -> Path:
        return self.directory / hashlib.sha256(scope.encode("utf-8")).hexdigest()[:32]

    def _path(self, scope: str, key: str) -> Path:
        digest = hashlib.sha256(f"{scope}\0{key}".encode("utf-8")).hexdigest()
        return self._scope_dir(scope) / f"{digest}.json"

    def records(self, scope: str) -> list[Operation]:
        """Every record of a scope, oldest first."""
        found = [Operation(**raw) for p in self._scope_dir(scope).glob("*.json") if (raw := read_json(p))]
        return sorted(found, key=lambda op: op.created_at)

    def get(self, scope: str, key: str) -> Operation | None:
        """The record of a scoped key, or None."""
        raw = read_json(self._path(scope, key))
        return Operation(**raw) if raw else None

    def put(self, op: Operation) -> None:
        """Durably write (or overwrite) a record."""
        write_json(self._path(op.scope, op.key), op.__dict__)
        if self._open is not None:
            if op.status in OPEN_STATES:
                self._open[(op.scope, op.key)] = op
            else:
                self._open.pop((op.scope, op.key), None)

    def set_status(self, op: Operation, status: str, error: str = "") -> None:
        """Durably move a record to a new status (``op`` changes only once the record is on disk)."""
        self.put(replace(op, status=status, error=error))
        op.status, op.error = status, error

    def open_records(self) -> list[Operation]:
        """Records whose outcome is not final (intent, published, index_pending), oldest first."""
        if self._open is None:
            self._open = {}
            for path in self.directory.glob("*/*.json"):
                raw = read_json(path)
                if raw and raw.get("status") in OPEN_STATES:
                    op = Operation(**raw)
                    self._open[(op.scope, op.key)] = op
        return sorted(self._open.values(), key=lambda op: op.created_at)

    def supersede_path(self, path: str, keep: Operation) -> None:
        """Mark every open record of ``path`` except ``keep`` as superseded (a later write replaced its intent)."""
        for op in self.open_records():
            if op.path == path and (op.scope, op.key) != (keep.scope, keep.key):
                self.set_status(op, SUPERSEDED, f"superseded by operation {keep.key!r}")


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

    def get(self, request_id: str) -> ImportRecord | None:
        raw = read_json(_keyed(self.directory, request_id))
        return ImportRecord(**raw) if raw else None

    def put(self, record: ImportRecord) -> None:
        write_json(_keyed(self.directory, record.request_id), record.__dict__)

    def reserved_paths(self) -> set[str]:
        """Copy paths held by any import record (published copies also exist on disk)."""
        if not self.directory.is_dir():
            return set()
        return {raw["path"] for p in self.directory.glob("*.json") if (raw := read_json(p))}


def numbered_name(filename: str, number: int) -> str:
    """``run.jsonl`` -> ``run-2.jsonl`` (before the last extension); ``notes`` -> ``notes-2``."""
    if number == 1:
        return filename
    stem, dot, ext = filename.rpartition(".")
    if not dot or not stem:
        return f"{filename}-{number}"
    return f"{stem}-{number}.{ext}"


def allocate_copy_name(directory: Path, filename: str, taken: set[str], rel_dir: str) -> str:
    """The first of ``filename``, ``-2``, ``-3``, ... that neither exists in ``directory`` nor is reserved."""
    number = 1
    while True:
        name = numbered_name(filename, number)
        if not (directory / name).exists() and not (directory / name).is_symlink() and f"{rel_dir}/{name}" not in taken:
            return name
        number += 1


def publish_copy(target: Path, data: bytes) -> None:
    """Publish the byte-exact copy of an original (atomic, durable)."""
    atomic_write(target, data)


class CheckpointStore:
    """Processing checkpoints under ``processing/``, one JSON record per request id, replaced atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def get(self, request_id: str) -> dict | None:
        return read_json(_keyed(self.directory, request_id))

    def put(self, request_id: str, checkpoint: dict) -> None:
        write_json(_keyed(self.directory, request_id), checkpoint)
