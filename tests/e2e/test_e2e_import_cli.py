"""End to end: the spec's one-shot import command with the installed ``reme`` console script, killed and resumed.

``reme start job=procedure_auto_memory plugins='["procedure-memory"]' file=/abs/run.jsonl filename=run.jsonl
request_id=run-001`` runs in a subprocess with ReMe's default config (so ``as_llm.default`` comes from the ``LLM_*``
environment variables and streams, and ``agent_wrapper.default`` is the real AgentScope wrapper). The "LLM" is
``ChatEndpoint`` (a scripted OpenAI-compatible chat server on 127.0.0.1, in this process), embeddings come from
``EmbeddingEndpoint``, the tokenizer is a local word-level ``tokenizer.json``. The workspace, cwd (with an empty
``.env`` shadowing any parent one) and original file are temporary; ``log_to_file=false``.

The first run is SIGKILLed (by its own pid) inside segment 2, after that segment's experience was created and before
its reply finished; the original is deleted; the same command resumes from the saved copy and the checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import EmbeddingEndpoint, write_word_tokenizer
from helpers.chat import ROLLOUT as TRAJECTORY
from helpers.chat import (
    ChatEndpoint,
    assert_offered_only_the_extraction_tools,
    experience_name,
    one_experience_per_segment,
)

pytestmark = pytest.mark.slow  # real `reme` processes and services

REME = Path(sys.executable).parent / "reme"
REQUEST_ID = "run-001"
SEGMENT_TOKENS = 100  # with the word tokenizer: 3 JSONL records (28 tokens each) per segment -> 4 segments
KILL_SEGMENT = 2


def read_checkpoint(ws: Path) -> dict | None:
    for path in (ws / "metadata" / "procedure" / "default" / "processing").glob("*.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("request_id") == REQUEST_ID:
            return record
    return None


def test_killed_one_shot_import_resumes_from_the_saved_copy(tmp_path):
    tokenizer = write_word_tokenizer(tmp_path / "tok" / "tokenizer.json")
    original = tmp_path / "originals" / "run.jsonl"
    original.parent.mkdir()
    original.write_bytes(TRAJECTORY)
    ws = tmp_path / "ws"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / ".env").write_text("")  # shadows any .env of a parent directory

    with EmbeddingEndpoint(64) as embeddings, ChatEndpoint(one_experience_per_segment) as chat:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBEDDING_", "LLM_", "REME_"))}
        env.pop("PYTHONPATH", None)
        env.update(
            {
                "HF_HUB_OFFLINE": "1",
                "PYTHONIOENCODING": "utf-8",
                "PROCEDURE_TOKENIZER_SOURCE": str(tokenizer),
                "EMBEDDING_BACKEND": "openai",
                "EMBEDDING_BASE_URL": embeddings.base_url,
                "EMBEDDING_API_KEY": "test",
                "EMBEDDING_MODEL_NAME": "fake",
                "LLM_BACKEND": "openai",
                "LLM_BASE_URL": chat.base_url,
                "LLM_API_KEY": "test",
                "LLM_MODEL_NAME": "fake",
            }
        )
        command = [
            str(REME),
            "start",
            "job=procedure_auto_memory",
            'plugins=["procedure-memory"]',
            f"file={original}",
            "filename=run.jsonl",
            f"request_id={REQUEST_ID}",
            f"workspace_dir={ws}",
            "log_to_file=false",
            "components.as_embedding.procedure.dimensions=64",
            f"components.procedure_memory.default.token_limits.segment={SEGMENT_TOKENS}",
        ]

        # -- run 1: park the model call that follows segment 2's create, then SIGKILL the process ---------------
        chat.hold = lambda c: c.segment == KILL_SEGMENT and c.step == 1
        log = tmp_path / "run1.log"
        with open(log, "wb") as out:
            first = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 90
            while not chat.held.wait(timeout=0.2):
                assert first.poll() is None, f"run 1 exited early ({first.returncode}):\n{log.read_text()[-4000:]}"
                assert time.monotonic() < deadline, f"run 1 never reached segment {KILL_SEGMENT}:\n{log.read_text()}"
            # Segment 1 is checkpointed; segment 2 has written its experience but its reply never finished.
            checkpoint = read_checkpoint(ws)
            assert checkpoint is not None and checkpoint["next_segment"] == KILL_SEGMENT - 1
            total = len(checkpoint["segments"])
            assert total >= KILL_SEGMENT + 1, "the kill must happen before the last segment"
            assert sorted(p.name for p in (ws / "procedures").iterdir()) == [experience_name(1), experience_name(2)]
        finally:
            if first.poll() is None:
                os.kill(first.pid, signal.SIGKILL)  # its own pid only
            first.wait(timeout=30)
        assert first.returncode == -signal.SIGKILL
        chat.hold = None
        chat.release()
        run1 = chat.conversations()
        assert chat.errors == []
        assert [(c.segment, c.step) for c in run1] == [(1, 0), (1, 1), (2, 0), (2, 1)]
        assert run1[-1].last_tool_answer()["status"] == "created"  # segment 2's experience was published
        assert all(c.total == total for c in run1)
        assert read_checkpoint(ws)["next_segment"] == KILL_SEGMENT - 1  # nothing advanced after the kill

        # -- the killed import, as the imports listing shows it (the one-shot CLI, the same settings) ------------
        import_only = ("job=", "file=", "filename=", "request_id=")
        listing = [
            str(REME),
            "start",
            "job=procedure_imports",
            *[arg for arg in command[2:] if not arg.startswith(import_only)],
        ]  # the same settings
        listed = subprocess.run(listing, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        assert listed.returncode == 0, listed.stderr[-3000:]
        entry = json.loads(listed.stdout)["imports"][0]
        assert (entry["request_id"], entry["file"], entry["status"]) == (
            REQUEST_ID,
            "session/trajectories/run.jsonl",
            "incomplete",
        )
        assert entry["segments"] == {"done": KILL_SEGMENT - 1, "total": total}
        assert entry["experiences"] == {"created": KILL_SEGMENT, "updated": 0}  # the killed attempt's write counts

        # -- run 2: the original is gone; the same command resumes from the verified copy -----------------------
        original.unlink()
        chat.requests.clear()
        second = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        assert chat.errors == []
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        answer = json.loads(second.stdout)
        assert answer["status"] == "complete" and answer["request_id"] == REQUEST_ID
        assert answer["path"] == "session/trajectories/run.jsonl"
        assert answer["segments"] == {"done": total, "total": total}

        # The copy is the original's bytes, and it is the only trajectory (no run-2.jsonl from the resume).
        copy = ws / "session" / "trajectories" / "run.jsonl"
        assert copy.read_bytes() == TRAJECTORY
        assert sorted(p.name for p in copy.parent.iterdir()) == ["run.jsonl"]

        # The resume restarted at the unfinished segment and went on to the end; every request was the real
        # AgentScope agent offering exactly the four job tools.
        run2 = chat.conversations()
        assert run2[0].segment == KILL_SEGMENT and run2[0].step == 0
        assert sorted({c.segment for c in run2}) == list(range(KILL_SEGMENT, total + 1))
        for conversation in run1 + run2:
            assert conversation.body["stream"] is True  # ReMe's default as_llm streams (SSE)
            assert_offered_only_the_extraction_tools(conversation.body)

        # Exactly one experience per segment: no duplicate, none lost, each citing the copied trajectory.
        expected = sorted(experience_name(n) for n in range(1, total + 1))
        assert sorted(p.name for p in (ws / "procedures").iterdir()) == expected
        for n in range(1, total + 1):
            record = json.loads((ws / "procedures" / experience_name(n)).read_text(encoding="utf-8"))
            assert set(record) == {"description", "when-to-use", "content", "sources"}
            assert record["description"] == f"Roll out part {n} of the procedure"
            assert record["sources"] == ["session/trajectories/run.jsonl"]

        # The interrupted segment's write was not repeated as a second experience: the resumed attempt either saw
        # it in its operation ledger or its identical create was answered from the operation journal.
        resumed_create = next(c for c in run2 if c.segment == KILL_SEGMENT and c.step == 1).last_tool_answer()
        assert (
            resumed_create.get("replayed") is True
            or resumed_create.get("kind") == "experience"
            or resumed_create.get("error", {}).get("code") == "already_exists"
        ), resumed_create

        # Spec: "A resumed segment receives its prior operation ledger" -- also after a hard kill, when the
        # experience of the interrupted attempt is already published (and recorded in the operation journal).
        assert f"procedures/{experience_name(KILL_SEGMENT)}" in run2[0].prompt, (
            "the resumed segment's prompt does not list the write of the killed attempt (operation ledger lost)"
        )
        # The import's answer accounts for every experience it created, including the one of the killed attempt.
        assert sorted(answer["experiences"]["created"]) == [f"procedures/{name}" for name in expected]
        assert answer["experiences"]["updated"] == [] and answer["pending_writes"] == []
        final = read_checkpoint(ws)
        assert final["status"] == "complete" and final["next_segment"] == total
        # the rolling summary of the segments before the last (after the last, none is asked for)
        assert final["summary"] == f"Read segments 1-{total - 1} of a staged rollout."
