"""ProcedureMemory: the component (type ``procedure_memory``) that owns the experience store, both views and runs.

Lifecycle: the constructor validates settings and takes the workspace lock — ReMe builds every component before it
starts any, so a second process is refused before any store could write. ``_start`` creates the directories, removes
temporary files a kill left behind, recovers the operation journal and reconciles the experience files with both
views (recovery.py; a process started to run the reindex job leaves the indexing to that job). ``_close`` compacts
the views' BM25 after writes, closes the plugin's own stores (each persists itself when it closes) and only then
releases the lock: no view file is written without it.

Steps are stateless and call the public coroutines here; every coroutine returns a JSON-able answer or raises
ProcedureError. All writes (create, update, reindex, pending retries) are serialised by one lock. Job arguments are
validated through their models in arguments.py; extraction runs and their grants live in runs.py, the write path
(create, update: journal -> publish -> index, replay) in writes.py.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from reme.components.base_component import BaseComponent
from reme.components.embedding_store import BaseEmbeddingStore
from reme.components.file_store import BaseFileStore

from .cli_errors import install_cli_error_hook
from .importer import run_import
from .guard import install_guard
from .paths import check_directory, check_disjoint, resolve_inside
from .recovery import Recovery
from .runs import Run, RunGrants
from .schema import (
    ErrorCode,
    ProcedureError,
    check_name,
)
from .settings import ProcedureSettings, load_settings
from .store import (
    CheckpointStore,
    ImportRegistry,
    BadFile,
    ExperienceFiles,
    OperationJournal,
    WorkspaceLock,
    ensure_dir,
    remove_temp_files,
)
from .tokens import TokenCounter, TokenizerUnavailable
from .views import Views
from .writes import WritePath


class ProcedureMemory(BaseComponent):
    """Experience store, two hybrid views, extraction-run grants. Configured under components.procedure_memory."""

    component_type = "procedure_memory"

    def __init__(self, **kwargs) -> None:
        identity = ("name", "backend", "app_context")
        raw = {k: v for k, v in kwargs.items() if k not in identity}  # every other key is a setting (or an error)
        super().__init__(**{k: v for k, v in kwargs.items() if k in identity})
        # a busy workspace or bad settings: one line on stderr from the CLI, the traceback in the log file only
        install_cli_error_hook(self.app_context is not None and self.app_context.app_config.log_to_console)
        self.settings: ProcedureSettings = load_settings(raw, prefix=f"components.procedure_memory.{self.name}")
        self.embedding_store = self.bind(self.settings.embedding_store, BaseEmbeddingStore, optional=False)
        # One top-level attribute per view so ReMe resolves them and starts them before this component.
        self.view_when_to_use = self.bind(self.settings.views["when_to_use"], BaseFileStore, optional=False)
        self.view_when_to_use_content = self.bind(
            self.settings.views["when_to_use_content"], BaseFileStore, optional=False,
        )
        self.tokens = TokenCounter(self.settings.tokenizer_source)
        self.views: Views | None = None
        self.pending: dict[str, dict[str, str]] = {}
        self.grants = RunGrants(self)  # live extraction runs (runs.py)
        self.write_path = WritePath(self)  # journal -> publish -> index (writes.py)
        self._write_lock: asyncio.Lock | None = None
        self._import_lock: asyncio.Lock | None = None
        self.recovery = Recovery(self)
        self._journal: OperationJournal | None = None
        self._writes = 0
        self._generation = 0  # see ``generation``
        self._decoded: tuple[tuple, str] | None = None  # (path, size, mtime) and text of the last trajectory read
        self.damaged_metadata: dict[str, str] = {}  # damaged metadata records skipped (not set aside): path -> cause
        if self.app_context is not None:  # before any component starts: nothing may be created through a link
            self.check_directories()
        # ReMe builds every component before it starts any: taking the lock here refuses a second process before any
        # store starts (and could persist itself on the way out). Released by _close after the stores' last write.
        self._lock_file = WorkspaceLock(self.state_dir / "workspace.lock")
        self._lock_file.acquire()

    # -- paths --------------------------------------------------------------------------------------------------

    @property
    def state_dir(self) -> Path:
        """``<workspace>/<metadata_dir>/procedure/<name>``: imports, operations, processing, lock."""
        return self.workspace_metadata_path / "procedure" / self.name

    @property
    def trajectory_rel_dir(self) -> str:
        """``<session_dir>/<trajectory_subdir>``, workspace-relative."""
        session = self.app_context.app_config.session_dir if self.app_context is not None else "session"
        return f"{session.rstrip('/')}/{self.settings.trajectory_subdir}"

    def directories(self) -> dict[str, str]:
        """Every workspace-relative directory this component writes, keyed by the setting(s) that place it.

        ReMe's own view state of the two views and the embedding cache lives in ``<metadata_dir>/<type>/``.
        """
        metadata = self.app_context.app_config.metadata_dir if self.app_context is not None else "metadata"
        prefix = f"components.procedure_memory.{self.name}"
        return {
            f"{prefix}.procedure_dir": self.settings.procedure_dir,
            f"session_dir + {prefix}.trajectory_subdir": self.trajectory_rel_dir,
            "metadata_dir (the plugin's journal, imports and checkpoints)": f"{metadata}/procedure/{self.name}",
            **{f"metadata_dir (ReMe's {kind} state of the views)": f"{metadata}/{kind}"
               for kind in ("file_store", "file_graph", "keyword_index", "embedding_store")},
        }

    def check_directories(self) -> None:
        """Fail unless every configured directory is a real directory inside the workspace (no symlinks, also
        not among its parents) and experiences, copies and metadata are separate directories."""
        for setting, rel in self.directories().items():
            check_directory(self.workspace_path, rel, setting=setting)
        metadata = self.app_context.app_config.metadata_dir if self.app_context is not None else "metadata"
        check_disjoint({
            f"components.procedure_memory.{self.name}.procedure_dir": self.settings.procedure_dir,
            f"components.procedure_memory.{self.name}.trajectory_subdir": self.trajectory_rel_dir,
            "metadata_dir": metadata,
        })

    def protected_directories(self) -> list[tuple[Path, bool, str]]:
        """``(resolved directory, private, label)`` of what ReMe's generic file jobs may not change (see guard.py);
        private directories they may not read either."""
        ws, experiences, trajectories = self.workspace_path, self.settings.procedure_dir, self.trajectory_rel_dir
        return [
            ((ws / experiences).resolve(), False, f"the experience directory {experiences}/"),
            ((ws / trajectories).resolve(), False, f"the trajectory directory {trajectories}/"),
            (self.state_dir.resolve(), True, f"{self.state_dir.relative_to(ws).as_posix()}/"),
        ]

    @property
    def files(self) -> ExperienceFiles:
        return ExperienceFiles(self.workspace_path, self.settings.procedure_dir, self.trajectory_rel_dir)

    @property
    def journal(self) -> OperationJournal:
        """The operation journal (one instance per start: it caches the records that are not final)."""
        if self._journal is None:
            self._journal = OperationJournal(self.state_dir / "operations")
        return self._journal

    @property
    def imports(self) -> ImportRegistry:
        return ImportRegistry(self.state_dir / "imports")

    @property
    def checkpoints(self) -> CheckpointStore:
        return CheckpointStore(self.state_dir / "processing")

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def _own_stores(self) -> list[BaseComponent]:
        """The plugin's stores in start order (embedding cache, then per view its BM25, graph and file store); each
        persists itself when it closes. Resolved (real components) once ReMe has started this component."""
        stores = [self.view_when_to_use, self.view_when_to_use_content]
        parts = [s.keyword_index for s in stores] + [s.file_graph for s in stores]
        return [c for c in [self.embedding_store, *parts, *stores] if isinstance(c, BaseComponent)]

    def _temp_file_dirs(self) -> list[Path]:
        """Directories where the plugin's atomic writer creates temporary files."""
        operations = self.state_dir / "operations"
        scopes = [p for p in operations.iterdir() if p.is_dir()] if operations.is_dir() else []
        return [self.workspace_path / self.settings.procedure_dir, self.workspace_path / self.trajectory_rel_dir,
                *(self.state_dir / d for d in ("imports", "processing")), operations, *scopes]

    def _remove_temp_files(self, copies: set[str]) -> list[str]:
        """Remove temporary files a kill or a full disk left behind: the plugin's own (never one of the imported
        ``copies``, which could be named like one), and ReMe's (``.<file>.<uuid hex>.tmp``) next to the files of the
        plugin's own stores. Returns workspace-relative paths."""
        keep = frozenset(self.workspace_path / rel for rel in copies)
        removed = remove_temp_files(self._temp_file_dirs(), keep=keep)
        for path in self._own_store_files():
            pattern = re.compile(rf"^\.{re.escape(path.name)}\.[0-9a-f]{{32}}\.tmp$")
            removed += remove_temp_files([path.parent], pattern)
        return [self.to_workspace_relative(p) for p in removed]

    def _own_store_files(self) -> list[Path]:
        """The files ReMe persists for the plugin's stores (chunks, BM25 index, graph)."""
        files = []
        for store in (self.view_when_to_use, self.view_when_to_use_content):
            for owner, attr in ((store, "chunks_path"), (store.keyword_index, "index_file"),
                                (store.file_graph, "_graph_file")):
                value = getattr(owner, attr, None) if owner is not None else None
                if isinstance(value, (str, Path)):
                    files.append(Path(value))
        return files

    async def _start(self) -> None:
        self.check_directories()  # again: a link may have appeared since the application was built
        install_guard(self.app_context)
        if not self._lock_file.held:  # restarted after a close
            self._lock_file.acquire()
        try:
            for store in self._own_stores():  # restarted after a close: _close closed them
                if not store.is_started:
                    await store.start()
            for directory in ("imports", "operations", "processing"):
                ensure_dir(self.state_dir / directory)
            ensure_dir(self.workspace_path / self.settings.procedure_dir)
            ensure_dir(self.workspace_path / self.trajectory_rel_dir)
            imports = self.imports
            copies = imports.reserved_paths()
            self.damaged_metadata.update(imports.damaged)
            removed = self._remove_temp_files(copies)
            if removed:
                self.logger.warning(f"procedure memory removed {len(removed)} leftover temporary files: {removed}")
            self._write_lock = asyncio.Lock()
            self._import_lock = asyncio.Lock()
            stores = {"when_to_use": self.view_when_to_use, "when_to_use_content": self.view_when_to_use_content}
            self.views = Views(
                stores, self.embedding_store, self.settings.embedding_timeout_seconds,
                self.settings.vector_cooldown_seconds, self.settings.search_embedding_timeout_seconds,
            )
            report = await self.recovery.start(defer=self._one_shot_reindex())
            if self.damaged_metadata:
                self.logger.warning(
                    "procedure memory skipped damaged metadata records (the import each belongs to stops with "
                    f"metadata_damaged when resumed and sets it aside): {json.dumps(self.damaged_metadata)}",
                )
            self.logger.info(f"procedure memory ready: {json.dumps({**report, 'temp_files_removed': len(removed)})}")
        except BaseException:
            self._lock_file.release()
            raise

    async def _close(self) -> None:
        self.grants.clear()
        self._journal = None
        self._decoded = None
        try:
            await self.recovery.stop()
            if self._writes and self.views is not None:
                # Updates leave lazily deleted BM25 documents behind; compact them before the stores persist.
                for store in self.views.stores.values():
                    await store.optimize_index()
        finally:
            try:
                # Close (= persist) the plugin's own stores now, under the lock; ReMe's later close of them is a
                # no-op. Then remove ReMe's temporary files a failed persist (e.g. a full disk) left behind.
                for store in reversed(self._own_stores()):
                    try:
                        await store.close()
                    except Exception as exc:
                        self.logger.exception(f"procedure memory: closing {store.name} failed: {exc}")
                self._remove_temp_files(self.imports.reserved_paths())
            finally:
                self._lock_file.release()

    # -- recovery and maintenance (recovery.py) ----------------------------------------------------------------

    def _one_shot_reindex(self) -> bool:
        """Whether this process is ``reme start job=...`` of a job that rebuilds this component's views: its
        start-up then leaves the indexing to that job (one pass instead of two, see recovery.py)."""
        if self.app_context is None:
            return False
        config = self.app_context.app_config
        service = config.service
        job = config.jobs.get(getattr(service, "job", None) or "") if service.backend == "cli" else None
        return job is not None and any(
            step.backend == "procedure_reindex_step"
            and (getattr(step, "procedure_memory", None) or "default") == self.name
            for step in job.steps
        )

    async def reconcile(self) -> dict[str, Any]:
        """Make both views agree with the experience files (see ``Recovery.reconcile``)."""
        return await self.recovery.reconcile()

    async def reindex(self) -> dict[str, Any]:
        """Rebuild both views from the experience JSON files; never touches experience or trajectory files."""
        return await self.recovery.reindex()

    def _mtime(self, rel_path: str) -> float:
        try:
            return self.files.abs(rel_path).stat().st_mtime
        except FileNotFoundError:
            return 0.0

    def mark_changed(self) -> None:
        """Files or views may have changed: advance ``generation``."""
        self._generation += 1

    @property
    def write_lock(self) -> asyncio.Lock:
        """Serialises every write: create, update, reindex, pending retries."""
        assert self._write_lock is not None
        return self._write_lock

    def pending_entry(self, path: str) -> dict[str, str]:
        """A pending file as reported in answers: path, version, error."""
        return self.recovery.pending_entry(path)

    # -- search and read ----------------------------------------------------------------------------------------

    async def search(self, query: str, view: str, limit: int) -> dict[str, Any]:
        """Hybrid search of one view; full current experiences with path, version and scores."""
        views = self.views
        assert views is not None
        await self.recovery.ensure_reconciled()
        await self.recovery.retries.maybe_start()
        fused, vector_error = await self.recovery.without_rebuild(
            lambda: views.search(view, query, limit, self.settings.vector_weight),
        )
        results = []
        files = self.files  # one validation context for this answer's reads
        wanted = [hit.path for hit in fused if hit.path not in self.pending][:limit]
        read = dict(zip(wanted, await asyncio.to_thread(lambda: [files.read(p) for p in wanted])))  # off-loop
        for hit in fused:
            if len(results) >= limit:
                break
            if hit.path in self.pending:
                continue
            item = read[hit.path] if hit.path in read else files.read(hit.path)
            if item is None:
                continue
            if isinstance(item, BadFile):  # edited by hand since indexing: exclude and report, never stale
                self.recovery.mark_invalid(item)
                continue
            results.append({
                "path": item.path,
                "version": item.version,
                "score": hit.score,
                "scores": {
                    "rrf": hit.score,
                    "vector": hit.vector_score,
                    "vector_rank": hit.vector_rank,
                    "keyword": hit.keyword_score,
                    "keyword_rank": hit.keyword_rank,
                },
                "experience": item.experience.fields(),
            })
        answer: dict[str, Any] = {
            "status": "ok",
            "index": view,
            "query": query,
            "results": results,
            "index_complete": not self.pending,
            "pending_indexes": [self.pending_entry(p) for p in sorted(self.pending)],
        }
        if vector_error:
            answer["vector_search"] = {"available": False, "error": vector_error}
        return answer

    def experience_path(self, raw) -> str:
        """Validate an experience path argument: ``<procedure_dir>/<valid name>.json`` inside the directory.

        An entry of the directory under an invalid name, or a symbolic link, is left to the shared file validation
        (``ExperienceFiles.read``), so read and update answer what search reports in ``pending_indexes``.
        """
        listed = self.files.listed(raw.strip() if isinstance(raw, str) else raw)
        if listed is not None:
            return listed
        rel, _ = resolve_inside(self.workspace_path, self.settings.procedure_dir, raw, what="experience")
        parent, _, name = rel.rpartition("/")
        problem = check_name(name)
        if parent != self.settings.procedure_dir or problem:
            raise ProcedureError(
                ErrorCode.INVALID_ARGUMENT,
                f"`path` must be {self.settings.procedure_dir}/<name>.json; {problem or 'no subdirectories'}",
            )
        return rel

    def read_experience(self, raw_path) -> dict[str, Any]:
        """One experience with its current version."""
        rel = self.experience_path(raw_path)
        item = self.files.read(rel)
        if item is None:
            raise ProcedureError(ErrorCode.NOT_FOUND, f"No experience at {rel}.", path=rel)
        if isinstance(item, BadFile):
            raise ProcedureError(
                ErrorCode.INVALID_EXPERIENCE, f"{rel} is not a valid experience: {item.error}",
                path=rel, version=item.version,
            )
        return {"status": "ok", "kind": "experience", "path": rel, "version": item.version,
                "experience": item.experience.fields()}

    async def read_trajectory(self, raw_path, offset: int, length: int) -> dict[str, Any]:
        """An excerpt of a copied trajectory by decoded characters, capped by characters and exact tokens."""
        rel, target = resolve_inside(self.workspace_path, self.trajectory_rel_dir, raw_path, what="trajectory")
        if not target.is_file():
            raise ProcedureError(ErrorCode.NOT_FOUND, f"No trajectory at {rel}.", path=rel)
        text = await self._decoded_text(rel, target)
        length = min(length, self.settings.read_max_chars)
        excerpt = text[offset:offset + length]
        try:
            capped = await asyncio.to_thread(self.tokens.prefix_within, excerpt, self.settings.read_max_tokens)
            tokens = await self.tokens.acount(capped)
        except TokenizerUnavailable as exc:
            raise ProcedureError(ErrorCode.TOKENIZER_UNAVAILABLE, str(exc)) from None
        end = min(len(text), offset) + len(capped)
        return {
            "status": "ok", "kind": "trajectory", "path": rel, "offset": offset, "length": len(capped),
            "total_chars": len(text), "tokens": tokens, "truncated_by_token_cap": len(capped) < len(excerpt),
            "next_offset": end if end < len(text) else None, "text": capped,
        }

    async def _decoded_text(self, rel: str, target: Path) -> str:
        """The decoded trajectory, cached for the last file read (an agent reads one trajectory many times)."""
        stat = target.stat()
        key = (str(target), stat.st_size, stat.st_mtime_ns)
        if self._decoded is None or self._decoded[0] != key:
            try:
                text = (await asyncio.to_thread(target.read_bytes)).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ProcedureError(ErrorCode.INVALID_ARGUMENT, f"{rel} is not UTF-8 text: {exc}", path=rel) from None
            self._decoded = (key, text)
        return self._decoded[1]

    # -- extraction runs (runs.py) and writes (writes.py) ------------------------------------------------------

    def begin_run(self, scope: str, sources: list[str], segment: int | None = None) -> Run:
        """Open an extraction run whose tools may write citing ``sources`` (see ``RunGrants.begin_run``)."""
        return self.grants.begin_run(scope, sources, segment)

    def end_run(self, run: Run) -> None:
        """Revoke a run's grant."""
        self.grants.end_run(run)

    def live_run(self, context_id, grant, sources) -> Run | None:
        """The live run a tool call's injected values name, or None for any missing or forged value."""
        return self.grants.live_run(context_id, grant, sources)

    def run_for(self, context_id, grant, sources) -> Run:
        """The live run of a tool call, or NO_ACTIVE_RUN (fails closed for any missing or forged value)."""
        return self.grants.run_for(context_id, grant, sources)

    @property
    def generation(self) -> int:
        """Changes whenever files or views may have changed (writes, index retries, rebuilds): an identical tool call
        counts as repeated only within one generation."""
        return self._generation

    async def create(self, run: Run, args: dict[str, Any]) -> dict[str, Any]:
        """Create a new experience for a live run (see ``WritePath.create``)."""
        return await self.write_path.create(run, args)

    async def update(self, run: Run, args: dict[str, Any]) -> dict[str, Any]:
        """Revise an experience at its expected version for a live run (see ``WritePath.update``)."""
        return await self.write_path.update(run, args)

    # -- trajectory import --------------------------------------------------------------------------------------

    async def import_trajectory(self, wrapper, args: dict[str, Any]) -> dict[str, Any]:
        """Copy one local trajectory and extract from it (see importer.py); one import at a time per process."""
        assert self._import_lock is not None
        await self.recovery.ensure_reconciled()
        async with self._import_lock:
            return await run_import(self, wrapper, args)
