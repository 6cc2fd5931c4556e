"""Job arguments are declared once: each job's advertised ``parameters`` is the schema of its model.

The models in arguments.py validate every job's arguments (bounds, enums, defaults, the CLI's numbers as strings);
plugin.yaml advertises the same schema to the agent, MCP and HTTP clients. These tests fail when either side changes
alone — a bound, an enum value, a description, a required argument.
"""

from __future__ import annotations

import copy
import importlib

import pytest
import yaml
from pydantic import Field, create_model
from reme_procedure_memory.errors import ProcedureError
from reme_procedure_memory.jobs.arguments import (
    MODELS,
    CreateArguments,
    ReadArguments,
    SearchArguments,
    UpdateArguments,
    parameters,
    validate,
)
from reme_procedure_memory.jobs.fields import Integer
from reme_procedure_memory.schema import AGENT_TOOLS, Job

from conftest import run_job
from helpers import REPO

MANIFEST = REPO / "plugin.yaml"


def manifest_jobs() -> dict:
    return yaml.safe_load(MANIFEST.read_text())["application_defaults"]["jobs"]


def comparable(schema: dict) -> dict:
    """A schema with ``required`` as the set it means (the models list it in validation order)."""
    return {**schema, "required": sorted(schema.get("required", []))}


def drift(jobs: dict, models: dict) -> list[str]:
    """The jobs whose advertised parameters differ from their model's schema."""
    return sorted(
        name
        for name, model in models.items()
        if comparable(jobs[name].get("parameters") or {}) != comparable(parameters(model))
    )


def test_every_job_of_the_manifest_has_a_model_and_advertises_its_schema():
    jobs = manifest_jobs()
    assert set(MODELS) == set(jobs)
    assert drift(jobs, MODELS) == []


def test_each_job_of_the_manifest_runs_the_step_that_declares_it():
    """A step declares its job by its arguments' model (``arguments.job``); plugin.yaml names each job's step. The two
    agree, the manifest's jobs are exactly ``Job``, and the agent's tools are among them."""
    manifest = yaml.safe_load(MANIFEST.read_text())
    declared = {}
    for job, spec in manifest["application_defaults"]["jobs"].items():
        for step in spec["steps"]:
            module, _, name = manifest["backends"][step["backend"]].partition(":")
            declared[job] = getattr(importlib.import_module(module), name).arguments.job
    assert declared == {job.value: job for job in Job}
    assert set(AGENT_TOOLS) < set(Job)


async def test_reme_serves_the_models_schemas(make_app):
    """What ReMe turns into tool schemas (agent wrappers, MCP) is the loaded job's ``parameters``."""
    async with make_app() as app:
        for name, model in MODELS.items():
            assert comparable(app.context.jobs[name].parameters) == comparable(parameters(model)), name


@pytest.mark.parametrize(
    "job, path, value",
    [
        ("procedure_search", ("properties", "limit", "maximum"), 60),
        ("procedure_search", ("properties", "limit", "minimum"), 0),
        ("procedure_read", ("properties", "offset", "minimum"), 1),
        ("procedure_read", ("properties", "length", "minimum"), 0),
        ("procedure_search", ("properties", "index", "enum"), ["when_to_use"]),
        ("procedure_read", ("properties", "kind", "enum"), ["experience", "trajectory", "summary"]),
        ("procedure_create", ("properties", "filename", "description"), "Any name."),
        ("procedure_update", ("required",), ["path", "operation_key"]),
        ("procedure_create", ("additionalProperties",), True),
    ],
)
def test_a_change_to_the_manifest_alone_is_detected(job, path, value):
    jobs = copy.deepcopy(manifest_jobs())
    node = jobs[job]["parameters"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert drift(jobs, MODELS) == [job]


def test_a_change_to_a_model_alone_is_detected():
    wider = create_model(
        "WiderSearch",
        __base__=SearchArguments,
        limit=(Integer, Field(5, ge=1, le=100, description="Maximum results (default 5).")),
    )
    assert drift(manifest_jobs(), {**MODELS, "procedure_search": wider}) == ["procedure_search"]


def test_every_default_is_stated_in_its_description():
    """JSON-schema defaults are applied by nobody (ReMe, MCP): the model applies them, the description states them."""
    stated = 0
    for model in MODELS.values():
        for name, field in model.model_fields.items():
            if field.is_required() or field.default in (None, "") or field.default_factory is not None:
                continue
            text = field.description or ""
            assert f"default {field.default}" in text or f"{field.default} (default)" in text, (model, name)
            stated += 1
    assert stated == 10  # index, limit, kind, offset, length, the two listings' limits; procedure_history: diff,
    # offset, limit


# -- validation ------------------------------------------------------------------------------------------------------


def refusal(model, arguments, **context) -> str:
    with pytest.raises(ProcedureError) as caught:
        validate(model, arguments, **context)
    assert caught.value.answer()["error"]["code"] == "invalid_argument"
    return caught.value.answer()["error"]["message"]


def test_search_defaults_and_the_clis_numbers_as_text():
    unset = {"detail": None, "min_relevance": None, "tools": None, "max_tokens": None, "min_evidence": None}
    assert validate(SearchArguments, {"query": " stale index "}).model_dump() == {
        "query": "stale index",
        "index": "when_to_use_content",
        "limit": 5,
        **unset,
    }
    assert validate(
        SearchArguments,
        {
            "query": 404,
            "limit": "07",
            "index": "",
            "min_relevance": "",
            "tools": "",
            "max_tokens": "",
            "min_evidence": "",
        },
    ).model_dump() == {"query": "404", "index": "when_to_use_content", "limit": 7, **unset}
    assert validate(SearchArguments, {"query": "q", "min_evidence": "03"}).min_evidence == 3  # the CLI's text
    assert validate(SearchArguments, {"query": "q", "limit": 50.0}).limit == 50


@pytest.mark.parametrize(
    "given, expected",
    [
        (0, 0.0),
        (1, 1.0),
        (0.35, 0.35),
        ("0.35", 0.35),
        ("00.5", 0.5),
        (" 1 ", 1.0),
    ],
)
def test_min_relevance_takes_numbers_from_0_to_1_also_as_cli_text(given, expected):
    assert validate(SearchArguments, {"query": "q", "min_relevance": given}).min_relevance == expected


@pytest.mark.parametrize(
    "given, expected",
    [
        (["post_tweet", "cd"], ("post_tweet", "cd")),
        ("post_tweet", ("post_tweet",)),
        ("post_tweet, cd,post_tweet", ("post_tweet", "cd")),  # the CLI's tools=a,b; repeats dropped
        (["GorillaFileSystem.cd", " ls "], ("GorillaFileSystem.cd", "ls")),
    ],
)
def test_tools_takes_a_list_or_the_clis_comma_separated_names(given, expected):
    assert validate(SearchArguments, {"query": "q", "tools": given}).tools == expected


TOOLS_SENTENCE = (
    "`tools` must be a list of function names (the CLI also takes `tools=name1,name2`), each 1-200 "
    "characters without spaces, at most 256."
)
RELEVANCE_SENTENCE = "`min_relevance` must be a number from 0 to 1."


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"query": "q", "min_relevance": 1.5}, RELEVANCE_SENTENCE),
        ({"query": "q", "min_relevance": -0.1}, RELEVANCE_SENTENCE),
        ({"query": "q", "min_relevance": True}, RELEVANCE_SENTENCE),
        ({"query": "q", "min_relevance": "high"}, RELEVANCE_SENTENCE),
        ({"query": "q", "min_relevance": "nan"}, RELEVANCE_SENTENCE),
        ({"query": "q", "tools": []}, TOOLS_SENTENCE),
        ({"query": "q", "tools": ["a", 3]}, TOOLS_SENTENCE),
        ({"query": "q", "tools": ["two words"]}, TOOLS_SENTENCE),
        ({"query": "q", "tools": "a,,b"}, TOOLS_SENTENCE),
        ({"query": "q", "tools": ["x" * 201]}, TOOLS_SENTENCE),
        ({"query": "q", "tools": [f"f{n}" for n in range(257)]}, TOOLS_SENTENCE),
        ({"query": "q", "tools": {"a": 1}}, TOOLS_SENTENCE),
        ({"query": "q", "max_tokens": 0}, "`max_tokens` must be at least 1 (got 0)."),
        ({"query": "q", "max_tokens": "lots"}, "`max_tokens` must be an integer."),
        ({"query": "q", "min_evidence": -1}, "`min_evidence` must be at least 0 (got -1)."),
        ({"query": "q", "min_evidence": "three"}, "`min_evidence` must be an integer."),
        ({"query": "q", "min_evidence": 2.5}, "`min_evidence` must be an integer."),
    ],
)
def test_search_refuses_bad_delivery_arguments_in_one_sentence(arguments, message):
    assert refusal(SearchArguments, arguments) == message


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({}, "`query` must be a non-empty string."),
        ({"query": "  "}, "`query` must be a non-empty string."),
        ({"query": "x" * 4097}, "`query` has 4097 characters; at most 4096."),
        ({"query": "q", "index": "content"}, "`index` must be one of when_to_use, when_to_use_content."),
        ({"query": "q", "limit": 51}, "`limit` must be between 1 and 50 (got 51)."),
        ({"query": "q", "limit": "0"}, "`limit` must be between 1 and 50 (got 0)."),
        ({"query": "q", "limit": True}, "`limit` must be an integer."),
        ({"query": "q", "limit": 2.5}, "`limit` must be an integer."),
        ({"query": "q", "limit": "1" * 13}, "`limit` must be an integer."),
        ({"query": 5, "index": "x", "limit": 0}, "`index` must be one of when_to_use, when_to_use_content."),
        ({"query": "q", "detail": "all"}, "`detail` must be one of full, compact, rules."),
    ],
)
def test_search_refusals_name_the_first_invalid_argument(arguments, message):
    assert refusal(SearchArguments, arguments) == message


def test_read_offset_and_length_concern_trajectories_only():
    assert validate(ReadArguments, {"path": "procedures/a.json", "offset": "x"}).kind == "experience"
    assert validate(ReadArguments, {"path": "p", "kind": 0}).kind == "experience"
    trajectory = validate(ReadArguments, {"path": "p", "kind": "trajectory", "offset": "10"})
    assert (trajectory.offset, trajectory.length) == (10, 8192)
    assert refusal(ReadArguments, {"path": "p", "kind": "trajectory", "offset": -1}) == (
        "`offset` must be at least 0 (got -1)."
    )
    assert refusal(ReadArguments, {"path": "p", "kind": "summary"}) == "`kind` must be one of experience, trajectory."


def test_write_arguments_alias_order_and_messages():
    base = {"filename": "a.json", "description": "d", "when_to_use": "w", "content": "c", "operation_key": "k"}
    alias = {**{k: v for k, v in base.items() if k != "when_to_use"}, "when-to-use": "w"}
    assert validate(CreateArguments, alias).when_to_use == "w"
    assert validate(CreateArguments, {**base, "operation_key": 12}).operation_key == "12"
    # The operation key is checked first, then the alias, then the fields in their order.
    assert refusal(CreateArguments, {**base, "operation_key": "", "when-to-use": "x"}) == (
        "`operation_key` must be a non-empty string (max 200)."
    )
    assert refusal(CreateArguments, {**base, "when-to-use": "x", "description": None}) == (
        "`when_to_use` and its alias `when-to-use` have different texts; give only `when_to_use`."
    )
    assert refusal(CreateArguments, {**base, "description": None, "content": 5}) == "`description` is required."
    assert refusal(CreateArguments, {**base, "filename": None}).startswith("`filename` is required, e.g. ")
    update = {"path": "procedures/a.json", "expected_version": " v1 ", "operation_key": "k"}
    assert validate(UpdateArguments, update).expected_version == "v1"
    assert refusal(UpdateArguments, {**update, "content": ""}) == "`content` must be a non-empty string."
    assert refusal(UpdateArguments, {**update, "expected_version": 3}) == (
        "`expected_version` is required: take it from procedure_search or procedure_read."
    )


async def test_the_step_answers_a_refusal_as_invalid_argument(make_app):
    async with make_app() as app:
        ok, ans = await run_job(app, "procedure_search", query="x", limit="51")
        assert not ok and ans["error"] == {
            "code": "invalid_argument",
            "message": "`limit` must be between 1 and 50 (got 51).",
        }
