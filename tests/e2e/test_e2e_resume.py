"""Resume never lies, with the installed ``reme`` console script in subprocesses.

- SIGINT / SIGTERM in the middle of an import: the ``incomplete`` JSON answer (on stderr, like every failed
  answer) with its ``resume`` command and exit status 130 / 143, no traceback; the checkpoint is as the last
  finished segment left it. An import started without ``request_id`` prints the generated one on stderr first.
- The printed command names the import (workspace, file, request id, the fingerprint's tokenizer and segment
  budget, the command line's other settings) but not where the models are: the first run took the embedding
  backend and the providers' URLs from the environment and the model name from ``.env``; the answer names those
  variables (``resume_environment``), and the command resumes in another directory with an environment holding
  only ``PATH``, ``HOME`` and the named variables.
- A completed import run again with other segmentation settings answers ``complete``: exit 0, no model call,
  nothing written.
- An import whose model endpoint fails after the copy: the environment is fixed (``LLM_BASE_URL`` of
  another endpoint) and the printed resume completes there.
- A wrong ``LLM_BASE_URL`` (the README's ``https://...`` placeholder) is refused before anything is
  copied, in one line naming the setting and its value; fixed, the same command imports.

The "LLM" is ``ChatEndpoint`` and the embeddings ``EmbeddingEndpoint``, both on 127.0.0.1 in this process; the
tokenizer is a local word-level ``tokenizer.json``; every directory is temporary.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import EmbeddingEndpoint, write_word_tokenizer
from helpers.chat import ROLLOUT, ChatEndpoint, experience_name, one_experience_per_segment
from helpers.cli import durable_state

pytestmark = pytest.mark.slow  # real `reme` processes, signals

BIN = Path(sys.executable).parent
SEGMENT = "components.procedure_memory.default.token_limits.segment"
STOP_SEGMENT = 2  # the signal comes while segment 2's reply is awaited (segment 1 is checkpointed)


def checkpoint_of(ws: Path) -> dict:
    (path,) = (ws / "metadata" / "procedure" / "default" / "processing").glob("*.json")
    return json.loads(path.read_text(encoding="utf-8"))


def FIRST_ENV(chat, embeddings) -> dict[str, str]:  # noqa: N802 - a table
    """The providers' settings of the first run's environment."""
    return {
        "EMBEDDING_BACKEND": "openai",
        "EMBEDDING_BASE_URL": embeddings.base_url,
        "EMBEDDING_API_KEY": "test",
        "EMBEDDING_MODEL_NAME": "fake",
        "LLM_BASE_URL": chat.base_url,
        "LLM_API_KEY": "test",
    }


def interrupted_import(tmp_path: Path, signum: int, embeddings, chat) -> tuple[subprocess.CompletedProcess, Path]:
    """A first run whose settings come from the environment, ``.env`` and the command line, without request_id,
    sent ``signum`` while segment 2's model call is parked."""
    tokenizer = write_word_tokenizer(tmp_path / "tok" / "tokenizer.json")
    original = tmp_path / "originals" / "run.jsonl"
    original.parent.mkdir()
    original.write_bytes(ROLLOUT)
    cwd = tmp_path / "first"
    cwd.mkdir()
    (cwd / ".env").write_text("LLM_MODEL_NAME=model-from-dotenv\n")  # ReMe loads it (override=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBEDDING_", "LLM_", "REME_", "PROCEDURE_"))}
    env.pop("PYTHONPATH", None)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "PYTHONIOENCODING": "utf-8",
            "PROCEDURE_TOKENIZER_SOURCE": str(tokenizer),
            **FIRST_ENV(chat, embeddings),
        }
    )
    ws = tmp_path / "ws"
    command = [
        str(BIN / "reme"),
        "start",
        "job=procedure_auto_memory",
        'plugins=["procedure-memory"]',
        f"file={original}",
        "filename=run.jsonl",
        f"workspace_dir={ws}",
        "log_to_file=false",
        "components.as_embedding.procedure.dimensions=64",
        f"{SEGMENT}=100",
    ]
    chat.hold = lambda c: c.segment == STOP_SEGMENT and c.step == 1
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while not chat.held.wait(timeout=0.2):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the import never reached segment 2"
        process.send_signal(signum)  # its own pid only
        stdout, stderr = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        chat.hold = None
        chat.release()
    assert chat.errors == []
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), ws


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_mid_import_answers_with_a_resume_that_completes_in_a_clean_shell(tmp_path, signum, status):
    with EmbeddingEndpoint(64) as embeddings, ChatEndpoint(one_experience_per_segment) as chat:
        first, ws = interrupted_import(tmp_path, signum, embeddings, chat)

        # one JSON answer after the generated request id, no traceback, exit 130 / 143
        assert first.returncode == status, first.stderr[-3000:]
        assert "Traceback" not in first.stderr and first.stdout == ""
        lines = first.stderr.strip().splitlines()
        answer = json.loads(lines[-1])
        generated = answer["request_id"]
        assert lines[0] == (
            f"[procedure-memory] request_id={generated} (generated; to resume, run the same "
            f"command with request_id={generated})"
        )
        assert answer["status"] == "incomplete" and answer["error"]["code"] == "interrupted"
        assert signal.Signals(signum).name in answer["error"]["message"]
        checkpoint = checkpoint_of(ws)
        assert answer["segments"] == {"done": STOP_SEGMENT - 1, "total": len(checkpoint["segments"])}
        assert checkpoint["next_segment"] == STOP_SEGMENT - 1 and checkpoint["status"] == "processing"
        assert answer["experiences"]["created"] == [f"procedures/{experience_name(s)}" for s in (1, 2)]

        # the command names the import, not where the models are; the answer names what it reads instead
        resume = answer["resume"]
        tokenizer = tmp_path / "tok" / "tokenizer.json"
        for setting in (
            f"request_id={generated}",
            f"workspace_dir={ws}",
            f"{SEGMENT}=100",
            f"components.procedure_memory.default.tokenizer_source={tokenizer}",
            "components.as_embedding.procedure.dimensions=64",
        ):  # given on the command line
            assert setting in resume, (setting, resume)
        for endpoint in (
            "model-from-dotenv",
            chat.base_url,
            embeddings.base_url,
            ".backend=",
            ".model=",
            "base_url",
            "api_key",
        ):
            assert endpoint not in resume, (endpoint, resume)
        needed = answer["resume_environment"]
        assert set(needed) == {
            "LLM_MODEL_NAME",
            "LLM_BASE_URL",
            "LLM_API_KEY",
            "EMBEDDING_BACKEND",
            "EMBEDDING_BASE_URL",
            "EMBEDDING_API_KEY",
            "EMBEDDING_MODEL_NAME",
        }, needed
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / ".env").write_text("")  # shadows any .env of a parent directory
        first_values = {**FIRST_ENV(chat, embeddings), "LLM_MODEL_NAME": "model-from-dotenv"}
        clean = {
            "PATH": f"{BIN}{os.pathsep}{os.defpath}",
            "HOME": str(tmp_path / "home"),
            "HF_HUB_OFFLINE": "1",
            **{name: first_values[name] for name in needed},
        }
        chat.requests.clear()
        second = subprocess.run(
            resume, shell=True, cwd=elsewhere, env=clean, capture_output=True, text=True, timeout=180
        )
        assert second.returncode == 0, second.stderr[-3000:]
        done = json.loads(second.stdout)
        total = len(checkpoint["segments"])
        assert done["status"] == "complete" and done["request_id"] == generated
        assert done["segments"] == {"done": total, "total": total}
        assert {c.segment for c in chat.conversations()} == set(range(STOP_SEGMENT, total + 1))  # went on
        assert all(c.body["model"] == "model-from-dotenv" for c in chat.conversations())
        assert [p.name for p in (ws / "session" / "trajectories").iterdir()] == ["run.jsonl"]  # one import
        assert sorted(p.name for p in (ws / "procedures").iterdir()) == sorted(
            experience_name(s) for s in range(1, total + 1)
        )

        # the completed import run again with another segment budget: complete, nothing to do
        before = durable_state(ws)
        chat.requests.clear()
        other = resume.replace(f"{SEGMENT}=100", f"{SEGMENT}=40")
        third = subprocess.run(other, shell=True, cwd=elsewhere, env=clean, capture_output=True, text=True, timeout=180)
        assert third.returncode == 0, third.stderr[-3000:]
        again = json.loads(third.stdout)
        assert again["status"] == "complete" and again["segments"] == {"done": total, "total": total}
        assert chat.requests == [] and durable_state(ws) == before


def one_shot(tmp_path: Path, chat_url: str, embeddings) -> tuple[list[str], dict[str, str], Path, Path]:
    """A first-run command (request_id ``fix-1``), its environment, the workspace and the cwd."""
    tokenizer = write_word_tokenizer(tmp_path / "tok" / "tokenizer.json")
    original = tmp_path / "originals" / "run.jsonl"
    original.parent.mkdir(exist_ok=True)
    original.write_bytes(ROLLOUT)
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    (cwd / ".env").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBEDDING_", "LLM_", "REME_", "PROCEDURE_"))}
    env.pop("PYTHONPATH", None)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "PYTHONIOENCODING": "utf-8",
            "PROCEDURE_TOKENIZER_SOURCE": str(tokenizer),
            **FIRST_ENV(SimpleNamespace(base_url=chat_url), embeddings),
            "LLM_MODEL_NAME": "fake",
        }
    )
    ws = tmp_path / "ws"
    command = [
        str(BIN / "reme"),
        "start",
        "job=procedure_auto_memory",
        'plugins=["procedure-memory"]',
        f"file={original}",
        "filename=run.jsonl",
        "request_id=fix-1",
        f"workspace_dir={ws}",
        "log_to_file=false",
        "components.as_embedding.procedure.dimensions=64",
        f"{SEGMENT}=100",
    ]
    return command, env, ws, cwd


def test_a_model_failing_after_the_copy_resumes_once_the_environment_is_fixed(tmp_path):
    gone = {"error": {"message": "no such route", "type": "not_found"}}
    with (
        EmbeddingEndpoint(64) as embeddings,
        ChatEndpoint(one_experience_per_segment) as wrong,
        ChatEndpoint(one_experience_per_segment) as right,
    ):
        wrong.refuse_after_probe = (404, gone)  # it answered the probe, then its chat API went away
        command, env, ws, cwd = one_shot(tmp_path, wrong.base_url, embeddings)
        first = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
        assert first.returncode == 1, first.stderr[-3000:]
        answer = json.loads(first.stderr.strip().splitlines()[-1])
        assert answer["status"] == "incomplete" and answer["error"]["code"] == "agent_failed", answer
        assert (ws / answer["path"]).read_bytes() == ROLLOUT  # copied before the model failed
        assert wrong.base_url not in answer["resume"] and "LLM_BASE_URL" in answer["resume_environment"]

        env["LLM_BASE_URL"] = right.base_url  # the fix: the environment, not the printed command
        second = subprocess.run(
            answer["resume"], shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=180
        )
        assert second.returncode == 0, second.stderr[-3000:]
        done = json.loads(second.stdout)
        assert done["status"] == "complete" and done["request_id"] == "fix-1", done
        assert done["segments"]["done"] == done["segments"]["total"] and right.conversations()
        assert [p.name for p in (ws / "session" / "trajectories").iterdir()] == ["run.jsonl"]  # the same import
        assert right.errors == [] and len(wrong.probes) == 1


def test_a_wrong_model_url_is_refused_before_the_copy_naming_it(tmp_path):
    with EmbeddingEndpoint(64) as embeddings, ChatEndpoint(one_experience_per_segment) as right:
        command, env, ws, cwd = one_shot(tmp_path, "https://...", embeddings)  # the README's placeholder
        first = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
        assert first.returncode == 1 and "Traceback" not in first.stderr, first.stderr[-3000:]
        answer = json.loads(first.stderr.strip().splitlines()[-1])
        assert answer["status"] == "error" and answer["error"]["code"] == "agent_unavailable", answer
        message = answer["error"]["message"]
        assert "endpoint https://... " in message and "LLM_BASE_URL" in message and "Nothing was copied" in message
        assert "test" not in message.split() and "\n" not in message and "resume" not in answer
        assert not (ws / "session" / "trajectories").exists() or not list((ws / "session" / "trajectories").iterdir())

        env["LLM_BASE_URL"] = right.base_url
        second = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
        assert second.returncode == 0, second.stderr[-3000:]
        assert json.loads(second.stdout)["status"] == "complete" and len(right.probes) == 1
