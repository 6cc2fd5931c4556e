"""The on-disk state of one view: a snapshot (records, vectors, BM25) and an append-only log of later changes.

Layout of ``<metadata>/file_store/<store>_<version>.view/`` (``g`` is the snapshot's generation), format 3:

    MANIFEST.json             which generation is current, and the size and CRC-32 of each of its parts: {"format",
                              "generation", "records", "chunks", "dimensions", "vector_space", "parts": {name:
                              {"bytes", "crc32"}}}
    <g>.records.json.zst      the records as columns (records.RecordColumns: one JSON list per field), one zstd
                              frame with its content checksum
    <g>.vectors.<array>.npy   the vector index, one plain ``.npy`` per array of ``VectorMatrix.export``
    <g>.bm25.<array>.npy      the keyword index, one ``.npy`` per array of ``ProcedureBM25Index.snapshot``
    <g>.log                   the changes since snapshot ``g``: entries ``[u32 length][u32 crc32][JSON]``; an
                              upsert names the vector space of its inline vectors (``vector_space``)

A manifest of another format (earlier ones were written only by unreleased development builds) is not read: the
view is rebuilt from the experience files.

Contract, so that a kill at any point leaves a state that start-up either loads exactly or rejects (the view is then
rebuilt from the experience files, which are the truth):

* a snapshot's files are written under temporary names, flushed to disk and renamed, then ``MANIFEST.json`` is
  replaced atomically to name the new generation (and each part's size and CRC-32); older generations are removed
  only after that, and leftovers of an interrupted write are removed at the next read;
* log entries are appended after the change they record happened in memory; each carries its length and CRC-32, so a
  torn tail is detected, dropped and cut off (the changes it held are re-applied from the experience files by the
  component's reconciliation, which compares every file's version with the indexed one);
* ``read`` raises ``ViewStateError`` for anything inconsistent (a missing part, a part whose size or CRC-32 is not the
  manifest's, wrong counts or dimensions, unreadable content); the caller discards the whole state. The parts' bytes
  are checked before anything is built from them, so the loader may trust their content (no per-record validation).
"""

from __future__ import annotations

import io
import json
import mmap
import os
import shutil
import struct
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import zstandard

from ...errors import StorageError, ViewStateError
from ...storage import atomic
from ...storage.format import VIEW_MANIFEST as MANIFEST, VIEW_STATE_FORMAT
from .record_codec import gc_paused

RECORDS = "records.json.zst"
_HEADER = struct.Struct("<II")  # payload length, crc32
_CRC_CHUNK = 1 << 24  # bytes checksummed per call (zlib releases the GIL for each)
_MAX_NPY_HEADER = 1 << 17  # the magic, header length and header of a .npy file fit in this


def _read_part(path: Path, size: int, crc: int) -> bytearray:
    """The bytes of ``path`` (a writable buffer), after checking their number and CRC-32."""
    data = bytearray(size)
    with open(path, "rb") as handle:
        if handle.readinto(data) != size or handle.read(1):
            raise ViewStateError(f"{path} is not {size} bytes long")
    if _crc(memoryview(data)) != crc:
        raise ViewStateError(f"{path} is damaged (CRC-32 mismatch)")
    return data


def _mapped_part(path: Path, size: int, crc: int) -> mmap.mmap:
    """``path`` mapped read-only (its pages stay the page cache's: no copy), after checking its size and CRC-32."""
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size != size:
            raise ViewStateError(f"{path} is not {size} bytes long")
        if size == 0:
            raise ViewStateError(f"{path} is empty")
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    if _crc(memoryview(mapped)) != crc:
        mapped.close()
        raise ViewStateError(f"{path} is damaged (CRC-32 mismatch)")
    return mapped


def _crc(view: memoryview) -> int:
    check = 0
    for offset in range(0, view.nbytes, _CRC_CHUNK):
        check = zlib.crc32(view[offset : offset + _CRC_CHUNK], check)
    return check


def _array_of(data) -> np.ndarray:
    """The array of ``.npy`` bytes (a bytearray: writable; a read-only map: read-only), sharing their buffer."""
    stream = io.BytesIO(memoryview(data)[:_MAX_NPY_HEADER])
    version = np.lib.format.read_magic(stream)
    if version not in ((1, 0), (2, 0)):  # what ``write_array`` writes for plain arrays
        raise ViewStateError(f"an array part of .npy version {version}")
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read_header(stream)
    if dtype.hasobject or fortran:
        raise ViewStateError("an array part is not a plain C-ordered array")
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(data, dtype=dtype, count=count, offset=stream.tell()).reshape(shape)


class ViewState:
    """Snapshot + log files of one view in ``directory`` (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.generation = 0  # 0: no snapshot yet
        self.log_entries = 0  # entries in the current generation's log

    def part_file(self, kind: str, generation: int | None = None) -> Path:
        """The file of part ``kind`` (``log``, ``records.json.zst``, ...) of generation ``generation`` (default: the
        current one)."""
        return self.directory / f"{self.generation if generation is None else generation}.{kind}"

    # -- reading ----------------------------------------------------------------------------------------------------

    def read(
        self,
    ) -> tuple[dict, dict[str, list], dict[str, np.ndarray], dict[str, np.ndarray] | None, list[dict]] | None:
        """``(manifest, record columns, vector index arrays, BM25 arrays or None when they are damaged, log entries)``
        of the current snapshot, or None when there is none. Raises ViewStateError when the state is inconsistent."""
        manifest_path = self.directory / MANIFEST
        if not manifest_path.is_file():
            self.generation, self.log_entries = 0, 0
            if self.directory.is_dir() and any(p.name[:1].isdigit() for p in self.directory.iterdir()):
                raise ViewStateError(f"{manifest_path} is missing beside the files of a snapshot")
            return None
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            if manifest.get("format") != VIEW_STATE_FORMAT:
                raise ViewStateError(f"{manifest_path}: unknown format {manifest.get('format')!r}")
            self.generation = int(manifest["generation"])
            self._remove_other_generations()
            with gc_paused(collect=True):
                columns, vectors, bm25 = self._read_parts(manifest)
            if len(columns["path"]) != manifest["records"] or len(columns["id"]) != manifest["chunks"]:
                raise ViewStateError(
                    f"{self.directory}: {len(columns['path'])} records, the manifest says {manifest['records']}"
                )
            if vectors["vectors"].shape[1:] != (manifest["dimensions"],):
                raise ViewStateError(f"{self.directory}: vectors of shape {vectors['vectors'].shape} do not match")
            entries = self._read_log()
        except ViewStateError:
            raise
        except Exception as exc:  # unreadable JSON, zstd, npy ...: the same answer
            raise ViewStateError(f"{self.directory}: {type(exc).__name__}: {exc}") from exc
        return manifest, columns, vectors, bm25, entries

    def _read_parts(self, manifest: dict) -> tuple[dict, dict, dict | None]:
        """Format 3: every part checked against the manifest (the arrays in worker threads, while this one parses
        the records: reading and CRC-32 release the GIL). BM25 parts that fail give None (the store re-indexes BM25
        from the files and keeps the records and vectors)."""
        parts = manifest["parts"]
        for name in parts:
            if not name.startswith("bm25.") and not self.part_file(name).is_file():
                raise ViewStateError(f"{self.part_file(name)} is missing")
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="view-load") as pool:
            futures = {name: pool.submit(self._array_part, name, parts[name]) for name in parts if name != RECORDS}
            data = _read_part(self.part_file(RECORDS), parts[RECORDS]["bytes"], parts[RECORDS]["crc32"])
            columns = json.loads(zstandard.ZstdDecompressor().decompressobj().decompress(bytes(data)))
            del data
            vectors = {name.split(".")[1]: futures[name].result() for name in futures if name.startswith("vectors.")}
            try:
                bm25 = {name.split(".")[1]: futures[name].result() for name in futures if name.startswith("bm25.")}
            except ViewStateError:
                bm25 = None
        if "vectors" not in vectors or (bm25 is not None and "meta" not in bm25):
            raise ViewStateError(f"{self.directory}: the manifest lists no vector or BM25 arrays")
        return columns, vectors, bm25

    def _array_part(self, name: str, part: dict) -> np.ndarray:
        """A checked array part: the vector index's read-only from the page cache (``VectorMatrix.restore`` copies
        them into its blocks), BM25's in a writable buffer of their own (the index keeps and grows them)."""
        read = _mapped_part if name.startswith("vectors.") else _read_part
        try:
            return _array_of(read(self.part_file(name), part["bytes"], part["crc32"]))
        except ViewStateError:
            raise
        except Exception as exc:  # missing, unreadable
            raise ViewStateError(f"{self.part_file(name)}: {type(exc).__name__}: {exc}") from exc

    def _read_log(self) -> list[dict]:
        """The log's valid entries; a torn or corrupt tail is cut off the file. An entry is valid when its length
        is not 0 (no entry is empty: zero bytes, whose CRC-32 is 0, are what a power loss may leave), its bytes match
        their CRC-32 and they are a JSON object with an ``op``; the first one that is not starts the tail."""
        path = self.part_file("log")
        entries: list[dict] = []
        if not path.is_file():
            self.log_entries = 0
            return entries
        data = path.read_bytes()
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, crc = _HEADER.unpack_from(data, offset)
            payload = data[offset + _HEADER.size : offset + _HEADER.size + length]
            if not length or len(payload) != length or zlib.crc32(payload) != crc:
                break
            try:
                entry = json.loads(payload)
            except ValueError:  # a payload whose CRC-32 matches by chance
                break
            if not isinstance(entry, dict) or entry.get("op") not in ("upsert", "delete"):
                break
            entries.append(entry)
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
        path = self.part_file("log")
        try:
            with open(path, "ab") as handle:
                handle.write(out)
        except OSError as exc:
            raise StorageError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        self.log_entries += len(entries)

    def _publish(self, target: Path, write: Callable[[Any], None]) -> None:
        """Write ``target`` through ``write(binary file)`` atomically (``storage.atomic.atomic_write``); the renames become
        durable with the directory fsync after the manifest's (all of them are in this directory)."""
        atomic.atomic_write(target, write, sync_dir=False)

    def write_snapshot(
        self, columns: dict[str, list], vectors: dict[str, np.ndarray], bm25: dict[str, np.ndarray], meta: dict
    ) -> None:
        """Make the record ``columns`` (``RecordColumns.encoded()``) + the vector index arrays + the BM25 arrays the new
        generation (format 3)."""
        generation = self.generation + 1
        parts: dict[str, dict] = {}

        def publish(name: str, write: Callable[[Any], None]) -> None:
            def counted(handle) -> None:
                writer = _CrcWriter(handle)
                write(writer)
                parts[name] = {"bytes": writer.size, "crc32": writer.crc}

            self._publish(self.part_file(name, generation), counted)

        def write_records(handle) -> None:
            text = json.dumps(columns, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            handle.write(zstandard.ZstdCompressor(level=1, write_checksum=True).compress(text))

        publish(RECORDS, write_records)
        for prefix, arrays in (("vectors", vectors), ("bm25", bm25)):
            for name, array in arrays.items():
                publish(
                    f"{prefix}.{name}.npy",
                    lambda handle, array=array: np.lib.format.write_array(
                        handle, np.ascontiguousarray(array), allow_pickle=False
                    ),
                )
        manifest = {
            **meta,
            "format": VIEW_STATE_FORMAT,
            "generation": generation,
            "records": len(columns["path"]),
            "chunks": len(columns["id"]),
            "dimensions": int(vectors["vectors"].shape[1]),
            "parts": parts,
        }
        self._publish(self.directory / MANIFEST, lambda h: h.write(json.dumps(manifest, indent=1).encode()))
        try:
            atomic.fsync_dir(self.directory)
        except OSError as exc:
            raise StorageError(exc.errno, exc.strerror or str(exc), str(self.directory / MANIFEST)) from exc
        self.generation, self.log_entries = generation, 0
        self._remove_other_generations()

    def remove(self) -> None:
        """Delete the whole state (after ``read`` rejected it, or on clear)."""
        shutil.rmtree(self.directory, ignore_errors=True)
        self.generation, self.log_entries = 0, 0


class _CrcWriter:
    """A binary file that counts the bytes written to ``handle`` through it and their CRC-32."""

    def __init__(self, handle) -> None:
        self.handle, self.size, self.crc = handle, 0, 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.size += view.nbytes
        self.crc = zlib.crc32(view, self.crc)
        return self.handle.write(view)
