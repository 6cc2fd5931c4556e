"""The experience directory: names, listing, the one validation every reader shares, and publishing.

Contract: ``ExperienceReader`` never writes; its ``read(rel_path)`` answers a ``StoredExperience``, a ``BadFile``
(its name is not a valid experience name, its bytes are not an experience, a source is not an existing trajectory
copy, or it is a symbolic link, never followed; the error says what to fix) or None when absent, for search, read,
update, reconcile and reindex alike, so a hand-placed file follows the rules of a written one. ``paths``/``scan``
list and read every ``*.json`` entry, ``page`` one page of them (the listing); the directory is checked to be a real
one inside the workspace first, then listed and read through one descriptor of it. ``scan`` and ``page`` validate
each file exactly as ``read`` does (``_judge``); only the reading differs: relative to that descriptor (``scan`` with
reader threads ahead when reads wait on the disk).
Writing is ``ExperienceFiles``' alone (``publish``/``remove``, atomic), the one writer of experience files (the
modules that write durable files: ``storage/__init__.py``).
"""

from __future__ import annotations

import bisect
import errno
import os
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import InvalidExperience
from ..schema import Experience, check_name, parse_experience, version_of
from . import atomic
from .paths import check_directory, source_problem


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


class ExperienceReader:
    """The experience directory, read only: names, reads and listing. Paths are workspace-relative."""

    def __init__(self, workspace: Path, procedure_dir: str, trajectory_dir: str, *, one_use: bool = False) -> None:
        self.workspace = workspace
        self.rel_dir = procedure_dir
        self.root = workspace / procedure_dir
        self.trajectory_dir = trajectory_dir
        # Only an instance of one use (``checked``: one search, scan or write) keeps its checks: the workspace's real
        # path, and each source checked once. The workspace's own instance checks again at every call.
        self._one_use = one_use
        self._real_root: str | None = None
        self._source_problems: dict[str, str | None] = {}

    def checked(self) -> "ExperienceReader":
        """An instance for one search, scan or write: the directory is checked once and each source once, however
        many files it reads (a link appearing later is found by the next use)."""
        return type(self)(self.workspace, self.rel_dir, self.trajectory_dir, one_use=True)

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
        if self._real_root is None or not self._one_use:
            root = os.path.realpath(self.workspace)
            check_directory(self.workspace, self.rel_dir, setting="procedure_dir", root=root)
            self._real_root = root

    def _read(self, rel_path: str) -> StoredExperience | BadFile | None:
        """``read`` in a directory already checked."""
        return self._judge(rel_path, read_entry(f"{self.workspace}/{rel_path}"))

    def _judge(self, rel_path: str, raw: bytes | Link | None) -> StoredExperience | BadFile | None:
        """Validate what ``read_entry`` found at ``rel_path``: the one validation of ``read`` and ``scan``."""
        if raw is None:
            return None
        if isinstance(raw, Link):
            return BadFile(
                rel_path,
                version_of(raw.target),
                "it is a symbolic link; experiences are regular files: replace the link with the file itself",
            )
        problems = []
        name_problem = check_name(rel_path.rpartition("/")[2])
        if name_problem:
            problems.append(f"{name_problem}; rename the file")
        try:
            experience = parse_experience(raw)
        except InvalidExperience as exc:
            problems.append(str(exc))
        else:
            problems += [p for s in experience.sources if (p := self._source_problem(s))]
        if problems:
            return BadFile(rel_path, version_of(raw), "; ".join(problems))
        return StoredExperience(rel_path, version_of(raw), experience)

    def _source_problem(self, source: str) -> str | None:
        if source not in self._source_problems:
            self._check()
            problem = source_problem(self.workspace, self.trajectory_dir, source, root=self._real_root)
            if not self._one_use:
                return problem
            self._source_problems[source] = problem
        return self._source_problems[source]

    def paths(self) -> list[str]:
        """Every ``*.json`` file or symbolic link directly in the experience directory, sorted. (The atomic
        writer's temporary files end in ``.tmp``; links are listed so that ``read`` reports them.)"""
        with self._opened() as dir_fd:
            return [self.rel(name) for name in entry_names(dir_fd)] if dir_fd is not None else []

    @contextmanager
    def _opened(self) -> Iterator[int | None]:
        """A descriptor of the checked experience directory (None when it does not exist), closed on exit.

        Listing and reads through it stay in the directory that was checked, even if a path element is replaced
        after the check; the directory itself is opened without following a link."""
        self._check()
        try:
            dir_fd = os.open(f"{self._real_root}/{self.rel_dir}", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except (FileNotFoundError, NotADirectoryError):
            dir_fd = None
        try:
            yield dir_fd
        finally:
            if dir_fd is not None:
                os.close(dir_fd)

    def listed(self, raw) -> str | None:
        """``raw`` when it names an entry ``paths()`` lists (whatever its name), else None: such a path is
        answered by ``read``'s validation, so read and update say what search reports in pending_indexes."""
        prefix = f"{self.rel_dir}/"
        if not isinstance(raw, str) or not raw.startswith(prefix):
            return None
        name = raw[len(prefix) :]
        if not name.endswith(".json") or "/" in name or "\x00" in name:
            return None
        self._check()
        entry = self.root / name
        try:
            return raw if entry.is_symlink() or entry.is_file() else None
        except OSError:  # e.g. a name too long for the file system: not an entry
            return None

    def scan(self) -> Iterator[StoredExperience | BadFile]:
        """Read and validate every experience file, in ``paths()`` order (the directory is checked once).

        Each file is validated by ``_judge``, as ``read`` validates it; its bytes come from ``read_ahead``, which
        reads through one descriptor of the checked directory."""
        if not self._one_use:
            yield from self.checked().scan()
            return
        with self._opened() as dir_fd:
            if dir_fd is None:
                return
            with closing(read_ahead(entry_names(dir_fd), dir_fd)) as found:  # closed before dir_fd is
                for name, raw in found:
                    item = self._judge(self.rel(name), raw)
                    if item is not None:
                        yield item

    def page(self, after: str | None, limit: int) -> tuple[list[StoredExperience | BadFile], int, str | None]:
        """At most ``limit`` entries after the path ``after`` (None: from the first), in ``paths()`` order, each
        validated as ``read`` does; with the number of entries in the directory and the last path of the page when
        more follow (else None). Only the page's files are read; one that cannot be read (e.g. no permission) is a
        BadFile saying so, and one removed since the listing is left out."""
        if not self._one_use:
            return self.checked().page(after, limit)
        with self._opened() as dir_fd:
            if dir_fd is None:
                return [], 0, None
            paths = [self.rel(name) for name in entry_names(dir_fd)]
            start = bisect.bisect_right(paths, after) if after is not None else 0
            chosen = paths[start : start + limit]
            items: list[StoredExperience | BadFile] = []
            for path in chosen:
                try:
                    item = self._judge(path, read_entry(path.rpartition("/")[2], dir_fd))
                except OSError as exc:
                    item = BadFile(path, "", f"it cannot be read ({exc.strerror or exc}): make it readable")
                if item is not None:
                    items.append(item)
        more = start + limit < len(paths)
        return items, len(paths), chosen[-1] if more and chosen else None


BATCH = 64  # files per read
READERS = 4  # reader threads, once reads wait on the disk
AHEAD = 8  # batches the readers read ahead: at most AHEAD * BATCH files' bytes are held
SLOW_READ = 50e-6  # seconds per file: a file read from the page cache takes about 5-20 µs, from a disk far longer
SLOW_AFTER = 4  # batches read in this thread before the readers may start


def read_ahead(names: list[str], dir_fd: int) -> Iterator[tuple[str, bytes | Link | None]]:
    """``(name, read_entry(name, dir_fd))`` for each name, in order.

    The first batches are read in this thread. When those reads average more than ``SLOW_READ`` a file (the files
    are not in the page cache), ``READERS`` threads read the next ``AHEAD`` batches while the caller works on the
    current one, so disk waits overlap. From the page cache the threads would cost more than they save: each
    system call of a reader takes the GIL back from the caller's parsing. An unexpected OSError (e.g. a file the
    process may not read) is raised at that file, as a sequential read would. Close the iterator before ``dir_fd``.
    """
    batches = [names[i : i + BATCH] for i in range(0, len(names), BATCH)]
    readers: ThreadPoolExecutor | None = None
    ahead: deque[Future] = deque()  # the readers' reads of the next batches, in order
    waited, read_here = 0.0, 0
    try:
        for number, batch in enumerate(batches):
            if readers is None:
                started = time.perf_counter()
                found = read_batch(batch, dir_fd)
                waited += time.perf_counter() - started
                read_here += len(batch)
                if number + 1 >= SLOW_AFTER and waited > read_here * SLOW_READ:
                    readers = ThreadPoolExecutor(READERS, thread_name_prefix="experience-scan")
            else:
                while len(ahead) < AHEAD and number + len(ahead) < len(batches):
                    ahead.append(readers.submit(read_batch, batches[number + len(ahead)], dir_fd))
                found = ahead.popleft().result()
            for name, raw in zip(batch, found):
                if isinstance(raw, OSError):
                    raise raw
                yield name, raw
    finally:  # the readers use dir_fd: stop them before the caller closes it
        if readers is not None:
            readers.shutdown(wait=True, cancel_futures=True)


@dataclass(frozen=True)
class Link:
    """A symbolic link where a file was expected; ``target`` is what it points to (its version, never shown)."""

    target: bytes


def entry_names(dir_fd: int) -> list[str]:
    """Names of every ``*.json`` file or symbolic link directly in the directory ``dir_fd``, sorted."""
    with os.scandir(dir_fd) as entries:  # one directory read; the entry types come with it (no stat per file)
        return sorted(e.name for e in entries if e.name.endswith(".json") and (e.is_symlink() or e.is_file()))


def read_entry(path: str, dir_fd: int | None = None) -> bytes | Link | None:
    """The bytes of the regular file ``path`` (relative to ``dir_fd`` when given), a ``Link`` when it is a symbolic
    link (never followed: it would give one file two names, or lead outside), or None when it is absent or a
    directory. Other OSErrors are raised."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        return Link(os.readlink(path, dir_fd=dir_fd).encode("utf-8", "surrogateescape"))
    try:
        chunks = [os.read(fd, 65536)]  # experience files are a few KiB: usually one read, and one at the end
        while chunks[-1]:
            chunks.append(os.read(fd, 1 << 20))
        return b"".join(chunks)
    except IsADirectoryError:
        return None
    finally:
        os.close(fd)


def read_batch(names: list[str], dir_fd: int) -> list[bytes | Link | None | OSError]:
    """``read_entry`` of each name in ``dir_fd``; an unexpected OSError ends the batch (the scan raises it there)."""
    found: list[bytes | Link | None | OSError] = []
    for name in names:
        try:
            found.append(read_entry(name, dir_fd))
        except OSError as exc:
            found.append(exc)
            break
    return found


class ExperienceFiles(ExperienceReader):
    """The experience directory: what ``ExperienceReader`` reads, and the atomic publish and removal of its files."""

    def publish(self, rel_path: str, data: bytes) -> None:
        """Atomically publish experience bytes (only while the directory is a real one inside the workspace)."""
        check_directory(self.workspace, self.rel_dir, setting="procedure_dir")
        atomic.atomic_write(self.abs(rel_path), data)

    def remove(self, rel_path: str) -> None:
        """Durably remove an experience file (a link itself, never its target; nothing when it is gone), only while
        the directory is a real one inside the workspace."""
        check_directory(self.workspace, self.rel_dir, setting="procedure_dir")
        atomic.remove_file(self.abs(rel_path))
