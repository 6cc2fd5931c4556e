"""The view snapshot's format 3 (columns + .npy parts with CRCs): what is dumped loads back identically, every damaged
or torn part is detected, a snapshot of another format is not read (the view is rebuilt from the files), and ReMe's
filtered vector search still works with the vectors held by the matrix only."""

import json
import shutil
import zlib
from types import SimpleNamespace

import numpy as np
import pytest
import zstandard
from reme.components.file_store.local_file_store import LocalFileStore

from conftest import memory_of
from helpers.corpus import corpus, write_corpus
from helpers.views import create_some, view_content, view_dirs


def records_of(app) -> dict:
    """Every record of every view as the log persists it (node, chunks, each vector as base64 float16)."""
    return {
        view: {path: store._record(path) for path in store.file_graph.paths()}
        for view, store in memory_of(app).workspace.views.stores.items()
    }


async def test_a_dump_and_load_gives_back_the_same_records_vectors_and_bm25_answers(make_app, tmp_path):
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        await create_some(app, 6)
        for store in memory_of(app).workspace.views.stores.values():
            store._snapshot_due = True  # closing writes a snapshot holding everything (no log)
        records, content = records_of(app), view_content(app)
    assert all(json.loads((d / "MANIFEST.json").read_text())["format"] == 3 for d in view_dirs(ws))
    assert not [p for d in view_dirs(ws) for p in d.glob("*.log")]
    async with make_app(workspace=ws) as app:
        assert records_of(app) == records  # nodes, chunks (metadata, digests) and the vectors' bytes
        assert view_content(app) == content  # versions, vector flags, every BM25 and cosine score
        assert memory_of(app).embedding_store.as_embedding.model.calls == []


def flip_byte(path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0x01
    path.write_bytes(bytes(data))


async def test_every_damaged_or_torn_part_is_detected(make_app, tmp_path):
    from reme_procedure_memory.errors import ViewStateError
    from reme_procedure_memory.search.view_store.state import ViewState

    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws):
        pass
    source = view_dirs(ws)[0]
    manifest = json.loads((source / "MANIFEST.json").read_text())
    assert ViewState(source).read()[3] is not None  # the sound state loads, BM25 included
    for name in manifest["parts"]:
        for damage in ("flip-start", "flip-middle", "flip-end", "torn"):
            copy = tmp_path / f"copy-{name}-{damage}"
            shutil.copytree(source, copy)
            part = copy / f"{manifest['generation']}.{name}"
            if damage == "torn":
                part.write_bytes(part.read_bytes()[:-1])
            else:
                flip_byte(part, {"flip-start": 0.0, "flip-middle": 0.5, "flip-end": 0.999}[damage])
            if name.startswith("bm25."):  # records and vectors are kept; BM25 is re-indexed from the files
                assert ViewState(copy).read()[3] is None, (name, damage)
            else:
                with pytest.raises(ViewStateError):
                    ViewState(copy).read()


async def test_a_damaged_column_is_rejected_even_with_a_matching_checksum(make_app, tmp_path):
    """The columns are checked against each other and the manifest: a records part rewritten with a column one
    entry short (its CRC updated) is still rejected, and the view is rebuilt from the files."""
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        expected = view_content(app)
    from reme_procedure_memory.search.view_store.record_codec import restore_columns
    from reme_procedure_memory.search.view_store.state import ViewState

    for d in view_dirs(ws):
        manifest = json.loads((d / "MANIFEST.json").read_text())
        part = d / f"{manifest['generation']}.records.json.zst"
        columns = json.loads(zstandard.ZstdDecompressor().decompressobj().decompress(part.read_bytes()))
        columns["st_mtime"].pop()
        data = zstandard.ZstdCompressor(write_checksum=True).compress(json.dumps(columns).encode())
        part.write_bytes(data)
        manifest["parts"]["records.json.zst"] = {"bytes": len(data), "crc32": zlib.crc32(data)}
        (d / "MANIFEST.json").write_text(json.dumps(manifest))
        with pytest.raises(ValueError, match="columns"):
            restore_columns(ViewState(d).read()[1])
    async with make_app(workspace=ws) as app:  # discarded and rebuilt from the files
        assert view_content(app) == expected


async def test_a_snapshot_of_another_format_is_not_read_and_the_view_is_rebuilt_from_the_files(make_app, tmp_path):
    """Format 3 is the only one read (earlier ones were written only by unreleased development builds): a manifest
    of another format is refused by name, and the view is rebuilt from the experience files."""
    from reme_procedure_memory.errors import ViewStateError
    from reme_procedure_memory.search.view_store.state import ViewState

    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        await create_some(app, 4)
        content = view_content(app)
    for d in view_dirs(ws):
        manifest = json.loads((d / "MANIFEST.json").read_text())
        (d / "MANIFEST.json").write_text(json.dumps({**manifest, "format": 2}))
        with pytest.raises(ViewStateError, match="unknown format 2"):
            ViewState(d).read()
    async with make_app(workspace=ws) as app:
        assert view_content(app) == content
    assert all(json.loads((d / "MANIFEST.json").read_text())["format"] == 3 for d in view_dirs(ws))


async def test_filtered_vector_search_reads_the_matrix_and_answers_like_reme_stock_scan(make_app, tmp_path):
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        for store in memory_of(app).workspace.views.stores.values():
            assert all(chunk.embedding is None for chunk in store.file_chunks.values())  # the matrix holds them
            # ReMe's own stock scan, run on copies of the chunks that carry their vectors
            shim = SimpleNamespace(
                file_chunks={
                    cid: c.model_copy(update={"embedding": np.array(store.vector_of(cid))})
                    for cid, c in store.file_chunks.items()
                },
                _get_query_embedding=store._get_query_embedding,
                _prepare_search_filter=store._prepare_search_filter,
                _embedding_dim_matches=store._embedding_dim_matches,
            )
            paths = sorted(c.path for c in store.file_chunks.values())
            for _, _, query in corpus()[:4]:
                for search_filter in ({"path_prefix": "procedures/"}, {"paths": paths[::2]}):
                    ours = await store.vector_search(query, 5, search_filter)
                    stock = await LocalFileStore.vector_search(shim, query, 5, search_filter)
                    assert [(c.id, c.scores) for c in ours] == [(c.id, c.scores) for c in stock] and ours
                    assert all(np.array_equal(c.embedding, s.embedding) for c, s in zip(ours, stock))
