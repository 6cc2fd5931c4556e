"""``procedure_search`` delivery on real views: the relevance floor (argument and setting), ``tools=`` and
``max_tokens=``, ``detail=rules`` (and the budget counting what it hands), each checked against the unfiltered answer
of the same search; the extraction agent's searches keep
no floor; without vectors relevance is the keyword evidence. The fake embedding is plumbing only (the default
floor's calibration is tested on the embedded model in ``tests/search/test_relevance_floor.py``)."""

from __future__ import annotations

import json
import re

import pytest
from tokenizers import Tokenizer

from conftest import add_trajectory, call_tool, memory_of, run_job
from helpers.corpus import corpus, write_corpus

VIEWS = ["when_to_use", "when_to_use_content"]
QUERY = corpus()[4][2]
ALL = 40  # the corpus: every experience in one answer


def floor_of(relevances: list[float]) -> float:
    """A floor that splits ``relevances`` (between its middle values)."""
    ordered = sorted(set(relevances))
    middle = len(ordered) // 2
    return (ordered[middle - 1] + ordered[middle]) / 2


def paths(answer: dict) -> list[str]:
    return [r["path"] for r in answer["results"]]


@pytest.mark.parametrize("view", VIEWS)
async def test_the_floor_keeps_exactly_the_results_at_or_above_it_in_rank_order(make_app, tmp_path, view):
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        ok, everything = await run_job(app, "procedure_search", query=QUERY, index=view, limit=ALL)
        assert ok and len(everything["results"]) == ALL and everything["min_relevance"] == 0
        floor = floor_of([r["relevance"] for r in everything["results"]])
        above = [r for r in everything["results"] if r["relevance"] >= floor]
        assert 0 < len(above) < ALL
        ok, floored = await run_job(app, "procedure_search", query=QUERY, index=view, limit=ALL, min_relevance=floor)
        assert ok and floored["min_relevance"] == floor and floored["results"] == above
        # a small limit pages past the candidates below the floor, unread
        ok, first = await run_job(app, "procedure_search", query=QUERY, index=view, limit=2, min_relevance=floor)
        assert ok and first["results"] == above[:2]
        ok, none = await run_job(app, "procedure_search", query=QUERY, index=view, min_relevance=1)
        assert ok and none["results"] == [] and none["status"] == "ok"


async def test_the_setting_is_the_default_floor_and_an_argument_overrides_it(make_app, tmp_path):
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(
        workspace=ws, components={"procedure_memory": {"default": {"search": {"min_relevance": 0.99}}}}
    ) as app:
        assert memory_of(app).settings.search.min_relevance == 0.99
        ok, default = await run_job(app, "procedure_search", query=QUERY, limit=ALL)
        assert ok and default["min_relevance"] == 0.99
        assert all(r["relevance"] >= 0.99 for r in default["results"]) and len(default["results"]) < 5
        ok, given = await run_job(app, "procedure_search", query=QUERY, limit=5, min_relevance="0")
        assert ok and given["min_relevance"] == 0 and len(given["results"]) == 5
        ok, empty = await run_job(app, "procedure_search", query=QUERY, min_relevance="")  # the CLI's "default"
        assert ok and empty["min_relevance"] == 0.99
        # the extraction agent's own searches keep no floor unless it asks for one
        run = memory_of(app).grants.begin_attempt("req", [add_trajectory(app)])
        ok, agent = await call_tool(app, run, "procedure_search", query=QUERY, detail="full")
        assert ok and agent["min_relevance"] == 0 and len(agent["results"]) == 5
        ok, asked = await call_tool(app, run, "procedure_search", query=QUERY, min_relevance=0.99)
        assert ok and asked["min_relevance"] == 0.99 and len(asked["results"]) < 5


def functions_named(content: str) -> set[str]:
    return set(re.findall(r"\b([a-z]+(?:_[a-z]+)+)\b", content))


@pytest.mark.parametrize("view", VIEWS)
async def test_tools_keeps_exactly_the_experiences_whose_content_names_one(make_app, tmp_path, view):
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        ok, everything = await run_job(app, "procedure_search", query=QUERY, index=view, limit=ALL)
        named = [functions_named(r["experience"]["content"]) for r in everything["results"]]
        counts = {name: sum(name in n for n in named) for n in named for name in n}
        tool = next(name for name, count in sorted(counts.items()) if 1 < count < ALL // 2)
        other = next(name for name, count in sorted(counts.items()) if count == 1 and name != tool)
        for tools in ([tool], [tool, other], f"{tool},{other}", [f"SomeAPI.{tool}"]):
            wanted = {tool, other} if other in str(tools) else {tool}
            expected = [r for r, n in zip(everything["results"], named) if n & wanted]
            ok, answer = await run_job(app, "procedure_search", query=QUERY, index=view, limit=ALL, tools=tools)
            assert ok and answer["results"] == expected and expected, tools
        ok, limited = await run_job(app, "procedure_search", query=QUERY, index=view, limit=1, tools=[tool])
        assert ok and paths(limited) == [next(r["path"] for r, n in zip(everything["results"], named) if tool in n)]
        ok, none = await run_job(app, "procedure_search", query=QUERY, index=view, tools=["no_experience_names_this"])
        assert ok and none["results"] == []


@pytest.mark.parametrize("view", VIEWS)
async def test_max_tokens_keeps_the_best_results_whose_texts_fit_and_never_cuts_one(
    make_app, tmp_path, view, word_tokenizer
):
    counter = Tokenizer.from_file(str(word_tokenizer))  # the configured tokenizer, counted independently

    def tokens(result) -> int:
        e = result["experience"]
        return len(
            counter.encode("\n".join((e["description"], e["when-to-use"], e["content"])), add_special_tokens=False).ids
        )

    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        ok, five = await run_job(app, "procedure_search", query=QUERY, index=view, limit=5)
        counts = [tokens(r) for r in five["results"]]
        assert ok and "token_budget" not in five and len(set(counts)) > 1
        for budget, kept in (
            (sum(counts[:2]), 2),
            (sum(counts[:2]) + counts[2] - 1, 2),
            (sum(counts), 5),
            (10**6, 5),
            (counts[0], 1),
            (counts[0] - 1, 0),
        ):
            ok, answer = await run_job(app, "procedure_search", query=QUERY, index=view, limit=5, max_tokens=budget)
            assert ok and answer["results"] == five["results"][:kept], budget
            assert answer["token_budget"] == {"max_tokens": budget, "tokens": sum(counts[:kept]), "left_out": 5 - kept}


async def test_delivery_arguments_combine_floor_then_tools_then_budget(make_app, tmp_path):
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        ok, everything = await run_job(app, "procedure_search", query=QUERY, limit=ALL)
        floor = floor_of([r["relevance"] for r in everything["results"]])
        tool = sorted(set.union(*(functions_named(r["experience"]["content"]) for r in everything["results"][:3])))[0]
        expected = [
            r
            for r in everything["results"]
            if r["relevance"] >= floor and tool in functions_named(r["experience"]["content"])
        ][:3]
        ok, answer = await run_job(
            app, "procedure_search", query=QUERY, limit=3, min_relevance=floor, tools=[tool], max_tokens=10**6
        )
        assert ok and answer["results"] == expected and expected
        assert answer["token_budget"]["left_out"] == 0


async def test_without_vectors_relevance_is_the_keyword_evidence(make_app, tmp_path):
    ws = tmp_path / "ws"
    write_corpus(ws)
    async with make_app(workspace=ws) as app:
        memory = memory_of(app)
        app.context.components["as_embedding"]["procedure"].model.fail_with = RuntimeError("provider down")
        ok, answer = await run_job(app, "procedure_search", query=QUERY, limit=3)
        assert ok and answer["vector_search"]["available"] is False and answer["results"]
        index = memory.workspace.views.stores["when_to_use_content"].keyword_index
        self_score = index.scored_search(QUERY, 1).self_score
        for result in answer["results"]:
            assert result["scores"]["vector"] is None
            assert result["relevance"] == pytest.approx(min(1.0, result["scores"]["keyword"] / self_score), abs=1e-4)
        assert any(0 < r["relevance"] < 1 for r in answer["results"])


def give_rules(ws) -> dict[str, str]:
    """Every other experience of the written corpus gets rules after its steps, as an extraction writes them; returns
    the path -> rules of those that have some."""
    rules = {}
    for n, path in enumerate(sorted((ws / "procedures").glob("*.json"))):
        if n % 2:
            continue
        record = json.loads(path.read_text())
        rules[f"procedures/{path.name}"] = f"- Rule one of {path.stem} (2 trajectories).\n- Rule two (1 trajectory)."
        record["content"] += "\nRules:\n" + rules[f"procedures/{path.name}"]
        path.write_text(json.dumps(record, indent=2))
    return rules


@pytest.mark.parametrize("view", VIEWS)
async def test_detail_rules_hands_each_result_s_rules_without_its_steps_and_the_budget_counts_them(
    make_app, tmp_path, view, word_tokenizer
):
    counter = Tokenizer.from_file(str(word_tokenizer))  # the configured tokenizer, counted independently

    def handed(result) -> int:
        parts = [result["description"], result["when-to-use"]] + ([result["rules"]] if result["rules"] else [])
        return len(counter.encode("\n".join(parts), add_special_tokens=False).ids)

    ws = tmp_path / "ws"
    write_corpus(ws)
    rules = give_rules(ws)
    async with make_app(workspace=ws) as app:
        ok, full = await run_job(app, "procedure_search", query=QUERY, index=view, limit=ALL)
        assert ok and "detail" not in full
        ok, ruled = await run_job(app, "procedure_search", query=QUERY, index=view, limit=ALL, detail="rules")
        assert ok and ruled["detail"] == "rules" and len(ruled["results"]) == ALL
        assert ruled["results"] == [
            {
                "path": r["path"],
                "version": r["version"],
                "relevance": r["relevance"],
                "description": r["experience"]["description"],
                "when-to-use": r["experience"]["when-to-use"],
                "rules": rules.get(r["path"], ""),
            }
            for r in full["results"]
        ]
        assert 0 < sum(bool(r["rules"]) for r in ruled["results"]) < ALL  # with rules and without
        assert all("Rules:" not in r["rules"] and "1." not in r["rules"] for r in ruled["results"])  # no steps
        counts = [handed(r) for r in ruled["results"]]
        budget = sum(counts[:3])
        ok, budgeted = await run_job(
            app, "procedure_search", query=QUERY, index=view, limit=ALL, detail="rules", max_tokens=budget
        )
        assert ok and budgeted["results"] == ruled["results"][:3]
        assert budgeted["token_budget"] == {"max_tokens": budget, "tokens": budget, "left_out": ALL - 3}
        ok, whole = await run_job(app, "procedure_search", query=QUERY, index=view, limit=ALL, max_tokens=budget)
        assert ok and len(whole["results"]) < 3  # whole experiences are counted whole: fewer fit
