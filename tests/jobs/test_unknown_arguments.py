"""Every job refuses a name it does not take: ``invalid_argument`` naming it and the closest name
the job takes, before any value is checked, and nothing is read or written; the names ReMe injects into a call are
not the caller's and are never refused.

Through real in-process Jobs here; the real CLI (one-shot and client), HTTP and MCP in ``tests/e2e/test_e2e_cli.py``.
"""

from __future__ import annotations

import json

import pytest
from reme_procedure_memory.errors import ProcedureError
from reme_procedure_memory.jobs.arguments import MODELS, advertised_names, argument_names, validate

from conftest import add_trajectory, call_tool, memory_of, run_job
from helpers import experience_record

FIELDS = {
    "description": "Rebuild search after a configuration change",
    "when_to_use": "After changing search configuration when results appear stale",
    "content": "Rebuild the affected indexes, then verify a known query before resuming.",
}

# job -> (valid arguments, a misspelled name, the name it should have been)
MISSPELLED = {
    "procedure_search": ({"query": "stale search"}, "limt", "limit"),
    "procedure_read": ({"path": "procedures/a.json"}, "ofset", "offset"),
    "procedure_create": ({"filename": "a.json", **FIELDS}, "descripton", "description"),
    "procedure_update": (
        {"path": "procedures/a.json", "expected_version": "v"},
        "expected_verison",
        "expected_version",
    ),
    "procedure_auto_memory": ({"file": "/tmp/run.jsonl", "filename": "run.jsonl"}, "memory_hnt", "memory_hint"),
    "procedure_reindex": ({}, "force", None),
    "procedure_list": ({"limit": 5}, "cursr", "cursor"),
    "procedure_imports": ({}, "limits", "limit"),
    "procedure_export": ({"dest": "/tmp/skills"}, "destination", "dest"),
    "procedure_history": ({"path": "procedures/a.json"}, "dif", "diff"),
    "procedure_delete": ({"path": "procedures/a.json"}, "paht", "path"),
    "procedure_dump": ({}, "verbose", None),
}


def refusal(job: str, arguments: dict, runtime=()) -> str:
    with pytest.raises(ProcedureError) as caught:
        validate(MODELS[job], arguments, runtime)
    assert caught.value.code == "invalid_argument"
    return caught.value.message


def test_every_job_has_a_misspelling_case():
    assert set(MISSPELLED) == set(MODELS)


@pytest.mark.parametrize("job", sorted(MISSPELLED))
def test_a_misspelled_name_is_refused_naming_it_and_the_closest_name(job):
    valid, wrong, meant = MISSPELLED[job]
    message = refusal(job, {**valid, wrong: 3})
    assert message.startswith(f"`{wrong}` is not an argument of {job}")
    if meant is None:
        assert "which takes none" in message
    else:
        assert f"did you mean `{meant}`?" in message
        assert message.endswith("It takes " + ", ".join(f"`{n}`" for n in advertised_names(MODELS[job])) + ".")


def test_the_closest_name_ignores_case_and_hyphens_and_prefers_the_first_listed_on_a_tie():
    assert "did you mean `when_to_use`?" in refusal("procedure_create", {"whenToUse": "w"})
    assert "did you mean `when_to_use`?" in refusal("procedure_update", {"When-To_Use": "w"})  # not its alias
    assert "did you mean `request_id`?" in refusal("procedure_auto_memory", {"requestid": "r"})
    assert "did you mean `query`?" in refusal("procedure_search", {"Query": "q"})
    assert "did you mean `kind`?" in refusal("procedure_read", {"knd": "trajectory"})


def test_unknown_names_come_first_in_the_callers_order_then_the_values_in_field_order():
    # a misspelled required argument: the misspelling is named, not the "missing" argument
    assert refusal("procedure_search", {"qeury": "stale"}).startswith("`qeury` is not an argument")
    assert refusal("procedure_search", {"query": "", "limt": 0}).startswith("`limt` is not")
    assert refusal("procedure_search", {"zzz": 1, "query": "q", "aaa": 2}).startswith("`zzz` is not")
    assert refusal("procedure_search", {"aaa": 2, "zzz": 1}).startswith("`aaa` is not")
    # without unknown names, the values are checked in field order as before
    assert refusal("procedure_search", {"query": 5, "index": "x", "limit": 0}) == (
        "`index` must be one of when_to_use, when_to_use_content."
    )


def test_the_field_names_of_aliased_arguments_are_not_names_callers_may_use():
    assert "when-to-use" in argument_names(MODELS["procedure_create"])
    assert (
        validate(
            MODELS["procedure_create"], {"filename": "a.json", **{**FIELDS, "when_to_use": None}, "when-to-use": "w"}
        ).when_to_use
        == "w"
    )
    assert refusal("procedure_create", {"when_to_use_alias": "w"}).startswith("`when_to_use_alias` is not")


def test_names_are_shown_safely_in_the_sentence():
    assert refusal("procedure_search", {"a\nb": 1}).startswith("`a\\nb` is not")
    assert refusal("procedure_search", {"x\ud800": 1}).startswith("`x\\ud800` is not")
    long = refusal("procedure_search", {"n" * 5000: 1})
    assert long.startswith("`" + "n" * 80 + "...` is not") and len(long) < 300
    json.dumps(refusal("procedure_search", {"\ud800": 1})).encode("utf-8")  # answerable as UTF-8


def test_names_ReMe_injects_are_never_refused():
    search = MODELS["procedure_search"]
    injected = {
        "_procedure_grant": "g",
        "_procedure_sources": ["s"],
        "_allowed_paths": ["x"],
        "tool_context_id": "ctx",
        "metadata": {"trace": 1},
    }
    assert validate(search, {"query": "q", **injected}).query == "q"
    assert validate(MODELS["procedure_reindex"], injected) is not None
    # what the step finds injected besides (the service's injected_job_kwargs, the job's configuration keys)
    assert validate(search, {"query": "q", "tenant": "t"}, frozenset({"tenant"})).query == "q"
    assert refusal("procedure_search", {"query": "q", "tenant": "t"}).startswith("`tenant` is not")


# -- through the real jobs -----------------------------------------------------------------------------------------


def durable(ws) -> dict:
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(ws.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "job",
    [
        "procedure_search",
        "procedure_read",
        "procedure_auto_memory",
        "procedure_reindex",
        "procedure_list",
        "procedure_imports",
        "procedure_history",
    ],
)
async def test_each_job_refuses_a_misspelled_argument_and_changes_nothing(make_app, tmp_path, job):
    original = tmp_path / "run.jsonl"
    original.write_text('{"role": "user", "content": "hi"}\n')
    valid, wrong, meant = MISSPELLED[job]
    valid = {**valid, "file": str(original)} if job == "procedure_auto_memory" else valid
    async with make_app(scripts=[]) as app:
        ws = memory_of(app).workspace_path
        before = durable(ws)
        ok, answer = await run_job(app, job, **valid, **{wrong: "x"})
        assert not ok and answer["status"] == "error", answer
        assert answer["error"]["code"] == "invalid_argument"
        assert f"`{wrong}`" in answer["error"]["message"] and (
            meant is None or f"`{meant}`" in answer["error"]["message"]
        )
        assert durable(ws) == before  # no copy, no import record, no rebuild
        assert app.agent.replies == []


@pytest.mark.parametrize("job", ["procedure_create", "procedure_update"])
async def test_the_agents_write_tools_refuse_a_misspelled_argument_and_write_nothing(make_app, job):
    async with make_app() as app:
        memory = memory_of(app)
        source = add_trajectory(app)
        (memory.workspace_path / "procedures/a.json").write_text(json.dumps(experience_record("d", "w", "c", [source])))
        run = memory.grants.begin_attempt("req-1", [source])
        before = durable(memory.workspace_path)
        valid, wrong, meant = MISSPELLED[job]
        ok, answer = await call_tool(app, run, job, **valid, **{wrong: "x"})  # with the injected grant and context
        assert not ok and answer["error"]["code"] == "invalid_argument", answer
        assert f"`{wrong}` is not an argument of {job}; did you mean `{meant}`?" in answer["error"]["message"]
        assert durable(memory.workspace_path) == before
        ok, answer = await call_tool(app, run, "procedure_search", query="stale search")  # injected names pass
        assert ok, answer


async def test_keys_the_service_injects_and_job_configuration_keys_are_not_refused(make_app):
    service = {"backend": "cli", "injected_job_kwargs": {"tenant": "t1"}}
    jobs = {"procedure_search": {"audit_label": "nightly"}}
    async with make_app(service=service, jobs=jobs) as app:
        ok, answer = await run_job(app, "procedure_search", query="stale search", tenant="t1")
        assert ok, answer  # the job's configuration key audit_label reached the call too
        ok, answer = await run_job(app, "procedure_search", query="stale search", tenantt="t1")
        assert not ok and answer["error"]["message"].startswith("`tenantt` is not an argument of procedure_search")
        ok, answer = await run_job(app, "procedure_read", path="procedures/a.json", audit_label="x")
        assert not ok and answer["error"]["message"].startswith("`audit_label` is not an argument of procedure_read")
