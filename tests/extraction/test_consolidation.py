"""Consolidated experiences on the scripted agent and the real jobs.

- the extraction prompt asks for one general procedure (placeholders, conditions, a value only as an example) with
  the environment's conventions as rules carrying their evidence, and for revisions that fold new evidence in
  rather than append a case;
- the extractor's own advice is off unless ``extraction.advice`` is set;
- an update may take an experience only to ``extraction.grow_limit`` tokens (accepted up to its ceiling with
  ``extraction.grow_slack``), or leave it no larger than it was
  (``consolidate_required``; nothing is written); the prompt states the bound;
- the segment's message shows the listed experiences naming a function it calls whole, so they are revised without
  a read.
"""

from __future__ import annotations

from reme_procedure_memory.extraction.prompt import system_prompt
from reme_procedure_memory.schema import ADVICE_MARKER
from reme_procedure_memory.settings import ExtractionSettings, TokenLimits

from conftest import add_trajectory, call_tool, import_file, memory_of
from helpers.corpus import JSONL, write

FIELDS = {
    "description": "Drain a node",
    "when_to_use": "Before rebooting a cluster node",
    "content": "Cordon the node, drain workloads, then reboot.",
}
FIELDS_IN_FILE = ("description", "when-to-use", "content")


def test_the_prompt_asks_for_general_procedures_with_rules_and_folded_revisions():
    system = system_prompt(TokenLimits())
    flat = " ".join(system.split())  # sentences may wrap anywhere
    assert "arguments as placeholders" in flat and "At most one short example per step" in flat
    assert 'Rules, after "Rules:"' in flat and "(2 trajectories)" in flat  # a rule carries its evidence
    assert "never a remark about one run" in flat
    # a step keeps its condition; a call not made is a rule only with the phrasing that led to it
    assert 'a step the user asked for in so many words ("first open X") holds only when asked' in flat
    assert "A call not made is a rule only with the phrasing that led to it and names that call" in flat
    # the wordings that led to a call and those that did not, side by side (a solver generalised one side)
    assert "where other wordings of the request did lead to it, the rule names both" in flat
    assert 'never "X alone", "no check is needed" or "X is not called"' in flat
    # a rule that rules out a look had agents act blind downstream (docs/decisions.md#consolidated-experiences)
    assert "a call that only looks (a listing, a read, where the agent stands) is never ruled out" in flat
    # a rule may be handed without the steps (procedure_search detail=rules): it carries its own case
    assert "A rule is read without the procedure, so it states the case it holds in" in flat
    assert "folding the evidence into its general procedure" in flat
    assert "never adding this trajectory's values as another case" in flat
    assert "{" not in system and "}" not in system  # every placeholder filled


def test_the_extractors_own_advice_is_off_unless_asked_for():
    off, on = system_prompt(TokenLimits()), system_prompt(TokenLimits(), advice=True)
    assert ADVICE_MARKER not in off and "Add no step, rule or advice the trajectory does not show." in off
    assert f'"{ADVICE_MARKER}"' in on and "Add no step, rule or advice" not in on
    assert off.replace(off.split("narration")[1].split("Skip")[0], "") == on.replace(
        on.split("narration")[1].split("Skip")[0], ""
    )  # only the advice sentence differs


async def test_the_advice_setting_reaches_the_agents_system_prompt(make_app, tmp_path):
    systems = []

    async def nothing(tools, prompt, kwargs):
        systems.append(kwargs["system_prompt"])
        return "Nothing reusable."

    for advice in (False, True):
        components = {"procedure_memory": {"default": {"extraction": {"advice": advice}}}}
        async with make_app(workspace=tmp_path / f"ws-{advice}", components=components, scripts=[nothing]) as app:
            ok, answer = await import_file(app, write(tmp_path, "run.jsonl", JSONL), request_id=f"r-{advice}")
            assert ok and answer["status"] == "complete", answer
    assert [ADVICE_MARKER in s for s in systems] == [False, True]


async def test_updates_grow_an_experience_only_to_the_grow_limit(make_app):
    async with make_app() as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req", [add_trajectory(app)], segment=0)
        ok, created = await call_tool(app, run, "procedure_create", filename="drain-node.json", **FIELDS)
        assert ok, created
        now = sum(await memory.workspace.tokens.acount_many(list(FIELDS.values())))
    limit = now + 3  # room for a short addition, not for a case of a few words
    # the agent is told the target; acceptance allows extraction.grow_slack beyond it
    ceiling = ExtractionSettings(grow_limit=limit, grow_slack=0.2).grow_ceiling()
    assert ceiling == int(limit * 1.2)
    components = {"procedure_memory": {"default": {"extraction": {"grow_limit": limit, "grow_slack": 0.2}}}}
    async with make_app(components=components) as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req-2", [add_trajectory(app, "run-2.jsonl")], segment=0)
        at = {"path": created["path"], "expected_version": created["version"]}
        past = " ".join(["word"] * (ceiling - now + 1))  # one token past the ceiling
        ok, grown = await call_tool(app, run, "procedure_update", **at, content_append=past)
        assert not ok and grown["error"]["code"] == "consolidate_required", grown
        assert grown["tokens"] == ceiling + 1 and grown["limit"] == limit
        assert f"at most {limit}." in grown["error"]["message"]  # the target, as the prompt states it
        message = grown["error"]["message"]
        assert message.startswith("Nothing was written: with the addition") and "general procedure" in message
        assert "procedure_read it first" in message
        longer = FIELDS["content"] + " Then uncordon it, check the pods, and watch the node for ten minutes."
        ok, rewritten = await call_tool(app, run, "procedure_update", **at, content=longer)  # a rewrite alike
        assert not ok and rewritten["error"]["code"] == "consolidate_required", rewritten
        assert rewritten["error"]["message"].startswith("Nothing was written: with this update")
        stored = memory.reads.experience(created["path"])
        assert stored["version"] == created["version"] and stored["experience"]["content"] == FIELDS["content"]
        at_ceiling = " ".join(["word"] * (ceiling - now))
        ok, small = await call_tool(app, run, "procedure_update", **at, content_append=at_ceiling)
        assert ok and small["status"] == "updated", small  # past the target, within its ceiling
        stored = memory.reads.experience(created["path"])["experience"]
        assert sum(await memory.workspace.tokens.acount_many([stored[k] for k in FIELDS_IN_FILE])) == ceiling
        system = system_prompt(TokenLimits(), grow_limit=limit)
        assert f"An experience's three fields stay within {limit} tokens together." in system
        assert "three fields stay within" not in system_prompt(TokenLimits())


async def test_an_experience_over_the_bound_may_be_revised_when_it_grows_no_larger(make_app):
    long_content = " ".join(["step"] * 40)
    components = {"procedure_memory": {"default": {"extraction": {"grow_limit": 20}}}}
    async with make_app(components=components) as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req", [add_trajectory(app)], segment=0)
        ok, created = await call_tool(
            app, run, "procedure_create", filename="drain-node.json", **{**FIELDS, "content": long_content}
        )
        assert ok, created  # a create is judged by the field limits alone
        at = {"path": created["path"], "expected_version": created["version"]}
        ok, grown = await call_tool(app, run, "procedure_update", **at, when_to_use_append="Also")
        assert not ok and grown["error"]["code"] == "consolidate_required"  # past the bound and growing
        ok, same = await call_tool(app, run, "procedure_update", **at, content=" ".join(["task"] * 40))
        assert ok and same["status"] == "updated", same  # as large as before: allowed
        ok, shorter = await call_tool(
            app,
            run,
            "procedure_update",
            path=created["path"],
            expected_version=same["version"],
            content="Cordon, drain, reboot.",
        )
        assert ok and shorter["status"] == "updated", shorter


async def test_a_grow_limit_of_zero_leaves_additions_to_the_field_limits(make_app):
    components = {"procedure_memory": {"default": {"extraction": {"grow_limit": 0}}}}
    async with make_app(components=components) as app:
        memory = memory_of(app)
        run = memory.grants.begin_attempt("req", [add_trajectory(app)], segment=0)
        ok, created = await call_tool(app, run, "procedure_create", filename="drain-node.json", **FIELDS)
        addition = " ".join(["step"] * 200)
        ok, updated = await call_tool(
            app,
            run,
            "procedure_update",
            path=created["path"],
            expected_version=created["version"],
            content_append=addition,
        )
        assert ok and updated["status"] == "updated", updated
