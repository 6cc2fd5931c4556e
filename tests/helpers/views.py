"""Probes of the views: what each holds, every result's branch scores, a fresh rebuild to compare with."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
from pathlib import Path

import numpy as np

from conftest import add_trajectory, call_tool, memory_of, run_job
from helpers.corpus import corpus, write_corpus


async def held_reindex(app) -> tuple[asyncio.Task, asyncio.Event]:
    """A ``procedure_reindex`` of ``app`` started and held where it has cleared the views and is indexing them again:
    (its task, the gate that lets it go on)."""
    views = memory_of(app).workspace.views
    original, entered, gate = views.index, asyncio.Event(), asyncio.Event()

    async def held_index(items):
        entered.set()
        await gate.wait()
        return await original(items)

    views.index = held_index
    reindex = asyncio.create_task(app.run_job("procedure_reindex"))
    await asyncio.wait_for(entered.wait(), 10)
    return reindex, gate


def view_dirs(ws):
    return sorted((ws / "metadata" / "file_store").glob("*.view"))


async def search_all(app, views=("when_to_use", "when_to_use_content")):
    """Every view's full ranking for a few queries: what a correct view must answer."""
    out = {}
    for view in views:
        for _, _, query in corpus()[:6]:
            ok, ans = await run_job(app, "procedure_search", query=query, index=view, limit=50)
            assert ok and ans["index_complete"], ans
            out[(view, query)] = [(r["path"], r["version"], round(r["score"], 12)) for r in ans["results"]]
    return out


def view_content(app) -> dict:
    """What each view holds, independent of row and slot order: every record's indexed version and whether it has a
    vector, and every record's BM25 and cosine score for a few queries (equal content = equal rankings, ties aside)."""
    from helpers import hashed_vector

    memory, out = memory_of(app), {}
    for view, store in memory.workspace.views.stores.items():
        out[view] = {"indexed": memory.workspace.views.indexed(view)}
        for _, _, query in corpus()[:6]:
            out[view][query] = (
                dict(store.keyword_paths(query, 500)),
                {p: round(s, 12) for p, s in store.nearest_paths(hashed_vector(query, 64), 500)},
            )
    return out


WORDS = (
    "queue worker deploy rollback cache token index shard node cluster replica lease quota bucket ticket flight "
    "price account portfolio engine door brake fuel tire message file folder"
).split()


async def create_some(app, count, prefix="c"):
    """``count`` experiences with distinct texts (random words: no two score alike)."""
    memory = memory_of(app)
    run = memory.grants.begin_attempt("req", [add_trajectory(app)])
    rng = random.Random(prefix)
    for i in range(count):
        words = rng.sample(WORDS, 9)
        ok, ans = await call_tool(
            app,
            run,
            "procedure_create",
            filename=f"{prefix}-{i}.json",
            operation_key=f"{prefix}{i}",
            description="d",
            when_to_use="when the " + " ".join(words[:5]) + " fails",
            content="check the " + " then the ".join(words[3:]),
        )
        assert ok, ans


VIEWS = ("when_to_use", "when_to_use_content")


DERIVED = ("file_store", "file_graph", "keyword_index", "embedding_store")  # metadata/<kind>: rebuildable


def fresh_copy(ws: Path, target: Path) -> Path:
    """A copy of the workspace without its derived state: what a rebuild from the files alone gives."""
    shutil.copytree(ws, target)
    for kind in DERIVED:
        shutil.rmtree(target / "metadata" / kind, ignore_errors=True)
    return target


async def branch_scores(app, queries) -> dict:
    """Per view and query: every result's path with its vector and BM25 scores (what a correct view answers, ties
    aside: ranks are left out)."""
    out = {}
    for view in VIEWS:
        for query in queries:
            ok, ans = await run_job(app, "procedure_search", query=query, index=view, limit=50)
            assert ok and ans["index_complete"], ans
            out[(view, query)] = {
                r["path"]: (
                    None if r["scores"]["vector"] is None else round(r["scores"]["vector"], 6),
                    None if r["scores"]["keyword"] is None else round(r["scores"]["keyword"], 6),
                )
                for r in ans["results"]
            }
    return out


async def indexed_corpus(make_app, ws: Path) -> Path:
    """The corpus of ``test_views`` placed, indexed and persisted (the first snapshot): later changes go to the
    views' logs."""
    write_corpus(ws)
    async with make_app(workspace=ws):
        pass
    return ws


def edit_by_hand(ws: Path, names: list[str]) -> None:
    for name in names:
        path = ws / "procedures" / name
        record = json.loads(path.read_text())
        record["when-to-use"] += " after a schema migration"
        record["content"] += "\nThen re-run the migration check."
        path.write_text(json.dumps(record, indent=2))


def brute_force(truth: dict, rows: dict, query, limit: int) -> list[tuple[str, float]]:
    """The exact top ``limit``: float64 cosine of the stored float16 vectors, ties by row."""
    q = np.asarray(query, dtype=np.float64) / np.linalg.norm(query)
    scored = []
    for item, vec in truth.items():
        v = np.asarray(vec, dtype=np.float16).astype(np.float64)
        norm = np.linalg.norm(v)
        scored.append((-(v @ q / norm if norm else 0.0), rows[item], item))
    return [(item, -score) for score, _, item in sorted(scored)[:limit]]
