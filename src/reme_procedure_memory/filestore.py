"""ProcedureFileStore: ReMe's ``local`` file store with its vectors in one contiguous matrix.

ReMe's local vector search stacks float16 vectors in a Python loop (~0.5 s per 10k records at 1,024 dimensions).
This subclass keeps every chunk's unit-normalised float32 vector in a growing matrix (row per chunk id, removed rows
filled by the last row), so a vector search is one matrix-vector product plus ``argpartition``. Chunks, BM25,
graph and persistence stay ReMe's.

The plugin pre-embeds every record it upserts and re-indexes missing vectors itself, so ReMe's background embedding
backfill is disabled for these stores: a backfill would change chunk vectors behind the matrix.
"""

from __future__ import annotations

import numpy as np
from reme.components.file_store.local_file_store import LocalFileStore
from reme.schema import FileChunk, FileNode


class VectorMatrix:
    """Unit vectors by id in one contiguous float32 matrix; O(1) amortised set/remove, exact top-k by cosine."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self._rows = np.zeros((16, dimensions), dtype=np.float32)
        self._ids: list[str] = []
        self._row_of: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, item: str) -> bool:
        return item in self._row_of

    def set(self, item: str, vector) -> None:
        """Insert or replace the vector of ``item`` (zero vectors are stored as zeros and never score > 0)."""
        vec = np.asarray(vector, dtype=np.float32).reshape(-1)
        if vec.shape[0] != self.dimensions:
            raise ValueError(f"vector of {vec.shape[0]} dimensions, expected {self.dimensions}")
        norm = float(np.linalg.norm(vec))
        vec = vec / norm if norm > 0 else vec
        row = self._row_of.get(item)
        if row is None:
            row = len(self._ids)
            if row == self._rows.shape[0]:
                grown = np.zeros((row * 2, self.dimensions), dtype=np.float32)
                grown[:row] = self._rows
                self._rows = grown
            self._ids.append(item)
            self._row_of[item] = row
        self._rows[row] = vec

    def remove(self, item: str) -> None:
        """Drop ``item`` if present."""
        row = self._row_of.pop(item, None)
        if row is None:
            return
        last = len(self._ids) - 1
        if row != last:
            moved = self._ids[last]
            self._rows[row] = self._rows[last]
            self._ids[row] = moved
            self._row_of[moved] = row
        self._ids.pop()

    def clear(self) -> None:
        """Drop every vector."""
        self._ids.clear()
        self._row_of.clear()

    def search(self, query, limit: int) -> list[tuple[str, float]]:
        """The ``limit`` ids of highest cosine similarity, best first (ties by insertion row)."""
        n = len(self._ids)
        if n == 0 or limit <= 0:
            return []
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(q))
        if norm == 0 or q.shape[0] != self.dimensions:
            return []
        scores = self._rows[:n] @ (q / norm)
        k = min(limit, n)
        top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
        order = top[np.lexsort((top, -scores[top]))]
        return [(self._ids[i], float(scores[i])) for i in order]


class ProcedureFileStore(LocalFileStore):
    """A ``local`` file store whose vector search runs on a contiguous matrix (see the module docstring)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.vectors: VectorMatrix | None = None

    def _matrix(self) -> VectorMatrix:
        if self.vectors is None:
            self.vectors = VectorMatrix(self.embedding_dimensions)
        return self.vectors

    def _track(self, chunk: FileChunk) -> None:
        if self.embedding_store and self._embedding_dim_matches(chunk.embedding):
            self._matrix().set(chunk.id, chunk.embedding)
        elif self.vectors is not None:
            self.vectors.remove(chunk.id)

    async def load(self) -> None:
        await super().load()
        self.vectors = None
        for chunk in self.file_chunks.values():
            self._track(chunk)

    def _start_embedding_backfill(self, *, skip_health_check: bool = False) -> None:
        """Disabled: the plugin embeds before upserting and re-indexes records without vectors itself."""

    async def upsert(self, files: list[tuple[FileNode, list[FileChunk]]]) -> None:
        old = {n.path: list(n.chunk_ids) for n in await self.get_nodes([node.path for node, _ in files])} if files else {}
        await super().upsert(files)
        if self.vectors is not None:
            for ids in old.values():
                for cid in ids:
                    if cid not in self.file_chunks:
                        self.vectors.remove(cid)
        for _, chunks in files:
            for chunk in chunks:
                self._track(self.file_chunks.get(chunk.id, chunk))

    async def _delete_nodes(self, nodes: list[FileNode]) -> None:
        await super()._delete_nodes(nodes)
        if self.vectors is not None:
            for node in nodes:
                for cid in node.chunk_ids:
                    self.vectors.remove(cid)

    async def clear(self) -> None:
        await super().clear()
        if self.vectors is not None:
            self.vectors.clear()

    def nearest(self, query_embedding, limit: int) -> list[FileChunk]:
        """Top ``limit`` chunks by cosine to an already computed query vector, scores as ReMe's vector_search."""
        hits = self._matrix().search(query_embedding, limit) if self.embedding_store else []
        out = []
        for cid, score in hits:
            chunk = self.file_chunks.get(cid)
            if chunk is not None:
                out.append(chunk.model_copy(update={"scores": {"vector": score, "score": score}}))
        return out

    async def vector_search(self, query: str, limit: int, search_filter: dict) -> list[FileChunk]:
        """ReMe's contract on the matrix; filters fall back to the stock scan."""
        if search_filter or limit <= 0:
            return await super().vector_search(query, limit, search_filter)
        query_embedding = await self._get_query_embedding(query)
        if query_embedding is None:
            return []
        return self.nearest(query_embedding, limit)
