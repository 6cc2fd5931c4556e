"""ProcedureFileGraph (file_graph backend ``procedure_graph``): ReMe's ``local`` file graph, compact and without a
file of its own.

* A view's graph holds one node per experience. A pydantic ``FileNode`` costs about 2 KB; this graph keeps each
  node as a plain tuple (mtime, chunk ids, front matter dict, links) and makes ``FileNode`` objects when they are
  asked for, so 100,000 experiences in two views take about 70 MB instead of 430 MB. Behaviour is ReMe's ``local`` graph's (the
  same nodes come back, links and their scopes included).
* The ``ProcedureFileStore`` that uses it persists the nodes with its records (snapshot + log) and restores them at
  start, so ``load`` and ``dump`` do nothing: closing never rewrites the whole graph.
"""

from __future__ import annotations

from pathlib import Path

from reme.components.file_graph.local_file_graph import LocalFileGraph
from reme.enumeration import LinkScopeEnum
from reme.schema import FileLink, FileNode


def _pack(node: FileNode) -> tuple:
    return node.st_mtime, tuple(node.chunk_ids), node.front_matter.model_dump(), tuple(node.links)


class ProcedureFileGraph(LocalFileGraph):
    """A compact in-memory ``local`` graph whose persistence belongs to its ProcedureFileStore."""

    # ``self._nodes`` maps a path to its packed node; ReMe's link bookkeeping only tests membership in it.

    def _unpack(self, path: str) -> FileNode:
        mtime, chunk_ids, front, links = self._nodes[path]
        return FileNode(
            path=path, st_mtime=mtime, chunk_ids=list(chunk_ids), front_matter=dict(front), links=list(links)
        )

    def node(self, path: str) -> FileNode:
        """The node of ``path`` (a new object; KeyError when absent)."""
        return self._unpack(path)

    def paths(self) -> list[str]:
        return list(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    @staticmethod
    def packed(st_mtime: float, chunk_ids: tuple[str, ...], front_matter: dict, links: tuple[FileLink, ...]) -> tuple:
        """A node in this graph's form, from its persisted fields (``chunk_ids``: the chunks' own id strings,
        shared rather than copied; ``front_matter`` is kept, not copied)."""
        return st_mtime, chunk_ids, front_matter, links

    def restore(self, nodes: dict[str, tuple]) -> None:
        """Replace the graph with ``packed`` nodes by path."""
        self._nodes = nodes
        self._link_all()

    async def upsert_nodes(self, nodes: list[FileNode]) -> None:
        for node in nodes:
            path = node.path
            if path in self._nodes:
                for target in self._targets(self._unpack(path)):
                    self._remove_edge(path, target)
            self._nodes[path] = _pack(node)
            for target in self._targets(node):
                self._add_edge(path, target)
            promoted = self._pending.pop(path, None)
            if promoted:
                self._inverse.setdefault(path, set()).update(promoted)

    async def delete_nodes(self, paths: list[str]) -> None:
        for path in paths:
            if path not in self._nodes:
                continue
            for target in self._targets(self._unpack(path)):
                self._remove_edge(path, target)
            del self._nodes[path]
            demoted = self._inverse.pop(path, None)
            if demoted:
                self._pending.setdefault(path, set()).update(demoted)

    async def get_nodes(self, paths: list[str] | None = None) -> list[FileNode]:
        if paths is None:
            return [self._unpack(p) for p in self._nodes]
        return [self._unpack(p) for p in paths if p in self._nodes]

    async def rebuild_links(self) -> None:
        self._link_all()

    def _link_all(self) -> None:
        self._inverse.clear()
        self._pending.clear()
        for src, packed in self._nodes.items():
            for link in packed[3]:
                if link.target_path:
                    self._add_edge(src, link.target_path)

    async def get_outlinks(self, path: str, scope: LinkScopeEnum | str = LinkScopeEnum.REAL) -> list[FileLink]:
        if path not in self._nodes:
            return []
        scope = self._normalize_scope(scope)
        return [lnk for lnk in self._nodes[path][3] if lnk.target_path and self._scope_match(lnk.target_path, scope)]

    async def get_inlinks(self, path: str, scope: LinkScopeEnum | str = LinkScopeEnum.REAL) -> list[FileLink]:
        scope = self._normalize_scope(scope)
        sources: set[str] = set()
        if scope in (LinkScopeEnum.REAL, LinkScopeEnum.ALL):
            sources |= self._inverse.get(path, set())
        if scope in (LinkScopeEnum.VIRTUAL, LinkScopeEnum.ALL):
            sources |= self._pending.get(path, set())
        return [
            link
            for src in sorted(sources)
            if src in self._nodes
            for link in self._nodes[src][3]
            if link.target_path == path
        ]

    async def load(self) -> None:
        """Nothing: the ProcedureFileStore restores the nodes."""

    async def dump(self) -> None:
        """Nothing: the ProcedureFileStore persists the nodes."""

    @property
    def legacy_file(self) -> Path:
        """Where ReMe's ``local`` graph kept this graph (written by earlier plugin versions; removed once unused)."""
        return self._graph_file
