"""The shared state of one component's workspace, and its one owner.

A ``Workspace`` is built once by the component and handed to the operations (runs, reads, writes, recovery) and the
import; they reach shared state only through it. Each part is created once, here:

* the durable stores (``storage/``): ``files`` (the experience files), ``imports``, ``checkpoints``, and
  ``journal`` (one per start: it caches the open records; ``close_journal`` ends it);
* the locks: ``lock_file`` (the workspace's ``flock``, one process per workspace: taken when the component is built,
  released after its stores persisted at close), ``write_lock`` (serialises every write: create, update, reindex,
  delete, export, pending retries), ``import_lock`` (one import at a time per process) and ``views_ready`` (set
  unless a reindex is rebuilding the views: searches wait on it); the asyncio ones are made by ``open``, for the
  event loop of the start;
* ``views`` (``search/views.py``): both views, once the view stores have started (``open``);
* ``pending``: the files excluded from both views until indexed (``PendingIndex``);
* ``damaged_metadata``: damaged metadata records skipped (not set aside), reported by start and reindex;
* ``importing``: the request ids of the imports this process is running now (the imports listing says
  ``processing``);
* ``generation``: changes whenever files or views may have changed (``mark_changed``), so an identical tool call
  counts as repeated only within one generation; ``writes``: experience writes since the start (``count_write``);
* the collaborators the operations share: ``settings``, ``tokens`` (exact token counting) and ``logger``.

Where each file is: ``storage/format.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Iterator

from .settings import ProcedureSettings
from .storage.checkpoints import CheckpointStore
from .storage.experiences import ExperienceFiles
from .storage.format import IMPORTS_DIR, LOCK_FILE, OPERATIONS_DIR, PROCESSING_DIR
from .storage.imports import ImportRegistry
from .storage.journal import OperationJournal
from .storage.lock import WorkspaceLock
from .search.views import Views
from .tokens import TokenCounter


class PendingIndex:
    """Files excluded from both views until they are indexed: path -> (version, error). An invalid file is pending
    too (its error says why), so it is reported instead of served stale."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, str]] = {}

    def mark(self, path: str, version: str, error: str) -> None:
        """Exclude ``path`` (at ``version``) until it is indexed, saying why."""
        self._entries[path] = {"version": version, "error": error}

    def clear(self, path: str | None = None) -> None:
        """Forget ``path`` (it is indexed, or gone), or every entry."""
        if path is None:
            self._entries.clear()
        else:
            self._entries.pop(path, None)

    def error(self, path: str) -> str:
        return self._entries[path]["error"]

    def entry(self, path: str) -> dict[str, str]:
        """A pending file as answers report it: path, version, error."""
        found = self._entries[path]
        return {"path": path, "version": found["version"], "error": found["error"]}

    def entries(self, paths=None) -> list[dict[str, str]]:
        """Every pending file (or those of ``paths``) as answers report them, by path."""
        chosen = self._entries if paths is None else set(paths) & set(self._entries)
        return [self.entry(path) for path in sorted(chosen)]

    def __contains__(self, path: object) -> bool:
        return path in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)


class Workspace:
    """The shared state of one component (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        state_dir: Path,
        trajectory_rel_dir: str,
        settings: ProcedureSettings,
        tokens: TokenCounter,
        logger: Any,
    ) -> None:
        self.root = root
        self.state_dir = state_dir
        self.trajectory_rel_dir = trajectory_rel_dir
        self.settings = settings
        self.tokens = tokens
        self.logger = logger
        self.files = ExperienceFiles(root, settings.procedure_dir, trajectory_rel_dir)
        self.imports = ImportRegistry(state_dir / IMPORTS_DIR)
        self.checkpoints = CheckpointStore(state_dir / PROCESSING_DIR)
        self.lock_file = WorkspaceLock(state_dir / LOCK_FILE)
        self.pending = PendingIndex()
        self.damaged_metadata: dict[str, str] = {}  # path -> cause
        self.importing: set[str] = set()  # request ids of the imports running in this process
        self._journal: OperationJournal | None = None
        self._views: Views | None = None
        self._write_lock: asyncio.Lock | None = None
        self._import_lock: asyncio.Lock | None = None
        self._views_ready: asyncio.Event | None = None
        self._generation = 0
        self._writes = 0

    # -- the durable stores -------------------------------------------------------------------------------------

    @property
    def journal(self) -> OperationJournal:
        """The operation journal (one instance per start: it caches the records that are not final)."""
        if self._journal is None:
            self._journal = OperationJournal(self.state_dir / OPERATIONS_DIR)
        return self._journal

    def setting(self, key: str) -> str:
        """The full configuration key of one of this component's settings, e.g. ``extraction.max_iters`` ->
        ``components.procedure_memory.default.extraction.max_iters`` (``state_dir`` ends with the component's name)."""
        return f"components.procedure_memory.{self.state_dir.name}.{key}"

    def relative(self, path: Path | str) -> str:
        """``path`` relative to the workspace (POSIX), as answers show it; a path outside stays absolute."""
        absolute = Path(path).absolute()
        try:
            return absolute.relative_to(self.root).as_posix()
        except ValueError:
            return absolute.as_posix()

    def mtime(self, rel_path: str) -> float:
        """An experience file's modification time (0 when it is gone)."""
        try:
            return self.files.abs(rel_path).stat().st_mtime
        except FileNotFoundError:
            return 0.0

    # -- lifecycle ------------------------------------------------------------------------------------------------

    def open(self, views: Views) -> None:
        """At start: the views, and fresh asyncio locks (of this event loop)."""
        self._views = views
        self._write_lock = asyncio.Lock()
        self._import_lock = asyncio.Lock()
        self._views_ready = asyncio.Event()
        self._views_ready.set()

    @property
    def is_open(self) -> bool:
        """Whether ``open`` has run (the views and the asyncio locks exist)."""
        return self._views is not None

    def close_journal(self) -> OperationJournal | None:
        """At close: the journal of this start, if one was opened (the next start reads it again)."""
        journal, self._journal = self._journal, None
        return journal

    @property
    def views(self) -> Views:
        """Both views (search/views.py); RuntimeError before the start opened them."""
        return self._opened(self._views)

    # -- locks ------------------------------------------------------------------------------------------------------

    @property
    def write_lock(self) -> asyncio.Lock:
        """Serialises every write: create, update, delete, reindex, export, pending retries."""
        return self._opened(self._write_lock)

    @property
    def import_lock(self) -> asyncio.Lock:
        """One import at a time per process."""
        return self._opened(self._import_lock)

    @property
    def views_ready(self) -> asyncio.Event:
        """Set unless a reindex is rebuilding the views from scratch (searches wait on it)."""
        return self._opened(self._views_ready)

    @staticmethod
    def _opened(part):
        if part is None:
            raise RuntimeError("the procedure-memory workspace is not open: its component has not started")
        return part

    # -- writes and changes ---------------------------------------------------------------------------------------

    def mark_changed(self) -> None:
        """Files or views may have changed: advance ``generation``."""
        self._generation += 1

    @property
    def generation(self) -> int:
        return self._generation

    def count_write(self) -> None:
        """An experience was written (the close compacts BM25 after writes)."""
        self._writes += 1

    @property
    def writes(self) -> int:
        return self._writes
