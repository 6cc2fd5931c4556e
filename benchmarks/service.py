"""Service concurrency benchmark: search throughput of the real ``reme start`` service over HTTP, 1 client vs 8.

Run from the repository root (a venv with the plugin installed)::

    python benchmarks/service.py                 # 10,000 experiences, 3 rounds of 1 and 8 clients
    python benchmarks/service.py --n 1000 --requests 200 --rounds 1      # a short run
    python benchmarks/service.py --smoke         # CI: 100 experiences, 10 queries, 1 round of 40 searches
    python benchmarks/service.py --access-log on,off      # also a service with uvicorn's access log off
    python benchmarks/service.py --http auto,h11          # also a service on uvicorn's pure-Python stack

What runs, all on 127.0.0.1:

* a local OpenAI-compatible ``/v1/embeddings`` server in this process, answering with the search benchmark's
  deterministic hashed-projection vectors (1,024 dimensions);
* N experience files written directly into a fresh workspace (the search benchmark's corpus), indexed by the real
  one-shot ``reme start job=procedure_reindex`` in a subprocess;
* the real service, ``reme start plugins='["procedure-memory"]' service.host=127.0.0.1 service.port=<free port>``, in a
  subprocess (stopped by its pid at the end), with ReMe's ``openai`` embedding backend pointed at the local server;
* queries: ``--queries`` distinct search benchmark queries, each sent once before timing so the service's embedding
  cache holds them (provider time is excluded from the timed rounds, as in ``search.py``);
* rounds: ``--requests`` ``POST /procedure_search`` calls (``limit`` 5, alternating the two views), first from one
  client (each call waits for the previous answer), then from 8 concurrent clients splitting the same calls; every
  answer is checked (HTTP 200, ``status: ok``, results, vector search available). Throughput is answers per second.
  The clients run in a separate process (``httpclient.py``: raw-socket keep-alive HTTP/1.1), so their CPU shares
  neither the service's GIL nor this script's event loop (they still share the machine's cores);
* the service process's CPU (user + system, all threads, from ``/proc/<pid>/stat``) per request of each series;
* ``--access-log``: the service with uvicorn's access log ``on`` (ReMe's default) and/or ``off``
  (``service.access_log=false``, passed through to ``uvicorn.run``), one service start per setting;
* ``--http``: uvicorn's ``auto`` stack (httptools' parser and uvloop's event loop when installed: the plugin's
  ``service`` extra) and/or ``h11`` (``service.http=h11 service.loop=asyncio``: the pure-Python parser and asyncio's
  loop, what ReMe's own dependencies give), one service start per setting and ``--access-log`` setting.

Target: 8 concurrent clients get >= 1.5x one client's throughput at 10k. The ratio is the median over the
rounds, both series measured in every round; nothing asserts on time.

``--smoke`` (CI, ``tests/benchmarks/test_smokes.py``): 100 experiences, 10 queries, 1 round of 40 searches per
series, the corpus built from ``tests/fixtures/experiences.jsonl`` when ``../shared`` is absent. Everything above
runs (the one-shot reindex, the real service on 127.0.0.1, the load client, every answer checked); the throughputs
of 40 searches say nothing about the target.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from benchlib import corpus as _corpus  # benchmarks/benchlib/corpus.py
from benchlib.corpus import DIMENSIONS, Corpus, HashedProjectionEmbedding, experience_bytes, log, machine
from benchlib.machine import revision  # benchmarks/benchlib/machine.py
from benchlib.ports import free_port  # noqa: E402  (benchmarks/benchlib/ports.py)
from benchlib.shared import REPO, smoke_library  # benchmarks/benchlib/shared.py

sys.path.insert(0, str(REPO / "tests"))  # tests/helpers: the word-level tokenizer, starting and stopping a service
from helpers import stop_process, wait_for_service, write_word_tokenizer  # noqa: E402

TARGET_RATIO = 1.5
CLIENTS = 8
REME = Path(sys.executable).parent / "reme"


class EmbeddingServer:
    """``POST /v1/embeddings`` (OpenAI format) with the search benchmark's model, on 127.0.0.1."""

    def __init__(self, model: HashedProjectionEmbedding) -> None:
        self.model = model
        self.texts = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                inputs = body.get("input")
                inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
                server.texts += len(inputs)
                data = json.dumps(
                    {
                        "object": "list",
                        "model": body.get("model", "bench"),
                        "data": [
                            {"object": "embedding", "index": i, "embedding": server.model.vector(str(t)).tolist()}
                            for i, t in enumerate(inputs)
                        ],
                        "usage": {"prompt_tokens": 1, "total_tokens": 1},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "EmbeddingServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def reme_env(embeddings: EmbeddingServer, tokenizer: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBEDDING_", "LLM_", "REME_"))}
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "PYTHONIOENCODING": "utf-8",
            "EMBEDDING_BASE_URL": embeddings.base_url,
            "EMBEDDING_API_KEY": "bench",
            "EMBEDDING_MODEL_NAME": "bench",
            "EMBEDDING_BACKEND": "openai",
            "PROCEDURE_TOKENIZER_SOURCE": str(tokenizer),
        }
    )
    return env


def reme_args(ws: Path) -> list[str]:
    return [
        'plugins=["procedure-memory"]',
        f"workspace_dir={ws}",
        "log_to_file=false",
        f"components.as_embedding.procedure.dimensions={DIMENSIONS}",
    ]


CLIENT = Path(__file__).with_name("httpclient.py")


def service_cpu_seconds(pid: int) -> float:
    """User + system CPU of the service process so far (all its threads), from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_round(port: int, queries: list[str], requests: int, clients: int) -> float:
    """Seconds for ``requests`` searches split over ``clients`` concurrent sequential clients, sent by the load
    client (httpclient.py) in its own process: its CPU shares neither the service's GIL nor this process."""
    calls = [(queries[i % len(queries)], ("when_to_use", "when_to_use_content")[i % 2]) for i in range(requests)]
    proc = subprocess.run(
        [sys.executable, str(CLIENT), str(port), str(clients)],
        input=json.dumps(calls),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"load client failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)["seconds"]


HTTP_STACKS = {
    "auto": [],  # uvicorn's choice: httptools and uvloop when installed (the plugin's ``service`` extra installs them)
    "h11": ["service.http=h11", "service.loop=asyncio"],  # pure-Python parser, asyncio loop: ReMe's own dependencies
}


def measure_service(
    ws: Path, root: Path, env: dict, queries: list[str], args, access_log: str, http: str = "auto"
) -> dict:
    """Start the service (uvicorn access log ``on``/``off``, HTTP stack ``auto``/``h11``), warm its query cache,
    run the rounds, stop it."""
    port = free_port()
    log_file = root / f"service-{access_log}-{http}.log"
    extra = ([] if access_log == "on" else ["service.access_log=false"]) + HTTP_STACKS[http]
    with open(log_file, "wb") as out:
        service = subprocess.Popen(
            [str(REME), "start", *reme_args(ws), "service.host=127.0.0.1", f"service.port={port}", *extra],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    # what uvicorn's "auto" picks: the C stack only where both modules are importable in the service's environment
    c_stack = all(importlib.util.find_spec(m) is not None for m in ("httptools", "uvloop"))
    stack = "httptools + uvloop" if http == "auto" and c_stack else "h11 + asyncio"
    run: dict = {"access_log": access_log, "http": http, "stack": stack, "rounds": []}
    try:
        started = time.perf_counter()
        wait_for_service(service, port, log_file, timeout=600)
        run["service_ready_seconds"] = time.perf_counter() - started
        log(f"service ready on port {port}; warming the query cache ...")
        run_round(port, queries, len(queries) * 2, 1)  # every query once per view
        for number in range(args.rounds):
            row = {}
            for clients, key in ((1, "one_client"), (CLIENTS, "clients")):
                cpu = service_cpu_seconds(service.pid)
                seconds = run_round(port, queries, args.requests, clients)
                row[f"{key}_per_s"] = args.requests / seconds
                row[f"{key}_cpu_ms"] = (service_cpu_seconds(service.pid) - cpu) / args.requests * 1000
            row["ratio"] = row["clients_per_s"] / row["one_client_per_s"]
            run["rounds"].append(row)
            log(
                f"round {number + 1}: 1 client {row['one_client_per_s']:.1f}/s, {CLIENTS} clients "
                f"{row['clients_per_s']:.1f}/s, ratio {row['ratio']:.2f}; service CPU per request "
                f"{row['one_client_cpu_ms']:.2f} / {row['clients_cpu_ms']:.2f} ms"
            )
    finally:
        stop_process(service, timeout=30)
    for key in ("ratio", "one_client_per_s", "clients_per_s", "one_client_cpu_ms", "clients_cpu_ms"):
        run[key] = statistics.median(r[key] for r in run["rounds"])
    run["passed"] = run["ratio"] >= TARGET_RATIO
    return run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=10_000, help="experiences (10000)")
    p.add_argument("--queries", type=int, default=200, help="distinct queries (200)")
    p.add_argument("--requests", type=int, default=800, help="searches per series per round (800)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of (1 client, 8 clients) (3)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--access-log",
        default="on",
        help="uvicorn access log of the service: on, off, or both as on,off (one service each) (on)",
    )
    p.add_argument(
        "--http",
        default="auto",
        help="uvicorn's HTTP stack: auto (httptools + uvloop when installed), h11 (pure Python + asyncio), "
        "or both as auto,h11 (one service each, for every --access-log setting) (auto)",
    )
    p.add_argument("--json", help="also write the raw numbers to this file")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="CI smoke run: --n 100 --queries 10 --requests 40 --rounds 1, tests/fixtures' library without ../shared",
    )
    args = p.parse_args(argv)
    if args.smoke:
        args.n, args.queries = min(args.n, 100), min(args.queries, 10)
        args.requests, args.rounds = min(args.requests, 40), 1
        _corpus.LIBRARY = smoke_library()
    access_logs = [s.strip() for s in args.access_log.split(",") if s.strip()]
    if not access_logs or set(access_logs) - {"on", "off"}:
        p.error("--access-log takes on, off or on,off")
    stacks = [s.strip() for s in args.http.split(",") if s.strip()]
    if not stacks or set(stacks) - set(HTTP_STACKS):
        p.error("--http takes auto, h11 or auto,h11")

    load_start = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="reme-proc-service-"))
    ws = root / "ws"
    tokenizer = write_word_tokenizer(root / "tokenizer" / "tokenizer.json")
    corpus = Corpus(seed=args.seed)
    experiences = [corpus.experience(i) for i in range(args.n)]
    queries = [corpus.query(experiences) for _ in range(args.queries)]
    trajectory = ws / "session" / "trajectories" / "bench-run.jsonl"
    trajectory.parent.mkdir(parents=True)
    trajectory.write_text('{"role": "user", "content": "benchmark trajectory"}\n', encoding="utf-8")
    (ws / "procedures").mkdir()
    for exp in experiences:
        (ws / "procedures" / exp["filename"]).write_bytes(experience_bytes(exp, "session/trajectories/bench-run.jsonl"))
    results: dict = {"n": args.n, "queries": args.queries, "requests": args.requests, "clients": CLIENTS, "runs": []}
    with EmbeddingServer(HashedProjectionEmbedding(DIMENSIONS, seed=args.seed)) as embeddings:
        env = reme_env(embeddings, tokenizer)
        log(f"{args.n} experience files; procedure_reindex ...")
        started = time.perf_counter()
        proc = subprocess.run(
            [str(REME), "start", "job=procedure_reindex", *reme_args(ws)],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"reindex failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        results["reindex_process_seconds"] = time.perf_counter() - started
        for setting in access_logs:
            for http in stacks:
                log(f"access log {setting}, HTTP stack {http}: starting the service ...")
                results["runs"].append(measure_service(ws, root, env, queries, args, setting, http))
    first = results["runs"][0]  # the top-level numbers are those of the first --access-log and --http settings
    results.update(
        {key: first[key] for key in ("ratio", "one_client_per_s", "clients_per_s", "passed", "service_ready_seconds")}
    )
    results.update(
        target_ratio=TARGET_RATIO,
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        machine=machine(),
        revision=revision(),
        command=" ".join(["python", *sys.argv]),
        loadavg_start=load_start,
        loadavg_end=os.getloadavg(),
    )
    print(f"procedure-memory service benchmark — {results['date']} — {results['machine']}")
    print(f"command: {results['command']}   revision {results['revision']}")
    print(
        "load average at start {:.2f}/{:.2f}/{:.2f}, at end {:.2f}/{:.2f}/{:.2f}".format(
            *results["loadavg_start"], *results["loadavg_end"]
        )
    )
    print(
        f"{args.n} experiences, reindex process {results['reindex_process_seconds']:.1f} s, service ready in "
        f"{results['service_ready_seconds']:.1f} s"
    )
    for run in results["runs"]:
        suffix = f" [access log {run['access_log']}, HTTP {run['http']}: {run['stack']}]"
        print(
            f"throughput over HTTP (median of {args.rounds} rounds of {args.requests} searches): 1 client "
            f"{run['one_client_per_s']:.1f}/s, {CLIENTS} clients {run['clients_per_s']:.1f}/s -> ratio "
            f"{run['ratio']:.2f} (target >= {TARGET_RATIO}) {'PASS' if run['passed'] else 'FAIL'}{suffix}"
        )
        print(
            f"service process CPU per request (median): 1 client {run['one_client_cpu_ms']:.2f} ms, {CLIENTS} "
            f"clients {run['clients_cpu_ms']:.2f} ms{suffix}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
