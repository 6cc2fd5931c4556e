"""The two hybrid views on real ReMe file stores and BM25: records, ranking, current content, reads, paths."""

import json
import math
import os

import pytest
from rank_bm25 import BM25Okapi
from reme_procedure_memory.errors import ProcedureError
from reme_procedure_memory.search.view_store.record_codec import text_digest

from conftest import add_trajectory, call_tool, memory_of, run_job
from helpers import experience_record, place_trajectory
from helpers.corpus import corpus, write_corpus


class LuceneBM25(BM25Okapi):
    """rank-bm25 scoring with the Lucene IDF ln(1 + (N - df + 0.5) / (df + 0.5)) that ReMe's BM25 documents."""

    def _calc_idf(self, nd):
        for word, freq in nd.items():
            self.idf[word] = math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5))


async def test_each_experience_is_one_record_per_view_with_the_spec_texts(make_app, tmp_path):
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        memory = memory_of(app)
        for store in memory.workspace.views.stores.values():
            nodes = await store.get_nodes()
            assert len(nodes) == len(corpus()) == len(store.file_chunks)
            assert all(len(n.chunk_ids) == 1 for n in nodes)
        name, record, _ = corpus()[3]
        wtu = memory.workspace.views.stores["when_to_use"].file_chunks[f"when_to_use:procedures/{name}"]
        both = memory.workspace.views.stores["when_to_use_content"].file_chunks[
            f"when_to_use_content:procedures/{name}"
        ]
        # a record keeps the digest of the text it indexed (the file holds the text itself)
        assert wtu.metadata["text_sha256"] == text_digest(record["when-to-use"])
        assert both.metadata["text_sha256"] == text_digest(record["when-to-use"] + "\n\n" + record["content"])
        # each record's vector is held by its view's matrix only (no per-chunk copy or view)
        assert wtu.embedding is None and both.embedding is None
        assert memory.workspace.views.stores["when_to_use"].vector_of(wtu.id) is not None
        assert memory.workspace.views.stores["when_to_use_content"].vector_of(both.id) is not None
        # separate BM25 indexes and graphs, one shared embedding store
        s1, s2 = memory.workspace.views.stores.values()
        assert s1.keyword_index is not s2.keyword_index and s1.file_graph is not s2.file_graph
        assert s1.embedding_store is s2.embedding_store is memory.embedding_store


@pytest.mark.parametrize("view", ["when_to_use", "when_to_use_content"])
async def test_keyword_ranking_matches_an_independent_bm25(make_app, tmp_path, view):
    ws = tmp_path / "ws"
    write_corpus(ws)
    components = {"procedure_memory": {"default": {"vector_weight": 0.0}}}
    async with make_app(workspace=ws, components=components) as app:
        tokenizer = app.context.components["tokenizer"]["procedure"]
        assert type(tokenizer).__name__ == "SnowballTokenizer"  # the shipped one: stemmed tokens on both sides
        docs = corpus()
        texts = [
            r["when-to-use"] if view == "when_to_use" else r["when-to-use"] + "\n\n" + r["content"] for _, r, _ in docs
        ]
        oracle = LuceneBM25(tokenizer.tokenize(texts), k1=1.5, b=0.75)
        checked = 0
        for _, _, query in docs[:15]:
            q_tokens = list(dict.fromkeys(tokenizer.tokenize([query])[0]))
            scores = oracle.get_scores(q_tokens)
            expected = {f"procedures/{docs[i][0]}": s for i, s in enumerate(scores) if s > 0}
            ok, ans = await run_job(app, "procedure_search", query=query, index=view, limit=10)
            assert ok
            got = [r["path"] for r in ans["results"]]
            top = sorted(expected.values(), reverse=True)[:10]
            assert len(got) == len(top)
            assert [expected[p] for p in got] == pytest.approx(top, rel=1e-4)
            assert [r["scores"]["keyword"] for r in ans["results"]] == pytest.approx(top, rel=1e-3)
            assert all(r["scores"]["vector_rank"] is None for r in ans["results"])
            checked += 1
        assert checked == 15


async def test_search_fuses_with_weighted_rrf_and_returns_full_current_experiences(make_app, tmp_path):
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        _, _, query = corpus()[5]
        ok, ans = await run_job(app, "procedure_search", query=query, index="when_to_use_content", limit=5)
        assert ok and ans["index_complete"] is True and ans["pending_indexes"] == []
        assert len(ans["results"]) == 5
        for r in ans["results"]:
            s = r["scores"]
            expected = (0.7 / (60 + s["vector_rank"]) if s["vector_rank"] else 0) + (
                0.3 / (60 + s["keyword_rank"]) if s["keyword_rank"] else 0
            )
            assert r["score"] == pytest.approx(expected)
            on_disk = (ws / r["path"]).read_bytes()
            assert r["experience"] == json.loads(on_disk)
            assert set(r["experience"]) == {"description", "when-to-use", "content", "sources"}
        assert [r["score"] for r in ans["results"]] == sorted((r["score"] for r in ans["results"]), reverse=True)
        # repeated searches may return the same experience again (no per-run dedup)
        ok, again = await run_job(app, "procedure_search", query=query, index="when_to_use_content", limit=5)
        assert [r["path"] for r in again["results"]] == [r["path"] for r in ans["results"]]


async def test_search_scans_and_reads_result_files_off_the_event_loop(make_app, tmp_path, monkeypatch):
    """The vector scan, the BM25 scoring and the reads of the result files run in worker threads (issue 9: the
    service's event loop keeps answering other requests meanwhile)."""
    import threading

    from reme_procedure_memory.search.view_store.file_store import ProcedureFileStore
    from reme_procedure_memory.storage.experiences import ExperienceFiles

    ws = tmp_path / "ws"
    write_corpus(ws)
    seen: dict[str, set[str]] = {}

    def observed(cls, name):
        real = getattr(cls, name)

        def wrapper(*args, **kwargs):  # observation only: the real method runs
            seen.setdefault(name, set()).add(threading.current_thread().name)
            return real(*args, **kwargs)

        monkeypatch.setattr(cls, name, wrapper)

    async with make_app(workspace=ws) as app:
        loop_thread = threading.current_thread().name
        for cls, name in (
            (ProcedureFileStore, "nearest_paths"),
            (ProcedureFileStore, "keyword_scored"),
            (ExperienceFiles, "read"),
        ):
            observed(cls, name)
        _, _, query = corpus()[5]
        ok, ans = await run_job(app, "procedure_search", query=query, index="when_to_use_content", limit=5)
        assert ok and len(ans["results"]) == 5
        assert set(seen) == {"nearest_paths", "keyword_scored", "read"}, seen
        assert all(loop_thread not in threads for threads in seen.values()), (loop_thread, seen)


async def test_views_index_different_texts(make_app):
    async with make_app() as app:
        run = memory_of(app).grants.begin_attempt("req", [add_trajectory(app)])
        await call_tool(
            app,
            run,
            "procedure_create",
            filename="zebra.json",
            operation_key="k1",
            description="d",
            when_to_use="when deploying services",
            content="check the zebra crossing",
        )
        ok, wtu = await run_job(app, "procedure_search", query="zebra crossing", index="when_to_use")
        ok, both = await run_job(app, "procedure_search", query="zebra crossing", index="when_to_use_content")
        assert all(r["scores"]["keyword_rank"] is None for r in wtu["results"])  # content is not in this view
        assert both["results"][0]["path"] == "procedures/zebra.json"
        assert both["results"][0]["scores"]["keyword_rank"] == 1


async def test_search_argument_validation(make_app):
    async with make_app() as app:
        for args, needle in [
            ({}, "query"),
            ({"query": "  "}, "query"),
            ({"query": "x", "index": "content"}, "index"),
            ({"query": "x", "limit": 0}, "limit"),
            ({"query": "x", "limit": 1000}, "limit"),
            ({"query": "x", "limit": "five"}, "limit"),
            ({"query": "x", "limit": True}, "limit"),
        ]:
            ok, ans = await run_job(app, "procedure_search", **args)
            assert not ok and ans["error"]["code"] == "invalid_argument" and needle in ans["error"]["message"]
        ok, ans = await run_job(app, "procedure_search", query=123, limit="3")  # CLI-converted values coerce
        assert ok and ans["query"] == "123" and ans["index"] == "when_to_use_content"


async def test_read_experience_and_trajectory_excerpt(make_app):
    async with make_app() as app:
        text = "héllo wörld\n" * 50  # multi-byte: offsets count decoded characters
        src = add_trajectory(app, "run.jsonl", text.encode("utf-8"))
        ok, ans = await run_job(app, "procedure_read", kind="trajectory", path=src, offset=1, length=10)
        assert ok and ans["text"] == text[1:11] and ans["next_offset"] == 11 and ans["total_chars"] == len(text)
        ok, ans = await run_job(app, "procedure_read", kind="trajectory", path=src, offset=len(text) - 3, length=100)
        assert ok and ans["text"] == text[-3:] and ans["next_offset"] is None
        ok, ans = await run_job(app, "procedure_read", path="procedures/missing.json")
        assert not ok and ans["error"]["code"] == "not_found"


async def test_trajectory_read_has_a_token_cap(make_app):
    components = {"procedure_memory": {"default": {"read_max_tokens": 7}}}
    async with make_app(components=components) as app:
        text = " ".join(f"w{i}" for i in range(100))
        src = add_trajectory(app, "long.log", text.encode())
        ok, ans = await run_job(app, "procedure_read", kind="trajectory", path=src, offset=0, length=8192)
        assert ok and ans["truncated_by_token_cap"] is True
        assert ans["tokens"] <= 7 and text.startswith(ans["text"]) and ans["text"].split() == text.split()[:7]
        assert ans["next_offset"] == len(ans["text"])


async def test_every_path_argument_rejects_traversal_and_symlink_escapes(make_app, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text(json.dumps(experience_record("s", "s", "s")))
    (outside / "secret.log").write_text("secret")
    async with make_app() as app:
        memory = memory_of(app)
        ws = memory.workspace_path
        src = add_trajectory(app)
        (ws / "procedures" / "link.json").symlink_to(outside / "secret.json")
        (ws / "session/trajectories/link.log").symlink_to(outside / "secret.log")
        (ws / "session/trajectories/dirlink").symlink_to(outside, target_is_directory=True)
        bad_experience_paths = [
            "../outside/secret.json",
            "/etc/passwd",
            "procedures/../metadata/x.json",
            "procedures/link.json",
            "session/trajectories/run.jsonl",
            "procedures\\x.json",
            "~/x.json",
            "procedures/sub/x.json",
        ]
        for path in bad_experience_paths:
            ok, ans = await run_job(app, "procedure_read", path=path)
            # a link in the experience directory is reported, never followed (invalid_experience)
            assert not ok and ans["error"]["code"] in (
                "path_outside_allowed_directory",
                "invalid_argument",
                "invalid_experience",
            ), path
            assert "experience" not in ans
            assert "secret" not in json.dumps(ans["error"]) or "secret" in path
        bad_trajectory_paths = [
            "session/trajectories/link.log",
            "session/trajectories/dirlink/secret.log",
            "session/../../outside/secret.log",
            "procedures/x.json",
            str(outside / "secret.log"),
            "session/trajectories",
        ]
        for path in bad_trajectory_paths:
            ok, ans = await run_job(app, "procedure_read", kind="trajectory", path=path)
            assert not ok and ans["error"]["code"] == "path_outside_allowed_directory", path
            assert "text" not in ans
        run = memory.grants.begin_attempt("req", [src])
        for path in bad_experience_paths:
            ok, ans = await call_tool(
                app, run, "procedure_update", path=path, expected_version="v", content="x", operation_key=f"k{path}"
            )
            assert not ok and ans["error"]["code"] in (
                "path_outside_allowed_directory",
                "invalid_argument",
                "invalid_experience",
            ), path
        for name in ["../../outside/evil.json", "/tmp/evil.json", "link.json"]:
            ok, ans = await call_tool(
                app,
                run,
                "procedure_create",
                filename=name,
                description="d",
                when_to_use="w",
                content="c",
                operation_key=f"c{name}",
            )
            assert not ok, name
        assert sorted(os.listdir(outside)) == ["secret.json", "secret.log"]
        assert json.loads((outside / "secret.json").read_text())["content"] == "s"
        # run sources must be copied trajectories inside the workspace, too
        for source in ["/etc/passwd", "session/trajectories/link.log", "procedures/x.json"]:
            with pytest.raises(ProcedureError):
                memory.grants.begin_attempt("req2", [source])


async def test_symlinked_experience_is_not_indexed(make_app, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(experience_record("outside", "outside secret", "outside")))
    ws = tmp_path / "ws"
    (ws / "procedures").mkdir(parents=True)
    place_trajectory(ws)
    (ws / "procedures" / "link.json").symlink_to(outside)
    async with make_app(workspace=ws) as app:
        ok, ans = await run_job(app, "procedure_search", query="outside secret")
        assert ans["results"] == []


async def test_trajectories_are_never_indexed(make_app):
    async with make_app() as app:
        add_trajectory(app, "run.jsonl", b'{"role": "user", "content": "flamingo migration procedure"}\n')
        run = memory_of(app).grants.begin_attempt("req", [f"{memory_of(app).workspace.trajectory_rel_dir}/run.jsonl"])
        await call_tool(
            app,
            run,
            "procedure_create",
            filename="a.json",
            operation_key="k",
            description="d",
            when_to_use="unrelated",
            content="unrelated",
        )
        for view in ("when_to_use", "when_to_use_content"):
            store = memory_of(app).workspace.views.stores[view]
            assert all(c.path.startswith("procedures/") for c in store.file_chunks.values())
            ok, ans = await run_job(app, "procedure_search", query="flamingo migration", index=view)
            assert all("flamingo" not in json.dumps(r["experience"]) for r in ans["results"])
