"""A search in one worker call (issue 9, service): the same candidates and answers as the two branches run apart.

``Views.search`` runs BM25, the matrix scan, the fusion and the reading of the result files in one scan-thread call.
These tests check it against the parts called one by one on the same real stores: the fused list against
``keyword_paths`` + ``nearest_paths`` + ``rrf_fuse``, and the answer against a sequential reader of the fused list
(skip pending files and missing ones, exclude and report invalid ones, stop at ``limit``).
"""

import json
import threading
from contextlib import asynccontextmanager

import pytest
from reme_procedure_memory.search import views as views_module
from reme_procedure_memory.search.fusion import rrf_fuse
from reme_procedure_memory.schema import VIEW_NAMES
from reme_procedure_memory.search.views import MAX_CANDIDATES
from reme_procedure_memory.storage.experiences import ExperienceFiles

from conftest import memory_of, run_job
from helpers.corpus import corpus, write_corpus

QUERIES = [query for _, _, query in corpus()[:8]] + ["deploy", "zebra nothing matches this"]


async def reference_fused(memory, view: str, query: str, limit: int, weight: float):
    """The fused candidates from the branches called apart (as before the one-call search)."""
    store = memory.workspace.views.stores[view]
    candidates = min(MAX_CANDIDATES, max(50, limit * 5))
    keyword = store.keyword_paths(query, candidates) if weight < 1 else []
    vector = (
        store.nearest_paths((await memory.workspace.views.embeddings.embed([query]))[0], candidates)
        if weight > 0
        else []
    )
    return rrf_fuse(vector, keyword, weight)


def reference_answer(ws, fused, pending: set[str], limit: int) -> list[tuple[str, float, dict]]:
    """(path, score, experience) a sequential reader returns: pending, missing and invalid files skipped."""
    out = []
    for hit in fused:
        if len(out) == limit:
            break
        file = ws / hit.path
        if hit.path in pending or not file.exists():
            continue
        try:
            experience = json.loads(file.read_bytes())
        except ValueError:
            continue
        out.append((hit.path, hit.score, experience))
    return out


@asynccontextmanager
async def corpus_search(make_app, tmp_path, view: str, query: str):
    """A started app over the test corpus, with the reference fused candidates of ``query`` in ``view``."""
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        memory = memory_of(app)
        yield app, memory, ws, await reference_fused(memory, view, query, 5, memory.settings.vector_weight)


def answered(ans) -> list[tuple[str, float, dict]]:
    return [(r["path"], r["score"], r["experience"]) for r in ans["results"]]


@pytest.mark.slow
@pytest.mark.parametrize("beside", [False, True], ids=["bm25-after-scan", "bm25-beside-scan"])
@pytest.mark.parametrize("weight", [0.0, 0.7, 1.0])
async def test_one_call_search_fuses_the_same_candidates_as_the_branches_apart(
    make_app, tmp_path, weight, beside, monkeypatch
):
    if beside:  # a large matrix scores BM25 in a keyword thread beside the scan: the same candidates
        monkeypatch.setattr(views_module, "PARALLEL_ROWS", 0)
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        memory = memory_of(app)
        for view in VIEW_NAMES:
            for query in QUERIES:
                for limit in (1, 5, 60):
                    fused, error = await memory.workspace.views.search(view, query, limit, weight)
                    assert error is None
                    assert fused == await reference_fused(memory, view, query, limit, weight)


async def test_answer_pages_past_missing_and_invalid_files_like_a_sequential_reader(make_app, tmp_path):
    view, query = "when_to_use_content", corpus()[5][2]
    async with corpus_search(make_app, tmp_path, view, query) as (app, memory, ws, fused):
        for limit in (1, 3, 5, len(fused), len(fused) + 10):
            ok, ans = await run_job(app, "procedure_search", query=query, index=view, limit=limit)
            assert ok and answered(ans) == reference_answer(ws, fused, set(), limit)
        # by hand, after indexing: the 1st hit deleted, the 2nd made invalid, the 4th deleted
        (ws / fused[0].path).unlink()
        (ws / fused[1].path).write_text("{not json")
        (ws / fused[3].path).unlink()
        for limit in (1, 2, 5, len(fused)):
            ok, ans = await run_job(app, "procedure_search", query=query, index=view, limit=limit)
            assert ok and len(ans["results"]) == min(limit, len(fused) - 3)
            assert answered(ans) == reference_answer(ws, fused, set(), limit)
            # the invalid file is excluded and reported, the deleted ones are just absent
            assert [p["path"] for p in ans["pending_indexes"]] == [fused[1].path]
            assert ans["index_complete"] is False


async def test_a_file_turning_pending_while_the_page_is_read_is_replaced_by_the_next_candidate(
    make_app, tmp_path, monkeypatch
):
    """The one case of a second worker call: a page file read valid, but pending by the time the answer is built."""
    view, query = "when_to_use", corpus()[2][2]
    async with corpus_search(make_app, tmp_path, view, query) as (app, memory, ws, fused):
        turning = fused[1].path
        real_read = ExperienceFiles.read
        threads = []

        def read(self, rel_path):  # the real read; meanwhile, another task marks the file pending
            threads.append(threading.current_thread().name)
            item = real_read(self, rel_path)
            if rel_path == turning:
                memory.workspace.pending.mark(turning, item.version, "index failed meanwhile")
            return item

        monkeypatch.setattr(ExperienceFiles, "read", read)
        ok, ans = await run_job(app, "procedure_search", query=query, index=view, limit=5)
        assert ok and answered(ans) == reference_answer(ws, fused, {turning}, 5)
        assert len(ans["results"]) == 5 and turning not in [r["path"] for r in ans["results"]]
        assert [p["path"] for p in ans["pending_indexes"]] == [turning]
        assert len(threads) == 6 and threading.current_thread().name not in threads  # 5 + 1 more, off the loop


def test_steps_load_the_same_prompts_as_reme_with_one_lookup_per_class():
    """Steps are built per request; their class prompts are looked up once per class (``ClassPrompts``), with the
    result ReMe's own lookup gives (here for a ReMe step class that has a prompt file, and for the plugin's)."""
    from reme.components.prompt_handler import PromptHandler
    from reme.steps.evolve.auto_memory import AutoMemoryStep
    from reme_procedure_memory.jobs.steps import ClassPrompts, ProcedureSearchStep

    for step in (AutoMemoryStep, ProcedureSearchStep):
        expected = PromptHandler(language="en")
        for cls in reversed(step.__mro__):
            expected.load_prompt_by_class(cls)
        expected.load_prompt_dict({"extra": "override", "ignored": 3})
        for _ in range(2):  # the first lookup fills the cache, the second uses it
            cached = ClassPrompts(language="en")
            for cls in reversed(step.__mro__):
                cached.load_prompt_by_class(cls)
            cached.load_prompt_dict({"extra": "override", "ignored": 3})
            assert cached.data == expected.data
    assert len(PromptHandler().load_prompt_by_class(AutoMemoryStep).data) > 0  # a class with prompts was checked
    built = ProcedureSearchStep(procedure_memory="default", prompt_dict={"extra": "override"})
    assert isinstance(built.prompt, ClassPrompts) and built.prompt.data == {"extra": "override"}
