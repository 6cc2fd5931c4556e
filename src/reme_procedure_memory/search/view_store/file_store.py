"""ProcedureFileStore (file_store backend ``procedure_local``): ReMe's ``local`` file store for the plugin's views.

What it changes, and why (records, chunks, graph nodes and BM25 scoring stay ReMe's); this module holds the
mutations and the persistence, its bases the vectors (vectors.py) and the searches (searches.py):

* **Vectors** live in a ``VectorMatrix`` (vector/matrix.py: exact cosine top-k screened by an int8 scan), only there:
  a chunk's ``embedding`` stays None, ``vector_of``/``has_vector`` ask the matrix (vectors.py). ReMe's local
  search stacks float16 vectors in a Python loop (~0.5 s per 10k records at 1,024 dimensions).
* **Searches** (vector and keyword) run in a worker thread (``scan_executor``), never on the event loop; readers-writer
  locks keep mutations (on the event loop) out of a running search.
* **Persistence is incremental** (state.py, records as in record_codec.py): a snapshot of records (as columns),
  vectors and the BM25 index plus an append-only log of later upserts and deletes. ``dump`` (and closing) appends the
  changes since the last one, and writes a new snapshot only when the log has grown past a share of the view, after a
  clear, or after BM25 compaction. The keyword index (``procedure_bm25``) and graph (``procedure_graph``) keep no files of their own; this
  store restores them. A state that cannot be read exactly is discarded: the view starts empty and the component
  re-indexes it from the experience files. The vector space the vectors came from is recorded (in the manifest and
  in every upsert of the log); after a change of embedding model they are dropped, so the component re-embeds.
* **Vectors are reused**: ``reusable_vector`` offers a record's current vector (or, after ``clear``, the one it had)
  for the same text in the same vector space, so re-indexing unchanged texts needs no provider call.

The plugin pre-embeds every record it upserts and re-indexes missing vectors itself, so ReMe's background embedding
backfill is disabled for these stores: a backfill would change chunk vectors behind the matrix.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
from reme.components.file_store.local_file_store import LocalFileStore
from reme.schema import FileChunk, FileNode

from ...errors import ViewStateError
from ..keyword.bm25 import ProcedureBM25Index
from ..locks import ReadWriteLock
from ..vector.matrix import VectorMatrix
from .graph import ProcedureFileGraph
from .record_codec import RecordColumns, files_of, persisted_record, restore_columns, text_digest
from .searches import ViewSearches
from .state import ViewState
from .vectors import ViewVectors

SNAPSHOT_MIN_ENTRIES = 500  # a new snapshot once the log holds more entries than this and than ...
SNAPSHOT_SHARE = 0.02  # ... this share of the view's records (bounds the replay at start to a few percent)
COMPACT_SHARE = 0.25  # BM25 compaction (with a new snapshot) once this share of its slots is lazily deleted


# ViewSearches first: its vector_search falls back (for filtered searches) to ViewVectors' matrix-backed stock scan
async def _none(failure: BaseException | None = None) -> None:
    """A part not restored: None, or ``failure`` raised."""
    if failure is not None:
        raise failure


class ProcedureFileStore(ViewSearches, ViewVectors, LocalFileStore):
    """ReMe's ``local`` file store with a vector matrix, off-loop searches and incremental persistence (see above)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.vectors: VectorMatrix | None = None
        self.vectors_lock = ReadWriteLock()
        self.state = ViewState(self.component_metadata_path / f"{self.name}_{self.store_version}.view")
        self.vector_space = ""  # the embedding vector space of the vectors held
        self._pending: list[dict] = []  # log entries of changes not yet written
        self._snapshot_due = False
        self._reusable: dict[str, tuple[str, np.ndarray]] = {}  # chunk id -> (text, vector) of cleared records

    def _drop_texts(self, chunk_ids) -> None:
        """Keep only a digest of each chunk's text once BM25 and the log have it: the experience file holds the text
        (a view whose BM25 cannot be loaded is re-indexed from the files, reusing the vectors by digest)."""
        for cid in chunk_ids:
            chunk = self.file_chunks.get(cid)
            if chunk is not None and chunk.text:
                chunk.metadata["text_sha256"] = text_digest(chunk.text)
                chunk.text = ""

    def _start_embedding_backfill(self, *, skip_health_check: bool = False) -> None:
        """Disabled: the plugin embeds before upserting and re-indexes records without vectors itself."""

    # -- mutations (each logged for the next dump) -------------------------------------------------------------

    async def _apply_upsert(self, files: list[tuple[FileNode, list[FileChunk]]]) -> None:
        old = (
            {n.path: list(n.chunk_ids) for n in await self.get_nodes([node.path for node, _ in files])} if files else {}
        )
        await super().upsert(files)
        with self.vectors_lock.write():
            for ids in old.values():
                for cid in ids:
                    if cid not in self.file_chunks:
                        self._untrack(cid)
        self._track([self.file_chunks.get(chunk.id, chunk) for _, chunks in files for chunk in chunks])

    async def upsert(self, files: list[tuple[FileNode, list[FileChunk]]]) -> None:
        if not files:
            return
        await self._apply_upsert(files)
        self.vector_space = self._current_space()
        self._log(
            lambda: {
                "op": "upsert",
                "vector_space": self.vector_space,
                "files": [self._record(node.path) for node, _ in files],
            }
        )
        self._drop_texts(c.id for _, chunks in files for c in chunks)

    async def delete(self, path: str | list[str]) -> None:
        paths = [path] if isinstance(path, str) else list(path)
        await super().delete(paths)
        if paths:
            self._log(lambda: {"op": "delete", "paths": paths})

    def _log(self, entry) -> None:
        """Keep the log entry ``entry()`` of a change for the next dump, unless that dump writes a snapshot anyway
        (after a clear, before the first snapshot, or once the log would outgrow its share): then nothing is kept."""
        if not self._snapshot_needed():
            self._pending.append(entry())
        if self._snapshot_needed():
            self._snapshot_due, self._pending = True, []

    async def _delete_nodes(self, nodes: list[FileNode]) -> None:
        await super()._delete_nodes(nodes)
        with self.vectors_lock.write():
            for node in nodes:
                for cid in node.chunk_ids:
                    self._untrack(cid)

    async def clear(self) -> None:
        """Empty the view; its vectors stay available to ``reusable_vector`` until the next ``dump``."""
        for cid, chunk in self.file_chunks.items():
            if self.has_vector(cid):
                self._reusable[cid] = (self._digest(chunk), np.array(self.vector_of(cid)))
        await super().clear()
        with self.vectors_lock.write():
            if self.vectors is not None:
                self.vectors.clear()
        self._pending, self._snapshot_due = [], True

    async def optimize_index(self) -> None:
        """Compact BM25 once a quarter of its slots are lazily deleted (then the next dump writes a snapshot)."""
        if self.keyword_index is not None and self.keyword_index.deleted_fraction >= COMPACT_SHARE:
            await self.keyword_index.optimize_index()
            self._snapshot_due = True

    async def reindex(self, scope: str) -> dict:
        result = await super().reindex(scope)
        self._snapshot_due = True
        return result

    # -- persistence ------------------------------------------------------------------------------------------------

    def _record(self, path: str, inline: bool = True) -> dict:
        node = self.file_graph.node(path)
        return persisted_record(
            node, [self.file_chunks[cid] for cid in node.chunk_ids], lambda chunk: self.vector_of(chunk.id), inline
        )

    def reme_files(self) -> list[Path]:
        """The files ReMe's own persistence of this store, its BM25 index and graph would write (only unreleased
        development builds of the plugin let it; a failed ReMe write leaves its temporary file beside them)."""
        return [Path(self.chunks_path), Path(self.file_graph.legacy_file), Path(self.keyword_index.index_file)]

    def _check_backends(self) -> None:
        if not isinstance(self.keyword_index, ProcedureBM25Index) or not isinstance(
            self.file_graph, ProcedureFileGraph
        ):
            raise TypeError(
                f"file_store.{self.name} (backend procedure_local) needs keyword_index backend procedure_bm25 and "
                f"file_graph backend procedure_graph (it persists them); got {type(self.keyword_index).__name__} and "
                f"{type(self.file_graph).__name__}.",
            )

    async def _reset(self) -> None:
        self.file_chunks.clear()
        await self.file_graph.clear()
        await self.keyword_index.clear()
        with self.vectors_lock.write():
            self.vectors = None

    async def load(self) -> None:
        """Restore the view from its snapshot and log; a state that does not load exactly is discarded (the view
        starts empty and the component re-indexes the files)."""
        self._check_backends()
        await self._reset()
        self._pending, self._reusable = [], {}
        try:
            state = await asyncio.to_thread(self.state.read)
            if state is not None:
                await self._restore(*state)
        except (ViewStateError, ValueError, KeyError, TypeError) as exc:
            self.logger.warning(f"{self.name}: discarding the persisted view ({exc}); it is rebuilt from the files")
            await self._reset()
            await asyncio.to_thread(self.state.remove)
            state = None
        self._snapshot_due = self._snapshot_due or state is None
        found = [str(path) for path in self.reme_files() if path.exists()]
        if found:  # never read: the view is built from the experience files
            self.logger.warning(
                f"{self.name}: not reading {', '.join(found)}: view files of an unreleased "
                "development build (the view is built from the experience files); remove them"
            )

    async def _restore(self, manifest: dict, columns: dict, vectors: dict, bm25: dict | None, entries: list[dict]):
        self._snapshot_due = False
        self.vector_space = self._current_space()
        same_space = manifest.get("vector_space") == self.vector_space
        if not same_space:  # another embedding model made these vectors
            self.logger.warning(f"{self.name}: vectors of another embedding vector space dropped; re-embedding")
            self._snapshot_due = True
        # records, vector index and BM25 are independent: restored at once (the vector copies run outside the GIL)
        restored, matrix, keyword = await asyncio.gather(
            asyncio.to_thread(restore_columns, columns),
            asyncio.to_thread(VectorMatrix.restore, self.embedding_dimensions, vectors)
            if same_space and self.embedding_store
            else _none(),
            asyncio.to_thread(self.keyword_index.restore, bm25)
            if bm25 is not None
            else _none(ValueError("its snapshot part is damaged")),
            return_exceptions=True,  # every thread has finished before a failure is raised
        )
        columns.clear()
        vectors.clear()
        for result in (restored, matrix):
            if isinstance(result, BaseException):
                raise result
        if isinstance(keyword, BaseException) and not isinstance(keyword, Exception):  # e.g. a cancellation
            raise keyword
        nodes, chunks, flagged = restored
        if matrix is not None and (len(matrix) != len(flagged) or not flagged.issuperset(matrix.ids())):
            raise ViewStateError("the vector index does not hold the records' vectors")
        keyword_ready = not isinstance(keyword, BaseException)
        if not keyword_ready:  # another tokenizer configuration, or a damaged part
            self.logger.warning(f"{self.name}: BM25 is re-indexed from the files ({type(keyword).__name__}: {keyword})")
            self._snapshot_due = True
        self.file_chunks.update((chunk.id, chunk) for chunk in chunks)
        self._drop_texts(c.id for c in chunks if c.text)  # records written before texts were dropped carry them
        self.file_graph.restore(nodes)
        with self.vectors_lock.write():
            self.vectors = matrix
        if not keyword_ready:  # records of unknown version: the component re-indexes them from the files (their
            for chunk in chunks:  # vectors are reused: the digests of their texts are kept)
                chunk.metadata["version"] = ""
        for entry in entries:  # the log, in order, through the same code paths as the original changes
            if entry["op"] == "upsert":
                # an entry names the vector space of its inline vectors (entries of format 3 before that: the
                # snapshot's); vectors of another space are dropped, so the component re-embeds those records
                current = entry.get("vector_space", manifest.get("vector_space")) == self.vector_space
                self._snapshot_due = self._snapshot_due or not current
                files = files_of(entry["files"], vectors=current)
                await self._apply_upsert(files)
                self._drop_texts(c.id for _, chunks in files for c in chunks)
            else:
                await super().delete(entry["paths"])

    def _snapshot_needed(self) -> bool:
        logged = self.state.log_entries + len(self._pending)
        return (
            self._snapshot_due
            or self.state.generation == 0
            or logged > max(SNAPSHOT_MIN_ENTRIES, SNAPSHOT_SHARE * len(self.file_graph))
        )

    @LocalFileStore.serialized
    async def dump(self) -> None:
        """Persist the changes since the last dump: appended to the log, or a new snapshot (see the module
        docstring). The snapshot's content is taken at once, on the event loop, so it is one consistent state;
        changes made while it is written are logged by the next dump."""
        await self.optimize_index()
        logged = len(self._pending)
        if self._snapshot_needed():
            records = RecordColumns()
            for path in self.file_graph.paths():
                records.add(self._record(path, inline=False))
            with self.vectors_lock.read():
                vectors = (self.vectors or VectorMatrix(self.embedding_dimensions or 1)).export()
            arrays = self.keyword_index.snapshot()
            meta = {"vector_space": self.vector_space}
            await asyncio.to_thread(self.state.write_snapshot, records.encoded(), vectors, arrays, meta)
            self._pending, self._snapshot_due = self._pending[logged:], False
        elif self._pending:
            await asyncio.to_thread(self.state.append, self._pending[:logged])
            self._pending = self._pending[logged:]
        self._reusable = {}
