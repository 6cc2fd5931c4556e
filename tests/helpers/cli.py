"""The real ``reme`` console script in subprocesses: one-shot jobs and a served workspace."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from helpers import EmbeddingEndpoint, experience_record, stop_process, wait_for_service

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from benchlib.ports import free_port  # noqa: E402  (benchmarks/benchlib/ports.py; the tests import it from here)

REME = Path(sys.executable).parent / "reme"


DIMENSIONS = 64


PLUGINS = 'plugins=["procedure-memory"]'


HIDDEN_JOBS = (
    "procedure_create",
    "procedure_update",
    "procedure_auto_memory",
    "procedure_reindex",
    "procedure_export",
    "procedure_delete",
    "procedure_dump",
)


SERVED_JOBS = ("procedure_search", "procedure_read", "procedure_list", "procedure_imports", "procedure_history")


TRAJECTORY = (
    b'{"role": "user", "content": "search results are stale after the config change"}\n'
    b'{"role": "assistant", "content": "rebuilding the index"}\n'
)


REBUILD = experience_record(
    "Rebuild search after a configuration change",
    "After changing search configuration when results appear stale",
    "Rebuild the affected indexes, then verify a known query before resuming.",
)


INSPECT = experience_record(
    "Inspect logs before rebuilding",
    "When a deployment misbehaves and the cause is unknown",
    "Inspect logs before rebuilding anything; note the first error and its timestamp.",
)


# an extraction writes the conventions after the steps, each with its evidence (procedure_search detail=rules,
# min_evidence)
CLEANUP_RULES = ("- Delete only the failed target's cache (3 trajectories).", "- Keep the build logs (1 trajectory).")
CLEANUP = experience_record(
    "Clean temporary files of a failed build",
    "When a build fails and leaves partial artifacts behind",
    "Delete the build directory and the cache of the failed target, then build again from scratch.\nRules:\n"
    + "\n".join(CLEANUP_RULES),
)


def write_experience(ws: Path, name: str, record: dict, *, compact: bool = False) -> bytes:
    """Write an experience file in a deliberately non-canonical layout (a rewrite would change its bytes)."""
    text = json.dumps(record, separators=(",", ":")) if compact else json.dumps(record, indent=4)
    data = text.encode("utf-8")  # no trailing newline: canonical files have one
    path = ws / "procedures" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def write_trajectory(ws: Path, name: str = "run.jsonl", data: bytes = TRAJECTORY) -> Path:
    path = ws / "session" / "trajectories" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def snapshot(*directories: Path) -> dict[str, tuple[bytes, int]]:
    """Bytes and mtime of every file under the directories (missing directories are empty)."""
    out = {}
    for directory in directories:
        if directory.is_dir():
            for path in sorted(directory.rglob("*")):
                if path.is_file():
                    out[str(path)] = (path.read_bytes(), path.stat().st_mtime_ns)
    return out


def durable_state(ws: Path) -> dict[str, tuple[bytes, int]]:
    """What a write would touch: experience files, trajectories, the plugin's journal/imports/checkpoints."""
    state = ws / "metadata" / "procedure" / "default"
    return snapshot(ws / "procedures", ws / "session", state / "operations", state / "imports", state / "processing")


def parse_client_output(stdout: str) -> tuple[dict, bool]:
    """``reme <job> ...`` prints the answer line followed by a ✅ / ❌ marker."""
    lines = [line for line in stdout.strip().splitlines() if line.strip()]
    assert len(lines) >= 2, f"unexpected client output: {stdout!r}"
    marker = lines[-1].strip()
    assert marker in ("✅", "❌"), f"no success marker in client output: {stdout!r}"
    return json.loads(lines[-2]), marker == "✅"


@dataclass
class Reme:
    """Runs the ``reme`` console script with the test environment in a temporary cwd."""

    env: dict[str, str]
    cwd: Path

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(REME), *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start_job(self, job: str, ws: Path, *job_args: str) -> subprocess.CompletedProcess:
        return self.run("start", f"job={job}", *start_args(ws), *job_args)

    def call(self, port: int, job: str, *args: str) -> tuple[dict, bool]:
        proc = self.run(job, *args, "host=127.0.0.1", f"port={port}", timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return parse_client_output(proc.stdout)


def start_args(ws: Path) -> list[str]:
    return [
        PLUGINS,
        f"workspace_dir={ws}",
        "log_to_file=false",
        f"components.as_embedding.procedure.dimensions={DIMENSIONS}",
    ]


def make_reme(root: Path, endpoint: EmbeddingEndpoint, tokenizer: Path) -> Reme:
    cwd = root / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / ".env").write_text("")  # shadows any .env in a parent directory (ReMe loads it with override=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBEDDING_", "LLM_", "REME_"))}
    # this checkout's code, not whatever the venv's editable install points at (a git worktree tests its own)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "PYTHONIOENCODING": "utf-8",
            "EMBEDDING_BASE_URL": endpoint.base_url,
            "EMBEDDING_API_KEY": "test",
            "EMBEDDING_MODEL_NAME": "fake",
            "EMBEDDING_BACKEND": "openai",
            "PROCEDURE_TOKENIZER_SOURCE": str(tokenizer),
            # the import's preflight needs model settings; a closed port (its probe refuses it): an import test sets its own
            "LLM_BACKEND": "openai",
            "LLM_API_KEY": "test",
            "LLM_MODEL_NAME": "fake",
            "LLM_BASE_URL": "http://127.0.0.1:9/v1",
        }
    )
    return Reme(env=env, cwd=cwd)


@dataclass
class Service:
    reme: Reme
    ws: Path
    port: int
    proc: subprocess.Popen
    endpoint: EmbeddingEndpoint
    versions: dict[str, str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def running_server(reme, ws: Path, log: Path, *extra: str):
    """``reme start`` (terminal 1) on ``ws`` and a free port, ready to answer; stopped by its own pid afterwards."""
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(REME), "start", *start_args(ws), "service.host=127.0.0.1", f"service.port={port}", *extra],
            cwd=reme.cwd,
            env=reme.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_service(proc, port, log)
        yield proc, port
    finally:
        stop_process(proc)
