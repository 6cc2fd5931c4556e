"""The preflight of an import: the model's settings, one embedding probe and the tokenizer are
checked before anything is copied; each failure is one sentence naming the setting, its variable and the fix.

ReMe's real AgentScope wrapper and as_llm component are configured (no request is sent); the embedding model is the
tests' fake, made to fail; Jobs, file stores and BM25 are real.
"""

from __future__ import annotations

import json

import pytest

from conftest import import_file, memory_of
from helpers import FakeEmbeddingModel
from helpers.chat import llm_components
from helpers.corpus import JSONL, creates, replies, write


def llm_without(*fields: str) -> dict:
    """The AgentScope wrapper of default.yaml, its LLM lacking ``fields`` (``model``, ``api_key``)."""
    components = llm_components("http://127.0.0.1:9/v1")
    llm = components["as_llm"]["default"]
    for field in fields:
        if field == "api_key":
            llm["credential"]["api_key"] = ""
        else:
            llm[field] = ""
    return components


def nothing_copied(app, request_id: str) -> bool:
    memory = memory_of(app)
    return (
        memory.workspace.imports.get(request_id) is None
        and memory.workspace.checkpoints.get(request_id) is None
        and not list((memory.workspace_path / "session").rglob("run*"))
    )


@pytest.mark.parametrize(
    "fields, named",
    [
        (("api_key",), ["components.as_llm.default.credential.api_key (LLM_API_KEY"]),
        (("model",), ["components.as_llm.default.model (LLM_MODEL_NAME)"]),
        (("model", "api_key"), ["LLM_MODEL_NAME", "LLM_API_KEY"]),
    ],
)
async def test_a_model_without_its_settings_is_refused_naming_the_variables(
    make_app, tmp_path, monkeypatch, fields, named
):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the openai client's own fallback
    original = write(tmp_path, "run.jsonl", JSONL)
    async with make_app(components=llm_without(*fields)) as app:
        ok, ans = await import_file(app, original, request_id="p1")
        assert not ok and ans["status"] == "error" and ans["error"]["code"] == "agent_unavailable", ans
        message = ans["error"]["message"]
        assert all(name in message for name in named) and "Nothing was copied" in message
        assert "\n" not in message and "resume" not in ans
        assert nothing_copied(app, "p1")


async def test_the_embedding_probe_names_the_providers_own_error_and_the_variables(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    model = FakeEmbeddingModel(64)
    model.fail_with = RuntimeError("Missing credentials. Please pass an `api_key`")
    async with make_app(embedding=model, scripts=[replies()]) as app:
        ok, ans = await import_file(app, original, request_id="p2")
        assert not ok and ans["status"] == "error" and ans["error"]["code"] == "embedding_unavailable", ans
        message = ans["error"]["message"]
        assert "components.as_embedding.procedure" in message and "Missing credentials" in message
        assert "EMBEDDING_API_KEY" in message and "EMBEDDING_BASE_URL" in message
        assert nothing_copied(app, "p2") and app.agent.replies == []

        model.fail_with = None  # fixed: the same command runs
        ok, ans = await import_file(app, original, request_id="p2")
        assert ok and ans["status"] == "complete", ans


async def test_the_embedding_probe_checks_the_vector_size(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)

    class ShortVectors(FakeEmbeddingModel):  # configured for 64, the provider answers 32 (another model)
        async def __call__(self, inputs, **kwargs):
            answer = await super().__call__(inputs, **kwargs)
            return type(answer)(embeddings=[vector[:32] for vector in answer.embeddings])

    async with make_app(embedding=ShortVectors(64), scripts=[replies()]) as app:
        ok, ans = await import_file(app, original, request_id="p3")
        assert ans["error"]["code"] == "embedding_unavailable"
        assert "a vector of 32 numbers where 64 are configured" in ans["error"]["message"]
        assert nothing_copied(app, "p3")


async def test_a_provider_failing_after_the_probe_is_named_in_the_pending_writes_answer(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    model = FakeEmbeddingModel(64)

    class FailsAfterProbe(FakeEmbeddingModel):
        async def __call__(self, inputs, **kwargs):
            if inputs != ["preflight"]:
                model.fail_with = RuntimeError("Missing credentials. Please pass an `api_key`")
            return await model(inputs, **kwargs)

    async with make_app(embedding=FailsAfterProbe(64), scripts=[creates("rebuild.json")]) as app:
        ok, ans = await import_file(app, original, request_id="p4")
        assert not ok and ans["error"]["code"] == "pending_writes", ans
        assert "Missing credentials" in ans["error"]["message"] and "EMBEDDING_*" in ans["error"]["message"]
        assert "Missing credentials" in ans["pending_writes"][0]["error"]


async def test_a_completed_import_needs_no_preflight(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", JSONL)
    ws = tmp_path / "ws"
    async with make_app(workspace=ws, scripts=[replies()]) as app:
        ok, ans = await import_file(app, original, request_id="p5")
        assert ok and ans["status"] == "complete"
    model = FakeEmbeddingModel(64)
    model.fail_with = RuntimeError("provider down")
    async with make_app(workspace=ws, embedding=model, components=llm_without("api_key", "model")) as app:
        ok, again = await import_file(app, original, request_id="p5")
        assert ok and again["status"] == "complete" and again["segments"] == ans["segments"]


# -- issue 32, item 1: one cheap request to the configured model, before anything is copied ------------------------


def closed_port_url() -> str:
    import socket

    with socket.socket() as sock:  # a port nobody listens on once this socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


KEY = "sk-do-not-print-1234"


def model_at(base_url: str) -> dict:
    components = llm_components(base_url)
    components["as_llm"]["default"]["credential"]["api_key"] = KEY
    return components


REFUSALS = {
    "refused key": (
        (401, {"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}}),
        ["refused the key", "components.as_llm.default.credential.api_key", "LLM_API_KEY", "HTTP 401"],
    ),
    "forbidden": ((403, {"error": {"message": "access denied"}}), ["refused the key", "LLM_API_KEY", "HTTP 403"]),
    "unknown model": (
        (
            404,
            {
                "error": {
                    "message": "The model `fake-chat` does not exist or you do not have access to it.",
                    "code": "model_not_found",
                }
            },
        ),
        ["'fake-chat'", "components.as_llm.default.model", "LLM_MODEL_NAME", "HTTP 404"],
    ),
    "unknown model (400)": ((400, {"error": {"message": "model_not_found: fake-chat"}}), ["LLM_MODEL_NAME"]),
    "no chat API at that path": (
        (404, {"detail": "Not Found"}),
        ["has no chat API there", "components.as_llm.default.credential.base_url", "LLM_BASE_URL", "/v1"],
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
async def test_the_probe_refuses_a_wrong_key_model_or_path_before_the_copy(make_app, tmp_path, case):
    from helpers.chat import ChatEndpoint

    refusal, named = REFUSALS[case]
    original = write(tmp_path, "run.jsonl", JSONL)
    with ChatEndpoint(lambda conversation: pytest.fail("no extraction request")) as endpoint:
        endpoint.refuse = refusal
        async with make_app(components=model_at(endpoint.base_url)) as app:
            ok, ans = await import_file(app, original, request_id="q1")
            assert not ok and ans["status"] == "error" and ans["error"]["code"] == "agent_unavailable", ans
            message = ans["error"]["message"]
            assert all(name in message for name in named), message
            assert endpoint.base_url in message and KEY not in json.dumps(ans)
            assert "Nothing was copied" in message and "\n" not in message and "resume" not in ans
            assert nothing_copied(app, "q1")
        assert len(endpoint.probes) == 1 and endpoint.requests == []  # one request, no retries
        assert endpoint.probes[0]["max_tokens"] == 1 and endpoint.probes[0]["model"] == "fake-chat"


@pytest.mark.parametrize("url", ["closed port", "https://..."])
async def test_the_probe_refuses_an_unreachable_url_naming_it(make_app, tmp_path, url):
    url = closed_port_url() if url == "closed port" else url
    original = write(tmp_path, "run.jsonl", JSONL)
    async with make_app(components=model_at(url)) as app:
        ok, ans = await import_file(app, original, request_id="q2")
        assert not ok and ans["error"]["code"] == "agent_unavailable", ans
        message = ans["error"]["message"]
        assert f"endpoint {url}" in message and "cannot be reached" in message, message
        assert "LLM_BASE_URL" in message and "components.as_llm.default.credential.base_url" in message
        assert KEY not in message and "Nothing was copied" in message and "\n" not in message
        assert nothing_copied(app, "q2")


async def test_other_answers_to_the_probe_pass_and_it_is_sent_once(tmp_path):
    """A 500 or 429 means the endpoint is there: the extraction's own retries deal with it."""
    import openai
    from types import SimpleNamespace

    from helpers.chat import ChatEndpoint
    from reme_procedure_memory.extraction.preflight import probe

    with ChatEndpoint(lambda conversation: pytest.fail("no extraction request")) as endpoint:
        model = SimpleNamespace(client=openai.AsyncClient(api_key=KEY, base_url=endpoint.base_url))
        for status in (500, 429):
            endpoint.refuse = (status, {"error": {"message": "busy"}})
            assert await probe(model, "fake-chat", "components.as_llm.default") is None
        assert len(endpoint.probes) == 2  # one each: the client's own retries are off
        endpoint.refuse = None
        assert await probe(model, "fake-chat", "components.as_llm.default") is None
        assert len(endpoint.probes) == 3


async def test_a_resume_refused_by_the_probe_says_the_copy_is_kept(make_app, tmp_path):
    from helpers.chat import ChatEndpoint

    original = write(tmp_path, "run.jsonl", JSONL)
    with ChatEndpoint(lambda conversation: pytest.fail("no extraction request")) as endpoint:
        endpoint.refuse_after_probe = (
            404,
            {"error": {"message": "The model `fake-chat` does not exist.", "code": "model_not_found"}},
        )
        async with make_app(components=model_at(endpoint.base_url)) as app:
            ok, first = await import_file(app, original, request_id="q3")  # copied, then the model call fails
            assert first["status"] == "incomplete" and first["error"]["code"] == "agent_failed", first
            endpoint.refuse = (401, {"error": {"message": "Incorrect API key provided"}})
            ok, again = await import_file(app, original, request_id="q3")
        assert again["status"] == "error" and again["error"]["code"] == "agent_unavailable", again
        message = again["error"]["message"]
        assert "Nothing was copied" not in message and "nothing was copied" not in message.lower()
        assert f"the copy {first['path']}" in message and "request_id q3 are kept" in message
        assert memory_of(app).workspace.imports.get("q3") is not None
