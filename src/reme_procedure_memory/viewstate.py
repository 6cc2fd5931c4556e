"""The on-disk state of one view: a snapshot (records, vectors, BM25) and an append-only log of later changes.

Layout of ``<metadata>/file_store/<store>_<version>.view/`` (``g`` is the snapshot's generation):

    MANIFEST.json             which generation is current: {"format", "generation", "records", "chunks",
                              "dimensions", "vector_space", "log_entries_at_write"}
    <g>.records.jsonl.zst     one file per line: {"node": FileNode, "chunks": [FileChunk without embedding]}
    <g>.vectors.npz           the vector index (``VectorMatrix.export``: ids, float16 rows, int8 codes, bounds)
    <g>.bm25.npz              the keyword index (``ProcedureBM25Index.save``)
    <g>.log                   the changes since snapshot ``g``: entries ``[u32 length][u32 crc32][JSON]``

Contract, so that a kill at any point leaves a state that start-up either loads exactly or rejects (the view is then
rebuilt from the experience files, which are the truth):

* a snapshot's files are written under temporary names, flushed to disk and renamed, then ``MANIFEST.json`` is
  replaced atomically to name the new generation; older generations are removed only after that, and leftovers of an
  interrupted write are removed at the next read;
* log entries are appended after the change they record happened in memory; each carries its length and CRC-32, so a
  torn tail is detected, dropped and cut off (the changes it held are re-applied from the experience files by the
  component's reconciliation, which compares every file's version with the indexed one);
* ``read`` raises ``ViewStateError`` for anything inconsistent (missing file, wrong counts or dimensions, unreadable
  content); the caller discards the whole state.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator
from uuid import uuid4

import numpy as np
import zstandard

from .store import fsync_dir

FORMAT = 2
MANIFEST = "MANIFEST.json"
_HEADER = struct.Struct("<II")  # payload length, crc32


class ViewStateError(RuntimeError):
    """The persisted view state is missing a part or inconsistent: discard it and rebuild the view."""


class ViewState:
    """Snapshot + log files of one view in ``directory`` (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.generation = 0  # 0: no snapshot yet
        self.log_entries = 0  # entries in the current generation's log

    def _path(self, kind: str, generation: int | None = None) -> Path:
        return self.directory / f"{self.generation if generation is None else generation}.{kind}"

    # -- reading ----------------------------------------------------------------------------------------------------

    def read(self) -> tuple[dict, Iterator[dict], dict[str, np.ndarray], Path, list[dict]] | None:
        """``(manifest, records, vector index arrays, bm25 file, log entries)`` of the current snapshot, or None when
        there is none. ``records`` is read while it is iterated (so no list of them is ever held); it too raises
        ViewStateError, at the end, when their number is not the manifest's. Raises ViewStateError when the state is
        inconsistent."""
        manifest_path = self.directory / MANIFEST
        if not manifest_path.is_file():
            self.generation, self.log_entries = 0, 0
            return None
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            if manifest.get("format") != FORMAT:
                raise ViewStateError(f"{manifest_path}: unknown format {manifest.get('format')!r}")
            self.generation = int(manifest["generation"])
            self._remove_other_generations()
            if not self._path("records.jsonl.zst").is_file():
                raise ViewStateError(f"{self._path('records.jsonl.zst')} is missing")
            records = self._records(manifest)
            with np.load(self._path("vectors.npz"), allow_pickle=False) as data:
                vectors = {name: data[name] for name in data.files}
            bm25 = self._path("bm25.npz")
            if vectors["vectors"].shape[1:] != (manifest["dimensions"],):
                raise ViewStateError(f"{self.directory}: vectors of shape {vectors['vectors'].shape} do not match")
            if not bm25.is_file():
                raise ViewStateError(f"{bm25} is missing")
            entries = self._read_log()
        except ViewStateError:
            raise
        except Exception as exc:  # unreadable JSON, zstd, npy ...: the same answer
            raise ViewStateError(f"{self.directory}: {type(exc).__name__}: {exc}") from exc
        return manifest, records, vectors, bm25, entries

    def _records(self, manifest: dict) -> Iterator[dict]:
        records = chunks = 0
        try:
            with open(self._path("records.jsonl.zst"), "rb") as raw:
                with zstandard.ZstdDecompressor().stream_reader(raw) as reader:
                    for line in io.TextIOWrapper(reader, encoding="utf-8"):
                        if line.strip():
                            record = json.loads(line)
                            records, chunks = records + 1, chunks + len(record["chunks"])
                            yield record
        except Exception as exc:  # unreadable JSON or zstd
            raise ViewStateError(f"{self.directory}: {type(exc).__name__}: {exc}") from exc
        if records != manifest["records"] or chunks != manifest["chunks"]:
            raise ViewStateError(f"{self.directory}: {records} records, the manifest says {manifest['records']}")

    def _read_log(self) -> list[dict]:
        """The log's valid entries; a torn or corrupt tail is cut off the file."""
        path = self._path("log")
        entries: list[dict] = []
        if not path.is_file():
            self.log_entries = 0
            return entries
        data = path.read_bytes()
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, crc = _HEADER.unpack_from(data, offset)
            payload = data[offset + _HEADER.size: offset + _HEADER.size + length]
            if len(payload) != length or zlib.crc32(payload) != crc:
                break
            entries.append(json.loads(payload))
            offset += _HEADER.size + length
        if offset != len(data):
            with open(path, "r+b") as handle:
                handle.truncate(offset)
        self.log_entries = len(entries)
        return entries

    def _remove_other_generations(self) -> None:
        """Files of other generations (an interrupted snapshot or cleanup) and temporary files."""
        current = f"{self.generation}."
        for path in self.directory.iterdir():
            if path.name != MANIFEST and not path.name.startswith(current):
                path.unlink(missing_ok=True)

    # -- writing ----------------------------------------------------------------------------------------------------

    def append(self, entries: list[dict]) -> None:
        """Append entries to the current generation's log (needs a snapshot)."""
        if not entries:
            return
        if self.generation == 0:
            raise ViewStateError("no snapshot to append to")
        out = bytearray()
        for entry in entries:
            payload = json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            out += _HEADER.pack(len(payload), zlib.crc32(payload)) + payload
        with open(self._path("log"), "ab") as handle:
            handle.write(out)
        self.log_entries += len(entries)

    def _publish(self, target: Path, write: Callable[[Any], None]) -> None:
        """Write ``target`` through ``write(binary file)`` under a temporary name, flush it to disk, rename it."""
        tmp = target.with_name(f".{target.name}.{uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as handle:
                write(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)

    def write_snapshot(self, records: list[dict], vectors: dict[str, np.ndarray], save_bm25: Callable[[Any], None],
                       meta: dict) -> None:
        """Make ``records`` + the vector index arrays + the BM25 index (written by ``save_bm25(file)``) the new
        generation."""
        self.directory.mkdir(parents=True, exist_ok=True)
        generation = self.generation + 1

        def write_records(handle) -> None:
            with zstandard.ZstdCompressor(level=1).stream_writer(handle, closefd=False) as writer:
                for record in records:
                    writer.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
                    writer.write(b"\n")

        self._publish(self._path("records.jsonl.zst", generation), write_records)
        self._publish(self._path("vectors.npz", generation), lambda h: np.savez(h, **vectors))
        self._publish(self._path("bm25.npz", generation), lambda h: save_bm25(h))
        manifest = {**meta, "format": FORMAT, "generation": generation, "records": len(records),
                    "chunks": sum(len(r["chunks"]) for r in records), "dimensions": int(vectors["vectors"].shape[1])}
        self._publish(self.directory / MANIFEST, lambda h: h.write(json.dumps(manifest, indent=1).encode()))
        fsync_dir(self.directory)
        self.generation, self.log_entries = generation, 0
        self._remove_other_generations()

    def remove(self) -> None:
        """Delete the whole state (after ``read`` rejected it, or on clear)."""
        shutil.rmtree(self.directory, ignore_errors=True)
        self.generation, self.log_entries = 0, 0
