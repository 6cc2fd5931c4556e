"""The plugin's BM25 backend against ReMe's stock bm25, and the views' incremental, crash-detectable persistence."""

import json
import os
import random
import shutil

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from reme.components.keyword_index.bm25_index import BM25Index
from reme_procedure_memory.search.keyword.bm25 import ProcedureBM25Index

from conftest import memory_of, run_job
from helpers import TESTS
from helpers.corpus import corpus, write_corpus
from helpers.views import create_some, search_all, view_content, view_dirs

STOCK_AND_OURS = {
    "keyword_index": {
        "stock": {"backend": "bm25", "tokenizer": "procedure"},
        "ours": {"backend": "procedure_bm25", "tokenizer": "procedure"},
        "restored": {"backend": "procedure_bm25", "tokenizer": "procedure"},
    }
}


def same_up_to_ties(got: dict, expected: dict, scores_of_all: dict) -> None:
    """The same scores in the same order, the same ids for every score but the last one of the page, and for that
    one ids that truly have it: the two top-ks differ only in which of equal scores come first (ours by slot)."""
    assert list(got.values()) == list(expected.values())
    last = list(expected.values())[-1] if expected else None
    groups = lambda ranked: {s: {i for i, v in ranked.items() if v == s} for s in ranked.values() if s != last}  # noqa: E731
    assert groups(got) == groups(expected)
    assert all(scores_of_all[i] == v for i, v in got.items())


async def same_rankings(stock, ours, queries, limit=12):
    for query in queries:
        expected = await stock.retrieve(query, limit)
        everything = await stock.retrieve(query, 10_000)
        same_up_to_ties(ours.search(query, limit), expected, everything)
        same_up_to_ties(await ours.retrieve(query, limit), expected, everything)


async def test_bm25_backend_ranks_like_reme_bm25_up_to_equal_scores_through_adds_deletes_updates_compaction_and_restore(
    make_app, tmp_path, monkeypatch
):
    monkeypatch.setattr(ProcedureBM25Index, "CACHE_MIN_POSTING", 1)  # every posting list goes through the cache
    texts = {f"d{i}": f"{r['when-to-use']}\n\n{r['content']}" for i, (_, r, _) in enumerate(corpus())}
    queries = [q for _, _, q in corpus()][:20] + ["restart the failed deployment", "部署 失败", "zzz-unknown"]
    rng = random.Random(3)
    async with make_app(components=STOCK_AND_OURS) as app:
        indexes = app.context.components["keyword_index"]
        stock, ours, restored = indexes["stock"], indexes["ours"], indexes["restored"]
        ids = list(texts)
        for start in range(0, len(ids), 7):  # many small batches: the growable arrays grow many times
            batch = {i: texts[i] for i in ids[start : start + 7]}
            await stock.add_docs(batch)
            await ours.add_docs(batch)
        await same_rankings(stock, ours, queries)
        gone = rng.sample(ids, 10)
        await stock.delete_docs(gone)
        await ours.delete_docs(gone)
        for doc_id in rng.sample([i for i in ids if i not in gone], 10):  # updates retire and re-add a slot
            text = texts[doc_id] + " restart rollback deployment " + doc_id
            await stock.add_docs({doc_id: text})
            await ours.add_docs({doc_id: text})
        await same_rankings(stock, ours, queries)
        assert ours.deleted_fraction > 0
        restored.restore(ours.snapshot())
        await same_rankings(stock, restored, queries)
        await stock.optimize_index()
        await ours.optimize_index()
        assert ours.deleted_fraction == 0
        await same_rankings(stock, ours, queries)
        await ours.add_docs({"new": "restart the failed deployment after compaction"})
        await stock.add_docs({"new": "restart the failed deployment after compaction"})
        await same_rankings(stock, ours, queries)


async def test_restore_refuses_a_snapshot_of_another_tokenizer_configuration(make_app, tmp_path):
    async with make_app(components=STOCK_AND_OURS) as app:
        ours = app.context.components["keyword_index"]["ours"]
        await ours.add_docs({"a": "restart the deployment"})
        arrays = ours.snapshot()
        meta = json.loads(bytes(arrays["meta"]).decode())
        meta["tokenizer_fingerprint"] = "another"
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        with pytest.raises(ValueError, match="tokenizer"):
            app.context.components["keyword_index"]["restored"].restore(arrays)


# -- persistence of the views ---------------------------------------------------------------------------------------


async def test_close_appends_to_the_log_instead_of_rewriting_the_views(make_app, tmp_path):
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws):
        pass  # the start-up reconcile indexed the corpus; closing wrote the first snapshot
    snapshot = {
        p: (p.stat().st_mtime_ns, p.stat().st_ino)
        for d in view_dirs(ws)
        for p in d.iterdir()
        if not p.name.endswith(".log")
    }
    parts = [json.loads((d / "MANIFEST.json").read_text())["parts"] for d in view_dirs(ws)]
    assert len(view_dirs(ws)) == 2 and len(snapshot) == 2 + sum(map(len, parts))  # manifest + its parts per view
    assert all(
        {"records.json.zst", "vectors.vectors.npy", "vectors.codes.npy", "bm25.meta.npy"} <= set(p) for p in parts
    )
    async with make_app(workspace=ws) as app:
        await create_some(app, 5)
        expected = await search_all(app)
    after = {
        p: (p.stat().st_mtime_ns, p.stat().st_ino)
        for d in view_dirs(ws)
        for p in d.iterdir()
        if not p.name.endswith(".log")
    }
    assert after == snapshot  # no snapshot file was rewritten
    logs = [p for d in view_dirs(ws) for p in d.glob("*.log")]
    assert len(logs) == 2 and all(p.stat().st_size > 0 for p in logs)
    async with make_app(workspace=ws) as app:  # restored from snapshot + log alone
        assert await search_all(app) == expected
        embedded = {t for call in memory_of(app).embedding_store.as_embedding.model.calls for t in call}
        assert embedded <= {q for _, _, q in corpus()}  # queries only: no record was re-embedded


async def test_a_snapshot_is_written_when_the_log_outgrows_its_share(make_app, tmp_path, monkeypatch):
    from reme_procedure_memory.search.view_store import file_store as filestore

    monkeypatch.setattr(filestore, "SNAPSHOT_MIN_ENTRIES", 3)
    ws = tmp_path / "ws"
    async with make_app(workspace=ws) as app:
        await create_some(app, 2)
    generations = {d: json.loads((d / "MANIFEST.json").read_text())["generation"] for d in view_dirs(ws)}
    async with make_app(workspace=ws) as app:
        await create_some(app, 6, prefix="more")
        expected = await search_all(app)
    for d in view_dirs(ws):
        assert json.loads((d / "MANIFEST.json").read_text())["generation"] == generations[d] + 1
        assert not list(d.glob("*.log"))  # the new snapshot holds everything
        assert not [
            p for p in d.iterdir() if not p.name.startswith(str(generations[d] + 1)) and p.name != "MANIFEST.json"
        ]
    async with make_app(workspace=ws) as app:
        assert await search_all(app) == expected


@pytest.mark.parametrize("damage", ["records", "vectors", "bm25", "manifest", "log-torn", "log-garbage", "gone"])
async def test_a_damaged_view_state_is_detected_and_rebuilt_from_the_files(make_app, tmp_path, damage):
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        await create_some(app, 4)
    async with make_app(workspace=ws) as app:
        await create_some(app, 3, prefix="late")  # these live in the log only
        expected = view_content(app)
    for d in view_dirs(ws):
        target = {
            "records": "*.records.json.zst",
            "vectors": "*.vectors.vectors.npy",
            "bm25": "*.bm25.posting_idxs.npy",
            "manifest": "MANIFEST.json",
        }.get(damage)
        if target:
            path = next(d.glob(target))
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        elif damage == "log-torn":
            log = next(d.glob("*.log"))
            log.write_bytes(log.read_bytes()[:-7])
        elif damage == "log-garbage":
            log = next(d.glob("*.log"))
            log.write_bytes(log.read_bytes() + b"\x00garbage")
        else:
            shutil.rmtree(d)
    async with make_app(workspace=ws) as app:
        # loaded what was sound, re-indexed the rest from the JSON files (a rebuilt view may order ties otherwise)
        assert view_content(app) == expected
        if damage in ("bm25", "log-torn", "log-garbage"):  # the records and vectors were sound: nothing re-embedded
            assert memory_of(app).embedding_store.as_embedding.model.calls == []


class Killed(Exception):
    """The process died here (nothing between the snapshot writer and the test catches it)."""


@pytest.mark.slow
async def test_a_kill_at_any_point_of_a_snapshot_leaves_a_state_start_up_handles(make_app, tmp_path, monkeypatch):
    """Crash simulation at every durable step of writing a snapshot (each file published, the manifest, cleanup)."""
    from reme_procedure_memory.search.view_store import state as viewstate

    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        expected = view_content(app)
    real = viewstate.ViewState._publish
    killed = []  # the killed applications: kept (never closed, never finalised) as a dead process would be
    publishes = 1 + max(len(json.loads((d / "MANIFEST.json").read_text())["parts"]) for d in view_dirs(ws))
    for crash_at in range(1, publishes + 1):  # each part (records, every vector and BM25 array), then the manifest
        calls = []

        def publish(self, target, write, calls=calls, crash_at=crash_at):
            calls.append(target)
            if len(calls) == crash_at:
                raise Killed(target.name)
            return real(self, target, write)

        monkeypatch.setattr(viewstate.ViewState, "_publish", publish)
        killed.append(make_app(workspace=ws))
        app = await killed[-1].__aenter__()
        for store in memory_of(app).workspace.views.stores.values():
            store._snapshot_due = True  # the next dump writes a snapshot, and dies in it
        with pytest.raises(Killed):
            await memory_of(app).workspace.views.dump()
        monkeypatch.setattr(viewstate.ViewState, "_publish", real)
        memory_of(app).workspace.lock_file.release()  # the killed process's lock dies with it
        async with make_app(workspace=ws) as app:
            assert view_content(app) == expected, crash_at


async def test_reindex_reuses_the_views_vectors_and_a_new_embedding_model_re_embeds(make_app, tmp_path):
    from helpers import FakeEmbeddingModel

    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        model = memory_of(app).embedding_store.as_embedding.model
        expected = await search_all(app)
        model.calls.clear()
        ok, ans = await run_job(app, "procedure_reindex")
        assert ok and ans["indexed"] == len(corpus())
        assert model.calls == []  # every text unchanged: its vector came from the view
        assert await search_all(app) == expected

    class OtherModel(FakeEmbeddingModel):
        pass

    other = OtherModel(64)
    other.model = "another-model"
    components = {"as_embedding": {"procedure": {"model": "another-model"}}}
    async with make_app(workspace=ws, embedding=other, components=components) as app:
        texts = {t for call in other.calls for t in call}
        assert {r["when-to-use"] for _, r, _ in corpus()} <= texts  # re-embedded in the new vector space
        await search_all(app)


async def test_view_files_of_remes_own_persistence_are_not_read_and_a_start_names_them(make_app, tmp_path):
    """Only unreleased development builds let ReMe persist the views itself: such files are never loaded (the view
    is built from the experience files) and every start warns, naming them."""
    from reme.components.file_store.local_file_store import LocalFileStore
    from reme.schema import FileChunk
    from reme.utils.jsonl_zst import write_jsonl_zst

    from helpers import hashed_vector

    ws = tmp_path / "ws"
    write_corpus(ws)
    chunks = [
        FileChunk(
            id=f"when_to_use:procedures/{name}",
            path=f"procedures/{name}",
            start_line=1,
            end_line=1,
            text="stale text",
            embedding=hashed_vector(record["when-to-use"], 64),
            metadata={"view": "when_to_use", "version": "old"},
        )
        for name, record, _ in corpus()
    ]
    stale = ws / "metadata" / "file_store" / "file_chunks_procedure_when_to_use_v1.jsonl.zst"
    write_jsonl_zst(stale, (LocalFileStore._serialize_chunk(c) for c in chunks))
    messages: list[str] = []
    app = make_app.build(workspace=ws)
    memory_of(app).logger.add(messages.append, level="WARNING")  # after the build: ReMe resets the handlers
    await app.start()
    try:
        embedded = {t for call in memory_of(app).embedding_store.as_embedding.model.calls for t in call}
        assert embedded >= {r["when-to-use"] for _, r, _ in corpus()}  # built from the files, nothing reused
        expected = await search_all(app)
    finally:
        await app.close()
    named = [m for m in messages if "unreleased development build" in m]
    assert len(named) == 1 and f"procedure_when_to_use: not reading {stale}: view files" in named[0], messages
    assert stale.exists()  # not the plugin's to remove
    async with make_app(workspace=ws) as app:
        assert await search_all(app) == expected  # the view's own state, loaded


WRITER = """
import asyncio, sys
sys.path[:0] = [{tests!r}, {repo!r}]
from conftest import add_trajectory, call_tool, memory_of
from helpers import FakeEmbeddingModel
from reme.application import Application
from reme_procedure_memory.search.view_store import file_store as filestore

filestore.SNAPSHOT_MIN_ENTRIES = 3  # snapshots often: the kill lands in every kind of write


async def main():
    app = Application(plugins=["procedure-memory"], workspace_dir={ws!r}, service={{"backend": "cli"}},
                      enable_logo=False, log_to_console=False, log_to_file=False,
                      components={{"procedure_memory": {{"default": {{"tokenizer_source": {tokenizer!r}}}}},
                                   "as_embedding": {{"procedure": {{"dimensions": 64}}}}}})
    app.context.components["as_embedding"]["procedure"].model = FakeEmbeddingModel(64)
    await app.start()
    memory = memory_of(app)
    run = memory.grants.begin_attempt("req", [add_trajectory(app)])
    for i in range(10_000):
        ok, ans = await call_tool(app, run, "procedure_create", filename=f"k{{{round}}}-{{i}}.json",
                                  operation_key=f"k{{{round}}}-{{i}}", description="d",
                                  when_to_use=f"when shard {{i}} of round {{{round}}} fails",
                                  content=f"restart shard {{i}} then verify replica {{i % 7}}")
        assert ok, ans
        if i % 2:
            ok, ans = await call_tool(app, run, "procedure_update", path=ans["path"], expected_version=ans["version"],
                                      content=f"drain shard {{i}} first", operation_key=f"u{{{round}}}-{{i}}")
        await memory.workspace.views.dump()
        print(i, flush=True)


asyncio.run(main())
"""


@pytest.mark.slow
def test_a_process_killed_while_it_writes_and_persists_leaves_views_start_up_loads_or_rebuilds(
    tmp_path, word_tokenizer
):
    """Real SIGKILLs at random moments of a process that creates, updates and persists views continuously."""
    import asyncio
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from conftest import deep_merge  # noqa: F401  (the writer builds its Application like make_app)
    from helpers import FakeEmbeddingModel

    ws = tmp_path / "ws"
    tests = str(TESTS)
    rng = random.Random(11)
    for round_ in range(3):
        script = tmp_path / f"writer{round_}.py"
        script.write_text(
            WRITER.format(
                tests=tests, repo=str(Path(tests).parent), ws=str(ws), tokenizer=str(word_tokenizer), round=round_
            )
        )
        proc = subprocess.Popen(
            [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + 120
            written = 0
            while written < 4 + rng.randrange(8):  # let it write a while, then kill it mid-flight
                line = proc.stdout.readline()
                assert line, proc.stderr.read()[-3000:]
                written += 1
                assert time.monotonic() < deadline
            time.sleep(rng.random() * 0.05)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

        async def check(round_: int = round_):
            from reme.application import Application

            def app():
                application = Application(
                    plugins=["procedure-memory"],
                    workspace_dir=str(ws),
                    service={"backend": "cli"},
                    enable_logo=False,
                    log_to_console=False,
                    log_to_file=False,
                    components={
                        "procedure_memory": {"default": {"tokenizer_source": str(word_tokenizer)}},
                        "as_embedding": {"procedure": {"dimensions": 64}},
                    },
                )
                application.context.components["as_embedding"]["procedure"].model = FakeEmbeddingModel(64)
                return application

            restarted = app()
            await restarted.start()
            try:
                loaded = view_content(restarted)
                ok, ans = await run_job(restarted, "procedure_reindex")
                assert ok and ans["status"] == "complete", ans
                assert loaded == view_content(restarted), f"round {round_}: the restarted views differ from a rebuild"
            finally:
                await restarted.close()

        asyncio.run(check())


async def test_the_compact_graph_answers_like_reme_local_graph(make_app):
    from reme.schema import FileLink, FileNode

    graphs = {"file_graph": {"stock": {"backend": "local"}, "ours": {"backend": "procedure_graph"}}}
    async with make_app(components=graphs) as app:
        stock, ours = app.context.components["file_graph"]["stock"], app.context.components["file_graph"]["ours"]

        def node(path, *targets):
            return FileNode(
                path=path,
                st_mtime=1.5,
                chunk_ids=[f"c:{path}"],
                front_matter={"name": path, "description": f"about {path}", "tag": "x"},
                links=[FileLink(source_path=path, target_path=t) for t in targets],
            )

        async def same():
            assert [n.model_dump() for n in await ours.get_nodes()] == [n.model_dump() for n in await stock.get_nodes()]
            for path in ("a", "b", "c", "d"):
                for scope in ("real", "virtual", "all"):
                    assert await ours.get_outlinks(path, scope) == await stock.get_outlinks(path, scope)
                    assert await ours.get_inlinks(path, scope) == await stock.get_inlinks(path, scope)

        for graph in (stock, ours):
            await graph.upsert_nodes([node("a", "b", "d"), node("b", "c"), node("c")])
        await same()
        for graph in (stock, ours):
            await graph.upsert_nodes([node("a", "c"), node("d", "a")])
            await graph.delete_nodes(["b"])
        await same()
        await ours.rebuild_links()
        await same()


def same_floats(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype == np.float32 and np.array_equal(a.view(np.uint32), b.view(np.uint32))


async def test_cached_contributions_give_reme_s_scores_bit_for_bit_and_a_mutation_drops_them(make_app, monkeypatch):
    monkeypatch.setattr(ProcedureBM25Index, "CACHE_MIN_POSTING", 2)
    texts = {f"d{i}": f"{r['when-to-use']}\n\n{r['content']}" for i, (_, r, _) in enumerate(corpus())}
    queries = [q for _, _, q in corpus()][:20] + ["restart the failed deployment to the cluster"]
    async with make_app(components={"keyword_index": {"ours": STOCK_AND_OURS["keyword_index"]["ours"]}}) as app:
        ours = app.context.components["keyword_index"]["ours"]

        def check() -> None:
            for query in queries:
                ids = ours._encode_query(query)
                reme = BM25Index._score_query(ours, ids)
                assert same_floats(ours._score_query(ids), reme)  # computed, and long lists kept
                assert same_floats(ours._score_query(ids), reme)  # from the cache
            assert len(ours.contributions) > 0

        await ours.add_docs(dict(list(texts.items())[:40]))
        check()
        await ours.add_docs(dict(list(texts.items())[40:]))  # new documents: other idf, lengths, postings
        assert len(ours.contributions) == 0
        check()
        await ours.delete_docs(list(texts)[:15])
        assert len(ours.contributions) == 0
        check()
        await ours.add_docs({"d20": texts["d20"] + " restart restart deployment cluster"})  # an update
        check()
        ours.restore(ours.snapshot())
        assert len(ours.contributions) == 0
        check()
        await ours.optimize_index()
        assert len(ours.contributions) == 0
        check()
        ours.contributions.budget = max(a.nbytes for a in ours.contributions._entries.values()) + 300
        ours.contributions.clear()
        check()  # a budget of one list: every query evicts, the scores stay ReMe's
        assert len(ours.contributions) == 1 and ours.contributions.used <= ours.contributions.budget
        await ours.clear()
        assert len(ours.contributions) == 0


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 0.0, 0.5, 1.25, 1.25, 2.0, 3.5, 3.5, 3.5]), min_size=0, max_size=80),
    st.integers(0, 90),
)
def test_top_k_is_reme_top_k_with_equal_scores_by_slot(values, limit):
    scores = np.array(values, dtype=np.float32)
    ours = ProcedureBM25Index._top_k(None, scores, limit)
    reme = BM25Index._top_k(None, scores, limit)
    assert [float(scores[i]) for i in ours] == [float(scores[i]) for i in reme]  # the same scores, best first
    assert all(scores[i] > 0 for i in ours)
    last = float(scores[reme[-1]]) if len(reme) else None
    for value in {float(scores[i]) for i in reme} - {last}:  # every score but the page's last: the same slots
        assert {int(i) for i in ours if scores[i] == value} == {int(i) for i in reme if scores[i] == value}
    assert all((scores[a], -a) > (scores[b], -b) for a, b in zip(ours, ours[1:]))  # equal scores by slot
