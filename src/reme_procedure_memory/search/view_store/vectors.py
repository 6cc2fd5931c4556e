"""The vectors of a ``ProcedureFileStore``: its ``VectorMatrix``, kept in step with the chunks, and their reuse.

Contract of ``ViewVectors`` (a base of ``ProcedureFileStore``, which owns ``vectors``, ``vectors_lock``,
``vector_space`` and ``_reusable``): the matrix is the only holder of a record's vector: ``_track`` moves chunks'
vectors into the matrix (or drops them from it) and leaves each chunk's ``embedding`` None (no per-chunk array or
view object: 200,000 of them cost about 0.5 s at start and 21 MiB); ``vector_of``/``has_vector`` answer for a record;
``reusable_vector`` offers the vector held now (or, after ``clear`` or from an earlier plugin version's files, held
before) for exactly the same text in the current vector space, so re-indexing unchanged texts needs no provider call.
``vector_search`` is ReMe's stock scan (what ``ViewSearches`` falls back to for filtered searches) reading the vectors
from the matrix: the same candidates, cosine function, batches, scores and order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from reme.components.file_store import local_file_store
from reme.schema import FileChunk

from ...reme_internals import chunk_filter, embedding_fits, query_embedding, vector_search_batch
from ..locks import ReadWriteLock
from ..vector.matrix import VectorMatrix
from .record_codec import slim, text_digest


class ViewVectors:
    """A view's vector matrix and reusable vectors (see the module docstring). What it reads of the store that
    mixes it in is declared here; ``ProcedureFileStore`` sets the first four, ReMe's ``LocalFileStore`` the rest."""

    vectors: VectorMatrix | None  # the only holder of the records' vectors
    vectors_lock: ReadWriteLock  # writers: mutations on the event loop; readers: scans in worker threads
    vector_space: str  # the embedding vector space of ``vectors``
    _reusable: dict[str, tuple[str, np.ndarray]]  # chunk id -> (text digest, vector) held before a clear
    file_chunks: dict[str, FileChunk]
    embedding_store: Any
    embedding_dimensions: int

    def _matrix(self) -> VectorMatrix:
        if self.vectors is None:
            self.vectors = VectorMatrix(self.embedding_dimensions)
        return self.vectors

    def _usable(self) -> VectorMatrix | None:
        """The matrix, when there is one of the embedding store's dimensions (else no vector is usable)."""
        vectors = self.vectors
        if not self.embedding_store or vectors is None or vectors.dimensions != self.embedding_dimensions:
            return None
        return vectors

    def has_vector(self, chunk_id: str) -> bool:
        vectors = self._usable()
        return vectors is not None and chunk_id in vectors

    def vector_ids(self) -> set[str]:
        """The ids of the records that have a vector."""
        vectors = self._usable()
        return set(vectors.ids()) if vectors is not None else set()

    def vector_of(self, chunk_id: str) -> np.ndarray | None:
        """The stored float16 vector of record ``chunk_id`` (a view of its matrix row, valid until the matrix next
        changes), or None."""
        vectors = self._usable()
        return vectors.view(chunk_id) if vectors is not None and chunk_id in vectors else None

    def _track(self, chunks: list[FileChunk]) -> None:
        """Move the chunks' vectors into the matrix (or drop theirs from it); the chunks keep none."""
        with self.vectors_lock.write():
            for chunk in chunks:
                slim(chunk)
            fits = embedding_fits(self)
            keep = [c for c in chunks if self.embedding_store and fits(c.embedding)]
            self._matrix().set_many((c.id, c.embedding) for c in keep)
            kept = {id(c) for c in keep}
            for chunk in chunks:
                if id(chunk) not in kept:
                    self._untrack(chunk.id)
                chunk.embedding = None

    def _untrack(self, chunk_id: str) -> None:
        """Drop a vector (caller holds the write lock)."""
        if self.vectors is not None:
            self.vectors.remove(chunk_id)

    def _current_space(self) -> str:
        return str(getattr(self.embedding_store, "vector_space_id", "") or "") if self.embedding_store else ""

    def reusable_vector(self, chunk_id: str, text: str):
        """The vector this store holds (or held before ``clear``) for record ``chunk_id`` with exactly ``text``, in
        the current vector space; None when there is none."""
        if not self.embedding_store or self.vector_space != self._current_space():
            return None
        digest = text_digest(text)
        chunk = self.file_chunks.get(chunk_id)
        if chunk is not None and self._digest(chunk) == digest and self.has_vector(chunk_id):
            return self.vector_of(chunk_id)
        held = self._reusable.get(chunk_id)
        return held[1] if held is not None and held[0] == digest else None

    @staticmethod
    def _digest(chunk: FileChunk) -> str:
        return chunk.metadata.get("text_sha256") or text_digest(chunk.text)

    async def vector_search(self, query: str, limit: int, search_filter: dict) -> list[FileChunk]:
        """ReMe's stock ``vector_search`` (see the module docstring); each result carries a copy of its vector."""
        if limit <= 0:
            return []
        query_vector = await query_embedding(self, query)
        if query_vector is None:
            return []
        matches = chunk_filter(self, search_filter)
        candidates = [c for c in self.file_chunks.values() if self.has_vector(c.id) and matches(c)]
        scores: list[float] = []
        batch = vector_search_batch()
        with self.vectors_lock.read():
            for start in range(0, len(candidates), batch):
                matrix = np.stack([self.vectors.view(c.id) for c in candidates[start : start + batch]])
                scores += local_file_store.batch_cosine_similarity(query_vector.reshape(1, -1), matrix)[0].tolist()
            best = sorted(range(len(candidates)), key=lambda i: (-scores[i], i))[:limit]
            return [
                candidates[i].model_copy(
                    update={
                        "scores": {"vector": scores[i], "score": scores[i]},
                        "embedding": np.array(self.vectors.view(candidates[i].id)),
                    }
                )
                for i in best
            ]
