"""ProcedureMemory: the component (type ``procedure_memory``) that wires the workspace, both views and the operations.

Lifecycle: the constructor validates settings, checks the directories and takes the workspace lock — ReMe builds
every component before it starts any, so a second process is refused before any store could write. ``_start``
creates the directories, removes temporary files a kill left behind, opens the workspace with both views, recovers
the operation journal and reconciles the experience files with the views (``operations/recovery.py``; a process
started to run the reindex job leaves the indexing to that job). ``_close`` compacts the views' BM25 after writes,
closes the plugin's own stores (each persists itself when it closes) and only then releases the lock: no view file
is written without it.

What it owns: one ``Workspace`` (``workspace.py``: the shared state, its stores and locks) and the operations built
on it, each created once here — ``grants`` (extraction runs), ``reads`` (search answers and reads), ``listing``
(the experiences and imports), ``writes`` (create, update), ``recovery`` (reconcile, reindex, pending retries),
``history`` (an experience's versions), ``retention`` (the journal's bound), ``hand_changes`` (changes made by hand,
recorded when found), ``deletion`` (``procedure_delete``), ``importer`` (``procedure_auto_memory``), ``exporter``
(``procedure_export``) and ``metadata`` (``procedure_dump``). The component itself is lifecycle and wiring, never a
forwarder: steps (``jobs/steps.py``) validate their arguments and call an operation's public method
(``memory.reads.search(...)``), the one route; every one returns a JSON-able answer or raises ProcedureError.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from reme.components.base_component import BaseComponent
from reme.components.embedding_store import BaseEmbeddingStore
from reme.components.file_store import BaseFileStore
from reme.enumeration import ComponentEnum

from .operator_errors import install_cli_error_hook, install_service_guard, serving, unknown_job_sentence
from .errors import ServiceStartAborted, StartStorageError, StartupError, UnknownJob, WorkspaceNotFound
from .export.exporter import Exporter
from .extraction.importer import Importer
from .operations.deletion import Deletion
from .operations.hand_changes import HandChanges
from .operations.history import History
from .operations.listing import Listing
from .operations.reads import Reads
from .operations.recovery import Recovery, defers_indexing
from .operations.retention import HistoryRetention
from .operations.attempts import AttemptGrants
from .operations.writes import Writes
from .schema import View
from .search.views import Views
from .settings import ProcedureSettings, load_settings
from .storage.atomic import ensure_dir
from .storage.dump import MetadataDump
from .storage.format import STATE_DIRS, state_rel_dir
from .storage.guard import install_guard
from .storage.layout import Layout, Protected
from .storage.presence import holds_plugin_state, remove_created_here
from .tokens import TokenCounter
from .workspace import Workspace

# ReMe imports this module (the plugin's backends) before it creates the workspace: from here on, the failures an
# operator fixes from one sentence are one line on the CLI, also those of ReMe's own workspace set-up (operator_errors.py).
install_cli_error_hook()

CREATING_STEPS = ("procedure_auto_memory_step",)  # a one-shot job with such a step may start a new workspace


def one_shot_job(app_context) -> str | None:
    """The job this process was started to run (``reme start job=...``), None for a service."""
    service = app_context.app_config.service
    return (getattr(service, "job", None) or None) if service.backend == "cli" else None


def needs_existing_workspace(app_context, job_name: str, name: str) -> bool:
    """Whether the one-shot job ``job_name`` is one of the plugin's jobs on component ``name`` that needs an existing
    workspace: every plugin job but the import. False for ReMe's own jobs (and for the service: a new workspace is
    how a user starts)."""
    job = app_context.app_config.jobs.get(job_name)
    ours = [
        step
        for step in (job.steps if job is not None else [])
        if step.backend.startswith("procedure_")
        and step.backend.endswith("_step")
        and (getattr(step, "procedure_memory", None) or "default") == name
    ]
    return bool(ours) and not any(step.backend in CREATING_STEPS for step in ours)


class ProcedureMemory(BaseComponent):
    """Experience store, two hybrid views, extraction-run grants. Configured under components.procedure_memory."""

    component_type = "procedure_memory"

    def __init__(self, **kwargs) -> None:
        identity = ("name", "backend", "app_context")
        raw = {k: v for k, v in kwargs.items() if k not in identity}  # every other key is a setting (or an error)
        super().__init__(**{k: v for k, v in kwargs.items() if k in identity})
        # a busy workspace or bad settings: one line on stderr from the CLI, the traceback in the log file only
        install_cli_error_hook(self.app_context is not None and self.app_context.app_config.log_to_console)
        if self.app_context is not None:  # a service's start failure: the same one line (operator_errors.py)
            install_service_guard(self.app_context.service)
        self.settings: ProcedureSettings = load_settings(raw, prefix=f"components.procedure_memory.{self.name}")
        self.embedding_store = self.bind(self.settings.embedding_store, BaseEmbeddingStore, optional=False)
        # One top-level attribute per view so ReMe resolves them and starts them before this component.
        self.view_when_to_use = self.bind(self.settings.views[View.WHEN_TO_USE], BaseFileStore, optional=False)
        self.view_when_to_use_content = self.bind(
            self.settings.views[View.WHEN_TO_USE_CONTENT],
            BaseFileStore,
            optional=False,
        )
        config = self.app_context.app_config if self.app_context is not None else None
        session = config.session_dir if config is not None else "session"
        self.layout = Layout(  # the directories the plugin owns (storage/layout.py)
            root=self.workspace_path,
            name=self.name,
            metadata_dir=config.metadata_dir if config else "metadata",
            procedure_dir=self.settings.procedure_dir,
            trajectory_rel_dir=f"{session.rstrip('/')}/{self.settings.trajectory_subdir}",
        )
        self.workspace = Workspace(
            self.workspace_path,
            self.layout.state_dir,
            self.layout.trajectory_rel_dir,
            self.settings,
            TokenCounter(self.settings.tokenizer_source),
            self.logger,
        )
        ws = self.workspace
        self.grants = AttemptGrants(ws)  # live extraction runs (operations/attempts.py)
        self.hand_changes = HandChanges(ws)  # recorded when found (operations/hand_changes.py)
        self.retention = HistoryRetention(ws)  # the journal's bound (operations/retention.py)
        self.recovery = Recovery(ws, self.hand_changes, self.retention)  # reconcile, reindex, pending retries
        self.reads = Reads(ws, self.recovery)  # search answers and reads (operations/reads.py)
        self.listing = Listing(ws, self.recovery)  # the experiences and imports, a page at a time
        self.history = History(ws, self.reads)  # an experience's versions (operations/history.py)
        self.writes = Writes(ws, self.hand_changes)  # journal -> publish -> index (operations/writes.py)
        self.deletion = Deletion(ws, self.recovery, self.reads, self.hand_changes, self.retention)  # procedure_delete
        self.importer = Importer(ws, self.app_context, self.grants, self.reads, self.recovery, self.retention)
        self.exporter = Exporter(ws)  # procedure_export (export/exporter.py)
        self.metadata = MetadataDump(
            ws.root, self.layout.metadata_dir, ws.state_dir, self.settings.procedure_dir, ws.trajectory_rel_dir
        )  # procedure_dump (storage/dump.py)
        self._built_at = time.time()  # ReMe's temporary files older than this are stale (storage/layout.py)
        if self.app_context is not None:  # before any component starts: nothing may be created through a link
            self.layout.check_directories()
            self.check_one_shot_job()
        # ReMe builds every component before it starts any: taking the lock here refuses a second process before any
        # store starts (and could persist itself on the way out). Released by _close after the stores' last write.
        try:
            ws.lock_file.acquire()
        except OSError as exc:  # the lock file cannot be created (a read-only workspace, a full disk): one line
            raise StartStorageError(exc) from exc

    # -- wiring -------------------------------------------------------------------------------------------------

    def check_one_shot_job(self) -> None:
        """Before anything is created: refuse ``reme start job=procedure_<unknown>`` (UnknownJob, the closest name)
        and a one-shot job that only reads on a workspace without plugin state (WorkspaceNotFound, naming the path;
        ``needs_existing_workspace``). The directories ReMe created for such a process are taken back
        (storage/presence.py)."""
        job = one_shot_job(self.app_context)
        if job is None:
            return
        config = self.app_context.app_config
        unknown = job.startswith("procedure") and job not in config.jobs
        if not unknown and not needs_existing_workspace(self.app_context, job, self.name):
            return
        existing = holds_plugin_state(
            self.workspace_path / self.settings.procedure_dir,
            self.workspace_path / self.layout.trajectory_rel_dir,
            self.layout.state_dir,
        )
        if not existing:
            subdirs = [
                config.metadata_dir,
                config.session_dir,
                config.mem_session_dir,
                config.resource_dir,
                config.daily_dir,
                config.digest_dir,
            ]
            remove_created_here(self.workspace_path, [d for d in subdirs if d])
        if unknown:
            raise UnknownJob(unknown_job_sentence(job, served_only=False))
        if existing:
            return
        raise WorkspaceNotFound(
            f"{job} needs an existing procedure-memory workspace, and {self.workspace_path} has none (no "
            f"{self.settings.procedure_dir}/, {self.layout.trajectory_rel_dir}/ or "
            f"{state_rel_dir(self.layout.metadata_dir, self.name)}/). Check "
            "workspace_dir (a relative path is resolved from the current directory); a new workspace is made by "
            "`reme start` (the service) or an import (job=procedure_auto_memory). Nothing was written.",
        )

    def protected_directories(self) -> list[Protected]:
        """What ReMe's generic file jobs may not change or read (storage/layout.py, used by storage/guard.py): the
        plugin's directories and where the application's agent wrappers keep their session files
        (``<mem_session_dir>/``, and a wrapper's own ``session_path`` elsewhere in the workspace)."""
        sessions = []
        if self.app_context is not None:
            sessions.append(self.workspace_path / self.app_context.app_config.mem_session_dir)
            wrappers = (self.app_context.components.get(ComponentEnum.AGENT_WRAPPER.value) or {}).values()
            sessions += [w.session_path for w in wrappers if isinstance(getattr(w, "session_path", None), Path)]
        return self.layout.protected_directories(sessions)

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def _own_stores(self) -> list[BaseComponent]:
        """The plugin's stores in start order (embedding cache, then per view its BM25, graph and file store); each
        persists itself when it closes. Resolved (real components) once ReMe has started this component."""
        stores = [self.view_when_to_use, self.view_when_to_use_content]
        parts = [s.keyword_index for s in stores] + [s.file_graph for s in stores]
        return [c for c in [self.embedding_store, *parts, *stores] if isinstance(c, BaseComponent)]

    def _remove_temp_files(self, copies: set[str], stale_before: float | None = None) -> list[str]:
        """Leftover temporary files removed (storage/layout.py; never one of the imported ``copies``),
        workspace-relative."""
        stores = [s for s in (self.view_when_to_use, self.view_when_to_use_content) if hasattr(s, "reme_files")]
        removed = self.layout.remove_temp_files(copies, [f for s in stores for f in s.reme_files()], stale_before)
        return [self.workspace.relative(p) for p in removed]

    async def _start(self) -> None:
        try:
            await self._start_up()
        except (
            StartupError
        ) as exc:  # a service answers it in one line and exits (operator_errors.py, install_service_guard)
            if serving(self.app_context):
                raise ServiceStartAborted(exc) from exc
            raise

    async def _start_up(self) -> None:
        ws = self.workspace
        self.layout.check_directories()  # again: a link may have appeared since the application was built
        install_guard(self.app_context)
        if not ws.lock_file.held:  # restarted after a close
            ws.lock_file.acquire()
        try:
            for store in self._own_stores():  # restarted after a close: _close closed them
                if not store.is_started:
                    await store.start()
            for directory in STATE_DIRS:
                ensure_dir(ws.state_dir / directory)
            ensure_dir(self.workspace_path / self.settings.procedure_dir)
            ensure_dir(self.workspace_path / ws.trajectory_rel_dir)
            copies = ws.imports.reserved_paths()
            ws.damaged_metadata.update(ws.imports.damaged)
            removed = self._remove_temp_files(copies, stale_before=self._built_at)
            if removed:
                self.logger.warning(f"procedure memory removed {len(removed)} leftover temporary files: {removed}")
            stores = {View.WHEN_TO_USE: self.view_when_to_use, View.WHEN_TO_USE_CONTENT: self.view_when_to_use_content}
            ws.open(
                Views(
                    stores,
                    self.embedding_store,
                    self.settings.embedding_timeout_seconds,
                    self.settings.vector_cooldown_seconds,
                    self.settings.search_embedding_timeout_seconds,
                )
            )
            report = await self.recovery.start(defer=defers_indexing(self.app_context, self.name))
            if ws.damaged_metadata:
                self.logger.warning(
                    "procedure memory skipped damaged metadata records (the import each belongs to stops with "
                    f"metadata_damaged when resumed and sets it aside): {json.dumps(ws.damaged_metadata)}",
                )
            self.logger.info(f"procedure memory ready: {json.dumps({**report, 'temp_files_removed': len(removed)})}")
        except OSError as exc:  # a write the start must make (a directory, the views' state): what to do, no trace
            ws.lock_file.release()
            raise StartStorageError(exc) from exc
        except BaseException:
            ws.lock_file.release()
            raise

    async def _close(self) -> None:
        self.grants.clear()
        journal = self.workspace.close_journal()
        self.reads.forget()
        try:
            await self.recovery.stop()
            if journal is not None:
                try:
                    journal.flush()  # no open file of a final record is left behind
                except OSError as exc:  # harmless: the final file is read first, and the next start removes them
                    self.logger.warning(f"procedure memory: settling the journal's open files failed: {exc}")
            if self.workspace.writes and self.workspace.is_open:
                # Updates leave lazily deleted BM25 documents behind; compact them before the stores persist.
                for store in self.workspace.views.stores.values():
                    await store.optimize_index()
        finally:
            try:
                # Close (= persist) the plugin's own stores now, under the lock; ReMe's later close of them is a
                # no-op. Then remove ReMe's temporary files a failed persist (e.g. a full disk) left behind.
                for store in reversed(self._own_stores()):
                    try:
                        await store.close()
                    except OSError as exc:  # said in one line: a start that could not save them already said why
                        self.logger.error(f"procedure memory: closing {store.name} failed: {exc}")
                    except Exception as exc:
                        self.logger.exception(f"procedure memory: closing {store.name} failed: {exc}")
                self._remove_temp_files(self.workspace.imports.reserved_paths())
            finally:
                self.workspace.lock_file.release()
