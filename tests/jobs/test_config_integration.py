"""The plugin inside ReMe's full default configuration: CLI overrides, bad settings, factual memory unchanged."""

import json

import pytest
from reme.application import Application
from reme.components.service.cli_service import prepare_start_config
from reme.config.config_parser import parse_kwargs

from conftest import add_trajectory, call_tool, memory_of
from helpers import FakeEmbeddingModel


def start_config(tmp_path, word_tokenizer, *cli_args: str) -> dict:
    """The config `reme start job=procedure_reindex plugins='["procedure-memory"]' ...` would build, on a workspace
    with an (empty) experience directory: a reindex needs an existing workspace ([missing-workspace])."""
    (tmp_path / "ws" / "procedures").mkdir(parents=True, exist_ok=True)
    args = parse_kwargs(
        "job=procedure_reindex",
        'plugins=["procedure-memory"]',
        f"workspace_dir={tmp_path / 'ws'}",
        "log_to_file=false",
        f"components.procedure_memory.default.tokenizer_source={word_tokenizer}",
        *cli_args,
    )
    config = prepare_start_config(args)
    # keep the test fast and quiet: only ReMe's request/response jobs, none of default.yaml's watchers or crons
    config["jobs"] = {k: v for k, v in config["jobs"].items() if v.get("backend", "base") == "base"}
    return config


def test_cli_dot_override_of_embedding_dimensions(tmp_path, word_tokenizer, monkeypatch):
    monkeypatch.setenv("EMBEDDING_BACKEND", "openai")  # a provider's dimensions (the embedded model's are fixed)
    config = start_config(tmp_path, word_tokenizer, "components.as_embedding.procedure.dimensions=768")
    app = Application(**config)
    assert app.context.components["as_embedding"]["procedure"].dimensions == 768


def test_default_embedding_settings_come_from_environment(tmp_path, word_tokenizer, monkeypatch):
    monkeypatch.setenv("EMBEDDING_BACKEND", "openai")
    monkeypatch.setenv("EMBEDDING_MODEL_NAME", "my-embedder")
    monkeypatch.setenv("EMBEDDING_API_KEY", "sk-test")
    monkeypatch.setenv("EMBEDDING_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("PROCEDURE_TOKENIZER_SOURCE", "/models/tok.json")
    args = parse_kwargs('plugins=["procedure-memory"]', f"workspace_dir={tmp_path / 'ws'}", "log_to_file=false")
    app = Application(**prepare_start_config(args) | {"jobs": {}})
    emb = app.context.components["as_embedding"]["procedure"]
    assert (emb.backend, emb.kwargs["model"], emb.dimensions) == ("openai", "my-embedder", 1024)
    assert emb.kwargs["credential"] == {"api_key": "sk-test", "base_url": "http://127.0.0.1:9/v1"}
    memory = app.context.components["procedure_memory"]["default"]
    assert memory.settings.tokenizer_source == "/models/tok.json"
    # the plugin enables embeddings for its own stores only; ReMe's default store stays as configured
    assert app.context.components["file_store"]["default"].embedding_store is None
    # the longest acceptable when_to_use_content record (563 + 2,252 tokens) is embedded whole
    assert app.context.components["embedding_store"]["procedure"].max_input_length >= 4 * (563 + 2252)


@pytest.mark.parametrize(
    "override, key",
    [
        ("components.procedure_memory.default.max_file_bytes=-5", "max_file_bytes"),
        ("components.procedure_memory.default.token_limits.segment=0", "token_limits.segment"),
        ("components.procedure_memory.default.procedure_dirr=x", "procedure_dirr"),
    ],
)
def test_bad_settings_fail_at_start_naming_the_key(tmp_path, word_tokenizer, override, key):
    with pytest.raises(ValueError, match=rf"components\.procedure_memory\.default\.{key}"):
        Application(**start_config(tmp_path, word_tokenizer, override))


async def test_factual_memory_is_unchanged_beside_the_plugin(tmp_path, word_tokenizer):
    config = start_config(tmp_path, word_tokenizer)
    config["service"] = {"backend": "cli"}
    app = Application(**config)
    app.context.components["as_embedding"]["procedure"].model = FakeEmbeddingModel(1024)
    await app.start()
    try:
        # ReMe's own write + index + search keep working
        ws = memory_of(app).workspace_path
        response = await app.run_job(
            "write",
            path="daily/2026-12-03/note.md",
            content="# Note\nThe quartz deployment uses blue-green switching.\n",
        )
        assert response.success, response.answer
        default_store = app.context.components["file_store"]["default"]
        from reme.schema import FileChunk, FileNode

        await default_store.upsert(
            [
                (
                    FileNode(path="daily/2026-12-03/note.md", st_mtime=1.0),
                    [
                        FileChunk(
                            id="n1",
                            path="daily/2026-12-03/note.md",
                            start_line=1,
                            end_line=2,
                            text="The quartz deployment uses blue-green switching.",
                        )
                    ],
                )
            ]
        )
        found = await app.run_job("search", query="quartz deployment")
        assert found.success and "quartz" in str(found.answer)
        rebuilt = await app.run_job("reindex")  # ReMe's own reindex still targets its default store only
        assert rebuilt.success and "bm25=1" in str(rebuilt.answer)
        # procedures never enter ReMe's default store, and notes never enter the procedure views
        run = memory_of(app).grants.begin_attempt("req", [add_trajectory(app)])
        ok, ans = await call_tool(
            app,
            run,
            "procedure_create",
            filename="quartz.json",
            operation_key="k",
            description="d",
            when_to_use="quartz deployment fails",
            content="roll back",
        )
        assert ok, ans
        assert all(not c.path.startswith("procedures/") for c in default_store.file_chunks.values())
        views = memory_of(app).workspace.views.stores.values()
        assert all(c.path.startswith("procedures/") for s in views for c in s.file_chunks.values())
        assert (ws / "daily/2026-12-03/note.md").read_text().startswith("# Note")
        assert json.loads((ws / "procedures/quartz.json").read_text())["content"] == "roll back"
    finally:
        await app.close()
