"""A view's records as persisted: the JSON of a file node and its chunks (log entries), their columns (snapshots),
and back.

Contract: pure functions. ``persisted_record`` is what the log holds of one file (each chunk without its embedding and
scores; its vector as base64 little-endian float16 when ``inline``, else whether it has one); ``chunk_of``/``files_of``
read that back (an inline vector becomes the chunk's embedding, a view of the decoded bytes). ``RecordColumns`` turns
such records (``inline=False``) into the columns a snapshot holds (one list per field: one ``json.loads`` per column
instead of one per record), and ``restore_columns`` builds the chunks and packed graph nodes straight from them,
without pydantic validation (the snapshot is our own data, protected by a checksum; see state.py). Every chunk
made here is ``slim``: it shares one pydantic fields set, its repeated metadata strings (view, tokenizer) are interned
and its id is ``sys.intern``-ed, so the store, its graph, BM25 and the vector matrix share one string object per id.
``text_digest`` is what a record keeps of its text (the experience file holds the text itself).
"""

from __future__ import annotations

import base64
import gc
import hashlib
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import numpy as np
from reme.schema import FileChunk, FileLink, FileNode

from .graph import ProcedureFileGraph

# Every chunk shares one "fields set" (pydantic's record of which fields were given: here, all of them), instead of
# one 728-byte set each (150 MB at 100,000 experiences in two views). Pydantic only ever adds field names to it.
_ALL_CHUNK_FIELDS = set(FileChunk.model_fields)
_SHARED_METADATA = ("view", "tokenizer")  # the same few strings in every record of a view
_NODE_COLUMNS = ("path", "st_mtime", "links", "front_matter", "chunks")
_CHUNK_COLUMNS = ("id", "text", "chunk_path", "start_line", "end_line", "metadata", "vector")


@contextmanager
def gc_paused(collect: bool = False) -> Iterator[None]:
    """Automatic cyclic garbage collection off while a snapshot's objects are parsed and built, and those objects
    (and the rest of the process's at that moment) moved out of the collector's reach afterwards (``gc.freeze``).
    They are about a million containers per view, alive as long as the view: without this, the full collections their
    allocation triggers, and every later one, would traverse all of them (about half the load time, and again after
    it). They form no reference cycles, so refcounting still frees them when the view drops them. ``collect``: first
    collect what is garbage now, so that no garbage is frozen with them (cheap: what earlier loads froze is not
    traversed). Collection is process-wide: switched back on if it was on."""
    enabled = gc.isenabled()
    if collect:
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def text_digest(text: str) -> str:
    """What a record keeps of its text (the experience file holds the text itself)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _share_metadata(metadata: dict) -> None:
    for key in _SHARED_METADATA:
        if isinstance(metadata.get(key), str):
            metadata[key] = sys.intern(metadata[key])


def slim(chunk: FileChunk) -> FileChunk:
    """A chunk with the shared fields set and its repeated metadata strings interned."""
    object.__setattr__(chunk, "__pydantic_fields_set__", _ALL_CHUNK_FIELDS)
    _share_metadata(chunk.metadata)
    return chunk


def persisted_record(
    node: FileNode, chunks: list[FileChunk], vector_of: Callable[[FileChunk], object], inline: bool = True
) -> dict:
    """A file's node and chunks as persisted (JSON): each chunk's vector (``vector_of(chunk)``, None when it has
    none) as base64 float16 when ``inline``, else whether it has one (the snapshot keeps vectors in its own array)."""
    dumped_chunks = []
    for chunk in chunks:
        dumped = chunk.model_dump(mode="json", exclude={"embedding", "scores"})
        vector = vector_of(chunk)
        if inline and vector is not None:
            dumped["vector"] = base64.b64encode(np.asarray(vector, dtype="<f2").tobytes()).decode()
        else:
            dumped["vector"] = vector is not None if not inline else None
        dumped_chunks.append(dumped)
    return {"node": node.model_dump(mode="json"), "chunks": dumped_chunks}


def chunk_of(dumped: dict, vector: bool = True) -> FileChunk:
    """A persisted chunk (see ``persisted_record``): an inline vector (log entries) becomes its embedding, a view of
    the decoded bytes (the store copies it into its matrix); ``vector=False`` drops it (another vector space)."""
    dumped = dict(dumped)
    encoded = dumped.pop("vector", None)
    chunk = slim(FileChunk.model_validate(dumped))
    chunk.id = sys.intern(chunk.id)
    if vector and isinstance(encoded, str):
        chunk.embedding = np.frombuffer(base64.b64decode(encoded), dtype="<f2")
    return chunk


def files_of(records: list[dict], vectors: bool = True) -> list[tuple[FileNode, list[FileChunk]]]:
    """Persisted records as upsert arguments (``vectors=False``: without their vectors)."""
    return [(FileNode.model_validate(r["node"]), [chunk_of(c, vectors) for c in r["chunks"]]) for r in records]


def _encode_metadata(rows: list[dict]) -> dict:
    """Chunk metadata dicts as columns when they all have the same keys in the same order (``{"keys", "columns"}``,
    a column of few distinct strings as ``{"distinct", "index"}``), else as they are (``{"rows"}``)."""
    keys = list(rows[0]) if rows else []
    if any(len(row) != len(keys) or list(row) != keys for row in rows):
        return {"rows": rows}
    columns = {}
    for key in keys:
        values = [row[key] for row in rows]
        distinct = list(dict.fromkeys(values)) if all(isinstance(v, str) for v in values) else None
        if distinct is not None and len(distinct) <= max(1, len(values) // 8):
            number = {value: i for i, value in enumerate(distinct)}
            columns[key] = {"distinct": distinct, "index": [number[v] for v in values]}
        else:
            columns[key] = values
    return {"keys": keys, "columns": columns}


def _decode_metadata(encoded: dict, count: int) -> list[dict]:
    """``_encode_metadata``'s rows back (``count`` of them); repeated strings are one object each."""
    if "rows" in encoded:
        for row in encoded["rows"]:
            _share_metadata(row)
        return encoded["rows"]
    keys, columns = encoded["keys"], []
    for key in keys:
        column = encoded["columns"][key]
        if isinstance(column, dict):
            distinct = [sys.intern(v) for v in column["distinct"]]
            column = [distinct[i] for i in column["index"]]
        columns.append(column)
    if any(len(column) != count for column in columns):
        raise ValueError("the metadata columns do not fit together")
    return [dict(zip(keys, row)) for row in zip(*columns)] if keys else [{} for _ in range(count)]


class RecordColumns:
    """Persisted records (``persisted_record(..., inline=False)``), added one at a time, as a snapshot's columns
    (``encoded()``): per file ``path``, ``st_mtime``, ``links``, ``front_matter``, ``chunks`` (its number of chunks);
    per chunk, in file order, ``id``, ``text``, ``chunk_path`` (None: the file's path), ``start_line``, ``end_line``,
    ``metadata`` (by key, see ``_encode_metadata``), ``vector`` (whether it has one)."""

    def __init__(self) -> None:
        self.columns: dict[str, list] = {name: [] for name in (*_NODE_COLUMNS, *_CHUNK_COLUMNS)}

    def encoded(self) -> dict:
        """The columns as written (JSON-ready)."""
        return {**self.columns, "metadata": _encode_metadata(self.columns["metadata"])}

    def add(self, record: dict) -> None:
        columns, node = self.columns, record["node"]
        columns["path"].append(node["path"])
        columns["st_mtime"].append(node["st_mtime"])
        columns["links"].append(node.get("links") or [])
        columns["front_matter"].append(node.get("front_matter") or {})
        columns["chunks"].append(len(record["chunks"]))
        if [c["id"] for c in record["chunks"]] != list(node.get("chunk_ids") or []):
            raise ValueError(f"record {node['path']!r}: its node does not list its chunks")
        for chunk in record["chunks"]:
            unknown = set(chunk) - {"id", "text", "path", "start_line", "end_line", "metadata", "vector"}
            if unknown:
                raise ValueError(f"record {node['path']!r}: chunk fields {sorted(unknown)} have no column")
            columns["id"].append(chunk["id"])
            columns["text"].append(chunk.get("text", ""))
            columns["chunk_path"].append(None if chunk.get("path") == node["path"] else chunk.get("path", ""))
            columns["start_line"].append(chunk.get("start_line", 0))
            columns["end_line"].append(chunk.get("end_line", 0))
            columns["metadata"].append(chunk.get("metadata") or {})
            columns["vector"].append(bool(chunk.get("vector")))

    def extend(self, records: Iterable[dict]) -> RecordColumns:
        for record in records:
            self.add(record)
        return self


def restore_columns(columns: dict[str, list]) -> tuple[dict[str, tuple], list[FileChunk], set[str]]:
    """``(packed graph nodes by path, chunks, ids of the chunks that have a vector)`` from a snapshot's columns
    (see ``RecordColumns``); raises ValueError when the columns do not fit together."""
    with gc_paused():
        return _restore_columns(columns)


def _restore_columns(columns: dict[str, list]) -> tuple[dict[str, tuple], list[FileChunk], set[str]]:
    files, n = len(columns["path"]), len(columns["id"])
    columns = {**columns, "metadata": _decode_metadata(columns["metadata"], n)}
    if (
        any(len(columns[name]) != files for name in _NODE_COLUMNS)
        or any(len(columns[name]) != n for name in _CHUNK_COLUMNS)
        or sum(columns["chunks"]) != n
    ):
        raise ValueError("the record columns do not fit together")
    intern, new, set_attr = sys.intern, FileChunk.__new__, object.__setattr__
    ids = [intern(i) for i in columns["id"]]
    paths = [intern(p) for p in columns["path"]]  # also the key of the file's chunks' records elsewhere
    chunk_paths = []
    for count, path in zip(columns["chunks"], paths):
        chunk_paths.extend([path] * count)
    chunk_paths = [own if own is not None else path for own, path in zip(columns["chunk_path"], chunk_paths)]
    chunks = []
    for cid, text, path, start, end, metadata in zip(
        ids, columns["text"], chunk_paths, columns["start_line"], columns["end_line"], columns["metadata"]
    ):
        chunk = new(FileChunk)  # FileChunk.model_construct without its per-field Python loop
        set_attr(
            chunk,
            "__dict__",
            {
                "id": cid,
                "text": text,
                "embedding": None,
                "metadata": metadata,
                "path": path,
                "start_line": start,
                "end_line": end,
                "scores": {},
            },
        )
        set_attr(chunk, "__pydantic_fields_set__", _ALL_CHUNK_FIELDS)
        set_attr(chunk, "__pydantic_extra__", None)
        set_attr(chunk, "__pydantic_private__", None)
        chunks.append(chunk)
    nodes, start = {}, 0
    for path, mtime, links, front, count in zip(
        paths, columns["st_mtime"], columns["links"], columns["front_matter"], columns["chunks"]
    ):
        links = tuple(FileLink.model_validate(link) for link in links) if links else ()
        nodes[path] = ProcedureFileGraph.packed(mtime, tuple(ids[start : start + count]), front, links)
        start += count
    flagged = {cid for cid, vector in zip(ids, columns["vector"]) if vector}
    return nodes, chunks, flagged
