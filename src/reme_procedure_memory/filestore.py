"""ProcedureFileStore: ReMe's ``local`` file store whose vectors live in a ``VectorMatrix``.

ReMe's local vector search stacks float16 vectors in a Python loop (~0.5 s per 10k records at 1,024 dimensions).
This subclass keeps every chunk's float16 vector in a ``VectorMatrix`` (vectors.py: exact cosine top-k screened by an
int8 scan); a chunk's ``embedding`` is a view of its stored row, never a second copy. Searches run in a worker thread
(``scan_executor``), never on the event loop; a readers-writer lock keeps mutations (on the event loop) out of a
running scan. Chunks, BM25, graph and persistence stay ReMe's.

The plugin pre-embeds every record it upserts and re-indexes missing vectors itself, so ReMe's background embedding
backfill is disabled for these stores: a backfill would change chunk vectors behind the matrix.
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from reme.components.file_store.local_file_store import LocalFileStore
from reme.schema import FileChunk, FileNode

from .vectors import VectorMatrix

_executor: ThreadPoolExecutor | None = None


def _one_thread() -> None:
    """Scan threads run faiss on one OpenMP thread: concurrent searches are the parallelism."""
    from .vectors import _faiss

    _faiss().omp_set_num_threads(1)


def scan_executor() -> ThreadPoolExecutor:
    """The process-wide pool of vector-scan threads (one per core)."""
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="procedure-scan",
                                       initializer=_one_thread)
    return _executor


class ReadWriteLock:
    """Many concurrent readers or one writer; a waiting writer holds back new readers (no writer starvation)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @contextmanager
    def read(self):
        with self._cond:
            while self._writing or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self):
        with self._cond:
            self._writers_waiting += 1
            while self._writing or self._readers:
                self._cond.wait()
            self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class ProcedureFileStore(LocalFileStore):
    """A ``local`` file store whose vector search runs on a ``VectorMatrix`` (see the module docstring)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.vectors: VectorMatrix | None = None
        self.vectors_lock = ReadWriteLock()

    def _matrix(self) -> VectorMatrix:
        if self.vectors is None:
            self.vectors = VectorMatrix(self.embedding_dimensions)
        return self.vectors

    def _track(self, chunks: list[FileChunk]) -> None:
        """Put the chunks' vectors in the matrix (or drop them from it) and point each chunk at its stored row."""
        with self.vectors_lock.write():
            keep = [c for c in chunks if self.embedding_store and self._embedding_dim_matches(c.embedding)]
            self._matrix().set_many((c.id, c.embedding) for c in keep)
            for chunk in keep:
                chunk.embedding = self.vectors.view(chunk.id)
            for chunk in chunks:
                if chunk not in keep:
                    self._untrack(chunk.id)

    def _untrack(self, chunk_id: str) -> None:
        """Drop a vector (caller holds the write lock); the row that moved into its place gets a fresh view."""
        moved = self.vectors.remove(chunk_id) if self.vectors is not None else None
        if moved is not None and moved in self.file_chunks:
            self.file_chunks[moved].embedding = self.vectors.view(moved)

    async def load(self) -> None:
        await super().load()
        with self.vectors_lock.write():
            self.vectors = None
        self._track(list(self.file_chunks.values()))

    def _start_embedding_backfill(self, *, skip_health_check: bool = False) -> None:
        """Disabled: the plugin embeds before upserting and re-indexes records without vectors itself."""

    async def upsert(self, files: list[tuple[FileNode, list[FileChunk]]]) -> None:
        old = {n.path: list(n.chunk_ids) for n in await self.get_nodes([node.path for node, _ in files])} if files else {}
        await super().upsert(files)
        with self.vectors_lock.write():
            for ids in old.values():
                for cid in ids:
                    if cid not in self.file_chunks:
                        self._untrack(cid)
        self._track([self.file_chunks.get(chunk.id, chunk) for _, chunks in files for chunk in chunks])

    async def _delete_nodes(self, nodes: list[FileNode]) -> None:
        await super()._delete_nodes(nodes)
        with self.vectors_lock.write():
            for node in nodes:
                for cid in node.chunk_ids:
                    self._untrack(cid)

    async def clear(self) -> None:
        await super().clear()
        with self.vectors_lock.write():
            if self.vectors is not None:
                self.vectors.clear()

    def nearest_paths(self, query_embedding, limit: int) -> list[tuple[str, float]]:
        """Top ``limit`` records as ``(path, cosine)`` for an already computed query vector (blocking: a scan)."""
        if not self.embedding_store or self.vectors is None:
            return []
        with self.vectors_lock.read():
            hits = self.vectors.search(query_embedding, limit)
            chunks = [(self.file_chunks.get(cid), score) for cid, score in hits]
        return [(chunk.path, score) for chunk, score in chunks if chunk is not None]

    async def anearest_paths(self, query_embedding, limit: int) -> list[tuple[str, float]]:
        """``nearest_paths`` in a scan thread, off the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(scan_executor(), self.nearest_paths, query_embedding, limit)

    def nearest(self, query_embedding, limit: int) -> list[FileChunk]:
        """Top ``limit`` chunks by cosine to an already computed query vector, scores as ReMe's vector_search."""
        if not self.embedding_store or self.vectors is None:
            return []
        with self.vectors_lock.read():
            hits = self.vectors.search(query_embedding, limit)
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
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(scan_executor(), self.nearest, query_embedding, limit)
