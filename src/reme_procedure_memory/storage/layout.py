"""Layout: the directories the plugin owns in a workspace, their containment, and its leftover temporary files.

Contract: every directory the component writes (experiences, trajectory copies, the plugin's metadata, ReMe's view
state) is a real directory inside the workspace, no symlink on the way (checked when the application is built and
again at start, before anything is created or indexed); experiences, copies and metadata are separate directories.
The experience and trajectory directories (and, private, the plugin's metadata and the agents' session files) are what
ReMe's generic file jobs may not change (guard.py); trajectory copies they may list but not read. Temporary files a
kill or a full disk left behind are the plugin's own (never an imported copy)
and ReMe's next to the plugin's own store files; nothing else is removed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .atomic import remove_temp_files
from .format import IMPORTS_DIR, OPERATIONS_DIR, PROCESSING_DIR, state_dir, state_rel_dir
from .paths import check_directory, check_disjoint

REME_TEMP_FILE = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")  # ReMe's atomic writers: ``.<file>.<uuid4 hex>.tmp``
REME_VIEW_STATE = ("file_store", "file_graph", "keyword_index", "embedding_store")  # ReMe's kinds the views use
# What ReMe's generic file jobs may do inside a protected directory (guard.py); none may change it.
PRIVATE = "private"  # neither read nor list
NAMES = "names"  # list and stat, not read: the content may hold credentials, served masked by procedure_read only
READABLE = "readable"  # read: what procedure_read serves as it is


@dataclass(frozen=True)
class Protected:
    """A directory ReMe's generic file jobs may not change: ``directory`` (resolved), ``access`` (``PRIVATE``,
    ``NAMES`` or ``READABLE``), ``label`` (how a refusal names it) and ``why`` (one clause: what it holds)."""

    directory: Path
    access: str
    label: str
    why: str


@dataclass(frozen=True)
class Layout:
    """The directories of one component: ``root`` the workspace, ``name`` the component's name, ``metadata_dir`` and
    ``trajectory_rel_dir`` (``<session_dir>/<trajectory_subdir>``) from the application, ``procedure_dir`` from the
    settings."""

    root: Path
    name: str
    metadata_dir: str
    procedure_dir: str
    trajectory_rel_dir: str

    @property
    def state_dir(self) -> Path:
        """``<workspace>/<metadata_dir>/procedure/<name>``: imports, operations, processing, lock."""
        return state_dir(self.root, self.metadata_dir, self.name)

    def directories(self) -> dict[str, str]:
        """Every workspace-relative directory this component writes, keyed by the setting(s) that place it.

        ReMe's own view state of the two views and the embedding cache lives in ``<metadata_dir>/<type>/``.
        """
        prefix = f"components.procedure_memory.{self.name}"
        return {
            f"{prefix}.procedure_dir": self.procedure_dir,
            f"session_dir + {prefix}.trajectory_subdir": self.trajectory_rel_dir,
            "metadata_dir (the plugin's journal, imports and checkpoints)": state_rel_dir(self.metadata_dir, self.name),
            **{
                f"metadata_dir (ReMe's {kind} state of the views)": f"{self.metadata_dir}/{kind}"
                for kind in REME_VIEW_STATE
            },
        }

    def check_directories(self) -> None:
        """Fail unless every configured directory is a real directory inside the workspace (no symlinks, also
        not among its parents) and experiences, copies and metadata are separate directories."""
        for setting, rel in self.directories().items():
            check_directory(self.root, rel, setting=setting)
        check_disjoint(
            {
                f"components.procedure_memory.{self.name}.procedure_dir": self.procedure_dir,
                f"components.procedure_memory.{self.name}.trajectory_subdir": self.trajectory_rel_dir,
                "metadata_dir": self.metadata_dir,
            }
        )

    def protected_directories(self, agent_session_dirs: list[Path] = ()) -> list[Protected]:
        """What ReMe's generic file jobs may not change, and what of it they may read (see guard.py).

        ``agent_session_dirs``: where the application's agent wrappers keep their session files (each a whole
        conversation: an extraction's holds its segment's text); private when strictly inside the workspace (one
        that is the workspace or above it is not the plugin's to close)."""
        root = self.root.resolve()
        sessions = [
            Protected(
                d.resolve(),
                PRIVATE,
                f"{d.resolve().relative_to(root).as_posix()}/",
                "where agents keep their session files (whole conversations, trajectory segments included)",
            )
            for d in agent_session_dirs
            if d.resolve() != root and d.resolve().is_relative_to(root)
        ]
        return [
            Protected(
                (self.root / self.procedure_dir).resolve(),
                READABLE,
                f"the experience directory {self.procedure_dir}/",
                "the experiences",
            ),
            Protected(
                (self.root / self.trajectory_rel_dir).resolve(),
                NAMES,
                f"the trajectory directory {self.trajectory_rel_dir}/",
                "the imported trajectory copies",
            ),
            Protected(
                self.state_dir.resolve(),
                PRIVATE,
                f"{self.state_dir.relative_to(self.root).as_posix()}/",
                "the procedure-memory plugin's private state (journal, import records, checkpoints)",
            ),
            *sessions,
        ]

    def temp_file_dirs(self) -> list[Path]:
        """Directories where the plugin's atomic writer creates temporary files."""
        operations = self.state_dir / OPERATIONS_DIR
        scopes = [p for p in operations.iterdir() if p.is_dir()] if operations.is_dir() else []
        return [
            self.root / self.procedure_dir,
            self.root / self.trajectory_rel_dir,
            *(self.state_dir / d for d in (IMPORTS_DIR, PROCESSING_DIR)),
            operations,
            *scopes,
        ]

    def remove_temp_files(
        self, copies: set[str], store_files: list[Path], stale_before: float | None = None
    ) -> list[Path]:
        """Remove temporary files a kill or a full disk left behind: the plugin's own (never one of the imported
        ``copies``, which could be named like one), and ReMe's (``.<file>.<uuid hex>.tmp``) next to ``store_files``
        (the files ReMe persists for the plugin's stores). With ``stale_before`` (at start: when this application
        was built), also ReMe's in every ReMe metadata directory of the workspace (``<metadata_dir>/<component
        type>/``, e.g. ``file_catalog``) modified before then: the workspace lock keeps other processes out, and no
        writer of this one existed yet. Returns the removed paths."""
        keep = frozenset(self.root / rel for rel in copies)
        removed = remove_temp_files(self.temp_file_dirs(), keep=keep)
        for path in store_files:
            pattern = re.compile(rf"^\.{re.escape(path.name)}\.[0-9a-f]{{32}}\.tmp$")
            removed += remove_temp_files([path.parent], pattern)
        if stale_before is not None:
            removed += remove_temp_files(self.reme_metadata_dirs(), REME_TEMP_FILE, older_than=stale_before)
        return removed

    def reme_metadata_dirs(self) -> list[Path]:
        """ReMe's component metadata directories of the workspace (not the plugin's own ``procedure/``)."""
        root, own = self.root / self.metadata_dir, self.state_dir.parent
        return sorted(p for p in root.iterdir() if p.is_dir() and p != own) if root.is_dir() else []
