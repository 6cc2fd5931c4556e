"""Reading the experience directory: names, listing, and the one validation every reader shares.

Contract: nothing here writes. ``ExperienceDirectory.read(rel_path)`` answers a ``StoredExperience``, a ``BadFile``
(its name is not a valid experience name, its bytes are not an experience, a source is not an existing trajectory
copy, or it is a symbolic link, never followed; the error says what to fix) or None when absent, for search, read,
update, reconcile and reindex alike, so a hand-placed file follows the rules of a written one. ``paths``/``scan``
list and read every ``*.json`` entry; the directory is checked to be a real one inside the workspace first.
Publishing is ``store.ExperienceFiles.publish`` (store.py is the only writer of durable files).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .paths import check_directory, source_problem
from .schema import Experience, InvalidExperience, check_name, parse_experience, version_of


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


class ExperienceDirectory:
    """The experience directory: names, reads and listing. Paths are workspace-relative."""

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
        try:  # one directory read; the entry types come with it (no stat, no resolve per file)
            with os.scandir(self.root) as entries:
                return sorted(self.rel(e.name) for e in entries
                              if e.name.endswith(".json") and (e.is_symlink() or e.is_file()))
        except (FileNotFoundError, NotADirectoryError):
            return []

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
