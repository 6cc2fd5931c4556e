"""Layout: the directories the plugin owns in a workspace, their containment, and its leftover temporary files.

Contract: every directory the component writes (experiences, trajectory copies, the plugin's metadata, ReMe's view
state) is a real directory inside the workspace, no symlink on the way (checked when the application is built and
again at start, before anything is created or indexed); experiences, copies and metadata are separate directories.
The experience and trajectory directories (and, private, the plugin's metadata) are what ReMe's generic file jobs may
not change (guard.py). Temporary files a kill or a full disk left behind are the plugin's own (never an imported copy)
and ReMe's next to the plugin's own store files; nothing else is removed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from .atomic import remove_temp_files
from .paths import check_directory, check_disjoint

REME_TEMP_FILE = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")  # ReMe's atomic writers: ``.<file>.<uuid4 hex>.tmp``

if TYPE_CHECKING:
    from ..component import ProcedureMemory


class Layout:
    """The directories of one ProcedureMemory (its settings and the application's workspace configuration)."""

    def __init__(self, memory: ProcedureMemory) -> None:
        self.memory = memory

    def directories(self) -> dict[str, str]:
        """Every workspace-relative directory this component writes, keyed by the setting(s) that place it.

        ReMe's own view state of the two views and the embedding cache lives in ``<metadata_dir>/<type>/``.
        """
        m = self.memory
        metadata = m.app_context.app_config.metadata_dir if m.app_context is not None else "metadata"
        prefix = f"components.procedure_memory.{m.name}"
        return {
            f"{prefix}.procedure_dir": m.settings.procedure_dir,
            f"session_dir + {prefix}.trajectory_subdir": m.trajectory_rel_dir,
            "metadata_dir (the plugin's journal, imports and checkpoints)": f"{metadata}/procedure/{m.name}",
            **{f"metadata_dir (ReMe's {kind} state of the views)": f"{metadata}/{kind}"
               for kind in ("file_store", "file_graph", "keyword_index", "embedding_store")},
        }

    def check_directories(self) -> None:
        """Fail unless every configured directory is a real directory inside the workspace (no symlinks, also
        not among its parents) and experiences, copies and metadata are separate directories."""
        m = self.memory
        for setting, rel in self.directories().items():
            check_directory(m.workspace_path, rel, setting=setting)
        metadata = m.app_context.app_config.metadata_dir if m.app_context is not None else "metadata"
        check_disjoint({
            f"components.procedure_memory.{m.name}.procedure_dir": m.settings.procedure_dir,
            f"components.procedure_memory.{m.name}.trajectory_subdir": m.trajectory_rel_dir,
            "metadata_dir": metadata,
        })

    def protected_directories(self) -> list[tuple[Path, bool, str]]:
        """``(resolved directory, private, label)`` of what ReMe's generic file jobs may not change (see guard.py);
        private directories they may not read either."""
        m = self.memory
        ws, experiences, trajectories = m.workspace_path, m.settings.procedure_dir, m.trajectory_rel_dir
        return [
            ((ws / experiences).resolve(), False, f"the experience directory {experiences}/"),
            ((ws / trajectories).resolve(), False, f"the trajectory directory {trajectories}/"),
            (m.state_dir.resolve(), True, f"{m.state_dir.relative_to(ws).as_posix()}/"),
        ]

    def temp_file_dirs(self) -> list[Path]:
        """Directories where the plugin's atomic writer creates temporary files."""
        m = self.memory
        operations = m.state_dir / "operations"
        scopes = [p for p in operations.iterdir() if p.is_dir()] if operations.is_dir() else []
        return [m.workspace_path / m.settings.procedure_dir, m.workspace_path / m.trajectory_rel_dir,
                *(m.state_dir / d for d in ("imports", "processing")), operations, *scopes]

    def remove_temp_files(self, copies: set[str], stale_before: float | None = None) -> list[str]:
        """Remove temporary files a kill or a full disk left behind: the plugin's own (never one of the imported
        ``copies``, which could be named like one), and ReMe's (``.<file>.<uuid hex>.tmp``) next to the files of the
        plugin's own stores. With ``stale_before`` (at start: when this application was built), also ReMe's in
        every ReMe metadata directory of the workspace (``<metadata_dir>/<component type>/``, e.g. ``file_catalog``)
        modified before then: the workspace lock keeps other processes out, and no writer of this one existed yet.
        Returns workspace-relative paths."""
        m = self.memory
        keep = frozenset(m.workspace_path / rel for rel in copies)
        removed = remove_temp_files(self.temp_file_dirs(), keep=keep)
        for path in self.own_store_files():
            pattern = re.compile(rf"^\.{re.escape(path.name)}\.[0-9a-f]{{32}}\.tmp$")
            removed += remove_temp_files([path.parent], pattern)
        if stale_before is not None:
            removed += remove_temp_files(self.reme_metadata_dirs(), REME_TEMP_FILE, older_than=stale_before)
        return [m.to_workspace_relative(p) for p in removed]

    def reme_metadata_dirs(self) -> list[Path]:
        """ReMe's component metadata directories of the workspace (not the plugin's own ``procedure/``)."""
        root = self.memory.workspace_metadata_path
        own = self.memory.state_dir.parent
        return sorted(p for p in root.iterdir() if p.is_dir() and p != own) if root.is_dir() else []

    def own_store_files(self) -> list[Path]:
        """The files ReMe persists for the plugin's stores (chunks, BM25 index, graph)."""
        m = self.memory
        files = []
        for store in (m.view_when_to_use, m.view_when_to_use_content):
            for owner, attr in ((store, "chunks_path"), (store.keyword_index, "index_file"),
                                (store.file_graph, "_graph_file")):
                value = getattr(owner, attr, None) if owner is not None else None
                if isinstance(value, (str, Path)):
                    files.append(Path(value))
        return files
