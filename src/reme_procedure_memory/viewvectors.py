"""The vectors of a ``ProcedureFileStore``: its ``VectorMatrix``, kept in step with the chunks, and their reuse.

Contract of ``ViewVectors`` (a base of ``ProcedureFileStore``, which owns ``vectors``, ``vectors_lock``,
``vector_space`` and ``_reusable``): ``_track`` puts chunks' vectors into the matrix (or drops them) and points each
chunk's ``embedding`` at its stored row, never a second copy; ``_untrack`` drops one and re-points the row that moved;
``reusable_vector`` offers the vector held now (or, after ``clear`` or from an earlier plugin version's files, held
before) for exactly the same text in the current vector space, so re-indexing unchanged texts needs no provider call.
"""

from __future__ import annotations

from reme.schema import FileChunk
from reme.utils.jsonl_zst import read_jsonl_zst

from .vectors import VectorMatrix
from .viewrecords import slim, text_digest


class ViewVectors:
    """A view's vector matrix and reusable vectors (see the module docstring)."""

    def _matrix(self) -> VectorMatrix:
        if self.vectors is None:
            self.vectors = VectorMatrix(self.embedding_dimensions)
        return self.vectors

    def _track(self, chunks: list[FileChunk]) -> None:
        """Put the chunks' vectors in the matrix (or drop them from it) and point each chunk at its stored row."""
        with self.vectors_lock.write():
            for chunk in chunks:
                slim(chunk)
            keep = [c for c in chunks if self.embedding_store and self._embedding_dim_matches(c.embedding)]
            self._matrix().set_many((c.id, c.embedding) for c in keep)
            for chunk in keep:
                chunk.embedding = self.vectors.view(chunk.id)
            kept = {id(c) for c in keep}
            for chunk in chunks:
                if id(chunk) not in kept:
                    self._untrack(chunk.id)

    def _untrack(self, chunk_id: str) -> None:
        """Drop a vector (caller holds the write lock); the row that moved into its place gets a fresh view."""
        moved = self.vectors.remove(chunk_id) if self.vectors is not None else None
        if moved is not None and moved in self.file_chunks:
            self.file_chunks[moved].embedding = self.vectors.view(moved)

    def _current_space(self) -> str:
        return str(getattr(self.embedding_store, "vector_space_id", "") or "") if self.embedding_store else ""

    def reusable_vector(self, chunk_id: str, text: str):
        """The vector this store holds (or held before ``clear``) for record ``chunk_id`` with exactly ``text``, in
        the current vector space; None when there is none."""
        if not self.embedding_store or self.vector_space != self._current_space():
            return None
        digest = text_digest(text)
        chunk = self.file_chunks.get(chunk_id)
        if chunk is not None and self._digest(chunk) == digest and self._embedding_dim_matches(chunk.embedding):
            return chunk.embedding
        held = self._reusable.get(chunk_id)
        return held[1] if held is not None and held[0] == digest else None

    @staticmethod
    def _digest(chunk: FileChunk) -> str:
        return chunk.metadata.get("text_sha256") or text_digest(chunk.text)

    def _keep_legacy_vectors(self) -> None:
        """A view of an earlier plugin version (ReMe's own chunk file): its vectors stay available to
        ``reusable_vector`` while the component re-indexes the files, so the migration embeds nothing it had."""
        try:
            for line in read_jsonl_zst(self.chunks_path, self.encoding):
                if line.strip():
                    chunk = self._deserialize_chunk(line)
                    if self._embedding_dim_matches(chunk.embedding):
                        self._reusable[chunk.id] = (text_digest(chunk.text), chunk.embedding)
        except Exception as exc:  # unreadable: those files are embedded again
            self.logger.warning(f"{self.name}: the previous version's vectors are unreadable ({exc})")
        self.vector_space = self._current_space()
