"""ProcedureFileGraph (file_graph backend ``procedure_graph``): ReMe's ``local`` file graph without a file of its own.

A view's graph holds one node per experience; the ``ProcedureFileStore`` that uses it persists the nodes with its
records (snapshot + log) and restores them at start, so ``load`` and ``dump`` do nothing: closing never rewrites
the whole graph.
"""

from __future__ import annotations

from pathlib import Path

from reme.components.file_graph.local_file_graph import LocalFileGraph
from reme.schema import FileNode


class ProcedureFileGraph(LocalFileGraph):
    """An in-memory ``local`` graph whose persistence belongs to its ProcedureFileStore."""

    async def load(self) -> None:
        """Nothing: the ProcedureFileStore restores the nodes."""

    async def dump(self) -> None:
        """Nothing: the ProcedureFileStore persists the nodes."""

    @property
    def node_map(self) -> dict[str, FileNode]:
        """Nodes by path (the live mapping: read it, never change it)."""
        return self._nodes

    @property
    def legacy_file(self) -> Path:
        """Where ReMe's ``local`` graph kept this graph (written by earlier plugin versions; removed once unused)."""
        return self._graph_file
