"""The printed resume: it names what makes the import the same import; where the models are and
who pays come from the environment at resume time, and the answer names (never shows) what the resume reads there.

In-process Applications (ReMe's real configuration resolution, Jobs, stores); the agent is scripted to stop
unfinished so that the import answers ``incomplete`` with its resume.
"""

from __future__ import annotations

import json
import shlex

import pytest

from conftest import import_file
from helpers.chat import llm_components
from helpers.corpus import JSONL, replies, write

LLM_URL = "http://127.0.0.1:9/wrong-llm/v1"
EMBEDDING_URL = "http://127.0.0.1:9/wrong-embeddings/v1"
SECRET = "sk-never-print-5678"
SEGMENT = "components.procedure_memory.default.token_limits.segment"
TOKENIZER = "components.procedure_memory.default.tokenizer_source"


async def unfinished(tools, prompt, kwargs):
    return {
        "session_id": "x",
        "result": "stopped",
        "usage": None,
        "last_message": {"finished_reason": "interrupted", "content": [{"type": "text", "text": "stopped"}]},
    }


@pytest.fixture
def model_environment(monkeypatch):
    """The extraction model and the embedding provider configured the documented way: environment variables."""
    for name, value in {
        "LLM_BASE_URL": LLM_URL,
        "LLM_MODEL_NAME": "model-from-env",
        "LLM_API_KEY": SECRET,
        "EMBEDDING_BACKEND": "openai",
        "EMBEDDING_BASE_URL": EMBEDDING_URL,
        "EMBEDDING_API_KEY": SECRET,
    }.items():
        monkeypatch.setenv(name, value)


async def interrupted(make_app, tmp_path, components: dict) -> dict:
    original = write(tmp_path, "run.jsonl", JSONL)
    async with make_app(scripts=[unfinished, replies()], components=components) as app:
        ok, ans = await import_file(app, original, request_id="r1")
    assert not ok and ans["status"] == "incomplete" and ans["error"]["code"] == "agent_interrupted", ans
    return ans


async def test_the_resume_names_the_import_and_leaves_the_model_to_the_environment(
    make_app, tmp_path, model_environment, word_tokenizer
):
    ans = await interrupted(make_app, tmp_path, {"procedure_memory": {"default": {"token_limits": {"segment": 500}}}})
    words = shlex.split(ans["resume"])
    assert words[:3] == ["reme", "start", "job=procedure_auto_memory"]
    for word in (
        f"workspace_dir={tmp_path / 'ws'}",
        f"file={tmp_path / 'originals' / 'run.jsonl'}",
        "filename=run.jsonl",
        "request_id=r1",
        f"{SEGMENT}=500",
        f"{TOKENIZER}={word_tokenizer}",
    ):  # the same import
        assert word in words, (word, words)
    # where the model is and who pays: read again from the environment at resume time, never printed
    assert LLM_URL not in ans["resume"] and "model-from-env" not in ans["resume"] and EMBEDDING_URL not in ans["resume"]
    assert not [w for w in words if ".as_llm." in w or "credential" in w or w.endswith(".model")]
    # an in-process Application has no default.yaml (no as_llm): the LLM_* names are checked by the CLI test in
    # tests/e2e/test_e2e_resume.py; the plugin's embedding provider reads its EMBEDDING_* placeholders here
    assert ans["resume_environment"] == ["EMBEDDING_API_KEY", "EMBEDDING_BACKEND", "EMBEDDING_BASE_URL"]
    assert SECRET not in json.dumps(ans) and LLM_URL not in json.dumps(ans["resume_environment"])


async def test_endpoint_settings_given_on_the_command_line_are_named_not_repeated(make_app, tmp_path):
    llm = llm_components(LLM_URL)["as_llm"]  # as default.yaml has it, with a model name and key of its own
    llm["default"].update(model="model-given", credential={"base_url": LLM_URL, "api_key": SECRET})
    given = {"as_llm": llm, "procedure_memory": {"default": {"extraction": {"summary_repair_attempts": 0}}}}
    ans = await interrupted(make_app, tmp_path, given)
    words = shlex.split(ans["resume"])
    assert "components.procedure_memory.default.extraction.summary_repair_attempts=0" in words  # a given setting
    assert "components.as_llm.default.context_size=262144" in words  # what the model is like, not where it is
    assert LLM_URL not in ans["resume"] and "model-given" not in ans["resume"] and SECRET not in json.dumps(ans)
    assert {
        "components.as_llm.default.model",
        "components.as_llm.default.credential.base_url",
        "components.as_llm.default.credential.api_key",
    } <= set(ans["resume_environment"]), ans
