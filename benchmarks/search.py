"""Search, create and reindex benchmark of the procedure-memory plugin, beside ReMe's stock ``local`` file store.

Run from the repository root (a venv with the plugin installed)::

    python benchmarks/search.py              # full run, 10,000 experiences
    python benchmarks/search.py --quick      # quick run, 1,000 experiences
    python benchmarks/search.py --smoke      # CI smoke run, seconds: 200 experiences, few queries and creates
    python benchmarks/search.py --n 20000 --json /tmp/bench.json

Everything is real ReMe except the embedding model: two in-process ``Application``s with
``plugins=["procedure-memory"]`` from the shipped ``plugin.yaml`` (a ~100-experience and an N-experience workspace;
creates alternate between them so machine load hits both series alike), real jobs, real ``ProcedureFileStore``s, BM25
and file graphs, a real ``tokenizers`` word-level tokenizer file. The embedding model is a deterministic hashed random projection (1,024 dimensions); its
vectors are computed before any timed section (the shared embedding cache is pre-warmed with every text a timed section
embeds), so provider time is excluded from the create and search latencies. The run checks and prints that the model
was called 0 times inside the timed sections.

Measured side by side in one run (see ``benchmarks/RUNS.md`` for the recorded numbers):

1. hybrid search latency per view at N experiences, through ``memory.reads.search`` (the procedure_search step's
   code path) and end to end through ``app.run_job("procedure_search", ...)``, with a breakdown;
2. create latency through the real ``procedure_create`` job tool path at 100 and at N experiences, and the ratio;
   plus create at N when the operation journal holds N records (as if every experience had been created by the tool);
3. full reindex (``procedure_reindex`` job) of N experiences, first run and a second run with cached embeddings;
4. ReMe's stock ``local`` file store (``LocalFileStore``) on the same records and vectors: ``vector_search`` +
   ``keyword_search`` + ``SearchStep._rrf_merge`` per view, and the stock/plugin ratio.

Targets (2-core machine): search p50 <= 25 ms per view at 10k; create p50 at 10k within 2x of create p50 at 100;
reindex of 10k with cached embeddings <= 20 s. At 100k (``--n 100000 --small-n 1000``): search p50 <= 10 ms
per view, start <= 10 s, close after the lifecycle creates <= 3 s, RSS after start <= 1.5 GiB, create CPU at 100k
<= 1.3x create CPU at --small-n. PASS/FAIL is printed; nothing asserts on time.

``--smoke`` (CI, ``tests/benchmarks/test_smokes.py``) runs every phase above on 200 experiences (50 in the small
workspace; 10 queries, 3 stock queries, 5 creates, 2 journal creates, 3 lifecycle creates, 1 warm-up), with the
corpus built from ``tests/fixtures/experiences.jsonl`` when ``../shared`` is absent. It shows that the benchmark runs
(every search answers, the stock stores answer beside it, creates and reindex complete, the lifecycle children start
and close, no provider call inside a timed section) and prints the whole table; its timings and PASS/FAIL verdicts
say nothing about the targets, which hold at 10k.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchlib import corpus as _corpus  # noqa: E402  (benchmarks/benchlib/corpus.py)
from benchlib.corpus import (  # noqa: E402
    DIMENSIONS,
    Corpus,
    HashedProjectionEmbedding,
    experience_bytes,
    log,
    machine,
    summary_ms,
    view_texts,
)
from benchlib.machine import revision  # noqa: E402  (benchmarks/benchlib/machine.py)
from benchlib.shared import smoke_library  # noqa: E402  (benchmarks/benchlib/shared.py)

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may wait on the Hugging Face hub


REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from helpers import write_word_tokenizer  # noqa: E402  (the tests' real word-level tokenizer file)

VIEWS = ("when_to_use", "when_to_use_content")
SEARCH_LIMIT = 5
STOCK_CANDIDATES = 50  # the plugin's candidate count at limit 5: min(200, max(50, 5 * limit))
VECTOR_WEIGHT = 0.7
SMALL_N = 100  # default size of the small workspace (--small-n)
LIFECYCLE_FIRST_INDEX = 10_000_000  # experience numbers of the lifecycle creates (never collide with the corpus)

TARGET_SEARCH_MS = 25.0  # search p50 per view at 10k
TARGET_SEARCH_MS_100K = 10.0  # search p50 per view at 100k
TARGET_START_S = 10.0  # start (load views + reconcile) at 100k
TARGET_CREATE_RATIO = 2.0
TARGET_REINDEX_S = 20.0
TARGET_CREATE_CPU_RATIO = 1.3  # create CPU at N over create CPU at --small-n (100k over 1k)
TARGET_RSS_MIB = 1536.0  # RSS after start at 100k
TARGET_CLOSE_S = 3.0  # close after the lifecycle creates at 100k


# -- the fake embedding model ---------------------------------------------------------------------------------------


# -- a realistic, varied corpus -------------------------------------------------------------------------------------


# -- measurement helpers --------------------------------------------------------------------------------------------


async def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    result = await fn(*args, **kwargs)
    return time.perf_counter() - started, result


def stock_components() -> dict:
    """Two plain ReMe ``local`` file stores (own BM25 + graph each) sharing the plugin's embedding store."""
    out: dict = {"keyword_index": {}, "file_graph": {}, "file_store": {}}
    for view in VIEWS:
        name = f"stock_{view}"
        out["keyword_index"][name] = {"backend": "bm25", "tokenizer": "procedure"}
        out["file_graph"][name] = {"backend": "local"}
        out["file_store"][name] = {
            "backend": "local",
            "embedding_store": "procedure",
            "keyword_index": name,
            "file_graph": name,
            "tag_index": "",
        }
    return out


def build_application(ws: Path, tokenizer: Path, cache_size: int | None, model, stock: bool):
    """An Application with the plugin (shipped plugin.yaml), 1,024-d vectors from ``model``, the shipped embedding
    cache size unless ``cache_size`` is given; optionally the two stock ``local`` stores for the comparison."""
    from reme.application import Application

    components = {
        "procedure_memory": {"default": {"tokenizer_source": str(tokenizer), "pending_retry_seconds": 0}},
        "as_embedding": {"procedure": {"dimensions": DIMENSIONS}},
        **({"embedding_store": {"procedure": {"max_cache_size": cache_size}}} if cache_size else {}),
        **(stock_components() if stock else {}),
    }
    app = Application(
        plugins=["procedure-memory"],
        workspace_dir=str(ws),
        service={"backend": "cli"},
        enable_logo=False,
        log_to_console=False,
        log_to_file=False,
        components=components,
    )
    app.context.components["as_embedding"]["procedure"].model = model
    return app


async def create_job(app, run, exp: dict[str, str], key: str) -> tuple[float, float]:
    """One create through the real procedure_create job tool path; returns (wall seconds, process CPU seconds).

    CPU time is the whole process's user + system time: it excludes the time spent waiting for fsync."""
    cpu = time.process_time()
    seconds, response = await timed(
        app.run_job,
        "procedure_create",
        filename=exp["filename"],
        description=exp["description"],
        when_to_use=exp["when_to_use"],
        content=exp["content"],
        operation_key=key,
        **run.injected(),  # the run's hidden job kwargs (grant, ...), as the agent wrapper injects them
        tool_context_id=run.context_id,
    )
    cpu = time.process_time() - cpu
    answer = json.loads(response.answer)
    if not response.success or answer.get("status") != "created":
        raise RuntimeError(f"create failed: {answer}")
    return seconds, cpu


def rss_mib() -> dict[str, float]:
    """Resident set size now and its peak (VmHWM), MiB."""
    out = {}
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return {"rss_mib": out.get("VmRSS", float("nan")), "hwm_mib": out.get("VmHWM", float("nan"))}


# -- the benchmark --------------------------------------------------------------------------------------------------


class Site:
    """One workspace with a started Application (the plugin from the shipped plugin.yaml) and an open extraction run."""

    def __init__(self, bench: "Bench", name: str, stock: bool) -> None:
        self.bench = bench
        self.name = name
        self.ws = bench.root / name
        self.with_stock = stock
        self.app = None
        self.memory = None
        self.run = None
        self.source = ""

    def build_app(self):
        return build_application(
            self.ws, self.bench.tokenizer, self.bench.args.cache_size, self.bench.model, self.with_stock
        )

    async def start(self) -> float:
        self.app = self.build_app()
        seconds, _ = await timed(self.app.start)
        self.memory = self.app.context.components["procedure_memory"]["default"]
        rel = f"{self.memory.workspace.trajectory_rel_dir}/bench-run.jsonl"
        target = self.memory.workspace_path / rel
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text('{"role": "user", "content": "benchmark trajectory"}\n', encoding="utf-8")
        self.source = rel
        self.run = self.memory.grants.begin_attempt(f"bench-{self.name}", [rel])
        return seconds

    async def close(self) -> None:
        if self.app is not None:
            await self.app.close()
            self.app = None

    def store(self, view: str):
        return self.memory.workspace.views.stores[view]

    def stock(self, view: str):
        return self.app.context.components["file_store"][f"stock_{view}"]

    def write_files(self, experiences: list[dict[str, str]]) -> None:
        """Write experience JSON files directly (valid 4-field JSON), as a bulk fixture."""
        directory = self.memory.workspace_path / self.memory.settings.procedure_dir
        directory.mkdir(parents=True, exist_ok=True)
        for exp in experiences:
            (directory / exp["filename"]).write_bytes(experience_bytes(exp, self.source))

    def count(self) -> int:
        return len(self.memory.workspace.files.paths())

    async def reindex(self) -> dict:
        model = self.bench.model
        gc.collect()
        calls_before, texts_before, model_s_before = model.calls, model.texts, model.seconds
        seconds, response = await timed(self.app.run_job, "procedure_reindex")
        answer = json.loads(response.answer)
        assert response.success and answer["status"] == "complete", answer
        return {
            "seconds": seconds,
            "step_seconds": answer["seconds"],
            "indexed": answer["indexed"],
            "provider_calls": model.calls - calls_before,
            "provider_texts": model.texts - texts_before,
            "provider_seconds": model.seconds - model_s_before,
        }

    async def create(self, exp: dict[str, str], key: str) -> tuple[float, float]:
        """One create through the real procedure_create job tool path; returns (wall, CPU) seconds."""
        return await create_job(self.app, self.run, exp, key)

    def write_journal_history(self, count: int) -> int:
        """Simulate the journal of a workspace whose experiences were all created by the tool: one final
        (``indexed``) record per existing experience, in the plugin's own record format (no fsync: a fixture)."""
        from reme_procedure_memory.storage.journal import INDEXED, Operation

        journal = self.memory.workspace.journal
        paths = self.memory.workspace.files.paths()[:count]
        for k, rel in enumerate(paths):
            data = self.memory.workspace.files.read_bytes(rel)
            op = Operation(
                scope=f"history-{k // 50}",
                key=f"history-{k}",
                tool="create",
                request=hashlib.sha256(rel.encode()).hexdigest(),
                path=rel,
                target=data.decode("utf-8"),
                expected_version=None,
                status=INDEXED,
            )
            path = journal.record_file(op.scope, op.key)  # the journal's own layout (flat or sharded by scope)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                json.dumps(op.__dict__, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8"
            )
        return len(paths)


class Bench:
    def __init__(self, args) -> None:
        self.args = args
        self.n: int = args.n
        self.results: dict = {"config": {}, "search": {}, "create": {}, "reindex": {}, "stock": {}, "info": {}}
        self.root = Path(args.workdir).resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="reme-proc-bench-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.tokenizer = write_word_tokenizer(self.root / "tokenizer" / "tokenizer.json")
        self.model = HashedProjectionEmbedding(DIMENSIONS, seed=args.seed)
        self.corpus = Corpus(seed=args.seed)
        self.experiences: list[dict[str, str]] = []
        self.small = Site(self, "ws-small", stock=False)  # ~100 experiences
        self.big = Site(self, "ws-big", stock=True)  # N experiences, plus the stock stores
        self.keys = 0

    def take(self, count: int) -> list[dict[str, str]]:
        """``count`` new experiences (never used before, so creates never collide)."""
        first = len(self.experiences)
        for i in range(first, first + count):
            self.experiences.append(self.corpus.experience(i))
        return self.experiences[first:]

    async def prewarm(self, texts: list[str]) -> None:
        """Put texts in the shared cache of both sites (one provider call per batch, outside any timed section)."""
        for site in (self.small, self.big):
            if site.memory is not None:
                await site.memory.embedding_store.get_embeddings(texts)

    def key(self) -> str:
        self.keys += 1
        return f"bench-create-{self.keys}"

    # -- phases --------------------------------------------------------------------------------------------------

    async def creates(self, sites: list[Site], count: int, warmup: int) -> list[dict]:
        """Alternate creates between ``sites`` (so load from other processes hits every series alike); time all but
        the first ``warmup`` of each site."""
        batches = [self.take(warmup + count) for _ in sites]
        await self.prewarm([t for batch in batches for exp in batch for t in view_texts(exp)])
        before = [site.count() for site in sites]
        calls_before = self.model.calls
        latencies: list[list[float]] = [[] for _ in sites]
        cpu: list[list[float]] = [[] for _ in sites]
        gc.collect()
        for j in range(warmup + count):
            for s, site in enumerate(sites):
                seconds, cpu_seconds = await site.create(batches[s][j], self.key())
                if j >= warmup:
                    latencies[s].append(seconds)
                    cpu[s].append(cpu_seconds)
        calls = self.model.calls - calls_before
        out = []
        for s, site in enumerate(sites):
            item = summary_ms(latencies[s])
            item["cpu"] = summary_ms(cpu[s])
            item.update(
                {
                    "experiences_before": before[s] + warmup,
                    "experiences_after": site.count(),
                    "provider_calls_during_creates": calls,
                }
            )
            out.append(item)
        return out

    async def search_latencies(self, queries: list[str]) -> None:
        """Plugin search per view, interleaved per query: component, fusion only (no file reads), the vector and
        keyword parts alone, and run_job end to end. The relevance floor is 0 (the hashed projection is not the
        model it is calibrated for): every search reads its 5 results, as before the floor; relevance is computed."""
        site = self.big
        memory = site.memory
        for view in VIEWS:
            for q in queries[: min(10, len(queries))]:
                await memory.reads.search(q, view, SEARCH_LIMIT, min_relevance=0)
                await site.app.run_job("procedure_search", query=q, index=view, limit=SEARCH_LIMIT, min_relevance=0)
        series = {
            view: {k: [] for k in ("component", "fusion_only", "vector_part", "keyword_part", "run_job")}
            for view in VIEWS
        }
        gc.collect()
        calls_before = self.model.calls
        for q in queries:
            for view in VIEWS:
                store, out = site.store(view), series[view]
                s, answer = await timed(memory.reads.search, q, view, SEARCH_LIMIT, min_relevance=0)
                assert answer["status"] == "ok" and "vector_search" not in answer, answer
                out["component"].append(s)
                s, response = await timed(
                    site.app.run_job, "procedure_search", query=q, index=view, limit=SEARCH_LIMIT, min_relevance=0
                )
                assert response.success, response.answer
                out["run_job"].append(s)
                s, _ = await timed(memory.workspace.views.search, view, q, SEARCH_LIMIT, VECTOR_WEIGHT)
                out["fusion_only"].append(s)
                qvec, error = await memory.workspace.views.embeddings.query_vector(q)
                assert error is None, error
                started = time.perf_counter()
                store.nearest(qvec, STOCK_CANDIDATES)
                out["vector_part"].append(time.perf_counter() - started)
                s, _ = await timed(store.keyword_search, q, STOCK_CANDIDATES, {})
                out["keyword_part"].append(s)
        calls = self.model.calls - calls_before
        for view in VIEWS:
            self.results["search"][view] = {k: summary_ms(v) for k, v in series[view].items()}
            self.results["search"][view]["provider_calls_during_search"] = calls
            log(
                f"search {view}: component p50 {self.results['search'][view]['component']['p50_ms']:.2f} ms, "
                f"run_job p50 {self.results['search'][view]['run_job']['p50_ms']:.2f} ms"
            )

    async def stock_search(self, queries: list[str]) -> None:
        """ReMe's stock local store on the same records and vectors: vector_search + keyword_search + _rrf_merge
        (as SearchStep does, candidates 50, vector weight 0.7)."""
        from reme.schema import FileChunk

        from reme_procedure_memory.reme_internals import stock_rrf_merge

        site = self.big
        for view in VIEWS:
            plugin_store, stock = site.store(view), site.stock(view)
            await stock.clear()
            nodes = {n.path: n for n in await plugin_store.get_nodes()}
            items = []
            for chunk in plugin_store.file_chunks.values():
                copy = FileChunk(
                    id=chunk.id,
                    path=chunk.path,
                    start_line=chunk.start_line,
                    end_line=chunk.end_line,
                    text=chunk.text,
                    embedding=plugin_store.vector_of(chunk.id),
                    metadata=dict(chunk.metadata),
                )
                items.append((nodes[chunk.path].model_copy(deep=True), [copy]))
            started = time.perf_counter()
            for start in range(0, len(items), 200):
                await stock.upsert(items[start : start + 200])
            fill = time.perf_counter() - started
            assert len(stock.file_chunks) == len(plugin_store.file_chunks)

            for q in queries[:3]:
                await stock.vector_search(q, STOCK_CANDIDATES, {})
            gc.collect()
            calls_before = self.model.calls
            total, vec, kw, plugin, agree = [], [], [], [], []
            for q in queries:
                started = time.perf_counter()
                vector_hits, keyword_hits = await asyncio.gather(
                    stock.vector_search(q, STOCK_CANDIDATES, {}),
                    stock.keyword_search(q, STOCK_CANDIDATES, {}),
                )
                fused = stock_rrf_merge(vector_hits, keyword_hits, VECTOR_WEIGHT)
                total.append(time.perf_counter() - started)
                s, (plugin_fused, _) = await timed(
                    site.memory.workspace.views.search, view, q, SEARCH_LIMIT, VECTOR_WEIGHT
                )
                plugin.append(s)
                s, _ = await timed(stock.vector_search, q, STOCK_CANDIDATES, {})
                vec.append(s)
                s, _ = await timed(stock.keyword_search, q, STOCK_CANDIDATES, {})
                kw.append(s)
                top_stock = {c.path for c in fused[:SEARCH_LIMIT]}
                top_plugin = {f.path for f in plugin_fused[:SEARCH_LIMIT]}
                agree.append(len(top_stock & top_plugin) / max(1, len(top_plugin)))
            hybrid, same_queries = summary_ms(total), summary_ms(plugin)
            self.results["stock"][view] = {
                "fill_seconds": fill,
                "hybrid": hybrid,
                "plugin_fusion_same_queries": same_queries,
                "ratio_stock_over_plugin": hybrid["p50_ms"] / same_queries["p50_ms"],
                "vector_search": summary_ms(vec),
                "keyword_search": summary_ms(kw),
                "top5_overlap_with_plugin": statistics.fmean(agree) if agree else float("nan"),
                "provider_calls_during_search": self.model.calls - calls_before,
            }
            await stock.clear()  # keep close() cheap; the stock stores are not part of the plugin
            log(f"stock {view}: hybrid p50 {hybrid['p50_ms']:.1f} ms")

    async def main(self) -> dict:
        a, r = self.args, self.results
        r["config"] = {
            "n": self.n,
            "queries": a.queries,
            "stock_queries": min(a.stock_queries, a.queries),
            "creates": a.creates,
            "journal_creates": a.journal_creates,
            "warmup": a.warmup,
            "dimensions": DIMENSIONS,
            "limit": SEARCH_LIMIT,
            "candidates": STOCK_CANDIDATES,
            "vector_weight": VECTOR_WEIGHT,
            "seed": a.seed,
            "cache_size": a.cache_size or "shipped",
            "small_n": a.small_n,
            "workdir": str(self.root),
        }
        r["info"]["loadavg_start"] = os.getloadavg()
        log(f"workdir {self.root}")
        await self.small.start()
        await self.big.start()

        # the small workspace: 100 experiences written directly, indexed by the reindex job
        self.small.write_files(self.take(a.small_n))
        await self.small.reindex()

        # the big workspace: N experiences written directly; reindex twice (2nd run: embeddings cached)
        started = time.perf_counter()
        self.big.write_files(self.take(self.n))
        r["info"]["write_files_seconds"] = time.perf_counter() - started
        log(f"{self.big.count()} experience files; reindex (1st, embeddings not cached) ...")
        r["reindex"]["first"] = await self.big.reindex()
        log(f"reindex 1st {r['reindex']['first']['seconds']:.2f} s; reindex (2nd, cached) ...")
        r["reindex"]["cached"] = await self.big.reindex()
        log(f"reindex cached {r['reindex']['cached']['seconds']:.2f} s")
        r["info"]["experiences_at_search"] = self.big.count()
        r["info"]["corpus_words"] = {
            "when_to_use_mean": statistics.fmean(len(e["when_to_use"].split()) for e in self.experiences),
            "content_mean": statistics.fmean(len(e["content"].split()) for e in self.experiences),
        }

        # search at N: the plugin, then the stock store on the same records and vectors
        queries = [self.corpus.query(self.experiences) for _ in range(a.queries)]
        await self.prewarm(queries)
        await self.search_latencies(queries)
        if a.stock_queries > 0:
            await self.stock_search(queries[: min(a.stock_queries, a.queries)])

        # create at 100 and at N, alternating between the two workspaces
        log("creates at 100 and at N (alternating) ...")
        r["create"]["at_100"], r["create"]["at_n"] = await self.creates([self.small, self.big], a.creates, a.warmup)

        # create at N when the operation journal holds N records (a workspace whose experiences came from the tool)
        if a.journal_creates > 0:
            written = self.big.write_journal_history(self.n)
            log(f"creates at N with {written} journal records (alternating with the small workspace) ...")
            small, big = await self.creates([self.small, self.big], a.journal_creates, 1)
            big["journal_records"] = written
            big["small_p50_same_run_ms"] = small["p50_ms"]
            r["create"]["at_n_with_journal"] = big

        # start, RSS, creates and close of each workspace, each in a fresh process (no state of this one)
        await self.small.close()
        await self.big.close()
        r["lifecycle"] = {}
        for site, n in ((self.small, a.small_n), (self.big, self.n)):
            log(f"lifecycle of {site.name} in a fresh process ...")
            r["lifecycle"][site.name] = run_lifecycle_child(
                site.ws, self.tokenizer, n, a.cache_size, a.seed, a.lifecycle_creates, a.warmup
            )
        r["info"]["restart_seconds"] = r["lifecycle"][self.big.name]["start_seconds"]
        r["info"]["loadavg_end"] = os.getloadavg()
        r["info"]["provider"] = {
            "calls": self.model.calls,
            "texts": self.model.texts,
            "seconds": self.model.seconds,
            "us_per_text": 1e6 * self.model.seconds / max(1, self.model.texts),
        }
        return r


# -- lifecycle in a fresh process -------------------------------------------------------------------------------------

VIEW_LOAD_TYPES = ("file_store", "keyword_index", "file_graph", "embedding_store")


def component_key(component) -> str:
    ctype = getattr(component, "component_type", "")
    return f"{getattr(ctype, 'value', ctype)}:{component.name}"


async def lifecycle(
    ws: Path, tokenizer: Path, n: int, cache_size: int | None, seed: int, creates: int, warmup: int
) -> dict:
    """Start the workspace's Application (timed per component), measure RSS, make ``creates`` timed creates through
    the job tool path (after ``warmup`` untimed ones; their texts embedded beforehand), then close it (timed)."""
    from reme.components.base_component import BaseComponent

    starts: dict[str, float] = {}
    closes: dict[str, float] = {}
    original_start, original_close = BaseComponent.start, BaseComponent.close

    async def start(self):
        started = time.perf_counter()
        await original_start(self)
        starts[component_key(self)] = starts.get(component_key(self), 0.0) + time.perf_counter() - started

    async def close(self):
        started = time.perf_counter()
        await original_close(self)
        closes[component_key(self)] = closes.get(component_key(self), 0.0) + time.perf_counter() - started

    BaseComponent.start, BaseComponent.close = start, close
    model = HashedProjectionEmbedding(DIMENSIONS, seed=seed)
    app = build_application(ws, tokenizer, cache_size, model, stock=False)
    gc.collect()
    before = rss_mib()
    start_seconds, _ = await timed(app.start)
    gc.collect()
    after = rss_mib()
    memory = app.context.components["procedure_memory"]["default"]
    run = memory.grants.begin_attempt("bench-lifecycle", [f"{memory.workspace.trajectory_rel_dir}/bench-run.jsonl"])
    corpus = Corpus(seed=seed + 1)
    experiences = [corpus.experience(LIFECYCLE_FIRST_INDEX + i) for i in range(warmup + creates)]
    await memory.embedding_store.get_embeddings([t for exp in experiences for t in view_texts(exp)])
    calls_before = model.calls
    wall, cpu = [], []
    gc.collect()
    for i, exp in enumerate(experiences):
        seconds, cpu_seconds = await create_job(app, run, exp, f"bench-lifecycle-{i}")
        if i >= warmup:
            wall.append(seconds)
            cpu.append(cpu_seconds)
    provider_calls = model.calls - calls_before
    memory.grants.end_attempt(run)
    close_seconds, _ = await timed(app.close)
    view_load = sum(v for k, v in starts.items() if k.split(":")[0] in VIEW_LOAD_TYPES)
    return {
        "experiences": n,
        "start_seconds": start_seconds,
        "view_load_seconds": view_load,
        "reconcile_seconds": sum(v for k, v in starts.items() if k.startswith("procedure_memory:")),
        "component_start_seconds": starts,
        "rss_before_start_mib": before["rss_mib"],
        "rss_after_start_mib": after["rss_mib"],
        "create": {**summary_ms(wall), "cpu": summary_ms(cpu)},
        "provider_calls_during_creates": provider_calls,
        "close_seconds": close_seconds,
        "component_close_seconds": closes,
        "peak_rss_mib": rss_mib()["hwm_mib"],
    }


def run_lifecycle_child(
    ws: Path, tokenizer: Path, n: int, cache_size: int | None, seed: int, creates: int, warmup: int
) -> dict:
    """``lifecycle`` in a fresh Python process (same interpreter and environment), so its RSS and timings carry
    nothing of this process."""
    import subprocess

    config = json.dumps(
        {
            "ws": str(ws),
            "tokenizer": str(tokenizer),
            "n": n,
            "cache_size": cache_size,
            "seed": seed,
            "creates": creates,
            "warmup": warmup,
        }
    )
    proc = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--lifecycle-child",
            config,
            "--lifecycle-library",
            str(_corpus.LIBRARY),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"lifecycle child failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- report ---------------------------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report(r: dict) -> str:
    n = r["config"]["n"]
    lines = []
    row = "| {:<64} | {:>10} | {:>10} | {:<26} |".format
    lines.append(row("measurement", "p50", "p95", "target"))
    lines.append("|" + "-" * 66 + "|" + "-" * 12 + "|" + "-" * 12 + "|" + "-" * 28 + "|")
    search_target = TARGET_SEARCH_MS_100K if n >= 100_000 else TARGET_SEARCH_MS
    for view in VIEWS:
        s, st = r["search"][view], r["stock"].get(view)
        ok = s["component"]["p50_ms"] <= search_target
        lines.append(
            row(
                f"search {view} @ {n}: memory.reads.search",
                f"{s['component']['p50_ms']:.2f} ms",
                f"{s['component']['p95_ms']:.2f} ms",
                f"<= {search_target:g} ms  {verdict(ok)}",
            )
        )
        lines.append(row("  p99 of the row above", f"{s['component']['p99_ms']:.2f} ms", "", ""))
        lines.append(
            row(
                f"search {view} @ {n}: run_job procedure_search",
                f"{s['run_job']['p50_ms']:.2f} ms",
                f"{s['run_job']['p95_ms']:.2f} ms",
                f"<= {search_target:g} ms  {verdict(s['run_job']['p50_ms'] <= search_target)}",
            )
        )
        lines.append(
            row(
                "  plugin fusion only (Views.search, no file reads)",
                f"{s['fusion_only']['p50_ms']:.2f} ms",
                f"{s['fusion_only']['p95_ms']:.2f} ms",
                "",
            )
        )
        lines.append(
            row(
                "  plugin vector part (matrix top-50)",
                f"{s['vector_part']['p50_ms']:.2f} ms",
                f"{s['vector_part']['p95_ms']:.2f} ms",
                "",
            )
        )
        lines.append(
            row(
                "  plugin keyword part (BM25 top-50)",
                f"{s['keyword_part']['p50_ms']:.2f} ms",
                f"{s['keyword_part']['p95_ms']:.2f} ms",
                "",
            )
        )
        if st is None:
            continue
        lines.append(
            row(
                f"  stock local: vector+keyword+_rrf_merge ({st['hybrid']['count']} q)",
                f"{st['hybrid']['p50_ms']:.1f} ms",
                f"{st['hybrid']['p95_ms']:.1f} ms",
                f"stock/plugin {st['ratio_stock_over_plugin']:.0f}x",
            )
        )
        lines.append(
            row(
                f"  plugin Views.search on the same {st['hybrid']['count']} queries, interleaved",
                f"{st['plugin_fusion_same_queries']['p50_ms']:.2f} ms",
                f"{st['plugin_fusion_same_queries']['p95_ms']:.2f} ms",
                "",
            )
        )
        lines.append(
            row(
                "  stock local: vector_search alone",
                f"{st['vector_search']['p50_ms']:.1f} ms",
                f"{st['vector_search']['p95_ms']:.1f} ms",
                "",
            )
        )
    c100, cn = r["create"]["at_100"], r["create"]["at_n"]
    ratio = cn["p50_ms"] / c100["p50_ms"]
    lines.append(
        row(
            f"create @ {c100['experiences_before']} (procedure_create job)",
            f"{c100['p50_ms']:.2f} ms",
            f"{c100['p95_ms']:.2f} ms",
            "",
        )
    )
    lines.append(
        row(
            f"create @ {cn['experiences_before']} (procedure_create job)",
            f"{cn['p50_ms']:.2f} ms",
            f"{cn['p95_ms']:.2f} ms",
            f"ratio {ratio:.2f}x <= {TARGET_CREATE_RATIO:g}x  {verdict(ratio <= TARGET_CREATE_RATIO)}",
        )
    )
    cpu_ratio = cn["cpu"]["p50_ms"] / c100["cpu"]["p50_ms"]
    lines.append(
        row(
            f"  create CPU @ {c100['experiences_before']} / @ {cn['experiences_before']} (process time)",
            f"{c100['cpu']['p50_ms']:.2f} ms",
            f"{cn['cpu']['p50_ms']:.2f} ms",
            f"ratio {cpu_ratio:.2f}x <= {TARGET_CREATE_CPU_RATIO:g}x  {verdict(cpu_ratio <= TARGET_CREATE_CPU_RATIO)}",
        )
    )
    cj = r["create"].get("at_n_with_journal")
    if cj:
        ratio_j = cj["p50_ms"] / c100["p50_ms"]
        lines.append(
            row(
                f"create @ {cj['experiences_before']} + {cj['journal_records']} journal records",
                f"{cj['p50_ms']:.2f} ms",
                f"{cj['p95_ms']:.2f} ms",
                f"ratio {ratio_j:.2f}x <= {TARGET_CREATE_RATIO:g}x  {verdict(ratio_j <= TARGET_CREATE_RATIO)}",
            )
        )
        lines.append(
            row("  (small workspace, interleaved with the row above)", f"{cj['small_p50_same_run_ms']:.2f} ms", "", "")
        )
    first, cached = r["reindex"]["first"], r["reindex"]["cached"]
    # the reindex target is the spec's, for 10k experiences: larger runs report the time without a verdict
    reindex_target = (
        f"<= {TARGET_REINDEX_S:g} s  {verdict(cached['seconds'] <= TARGET_REINDEX_S)}"
        if n <= 10_000
        else f"(target {TARGET_REINDEX_S:g} s is at 10k)"
    )
    lines.append(
        row(
            f"reindex {cached['indexed']} (procedure_reindex, cached embeddings)",
            f"{cached['seconds']:.2f} s",
            "",
            reindex_target,
        )
    )
    lines.append(
        row(
            f"reindex {first['indexed']} (1st run, {first['provider_texts']} texts embedded by fake)",
            f"{first['seconds']:.2f} s",
            "",
            f"fake provider {first['provider_seconds']:.2f} s",
        )
    )
    for name, lc in r.get("lifecycle", {}).items():
        k = lc["experiences"]
        lines.append(
            row(
                f"{name} ({k}) in a fresh process: start (load views + reconcile)",
                f"{lc['start_seconds']:.2f} s",
                "",
                f"<= {TARGET_START_S:g} s at 100k  {verdict(lc['start_seconds'] <= TARGET_START_S)}"
                if k >= 100_000
                else "",
            )
        )
        lines.append(
            row(
                "  view load (file stores, BM25, graphs, embedding cache) / reconcile",
                f"{lc['view_load_seconds']:.2f} s",
                f"{lc['reconcile_seconds']:.2f} s",
                "",
            )
        )
        lines.append(
            row(
                "  RSS after start (MiB)",
                f"{lc['rss_after_start_mib']:.0f}",
                "",
                f"<= {TARGET_RSS_MIB:g} MiB at 100k  {verdict(lc['rss_after_start_mib'] <= TARGET_RSS_MIB)}"
                if k >= 100_000
                else "",
            )
        )
        lines.append(
            row(
                f"  create wall / CPU ({lc['create']['count']} creates)",
                f"{lc['create']['p50_ms']:.2f} ms",
                f"{lc['create']['cpu']['p50_ms']:.2f} ms",
                "",
            )
        )
        lines.append(
            row(
                f"  close after {lc['create']['count']} creates",
                f"{lc['close_seconds']:.2f} s",
                "",
                f"<= {TARGET_CLOSE_S:g} s at 100k  {verdict(lc['close_seconds'] <= TARGET_CLOSE_S)}"
                if k >= 100_000
                else "",
            )
        )
    calls = (
        r["search"][VIEWS[0]]["provider_calls_during_search"]
        + sum(r["stock"][v]["provider_calls_during_search"] for v in r["stock"])
        + c100["provider_calls_during_creates"]
        + (cj["provider_calls_during_creates"] if cj else 0)
    )
    lines.append("")
    lines.append(f"embedding provider calls inside timed search/create sections: {calls} (cache pre-warmed)")
    lines.append(
        f"fake provider cost: {r['info']['provider']['us_per_text']:.0f} us per text "
        f"({r['info']['provider']['texts']} texts in {r['info']['provider']['seconds']:.2f} s, all untimed "
        f"except the 1st reindex)"
    )
    for view in r["stock"]:
        lines.append(f"top-5 overlap stock vs plugin ({view}): {r['stock'][view]['top5_overlap_with_plugin']:.3f}")
    words = r["info"]["corpus_words"]
    lines.append(
        f"corpus: mean when-to-use {words['when_to_use_mean']:.0f} words, mean content "
        f"{words['content_mean']:.0f} words"
    )
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--n",
        type=int,
        default=None,
        help="experiences for search, create-at-N and reindex (default 10000; 1000 with --quick)",
    )
    p.add_argument("--quick", action="store_true", help="quick run: n=1000, fewer queries and creates")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="CI smoke run (seconds): n=200, small-n 50, 10 queries, 5 creates; tests/fixtures' library "
        "without ../shared",
    )
    p.add_argument("--lifecycle-library", help=argparse.SUPPRESS)
    p.add_argument("--queries", type=int, default=200, help="timed search queries per view (200)")
    p.add_argument("--stock-queries", type=int, default=30, help="timed queries per view on the stock store (30)")
    p.add_argument("--creates", type=int, default=50, help="timed creates at 100 and at N (50)")
    p.add_argument(
        "--small-n",
        type=int,
        default=SMALL_N,
        help=f"experiences in the small workspace, the create baseline ({SMALL_N}; 1000 for the scale runs)",
    )
    p.add_argument(
        "--lifecycle-creates",
        type=int,
        default=50,
        help="timed creates between start and close in the fresh-process lifecycle runs (50)",
    )
    p.add_argument("--lifecycle-child", help=argparse.SUPPRESS)
    p.add_argument(
        "--cache-size",
        type=int,
        default=None,
        help="embedding_store.procedure.max_cache_size (default: the shipped plugin.yaml value)",
    )
    p.add_argument(
        "--journal-creates",
        type=int,
        default=10,
        help="timed creates at N with an N-record operation journal (10; 0 skips)",
    )
    p.add_argument("--warmup", type=int, default=3, help="untimed creates before each timed create series (3)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", help="directory for the two workspaces (default: a new temp dir, removed afterwards)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir")
    p.add_argument("--json", help="also write the raw numbers to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.queries, args.stock_queries = min(args.queries, 50), min(args.stock_queries, 10)
        args.creates, args.journal_creates = min(args.creates, 20), min(args.journal_creates, 5)
    if args.smoke:
        args.queries, args.stock_queries = min(args.queries, 10), min(args.stock_queries, 3)
        args.creates, args.journal_creates = min(args.creates, 5), min(args.journal_creates, 2)
        args.lifecycle_creates, args.warmup = min(args.lifecycle_creates, 3), min(args.warmup, 1)
        args.small_n = min(args.small_n, 50)
        _corpus.LIBRARY = smoke_library()
    if args.lifecycle_library:  # the parent's corpus library (a smoke run's fixture)
        _corpus.LIBRARY = Path(args.lifecycle_library)
    if args.n is None:
        args.n = 200 if args.smoke else 1000 if args.quick else 10_000
    if args.n < 1 or args.queries < 1 or args.creates < 1 or args.small_n < 1 or args.lifecycle_creates < 1:
        p.error("--n, --small-n, --queries, --creates and --lifecycle-creates must be positive")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.lifecycle_child:
        c = json.loads(args.lifecycle_child)
        out = asyncio.run(
            lifecycle(
                Path(c["ws"]), Path(c["tokenizer"]), c["n"], c["cache_size"], c["seed"], c["creates"], c["warmup"]
            )
        )
        print(json.dumps(out))
        return 0
    bench = Bench(args)
    started = time.perf_counter()
    try:
        results = asyncio.run(bench.main())
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(bench.root, ignore_errors=True)
    results["info"]["total_seconds"] = time.perf_counter() - started
    results["info"]["machine"] = machine()
    results["info"]["date"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    results["info"]["command"] = " ".join(["python", *sys.argv])
    results["info"]["revision"] = revision()
    print(f"procedure-memory benchmark — {results['info']['date']} — {results['info']['machine']}")
    print(
        f"command: {results['info']['command']}   revision {results['info']['revision']}   "
        f"total {results['info']['total_seconds']:.0f} s"
    )
    load = results["info"]
    print(
        "load average (1/5/15 min) at start {:.2f}/{:.2f}/{:.2f}, at end {:.2f}/{:.2f}/{:.2f}\n".format(
            *load["loadavg_start"], *load["loadavg_end"]
        )
    )
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
