"""The searches of a ``ProcedureFileStore``: vector and keyword top-k as paths or chunks, off the event loop.

Contract of ``ViewSearches`` (a base of ``ProcedureFileStore``, whose records, vector matrix, its lock and keyword
index it reads): ``nearest_paths``/``keyword_paths`` (``keyword_scored``: with the search's ``QueryScores``) return
the top ``limit`` records as ``(path, score)`` (blocking:
a scan, under the matrix's read lock), for callers that run them in a scan thread of ``scan_executor`` (one per core,
faiss on one OpenMP thread each: concurrent searches are the parallelism), never on the event loop (``Views.search_page``
runs both and the fusion in one such call); ``nearest``/``vector_search`` keep ReMe's ``vector_search`` contract
(chunks with ``vector`` and ``score``) in a scan thread, falling back to ReMe's stock scan for filtered searches.
``cosine_to`` is one record's exact cosine (as ``nearest_paths`` scores it), for a relevance outside the top ``limit``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from reme.schema import FileChunk

from ...reme_internals import query_embedding
from ..executors import scan_executor
from ..keyword.bm25 import ProcedureBM25Index, QueryScores
from ..locks import ReadWriteLock
from ..vector.matrix import VectorMatrix


class ViewSearches:
    """Searches over a ``ProcedureFileStore``'s matrix and BM25 index (see the module docstring). What it reads of
    the store that mixes it in is declared here."""

    vectors: VectorMatrix | None
    vectors_lock: ReadWriteLock
    file_chunks: dict[str, FileChunk]
    keyword_index: ProcedureBM25Index | None
    embedding_store: Any

    def nearest_paths(self, query_embedding, limit: int) -> list[tuple[str, float]]:
        """Top ``limit`` records as ``(path, cosine)`` for an already computed query vector (blocking: a scan)."""
        if not self.embedding_store or self.vectors is None:
            return []
        with self.vectors_lock.read():
            hits = self.vectors.search(query_embedding, limit)
            chunks = [(self.file_chunks.get(cid), score) for cid, score in hits]
        return [(chunk.path, score) for chunk, score in chunks if chunk is not None]

    def keyword_paths(self, query: str, limit: int) -> list[tuple[str, float]]:
        """Top ``limit`` records as ``(path, BM25 score)`` (blocking; ReMe's BM25 scores and order)."""
        return self.keyword_scored(query, limit)[0]

    def keyword_scored(self, query: str, limit: int) -> tuple[list[tuple[str, float]], QueryScores | None]:
        """``keyword_paths`` and the search's ``QueryScores`` (None without a keyword index or a query)."""
        if not self.keyword_index or not query.strip():
            return [], None
        searched = self.keyword_index.scored_search(query.strip(), max(0, limit))
        chunks = [(self.file_chunks.get(cid), score) for cid, score in searched.hits.items()]
        return [(chunk.path, score) for chunk, score in chunks if chunk is not None], searched

    def cosine_to(self, query_embedding, chunk_id: str) -> float | None:
        """The exact cosine of record ``chunk_id``'s vector with the query's; None when it has none."""
        if not self.embedding_store or self.vectors is None:
            return None
        with self.vectors_lock.read():
            return self.vectors.cosine(query_embedding, chunk_id)

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
        query_vector = await query_embedding(self, query)
        if query_vector is None:
            return []
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(scan_executor(), self.nearest, query_vector, limit)
