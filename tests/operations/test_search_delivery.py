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
async def test_max_tokens_keeps_the_best_results_whose_texts_fit_and_never_cuts_one(make_app, tmp_path, view, counter):

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


def ruled_corpus(ws, rules_of_stem) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The corpus written to ``ws``, every other experience with rules (``rules_of_stem`` its file's stem) after its
    steps, as an extraction writes them; returns the path -> (content before the rules, rules line by line) of those."""
    write_corpus(ws)
    given = {}
    for n, path in enumerate(sorted((ws / "procedures").glob("*.json"))):
        if n % 2:
            continue
        record = json.loads(path.read_text())
        rules = rules_of_stem(path.stem)
        given[f"procedures/{path.name}"] = (record["content"], rules)
        record["content"] += "\nRules:\n" + "\n".join(rules)
        path.write_text(json.dumps(record, indent=2))
    return given


@pytest.fixture
def counter(word_tokenizer) -> Tokenizer:
    """The configured tokenizer, loaded here to count independently of the plugin."""
    return Tokenizer.from_file(str(word_tokenizer))


def handed_tokens(counter: Tokenizer, result: dict) -> int:
    """The tokens of what a rules result hands (description, when-to-use and its rules, if any), counted with the
    configured tokenizer independently of the plugin."""
    parts = [result["description"], result["when-to-use"]] + ([result["rules"]] if result["rules"] else [])
    return len(counter.encode("\n".join(parts), add_special_tokens=False).ids)


def two_and_one(stem: str) -> tuple[str, ...]:
    return (f"- Rule one of {stem} (2 trajectories).", "- Rule two (1 trajectory).")


def three_and_one(stem: str) -> tuple[str, ...]:
    return (f"- Rule of {stem} (3 trajectories).", "- A thin rule (1 trajectory).")


@pytest.mark.parametrize("view", VIEWS)
async def test_detail_rules_hands_each_result_s_rules_without_its_steps_and_the_budget_counts_them(
    make_app, tmp_path, view, counter
):
    ws = tmp_path / "ws"
    given = ruled_corpus(ws, two_and_one)
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
                "rules": "\n".join(given[r["path"]][1]) if r["path"] in given else "",
            }
            for r in full["results"]
        ]
        assert 0 < sum(bool(r["rules"]) for r in ruled["results"]) < ALL  # with rules and without
        assert all("Rules:" not in r["rules"] and "1." not in r["rules"] for r in ruled["results"])  # no steps
        counts = [handed_tokens(counter, r) for r in ruled["results"]]
        budget = sum(counts[:3])
        ok, budgeted = await run_job(
            app, "procedure_search", query=QUERY, index=view, limit=ALL, detail="rules", max_tokens=budget
        )
        assert ok and budgeted["results"] == ruled["results"][:3]
        assert budgeted["token_budget"] == {"max_tokens": budget, "tokens": budget, "left_out": ALL - 3}
        ok, whole = await run_job(app, "procedure_search", query=QUERY, index=view, limit=ALL, max_tokens=budget)
        assert ok and len(whole["results"]) < 3  # whole experiences are counted whole: fewer fit


@pytest.mark.parametrize("view", VIEWS)
async def test_min_evidence_leaves_out_thin_rules_of_each_result_and_the_budget_counts_what_is_handed(
    make_app, tmp_path, view, counter
):
    ws = tmp_path / "ws"
    given = ruled_corpus(ws, three_and_one)
    async with make_app(workspace=ws) as app:
        ok, full = await run_job(app, "procedure_search", query=QUERY, index=view, limit=ALL)
        assert ok and full["min_evidence"] == 0 and all("rules_left_out" not in r for r in full["results"])
        ok, evident = await run_job(app, "procedure_search", query=QUERY, index=view, limit=ALL, min_evidence=3)
        assert ok and evident["min_evidence"] == 3
        assert [(r["path"], r["version"], r["scores"]) for r in evident["results"]] == [
            (r["path"], r["version"], r["scores"]) for r in full["results"]
        ]  # the same search: only what each result hands differs
        for whole, thinned in zip(full["results"], evident["results"]):
            if whole["path"] not in given:
                assert thinned == whole
                continue
            steps, (strong, thin) = given[whole["path"]]
            assert whole["experience"]["content"] == f"{steps}\nRules:\n{strong}\n{thin}"
            assert thinned["experience"] == {**whole["experience"], "content": f"{steps}\nRules:\n{strong}"}
            assert thinned["rules_left_out"] == 1
        ok, bare = await run_job(app, "procedure_search", query=QUERY, index=view, limit=ALL, min_evidence="4")
        assert all(r["experience"]["content"] == given[r["path"]][0] for r in bare["results"] if r["path"] in given)
        assert {r.get("rules_left_out") for r in bare["results"] if r["path"] in given} == {2}

        ok, ruled = await run_job(
            app, "procedure_search", query=QUERY, index=view, limit=ALL, detail="rules", min_evidence=3
        )
        assert ok and [r["rules"] for r in ruled["results"]] == [
            given[r["path"]][1][0] if r["path"] in given else "" for r in ruled["results"]
        ]
        handed = [handed_tokens(counter, r) for r in ruled["results"]]
        budget = sum(handed[:3])
        ok, budgeted = await run_job(
            app,
            "procedure_search",
            query=QUERY,
            index=view,
            limit=ALL,
            detail="rules",
            min_evidence=3,
            max_tokens=budget,
        )
        assert ok and budgeted["results"] == ruled["results"][:3]
        assert budgeted["token_budget"] == {"max_tokens": budget, "tokens": budget, "left_out": ALL - 3}
        assert any(r["path"] in given for r in budgeted["results"])  # a thinned result was counted thinned
        ok, unthinned = await run_job(
            app, "procedure_search", query=QUERY, index=view, limit=ALL, detail="rules", max_tokens=budget
        )
        assert ok and len(unthinned["results"]) < 3  # every rule counted: fewer fit

        ok, read = await run_job(app, "procedure_read", path=next(iter(given)))
        steps, rules = given[next(iter(given))]
        assert ok and read["experience"]["content"] == steps + "\nRules:\n" + "\n".join(rules)  # the file keeps them


async def test_the_setting_is_the_default_evidence_and_the_extraction_agent_sees_every_rule(make_app, tmp_path):
    ws = tmp_path / "ws"
    given = ruled_corpus(ws, three_and_one)
    async with make_app(
        workspace=ws, components={"procedure_memory": {"default": {"search": {"min_evidence": 3}}}}
    ) as app:
        assert memory_of(app).settings.search.min_evidence == 3
        ok, default = await run_job(app, "procedure_search", query=QUERY, limit=ALL, min_relevance=0)
        assert ok and default["min_evidence"] == 3
        assert {r.get("rules_left_out") for r in default["results"] if r["path"] in given} == {1}
        ok, empty = await run_job(app, "procedure_search", query=QUERY, limit=ALL, min_relevance=0, min_evidence="")
        assert ok and empty["min_evidence"] == 3  # the CLI's "default"
        ok, given_zero = await run_job(app, "procedure_search", query=QUERY, limit=ALL, min_relevance=0, min_evidence=0)
        assert ok and given_zero["min_evidence"] == 0 and all("rules_left_out" not in r for r in given_zero["results"])
        # the extraction agent revises every rule it has, the thin ones too
        run = memory_of(app).grants.begin_attempt("req", [add_trajectory(app)])
        ok, agent = await call_tool(app, run, "procedure_search", query=QUERY, detail="full")
        assert ok and agent["min_evidence"] == 0
        shown = [r for r in agent["results"] if r["path"] in given]
        assert shown and all(r["content"].endswith("(1 trajectory).") for r in shown)
        ok, refused = await run_job(app, "procedure_search", query=QUERY, min_evidence=-1)
        assert not ok and "min_evidence" in refused["error"]["message"]
