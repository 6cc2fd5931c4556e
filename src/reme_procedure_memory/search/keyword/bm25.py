"""ProcedureBM25Index (keyword_index backend ``procedure_bm25``): ReMe's ``bm25`` with growable arrays, thread-safe
reads and no file of its own.

Contract:

* scores and rankings are ReMe's ``bm25`` exactly: the subclass reuses its tokenisation and scoring code and only
  changes where arrays live (the tests compare it with the stock index on the same documents, also after deletes,
  updates, compaction and a save + load); its top-k is ReMe's set and order except among equal scores, which it
  orders by document slot (ReMe's order of equal scores is whatever ``argpartition`` left), at a fraction of the cost;
* adding a document appends to capacity buffers (per posting list, and for document lengths and deletion flags)
  instead of concatenating every touched posting list: the cost of an add does not grow with the corpus;
* it keeps no per-document token arrays (ReMe keeps them only to renumber them when compacting; ``doc_meta`` derives
  them from the postings instead): one numpy array less per document;
* ``search`` may run in any thread: a readers-writer lock keeps ``add_docs``/``delete_docs``/``optimize_index``/
  ``clear`` (on the event loop) out of a running search;
* a search keeps each long posting list's score contributions (ReMe's expression, bit for bit) in a byte-bounded
  least-recently-used cache until the next mutation: ReMe recomputes them for every query, which at 100k documents
  is most of the content view's keyword time;
* ``scored_search`` also answers the query's self-score (relevance.py) and keeps the search's score of every document,
  so the score of a document outside the top ``limit`` is looked up later (``score_of``) instead of searched again;
  after a mutation it is scored anew, exactly;
* persistence belongs to the ``ProcedureFileStore`` that uses it (``snapshot``/``restore`` in the store's snapshot, and
  the store's log replays the adds and deletes after it): ``load``/``dump`` do nothing, so closing never rewrites it.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from reme.components.keyword_index.bm25_index import BM25Index

from ...storage.format import BM25_FORMAT
from ..locks import ReadWriteLock
from ..relevance import unseen_idf


def _grow(buffer: np.ndarray | None, used: np.ndarray, needed: int) -> np.ndarray:
    """``buffer`` if ``used`` is its prefix view and it holds ``needed`` items, else a larger copy of ``used``."""
    if buffer is not None and used.base is buffer and buffer.size >= needed:
        return buffer
    grown = np.zeros(max(8, needed + needed // 4 + 8), dtype=used.dtype)
    grown[: used.size] = used
    return grown


class ContributionCache:
    """Per-token score contributions of a BM25 index, least recently used first out beyond ``budget`` bytes.

    Any thread may ``get`` and ``put`` (a lock of its own keeps the bookkeeping consistent); the index ``clear``s it
    under its write lock whenever a mutation changes a document count, a length or a posting."""

    ENTRY_OVERHEAD = 200  # bytes of a numpy array object and its dictionary slot, beside its data

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self._entries: OrderedDict[int, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, tid: int) -> np.ndarray | None:
        with self._lock:
            found = self._entries.get(tid)
            if found is not None:
                self._entries.move_to_end(tid)
            return found

    def put(self, tid: int, contributions: np.ndarray) -> None:
        size = contributions.nbytes + self.ENTRY_OVERHEAD
        if size > self.budget:
            return
        with self._lock:
            if tid in self._entries:
                return
            while self.used + size > self.budget:
                _, evicted = self._entries.popitem(last=False)
                self.used -= evicted.nbytes + self.ENTRY_OVERHEAD
            self._entries[tid] = contributions
            self.used += size

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.used = 0

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True)
class QueryScores:
    """One query's BM25 search (``ProcedureBM25Index.scored_search``): the top hits (``{doc_id: score}``, best
    first), the query's self-score, and what ``score_of`` needs to look up any other document's score."""

    hits: dict[str, float]
    self_score: float
    query_ids: tuple[int, ...]
    scores: np.ndarray | None  # every slot's score at search time (None: no query term in the vocabulary)
    generation: int  # the index's mutation count at search time


class ProcedureBM25Index(BM25Index):
    """ReMe's BM25 with growable arrays and store-owned persistence (see the module docstring)."""

    # Posting lists shorter than this are scored as ReMe does: cheap to recompute, and many small arrays would cost
    # more memory per saved microsecond. The budget is per index (two views: twice this at most).
    CACHE_MIN_POSTING = 256
    CACHE_BYTES = 16 << 20

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.lock = ReadWriteLock()
        self.contributions = ContributionCache(self.CACHE_BYTES)
        self._capacity: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # token id -> (doc idx, tf) buffers
        self._lens_capacity: np.ndarray | None = None
        self._deleted_capacity: np.ndarray | None = None
        self.generation = 0  # mutations so far: a QueryScores of an earlier generation is stale

    # -- growable arrays (ReMe's add_docs calls these) ---------------------------------------------------------------

    def _append_doc_arrays(self, new_doc_ids, new_doc_lens, new_doc_token_ids) -> None:
        if not new_doc_ids:
            return
        n, m = self._doc_lens.size, self._doc_lens.size + len(new_doc_ids)
        self._lens_capacity = _grow(self._lens_capacity, self._doc_lens, m)
        self._deleted_capacity = _grow(self._deleted_capacity, self._deleted, m)
        self._lens_capacity[n:m] = new_doc_lens
        self._deleted_capacity[n:m] = False
        self._doc_lens, self._deleted = self._lens_capacity[:m], self._deleted_capacity[:m]
        self._doc_ids.extend(new_doc_ids)
        self._total_len += int(sum(new_doc_lens))

    def _compact_docs(self, active_mask, old_tid_to_new) -> tuple[list[str], list]:
        return [self._doc_ids[int(i)] for i in np.flatnonzero(active_mask)], []

    @property
    def doc_meta(self) -> dict[str, dict]:
        """Per live document: its length and unique token ids (derived from the postings)."""
        tokens: dict[int, set[int]] = {}
        for tid, idxs in self._posting_doc_idxs.items():
            for idx in idxs.tolist():
                if not self._deleted[idx]:
                    tokens.setdefault(idx, set()).add(int(tid))
        return {
            self._doc_ids[idx]: {"len": int(self._doc_lens[idx]), "token_ids": tids} for idx, tids in tokens.items()
        }

    def _extend_postings(self, pending: dict[int, list[tuple[int, int]]]) -> None:
        empty = np.zeros(0, dtype=np.int32)
        for tid, items in pending.items():
            idxs, tfs = self._posting_doc_idxs.get(tid, empty), self._posting_tfs.get(tid, empty)
            n, m = idxs.size, idxs.size + len(items)
            old = self._capacity.get(tid, (None, None))
            idx_buffer, tf_buffer = _grow(old[0], idxs, m), _grow(old[1], tfs, m)
            idx_buffer[n:m] = [idx for idx, _ in items]
            tf_buffer[n:m] = [tf for _, tf in items]
            self._capacity[tid] = (idx_buffer, tf_buffer)
            self._posting_doc_idxs[tid], self._posting_tfs[tid] = idx_buffer[:m], tf_buffer[:m]

    # -- mutations under the write lock (each runs without suspending) -------------------------------------------

    @contextmanager
    def _mutation(self):
        """The write lock, with the cached contributions dropped: any write changes a count, a length or a posting."""
        with self.lock.write():
            self.contributions.clear()
            self.generation += 1
            yield

    async def add_docs(self, docs_dict: dict[str, str]) -> None:
        with self._mutation():
            await super().add_docs(docs_dict)

    async def delete_docs(self, doc_ids: list[str]) -> None:
        with self._mutation():
            await super().delete_docs(doc_ids)

    async def optimize_index(self) -> None:
        with self._mutation():
            await super().optimize_index()
            self._capacity.clear()

    async def clear(self) -> None:
        with self._mutation():
            await super().clear()
            self._capacity.clear()

    def tokenizer_fingerprint(self) -> str:
        """ReMe's fingerprint of this index's tokenizer configuration (what its snapshot records)."""
        return self._tokenizer_fingerprint()

    @property
    def deleted_fraction(self) -> float:
        """Share of document slots held by lazily deleted documents (what ``optimize_index`` reclaims)."""
        slots = self._deleted.size
        return float(self._deleted.sum()) / slots if slots else 0.0

    # -- reads ------------------------------------------------------------------------------------------------------

    def _top_k(self, scores: np.ndarray, limit: int) -> np.ndarray:
        """Slots of the top ``limit`` strictly positive scores, best first, equal scores by slot. ReMe partitions the
        negated scores of every slot with their indices (0.7-1.4 ms at 100k documents); this partitions the values of
        the positive slots only (0.1-0.9 ms) and sorts those at or above the k-th."""
        if limit <= 0:
            return np.empty(0, dtype=np.int64)
        slots = np.flatnonzero(scores > 0)
        values = scores[slots]
        if values.size > limit:
            kth = np.partition(values, values.size - limit)[values.size - limit]
            kept = values >= kth
            slots, values = slots[kept], values[kept]
        return slots[np.lexsort((slots, -values))[:limit]]

    def _score_query(self, query_ids: list[int], candidate_idxs: np.ndarray | None = None) -> np.ndarray:
        """ReMe's ``_score_query``, bit for bit; for the whole index, each long posting list's contributions come
        from (or go to) the cache. The expression and its float32 operands are ReMe's (bm25_index.py ``_score_query``)
        and the contributions are added to the scores in the same order, so every score is the same float."""
        if candidate_idxs is not None or self.n_docs == 0:
            return super()._score_query(query_ids, candidate_idxs)
        n_docs = self.n_docs
        avg_len = self.total_len / n_docs
        k1, b = self.k1, self.b
        denom_base = k1 * (1.0 - b)
        denom_norm = k1 * b / avg_len if avg_len > 0 else 0.0
        scores = np.zeros(self._doc_lens.size, dtype=np.float32)
        for tid in query_ids:
            posting_idxs = self._posting_doc_idxs.get(tid)
            if posting_idxs is None or posting_idxs.size == 0:
                continue
            idf = self._get_idf(tid, n_docs)
            if idf == 0.0:
                continue
            contributions = self.contributions.get(tid)
            if contributions is None:
                tfs = self._posting_tfs[tid].astype(np.float32)
                doc_lens = self._doc_lens[posting_idxs].astype(np.float32)
                contributions = idf * tfs * (k1 + 1.0) / (tfs + denom_base + denom_norm * doc_lens)
                if posting_idxs.size >= self.CACHE_MIN_POSTING:
                    self.contributions.put(tid, contributions)
            scores[posting_idxs] += contributions
        if self._deleted.any():
            scores[self._deleted] = 0.0
        return scores

    def search(self, query: str, limit: int) -> dict[str, float]:
        """``retrieve`` for any thread: ``{doc_id: score}``, best first (ReMe's scoring and top-k)."""
        return self.scored_search(query, limit).hits

    def scored_search(self, query: str, limit: int) -> QueryScores:
        """``search``'s hits (same scores and order), with the query's self-score (the sum of the IDFs of its
        distinct terms, a term no live document holds at ``unseen_idf``; relevance.py) and every document's score
        for ``score_of``."""
        with self.lock.read():
            n_docs = self.n_docs
            terms = list(dict.fromkeys(t for t in (tok.strip() for tok in self._tokenize(query)) if t))
            ids = [self.vocab[t] for t in terms if t in self.vocab]
            unseen = unseen_idf(n_docs)
            self_score = sum(unseen for t in terms if t not in self.vocab)
            self_score += sum(self._get_idf(tid, n_docs) or unseen for tid in ids) if n_docs else unseen * len(ids)
            if n_docs == 0 or not ids:
                return QueryScores({}, self_score, tuple(ids), None, self.generation)
            scores = self._score_query(ids)
            hits = {self._doc_ids[int(i)]: float(scores[int(i)]) for i in self._top_k(scores, limit)}
            return QueryScores(hits, self_score, tuple(ids), scores, self.generation)

    def score_of(self, searched: QueryScores, doc_id: str) -> float:
        """The BM25 score of ``doc_id`` for ``searched``'s query: from its search while the index is unchanged, else
        scored now (0 for a document the index does not hold)."""
        if searched.scores is None:
            return 0.0
        with self.lock.read():
            idx = self._doc_id_to_idx.get(doc_id)
            if idx is None:
                return 0.0
            if searched.generation == self.generation:
                return float(searched.scores[idx])
            return float(self._score_query(list(searched.query_ids), np.array([idx], dtype=np.int32))[0])

    # -- persistence, driven by the store -----------------------------------------------------------------------

    async def load(self) -> None:
        """Nothing: the ProcedureFileStore restores this index from its own snapshot."""

    async def dump(self) -> None:
        """Nothing: the ProcedureFileStore persists this index in its own snapshot and log."""

    def snapshot(self) -> dict[str, np.ndarray]:
        """The whole index as arrays (copies: consistent even if the index changes afterwards)."""
        with self.lock.read():
            tids = sorted(self._posting_doc_idxs)
            empty = np.zeros(0, dtype=np.int32)
            meta = {
                "format": BM25_FORMAT,
                "tokenizer_fingerprint": self._tokenizer_fingerprint(),
                "k1": self.k1,
                "b": self.b,
                "vocab": sorted(self.vocab, key=self.vocab.__getitem__),
                "doc_ids": self._doc_ids,
            }
            return {
                "meta": np.frombuffer(json.dumps(meta, ensure_ascii=False).encode("utf-8"), dtype=np.uint8),
                "doc_lens": self._doc_lens.copy(),
                "deleted": self._deleted.copy(),
                "posting_tids": np.array(tids, dtype=np.int64),
                "posting_sizes": np.array([self._posting_doc_idxs[t].size for t in tids], dtype=np.int64),
                "posting_idxs": np.concatenate([self._posting_doc_idxs[t] for t in tids]) if tids else empty,
                "posting_tfs": np.concatenate([self._posting_tfs[t] for t in tids]) if tids else empty,
            }

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        """Replace the index with a ``snapshot``'s arrays (as written and read back by the store's view state;
        ``restore`` keeps them, it does not copy them); raises ValueError when they were written under another
        tokenizer configuration or format (the caller then rebuilds)."""
        meta = json.loads(bytes(arrays["meta"]).decode("utf-8"))
        if meta.get("format") != BM25_FORMAT or meta.get("tokenizer_fingerprint") != self._tokenizer_fingerprint():
            raise ValueError("the BM25 snapshot was written by another format or tokenizer configuration")
        ends = np.cumsum(arrays["posting_sizes"])
        idxs = np.split(arrays["posting_idxs"], ends[:-1]) if ends.size else []
        tfs = np.split(arrays["posting_tfs"], ends[:-1]) if ends.size else []
        doc_ids = [sys.intern(doc_id) for doc_id in meta["doc_ids"]]  # the store's chunk ids: one object each
        deleted = arrays["deleted"]
        with self._mutation():
            self.vocab = {token: tid for tid, token in enumerate(meta["vocab"])}
            self._doc_ids = doc_ids
            self._doc_lens, self._deleted = arrays["doc_lens"], deleted
            self._doc_id_to_idx = {doc_ids[i]: i for i in np.flatnonzero(~deleted).tolist()}
            self._total_len = int(self._doc_lens[~deleted].sum())
            self._doc_token_ids = []
            self._posting_doc_idxs = dict(zip(arrays["posting_tids"].tolist(), idxs))
            self._posting_tfs = dict(zip(arrays["posting_tids"].tolist(), tfs))
            self.k1, self.b = meta["k1"], meta["b"]
            self._idf_cache, self._capacity = {}, {}
            self._lens_capacity = self._deleted_capacity = None
