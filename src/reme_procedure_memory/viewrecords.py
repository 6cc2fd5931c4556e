"""A view's records as persisted: the JSON of a file node and its chunks, and back.

Contract: pure functions. ``persisted_record`` is what the snapshot and the log hold of one file (each chunk without
its embedding and scores; its vector as base64 little-endian float16 when ``inline``, else whether it has one);
``chunk_of``/``files_of`` read that back (an inline vector becomes the chunk's embedding, a view of the decoded
bytes). Every chunk made here is ``slim``: it shares one pydantic fields set and an interned view name.
``text_digest`` is what a record keeps of its text (the experience file holds the text itself).
"""

from __future__ import annotations

import base64
import hashlib
import sys
from typing import Callable

import numpy as np
from reme.schema import FileChunk, FileNode

# Every chunk shares one "fields set" (pydantic's record of which fields were given: here, all of them), instead of
# one 728-byte set each (150 MB at 100,000 experiences in two views). Pydantic only ever adds field names to it.
_ALL_CHUNK_FIELDS = set(FileChunk.model_fields)


def text_digest(text: str) -> str:
    """What a record keeps of its text (the experience file holds the text itself)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def slim(chunk: FileChunk) -> FileChunk:
    """A chunk with the shared fields set and its view name interned (the same few strings for all chunks)."""
    object.__setattr__(chunk, "__pydantic_fields_set__", _ALL_CHUNK_FIELDS)
    if isinstance(chunk.metadata.get("view"), str):
        chunk.metadata["view"] = sys.intern(chunk.metadata["view"])
    return chunk


def persisted_record(node: FileNode, chunks: list[FileChunk], has_vector: Callable[[object], bool],
                     inline: bool = True) -> dict:
    """A file's node and chunks as persisted (JSON): each chunk's vector as base64 float16 when ``inline``, else
    whether it has one (the snapshot keeps vectors in its own array); None/False: no vector."""
    dumped_chunks = []
    for chunk in chunks:
        dumped = chunk.model_dump(mode="json", exclude={"embedding", "scores"})
        vector = has_vector(chunk.embedding)
        if inline and vector:
            dumped["vector"] = base64.b64encode(np.asarray(chunk.embedding, dtype="<f2").tobytes()).decode()
        else:
            dumped["vector"] = vector if not inline else None
        dumped_chunks.append(dumped)
    return {"node": node.model_dump(mode="json"), "chunks": dumped_chunks}


def chunk_of(dumped: dict) -> FileChunk:
    """A persisted chunk (see ``persisted_record``): an inline vector (log entries) becomes its embedding, a view of
    the decoded bytes (the store copies it into its matrix); snapshot chunks get theirs from the restored matrix."""
    dumped = dict(dumped)
    encoded = dumped.pop("vector", None)
    chunk = slim(FileChunk.model_validate(dumped))
    if isinstance(encoded, str):
        chunk.embedding = np.frombuffer(base64.b64decode(encoded), dtype="<f2")
    return chunk


def files_of(records: list[dict]) -> list[tuple[FileNode, list[FileChunk]]]:
    """Persisted records as upsert arguments."""
    return [(FileNode.model_validate(r["node"]), [chunk_of(c) for c in r["chunks"]]) for r in records]
