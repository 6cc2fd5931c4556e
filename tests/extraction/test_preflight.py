"""The preflight of an import (issue 21, item 3): the model's settings, one embedding probe and the tokenizer are
checked before anything is copied; each failure is one sentence naming the setting, its variable and the fix.

ReMe's real AgentScope wrapper and as_llm component are configured (no request is sent); the embedding model is the
tests' fake, made to fail; Jobs, file stores and BM25 are real.
"""

from __future__ import annotations

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
    return memory.imports.get(request_id) is None and memory.checkpoints.get(request_id) is None and \
        not list((memory.workspace_path / "session").rglob("run*"))


@pytest.mark.parametrize("fields, named", [
    (("api_key",), ["components.as_llm.default.credential.api_key (LLM_API_KEY"]),
    (("model",), ["components.as_llm.default.model (LLM_MODEL_NAME)"]),
    (("model", "api_key"), ["LLM_MODEL_NAME", "LLM_API_KEY"]),
])
async def test_a_model_without_its_settings_is_refused_naming_the_variables(make_app, tmp_path, monkeypatch, fields,
                                                                          named):
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
