"""Answers a user can act on, with the real ``reme`` console script in subprocesses.

- the ``resume`` command printed in a failure answer does not resume: it drops ``workspace_dir`` and every
  ``components...`` override (a run with ``token_limits.segment=1500`` then answers ``incompatible_checkpoint``)
- a busy workspace and bad settings end in a 23-line traceback instead of one line on stderr
- a second process refused by the workspace lock rewrites the view files on its way out

Each process gets a temporary workspace and cwd (an empty ``.env`` shadows any parent one); the embedding provider
and the chat model are local endpoints on 127.0.0.1 started by the test; the tokenizer is a local file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from reme_procedure_memory.storage.lock import WorkspaceLock

from helpers import EmbeddingEndpoint, experience_record, place_trajectory, write_word_tokenizer
from helpers.chat import ChatEndpoint, say
from helpers.cli import free_port

pytestmark = pytest.mark.slow  # real `reme` processes and services

BIN = Path(sys.executable).parent
REME = BIN / "reme"
PLUGINS = 'plugins=["procedure-memory"]'
TRAJECTORY = (
    b'{"role": "user", "content": "search results are stale after the config change"}\n'
    b'{"role": "assistant", "content": "rebuilt the index and verified a known query"}\n'
)


@pytest.fixture
def cli(tmp_path):
    """Environment, cwd and workspace of a one-shot ``reme`` process (local endpoints only)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / ".env").write_text("")
    tokenizer = write_word_tokenizer(tmp_path / "tok" / "tokenizer.json")
    with EmbeddingEndpoint(64) as embeddings:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBEDDING_", "LLM_", "REME_"))}
        env.pop("PYTHONPATH", None)
        env.update(
            {
                "HF_HUB_OFFLINE": "1",
                "PYTHONIOENCODING": "utf-8",
                "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
                "PROCEDURE_TOKENIZER_SOURCE": str(tokenizer),
                "EMBEDDING_BACKEND": "openai",
                "EMBEDDING_BASE_URL": embeddings.base_url,
                "EMBEDDING_API_KEY": "test",
                "EMBEDDING_MODEL_NAME": "fake",
                "LLM_BACKEND": "openai",
                "LLM_API_KEY": "test",
                "LLM_MODEL_NAME": "fake",
                "LLM_BASE_URL": "http://127.0.0.1:9/v1",
            }
        )
        yield {"cwd": cwd, "env": env, "ws": tmp_path / "ws"}


def run(cli, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REME), *args], cwd=cli["cwd"], env=cli["env"], capture_output=True, text=True, timeout=180, **kwargs
    )


# -- the printed resume command -------------------------------------------------------------------------------------


def test_the_printed_resume_command_resumes_verbatim(cli, tmp_path):
    original = tmp_path / "originals" / "run.jsonl"
    original.parent.mkdir()
    original.write_bytes(TRAJECTORY)
    ws = cli["ws"]
    state = {"summary": False}

    # Two segments of 40 tokens (one line each): the first run's reply to segment 1 has no summary (no repair allowed)
    def model(conversation):
        if state["summary"]:
            return say("Nothing reusable.\n<summary>Read a short session about stale search.</summary>")
        return say("Nothing reusable.")

    with ChatEndpoint(model) as chat:
        cli["env"]["LLM_BASE_URL"] = chat.base_url
        first = run(
            cli,
            "start",
            "job=procedure_auto_memory",
            PLUGINS,
            f"file={original}",
            "filename=run.jsonl",
            "request_id=res-1",
            f"workspace_dir={ws}",
            "log_to_file=false",
            "components.as_embedding.procedure.dimensions=64",
            "components.procedure_memory.default.token_limits.segment=40",
            "components.procedure_memory.default.extraction.summary_repair_attempts=0",
        )
        assert first.returncode == 1, first.stdout[-2000:] + first.stderr[-2000:]
        answer = json.loads(first.stderr)
        assert answer["status"] == "incomplete" and answer["error"]["code"] == "summary_invalid", answer
        resume = answer["resume"]
        assert f"workspace_dir={ws}" in resume
        assert "components.procedure_memory.default.token_limits.segment=40" in resume
        assert "api_key" not in resume and "test" not in resume.split()  # no secrets

        state["summary"] = True
        second = subprocess.run(
            resume, shell=True, cwd=cli["cwd"], env=cli["env"], capture_output=True, text=True, timeout=180
        )
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    resumed = json.loads(second.stdout)
    assert resumed["status"] == "complete" and resumed["request_id"] == "res-1", resumed
    checkpoint = next((ws / "metadata/procedure/default/processing").glob("*.json"))
    saved = json.loads(checkpoint.read_text())
    assert saved["status"] == "complete" and saved["fingerprint"]["segment_tokens"] == 40
    assert saved["attempts"] == {"0": 2, "1": 1}  # the same import ran its first segment a second time
    assert not (cli["cwd"] / ".reme").exists()  # not a new import in another workspace


# -- busy workspaces and bad settings -------------------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p): (p.stat().st_mtime_ns, p.read_bytes()) for p in root.rglob("*") if p.is_file()}


def assert_one_line(result: subprocess.CompletedProcess, *needles: str) -> str:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reme: error: "), result.stderr[-3000:]
    assert "Traceback" not in result.stdout + result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_a_busy_workspace_is_one_line_and_the_refused_process_writes_nothing(cli):
    ws = cli["ws"]
    (ws / "procedures").mkdir(parents=True)
    place_trajectory(ws)
    (ws / "procedures/rebuild.json").write_text(
        json.dumps(experience_record("Rebuild search", "when search results look stale", "rebuild the index"))
    )
    built = run(
        cli,
        "start",
        "job=procedure_reindex",
        PLUGINS,
        f"workspace_dir={ws}",
        "log_to_file=false",
        "components.as_embedding.procedure.dimensions=64",
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert any((ws / "metadata/file_store").glob("procedure_*.view/MANIFEST.json"))  # the views were persisted

    holder = WorkspaceLock(ws / "metadata/procedure/default/workspace.lock")
    holder.acquire()  # this test process is "the other ReMe process"
    try:
        before = snapshot(ws)
        refused = run(
            cli,
            "start",
            "job=procedure_reindex",
            PLUGINS,
            f"workspace_dir={ws}",
            "components.as_embedding.procedure.dimensions=64",
        )  # logs to cwd/logs
        line = assert_one_line(refused, "in use by another ReMe process", f"pid={os.getpid()}", "Stop that process")
        assert snapshot(ws) == before, "the refused process rewrote workspace files on its way out"
        logs = "".join(p.read_text() for p in (cli["cwd"] / "logs").glob("*.log"))
        assert "Traceback" in logs and "in use by another ReMe process" in logs  # the traceback is in the log only
        port = free_port()
        service = run(
            cli,
            "start",
            PLUGINS,
            f"workspace_dir={ws}",
            "log_to_file=false",
            "service.host=127.0.0.1",
            f"service.port={port}",
            "components.as_embedding.procedure.dimensions=64",
        )
        assert assert_one_line(service, f"pid={os.getpid()}") == line
    finally:
        holder.release()


@pytest.mark.parametrize(
    "override, key",
    [
        ("components.procedure_memory.default.token_limits.segment=0", "token_limits.segment"),
        ("components.procedure_memory.default.procedure_dirr=x", "procedure_dirr"),
    ],
)
def test_bad_settings_are_one_line_naming_the_key(cli, override, key):
    result = run(
        cli, "start", "job=procedure_reindex", PLUGINS, f"workspace_dir={cli['ws']}", "log_to_file=false", override
    )
    assert_one_line(result, f"components.procedure_memory.default.{key}", "Fix the value")
