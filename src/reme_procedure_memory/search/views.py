"""The two hybrid search views over ReMe file stores, and weighted RRF.

* ``when_to_use`` indexes the when-to-use text; ``when_to_use_content`` indexes when-to-use + "\\n\\n" + content.
* Each experience is exactly one record (one FileNode with one FileChunk) in each view; chunk id ``<view>:<path>``,
  ``metadata.version`` is the file version the record was built from, ``metadata.tokenizer`` the identity of the
  view's BM25 tokenizer (see keyword/tokenizer.py): records of another tokenizer make the view inconsistent.
* Each view is its own file store with its own BM25 index and file graph; both share one embedding store (cache).
* The plugin embeds record texts itself, under a timeout, before upserting: an embedding failure never leaves a
  BM25-only record behind. Any indexing failure removes the path from both views and raises IndexFailure.
* Search fuses the vector and BM25 candidate lists with weighted RRF (always RRF, also when one list is empty), and
  gives the page a ``Relevance`` of the candidates (relevance.py: from the raw cosine and BM25 evidence, not RRF).
"""

from __future__ import annotations

import asyncio
from typing import Callable, TypeVar

from reme.schema import FileChunk, FileNode

from ..errors import IndexFailure
from ..schema import VIEW_NAMES, View
from ..storage.experiences import StoredExperience
from .embedding_client import EmbeddingClient
from .executors import keyword_executor, scan_executor
from .fusion import Fused, rrf_fuse
from .relevance import Relevance
from .keyword.tokenizer import tokenizer_identity
from .view_store.file_store import ProcedureFileStore

MAX_CANDIDATES = 200
PARALLEL_ROWS = 32_768  # above this many rows a view's BM25 runs beside its matrix scan (see _fused_page)
T = TypeVar("T")


def view_text(view: str, stored: StoredExperience) -> str:
    """The text a view indexes for an experience."""
    exp = stored.experience
    if view == View.WHEN_TO_USE:
        return exp.when_to_use
    if view == View.WHEN_TO_USE_CONTENT:
        return exp.when_to_use + "\n\n" + exp.content
    raise ValueError(f"unknown view {view!r}")


def chunk_id(view: str, path: str) -> str:
    """The one record id of ``path`` in ``view``."""
    return f"{view}:{path}"


class Views:
    """Both views of one ProcedureMemory component; their embeddings come through ``embeddings``
    (``EmbeddingClient``: timeouts, the provider's cooldown and probe)."""

    def __init__(
        self,
        stores: dict[str, ProcedureFileStore],
        embedding_store,
        timeout: float,
        cooldown: float,
        search_timeout: float | None = None,
    ) -> None:
        self.stores = stores
        self.embedding_store = embedding_store
        self.embeddings = EmbeddingClient(embedding_store, timeout, cooldown, search_timeout)
        self.tokenizers = {view: self._tokenizer_identity(store) for view, store in stores.items()}

    @staticmethod
    def _tokenizer_identity(store: ProcedureFileStore) -> str:
        index = store.keyword_index
        if index is None:
            return "none"
        return tokenizer_identity(index.tokenizer, index.tokenizer_fingerprint())

    def foreign_tokenizer(self) -> list[str]:
        """Views holding records tokenized by another tokenizer than the current one (also: records without a
        recorded identity). Their BM25 tokens cannot be mixed with the current ones: rebuild."""
        return [
            view
            for view in VIEW_NAMES
            if any(c.metadata.get("tokenizer") != self.tokenizers[view] for c in self.stores[view].file_chunks.values())
        ]

    # -- writes -------------------------------------------------------------------------------------------------

    def _records(self, view: str, stored: StoredExperience, vector, mtime: float) -> tuple[FileNode, list[FileChunk]]:
        chunk = FileChunk(
            id=chunk_id(view, stored.path),
            path=stored.path,
            start_line=1,
            end_line=1,
            text=view_text(view, stored),
            embedding=vector,
            metadata={"view": view, "version": stored.version, "tokenizer": self.tokenizers[view]},
        )
        node = FileNode(
            path=stored.path,
            st_mtime=mtime,
            chunk_ids=[chunk.id],
            front_matter={"name": stored.path.rsplit("/", 1)[-1], "description": stored.experience.description},
        )
        return node, [chunk]

    async def index(self, items: list[tuple[StoredExperience, float]]) -> None:
        """Index experiences (with their file mtimes) in both views; on failure remove them from both and raise."""
        if not items:
            return
        texts = [view_text(view, stored) for stored, _ in items for view in VIEW_NAMES]
        try:
            vectors = await self._vectors(
                texts, [chunk_id(view, stored.path) for stored, _ in items for view in VIEW_NAMES]
            )
            for offset, view in enumerate(VIEW_NAMES):
                batch = [
                    self._records(view, stored, vectors[i * len(VIEW_NAMES) + offset], mtime)
                    for i, (stored, mtime) in enumerate(items)
                ]
                await self.stores[view].upsert(batch)
        except IndexFailure:
            await self.remove([stored.path for stored, _ in items])
            raise
        except Exception as exc:  # e.g. a BM25 tokenizer error: exclude the file, report the cause
            await self.remove([stored.path for stored, _ in items])
            raise IndexFailure(f"{type(exc).__name__}: {exc}") from exc

    async def _vectors(self, texts: list[str], ids: list[str]) -> list:
        """Vectors of the record texts: the one a view already holds for the same record and text, else embedded."""
        views = [ids_view.split(":", 1)[0] for ids_view in ids]
        vectors = [self.stores[v].reusable_vector(i, t) for v, i, t in zip(views, ids, texts)]
        missing = [n for n, vector in enumerate(vectors) if vector is None]
        for n, vector in zip(missing, await self.embeddings.embed([texts[n] for n in missing])):
            vectors[n] = vector
        return vectors

    async def remove(self, paths: list[str]) -> None:
        """Remove paths from both views (unknown paths are ignored)."""
        if paths:
            for view in VIEW_NAMES:
                await self.stores[view].delete(paths)

    async def clear(self) -> None:
        """Empty both views."""
        for view in VIEW_NAMES:
            await self.stores[view].clear()

    async def dump(self) -> None:
        """Persist both views (chunks, BM25, graph)."""
        for view in VIEW_NAMES:
            await self.stores[view].dump()

    # -- reads --------------------------------------------------------------------------------------------------

    def indexed(self, view: str) -> dict[str, tuple[str, bool]]:
        """``path -> (indexed version, has a vector)`` of every record in ``view``."""
        store = self.stores[view]
        held = store.vector_ids()
        return {
            chunk.path: (str(chunk.metadata.get("version", "")), chunk.id in held)
            for chunk in store.file_chunks.values()
        }

    def held_version(self, path: str) -> str | None:
        """The version of ``path`` both views hold a record of; None when a view holds none or they differ."""
        versions = set()
        for view in VIEW_NAMES:
            chunk = self.stores[view].file_chunks.get(chunk_id(view, path))
            if chunk is None:
                return None
            versions.add(str(chunk.metadata.get("version", "")))
        return versions.pop() if len(versions) == 1 else None

    async def search(self, view: str, query: str, limit: int, vector_weight: float) -> tuple[list[Fused], str | None]:
        """Fused candidates of ``view`` (best first, at least ``limit`` when available) and, if the vector branch
        was unavailable, why: the fusion without reading any file (``benchmarks/search.py`` times it apart; answers
        use ``search_page``)."""
        return await self.search_page(view, query, limit, vector_weight, lambda fused, _relevance: fused)

    async def search_page(
        self, view: str, query: str, limit: int, vector_weight: float, page: Callable[[list[Fused], Relevance], T]
    ) -> tuple[T, str | None]:
        """``page(fused candidates, their relevance)`` and, if the vector branch was unavailable, why.

        The query vector comes first, on the event loop (the shared embedding cache; the provider on a miss). Then
        one scan-thread call does the rest: BM25, the matrix scan, the fusion and ``page`` (e.g. reading the result
        files), so a search hands work to a thread once, never to the event loop.
        """
        store = self.stores[view]
        candidates = min(MAX_CANDIDATES, max(50, limit * 5))
        query_vector, vector_error = (await self.embeddings.query_vector(query)) if vector_weight > 0 else (None, None)
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(
            scan_executor(), _fused_page, view, store, query, query_vector, candidates, vector_weight, page
        )
        return found, vector_error


def _fused_page(
    view: str,
    store: ProcedureFileStore,
    query: str,
    query_vector,
    candidates: int,
    vector_weight: float,
    page: Callable[[list[Fused], Relevance], T],
) -> T:
    """BM25 and vector candidates of one view, fused, passed to ``page`` with their ``Relevance`` (blocking: runs
    in a scan thread).

    Over a matrix of more than ``PARALLEL_ROWS`` rows BM25 runs in a keyword thread beside the scan (a search's
    latency is then about the longer of the two, not their sum); below, both run here, one after the other: the
    scan is short and a second hand-off would cost more than it saves.
    """
    keyword: list[tuple[str, float]] = []
    searched = None  # the BM25 search's QueryScores
    beside = None  # BM25 running in a keyword thread
    if vector_weight < 1:  # at weight 1 relevance is the cosine alone: no BM25 needed
        if query_vector is not None and store.vectors is not None and len(store.vectors) > PARALLEL_ROWS:
            beside = keyword_executor().submit(store.keyword_scored, query, candidates)
        else:
            keyword, searched = store.keyword_scored(query, candidates)
    vector = store.nearest_paths(query_vector, candidates) if query_vector is not None else []
    if beside is not None:
        keyword, searched = beside.result()
    return page(
        rrf_fuse(vector, keyword, vector_weight), _relevance(view, store, query_vector, searched, vector_weight)
    )


def _relevance(view: str, store: ProcedureFileStore, query_vector, searched, vector_weight: float) -> Relevance:
    """The ``Relevance`` of one search's candidates: a score missing from a branch's list is looked up exactly
    (the record's cosine; its BM25 score from the search's own scores)."""
    index = store.keyword_index
    if searched is None or index is None:

        def bm25_of(path: str) -> float:
            return 0.0
    else:

        def bm25_of(path: str) -> float:
            return index.score_of(searched, chunk_id(view, path))

    cosine_of = None
    if query_vector is not None:

        def cosine_of(path: str) -> float | None:
            return store.cosine_to(query_vector, chunk_id(view, path))

    return Relevance(
        vector_weight if query_vector is not None else 0.0,
        searched.self_score if searched is not None else 0.0,
        cosine_of,
        bm25_of,
    )
