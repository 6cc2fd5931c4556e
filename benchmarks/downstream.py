"""Downstream benchmark: does a solver given the plugin's experiences do better on BFCL tasks it never saw?

Solves BFCL v4 ``multi_turn_base`` tasks with any OpenAI-compatible chat endpoint in function-calling mode, executes
every call with BFCL's own simulated APIs (``execute_multi_turn_func_call``) and scores each task with BFCL's own
checker (``multi_turn_checker``), once per arm:

* ``none``: no memory;
* ``plugin``: before each user turn, the turn's message goes through the real ``procedure_search`` job of a workspace
  the ``build`` step made (view and k configurable), and the results are put in front of the message as a marked
  block ("experiences from earlier tasks; use only if relevant");
* ``library``: the same, on a workspace holding ReMe's released experiences (``bfcl_qwen3_8b.jsonl``).

Same messages and tools in every arm (BFCL's, no system prompt); only the block differs. Run from the repository
root, in the venv with the plugin and the ``benchmarks`` extra (``pip install -e '.[test,benchmarks]'`` and
``pip install --no-deps bfcl-eval==2026.3.23``; see ``benchmarks/README.md``, "downstream.py")::

    python benchmarks/downstream.py smoke                  # offline, seconds: scripted endpoints, 100% and 0%

    export LLM_BACKEND=openai LLM_MODEL_NAME=... LLM_API_KEY=... LLM_BASE_URL=https://...
    python benchmarks/downstream.py build --out /tmp/mem --train 0-19           # memory from 20 replays
    python benchmarks/downstream.py build --out /tmp/mem --train 0-19 --rollouts passed   # + the model's own passes
    python benchmarks/downstream.py build --out /tmp/mem2 --train 50,52 --start-from /tmp/mem/ws  # replays made here
    python benchmarks/downstream.py run --tasks 44-63 --arms none,plugin,library --workspace /tmp/mem/ws \
        --k 3 --view when_to_use_content --fields all --json /tmp/downstream.json
    python benchmarks/downstream.py run ... --min-relevance 0 --tools none --memory-tokens 0   # the delivery before
    python benchmarks/downstream.py run ... --endpoint none=http://127.0.0.1:18612/v1 \
        --endpoint plugin=http://127.0.0.1:18613/v1            # one answerer per arm (relay servers)

    python benchmarks/downstream.py combine /tmp/down-a.json /tmp/down-b.json --json /tmp/down.json  # halves as one

    python benchmarks/downstream.py run --local-model --tasks 44,45 --arms none,plugin --workspace ...  # shared 1.5B

The memory arms' delivery defaults to the plugin's: ``procedure_search`` with its relevance floor (the
setting, or ``--min-relevance``), ``tools`` = the task's function names (``--tools task``; ``none`` passes none) and a
budget of ``--memory-tokens`` (500) tokens of experience text per block, whole experiences best first. With
``--fields`` naming ``rules`` the arm asks for ``detail=rules`` (each result's description, when-to-use and rules,
without its steps), and the budget counts that text. A block leaves out the experiences an earlier block of the same
task showed (they are still in the conversation; the search is the same); ``--repeats show`` shows them again, as
every run before the ninth session of issue 31 did.

``combine`` makes one measurement of runs over disjoint tasks with the same arms, memory and delivery (the halves
of a test set, each with its own answerers): the per-task table and report of all their tasks, and per memory arm
the tasks it alone passed and those only ``none`` passed, the net, McNemar's p and its prompt tokens per task
against ``none``'s, with issue 31's verification bars (at most +15%; no net loss). Runs that share a task, differ
in a setting other than their tasks and endpoints, or whose memory changed are refused.

Arms run concurrently (one asyncio task each; model requests in worker threads), tasks of an arm one after the
other. Each arm may have its own endpoint (``--endpoint ARM=URL``; the others use ``LLM_BASE_URL``). Every arm gets
a unique tag for BFCL's cached API instances. ``--json`` writes the raw per-task results (calls, BFCL-format model
responses, verdicts, requests, tokens, memory blocks' paths and tokens).

Honesty rules the run enforces: test ids that a memory has seen are refused (a BFCL task is seen when one of its
user messages of 30 characters or more appears in a file of the workspace's ``session/trajectories/`` -- the
imported replays and rollouts, or the released library's own JSONL); the searched workspace is a copy, and both the
given workspace (every byte) and the copy's memory (``procedures/`` and ``session/``) must be unchanged at the end.

Embeddings: ``--embedded``: the plugin's own embedded MiniLM (what a user gets with no ``EMBEDDING_*``; the one the
relevance floor is calibrated on); else ``EMBEDDING_*`` when ``EMBEDDING_BASE_URL`` is set; else the shared hash
embedding server (plumbing only). Build and run must use the same embeddings. ``bfcl-export`` / ``bfcl-compare`` feed a run's model responses
to bfcl-eval's own CLI (``bfcl evaluate``) and compare its verdicts with this driver's.

``smoke`` (CI: ``tests/benchmarks/test_smokes.py`` runs it as above; ``test_downstream.py`` calls it in-process) needs
no model, no ``../shared`` and no network: tasks 0 and 1 through the ``none`` arm against scripted endpoints on
127.0.0.1, the ground-truth replay (every task must pass) and an endpoint that calls nothing (none may pass), with
BFCL's real tasks, execution and checker. It covers the driver's client, BFCL's plumbing and the scoring; the memory
arms (``procedure_search`` blocks, the frozen-workspace and seen-task rules) and ``build`` are not in it: the
in-process tests of ``tests/benchmarks/test_downstream.py`` cover the arms on workspaces they build, and ``build``
end to end with a scripted chat model (a made replay imported into a copy of a start workspace). It says nothing
about whether memory helps.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import copy
import dataclasses
import hashlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import ModuleType, SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchlib.machine import describe, revision  # noqa: E402  (benchmarks/benchlib/machine.py)
from benchlib.shared import find_shared, shared_dir  # noqa: E402  (benchmarks/benchlib/shared.py)
from benchlib.library import index_placed, load_library, place_library  # noqa: E402  (benchmarks/benchlib/library.py)
from benchlib.stats import sign_test  # noqa: E402  (benchmarks/benchlib/stats.py)

sys.path.append(str(Path(__file__).resolve().parent.parent / "tests"))  # the doubles' one local HTTP server
from helpers import LocalServer, send_json  # noqa: E402  (tests/helpers)

CATEGORY = "multi_turn_base"
ARMS = ("none", "plugin", "library")
FIELD_NAMES = ("description", "when-to-use", "content")  # an experience's fields, what ``all`` delivers
# ``rules``: the plugin's ``detail=rules`` answer (each result's rules, its steps left out; a budget counts that
# text), for a block of the environment's conventions
FIELD_CHOICES = FIELD_NAMES + ("rules",)
FIELD_LABELS = {"description": "Description", "when-to-use": "When to use", "content": "Content", "rules": "Rules"}
BLOCK_HEAD = "--- Experiences from earlier tasks (use only if relevant) ---"
BLOCK_TAIL = "--- End of experiences ---"
MIN_MESSAGE_CHARS = 30  # shorter user messages ("What's inside?") do not identify a task
BFCL_MODEL = "gpt-4o-2024-11-20-FC"  # a BFCL registry name whose handler decodes OpenAI tool calls (bfcl-export)


# -- BFCL -----------------------------------------------------------------------------------------------------------


def bfcl() -> SimpleNamespace:
    """bfcl-eval's own dataset, execution, checker and OpenAI tool conversion.

    ``bfcl_eval.model_handler.utils`` imports the Java and JavaScript call parsers, which need ``tree_sitter`` 0.21
    while agentscope (ReMe) needs a current one; multi-turn tasks never parse Java or JavaScript, so those two modules
    are replaced by stubs that raise if called. Everything used here is bfcl-eval's code, unchanged."""
    parsers = (("java_parser", "parse_java_function_call"), ("js_parser", "parse_javascript_function_call"))
    for name, function in parsers:
        module_name = f"bfcl_eval.model_handler.parser.{name}"
        if module_name not in sys.modules:
            stub = ModuleType(module_name)

            def unavailable(*_args, _name=name):
                raise NotImplementedError(f"{_name} is stubbed out by downstream.py (multi-turn needs no parser)")

            setattr(stub, function, unavailable)
            sys.modules[module_name] = stub
    try:
        from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT
        from bfcl_eval.constants.enums import ModelStyle
        from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
            execute_multi_turn_func_call,
            is_empty_execute_response,
        )
        from bfcl_eval.model_handler.utils import convert_to_function_call, convert_to_tool
        from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry
    except ImportError as exc:
        raise SystemExit(
            f"bfcl-eval is missing ({exc}): pip install -e '.[benchmarks]' && "
            "pip install --no-deps bfcl-eval==2026.3.23"
        ) from exc
    return SimpleNamespace(
        step_limit=MAXIMUM_STEP_LIMIT,
        checker=multi_turn_checker,
        execute=execute_multi_turn_func_call,
        is_empty=is_empty_execute_response,
        decode=convert_to_function_call,
        tools=lambda functions: convert_to_tool(functions, GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS),
        entries=lambda: load_dataset_entry(CATEGORY, include_prereq=False),
        ground_truth=lambda: load_ground_truth_entry(CATEGORY),
    )


@dataclass
class Task:
    id: str
    entry: dict  # BFCL's test entry: question (turns of messages), function docs, initial_config, involved_classes
    ground_truth: list[list[str]]  # per turn, the ground-truth call strings

    @property
    def messages(self) -> list[str]:
        return [m["content"] for turn in self.entry["question"] for m in turn if m.get("role") == "user"]


def load_tasks(lib: SimpleNamespace | None = None) -> dict[str, Task]:
    """All 200 ``multi_turn_base`` tasks by id (BFCL keeps prompts and ground truth in the same order)."""
    lib = lib or bfcl()
    entries, truths = lib.entries(), lib.ground_truth()
    assert [e["id"] for e in entries] == [g["id"] for g in truths], "BFCL prompts and ground truth differ in order"
    return {e["id"]: Task(e["id"], e, g["ground_truth"]) for e, g in zip(entries, truths)}


def parse_ids(spec: str) -> list[str]:
    """``"0-3,7,multi_turn_base_9"`` -> BFCL ids in that order, without repeats."""
    out: list[str] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        part = part.removeprefix(f"{CATEGORY}_")
        if re.fullmatch(r"\d+-\d+", part):
            first, last = map(int, part.split("-"))
            numbers = range(first, last + 1)
        elif part.isdigit():
            numbers = [int(part)]
        else:
            raise ValueError(f"not a task id or range: {part!r}")
        out.extend(f"{CATEGORY}_{n}" for n in numbers if f"{CATEGORY}_{n}" not in out)
    return out


def task_number(task_id: str) -> int:
    return int(task_id.rsplit("_", 1)[1])


# -- what a memory has seen -----------------------------------------------------------------------------------------


def seen_task_ids(texts: list[str], tasks: dict[str, Task]) -> set[str]:
    """Tasks one of whose user messages (of ``MIN_MESSAGE_CHARS`` or more) occurs in one of ``texts``, verbatim or
    JSON-escaped: the tasks a memory built from these files has seen (replays, rollouts, a released library)."""
    seen = set()
    for task in tasks.values():
        forms = {
            form
            for message in task.messages
            if len(message.strip()) >= MIN_MESSAGE_CHARS
            for form in (
                message.strip(),
                json.dumps(message.strip())[1:-1],
                json.dumps(message.strip(), ensure_ascii=False)[1:-1],
            )
        }
        if any(form in text for text in texts for form in forms):
            seen.add(task.id)
    return seen


def source_texts(workspace: Path) -> list[str]:
    """The decoded text of every file in the workspace's ``session/trajectories/``."""
    directory = workspace / "session" / "trajectories"
    return [p.read_text(encoding="utf-8", errors="replace") for p in sorted(directory.rglob("*")) if p.is_file()]


def refuse_overlap(test_ids: list[str], seen: dict[str, set[str]]) -> None:
    """SystemExit when a test id is a task some memory of the run has seen (``seen``: memory label -> ids)."""
    clashes = {label: sorted(set(test_ids) & ids, key=task_number) for label, ids in seen.items()}
    clashes = {label: ids for label, ids in clashes.items() if ids}
    if clashes:
        detail = "; ".join(f"{label}: {', '.join(ids)}" for label, ids in clashes.items())
        raise SystemExit(f"refused: test tasks seen by a memory of this run ({detail})")


# -- pure parts: the memory block, the paired table, the statistics -------------------------------------------------


def parse_fields(spec: str) -> tuple[str, ...]:
    """``"all"`` (the three fields) or a comma list of ``description``, ``when-to-use`` (``when_to_use``),
    ``content``, ``rules`` (the content's rules alone; not together with ``content``)."""
    if spec.strip() == "all":
        return FIELD_NAMES
    fields = tuple(f.strip().replace("_", "-") for f in spec.split(",") if f.strip())
    unknown = [f for f in fields if f not in FIELD_CHOICES]
    if unknown or not fields or {"content", "rules"} <= set(fields):
        raise ValueError(
            f"fields must be 'all' or a comma list of {', '.join(FIELD_CHOICES)} (content or rules): {spec!r}"
        )
    return tuple(f for f in FIELD_CHOICES if f in fields)


def memory_block(experiences: list[dict], fields: tuple[str, ...]) -> str:
    """The marked block of ``experiences`` (each ``{description, when-to-use, content}``, or with ``rules`` the
    results of a ``detail=rules`` search), in rank order; ``""`` when there are none. An empty ``rules`` gets no
    line."""
    if not experiences:
        return ""
    items = []
    for n, experience in enumerate(experiences, 1):
        texts = [(f, str(experience.get(f, "")).strip()) for f in fields]
        lines = [f"{FIELD_LABELS[f]}: {text}" for f, text in texts if text or f != "rules"]  # rules: none, no line
        items.append(f"[{n}] " + "\n".join(lines))
    return "\n".join([BLOCK_HEAD, "\n\n".join(items), BLOCK_TAIL])


def with_block(block: str, message: str) -> str:
    """The user message the model sees: the block in front of the turn's message (unchanged without a block)."""
    return f"{block}\n\n{message}" if block else message


def inject_at(mode: str, turn_index: int) -> bool:
    """Whether a memory arm searches and injects before turn ``turn_index``: ``every`` turn or only the ``first``."""
    return mode == "every" or (mode == "first" and turn_index == 0)


def paired_table(with_memory: dict[str, bool], without: dict[str, bool]) -> dict:
    """Both pass / only with memory / only without / neither over the tasks both arms ran, with McNemar's exact p."""
    common = [t for t in with_memory if t in without]
    table = {
        "both": sum(with_memory[t] and without[t] for t in common),
        "only_with": sum(with_memory[t] and not without[t] for t in common),
        "only_without": sum(without[t] and not with_memory[t] for t in common),
        "neither": sum(not with_memory[t] and not without[t] for t in common),
        "tasks": len(common),
    }
    return {**table, "p": mcnemar_p(table["only_with"], table["only_without"])}


def mcnemar_p(only_with: int, only_without: int) -> float:
    """McNemar's exact test, two-sided: the binomial (sign) test of the discordant pairs at 1/2."""
    return sign_test(only_with, only_without)


def mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.fmean(values), 1) if values else None


def summarize(results: list[dict], arms: list[str]) -> dict:
    """Per arm: pass rate, requests and tokens per task, memory tokens per turn, failing error types; per memory arm:
    the paired table against ``none``."""
    out: dict = {"arms": {}, "paired": {}}
    for arm in arms:
        rows = [r for r in results if r["arm"] == arm]
        injected = [m["tokens"] for r in rows for m in r["memory"]]
        turns = sum(len(r["task_turns"]) for r in rows) if rows else 0
        out["arms"][arm] = {
            "tasks": len(rows),
            "passed": sum(r["passed"] for r in rows),
            "pass_rate": round(sum(r["passed"] for r in rows) / len(rows), 3) if rows else None,
            "requests_per_task": mean([r["requests"] for r in rows]),
            "prompt_tokens_per_task": mean([r["prompt_tokens"] for r in rows]),
            "completion_tokens_per_task": mean([r["completion_tokens"] for r in rows]),
            "usage_missing_requests": sum(r["usage_missing"] for r in rows),
            "memory_tokens_per_injected_turn": mean(injected),
            "memory_tokens_per_turn": round(sum(injected) / turns, 1) if turns else None,
            "injected_turns": len(injected),
            "error_types": dict(Counter(r["error_type"] for r in rows if not r["passed"])),
        }
    verdicts = {arm: {r["id"]: r["passed"] for r in results if r["arm"] == arm} for arm in arms}
    if "none" in arms:
        for arm in arms:
            if arm != "none":
                out["paired"][arm] = paired_table(verdicts[arm], verdicts["none"])
    return out


# -- the model endpoint ---------------------------------------------------------------------------------------------


@dataclass
class Reply:
    message: dict  # the assistant message for the history
    responses: object  # BFCL's ``model_responses``: [{name: arguments}] for tool calls, else the text
    call_ids: list[str]
    prompt_tokens: int | None
    completion_tokens: int | None


class Endpoint:
    """One OpenAI-compatible chat endpoint (its own client: arms may talk to different servers at once)."""

    def __init__(self, base_url: str, model: str, api_key: str, temperature: float, timeout: float) -> None:
        from openai import OpenAI

        self.base_url, self.model, self.temperature = base_url, model, temperature
        self.client = OpenAI(base_url=base_url, api_key=api_key or "none", timeout=timeout, max_retries=2)

    def complete(self, messages: list[dict], tools: list[dict]) -> Reply:
        kwargs = {"model": self.model, "messages": messages, "temperature": self.temperature}
        if tools:
            kwargs["tools"] = tools
        response = self.client.chat.completions.create(**kwargs)
        message = response.choices[0].message
        calls = message.tool_calls or []
        history: dict = {"role": "assistant", "content": message.content}
        if calls:
            history["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in calls
            ]
        # as BFCL's OpenAI handler: the tool calls when there are any (an empty list stays empty), else the text
        responses = (
            [{c.function.name: c.function.arguments} for c in calls]
            if message.tool_calls is not None
            else message.content
        )
        usage = response.usage
        return Reply(
            history,
            responses,
            [c.id for c in calls],
            getattr(usage, "prompt_tokens", None),
            getattr(usage, "completion_tokens", None),
        )


# -- memory: a workspace searched through the real procedure_search job ---------------------------------------------


def digest(directory: Path, parts: tuple[str, ...] | None = None) -> str:
    """SHA-256 over the relative paths and bytes of every file under ``directory`` (or only under ``parts``)."""
    h = hashlib.sha256()
    roots = [directory / p for p in parts] if parts else [directory]
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []:
            h.update(str(path.relative_to(directory)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


MEMORY_PARTS = ("procedures", "session")
DEFAULT_MEMORY_TOKENS = 500  # ``run --memory-tokens``: the experience text of one block, at most


@dataclass(frozen=True)
class Delivery:
    """What a memory arm asks ``procedure_search`` for beyond the query. The defaults are the delivery
    before it (no floor, every experience, no budget: what the in-process tests use); ``run``'s flags default to the
    new one: the plugin's relevance floor, the task's function names as ``tools``, a ``DEFAULT_MEMORY_TOKENS``
    budget."""

    min_relevance: float | None = 0.0  # None: the plugin's setting (search.min_relevance)
    task_tools: bool = False  # pass the task's function names as tools=
    max_tokens: int | None = None  # the answer's experience text, at most (exact tokens; whole experiences)
    repeats: bool = True  # False: a result already in an earlier block of the task is left out of this one
    # procedure_search min_evidence: each result without the rules fewer trajectories showed; 0: every rule
    min_evidence: int = 0

    def arguments(self, functions) -> dict:
        args: dict = {}
        if self.min_relevance is not None:
            args["min_relevance"] = self.min_relevance
        if self.task_tools and functions:
            args["tools"] = list(functions)
        if self.max_tokens:
            args["max_tokens"] = self.max_tokens
        args["min_evidence"] = self.min_evidence  # the plugin's own thinning, counted by its budget
        return args


def app_settings(dimensions: int | None) -> SimpleNamespace:
    """The settings ``extraction.application`` reads (no model: searches only)."""
    return SimpleNamespace(
        embedding_dimensions=dimensions, segment=None, summary=None, ctx=None, reserve=None, max_iters=None, smoke=False
    )


class Memory:
    """A copy of a workspace, opened by an in-process ``Application`` with the plugin, searched per turn.

    ``async with Memory(...)``: copies ``source`` into ``copy_to``, records the digests, starts the application;
    at exit closes it and checks that ``source`` (all bytes) and the copy's memory are unchanged (``frozen``)."""

    def __init__(
        self,
        label: str,
        source: Path,
        copy_to: Path,
        view: str,
        k: int,
        fields: tuple[str, ...],
        tokenizer: Path,
        dimensions: int | None,
        delivery: "Delivery | None" = None,
    ) -> None:
        self.label, self.source, self.path = label, source, copy_to
        self.view, self.k, self.fields = view, k, fields
        self.delivery = delivery or Delivery()
        self.tokenizer, self.dimensions = tokenizer, dimensions
        self.app = None
        self.frozen: dict = {}
        self.valid_experiences = 0

    async def __aenter__(self) -> "Memory":
        from extraction import application, scan  # benchmarks/extraction.py: the plugin Application, the file scan

        if not (self.source / "procedures").is_dir():
            raise SystemExit(f"{self.label}: {self.source} is not a workspace with procedures/")
        self.frozen = {"source_before": digest(self.source)}
        if self.path.exists():
            shutil.rmtree(self.path)
        shutil.copytree(self.source, self.path, symlinks=True)
        self.frozen["memory_before"] = digest(self.path, MEMORY_PARTS)
        self.app = application(self.path, self.tokenizer, app_settings(self.dimensions), with_model=False)
        await self.app.start()
        memory = self.app.context.components["procedure_memory"]["default"]
        valid, invalid = scan(memory)
        self.valid_experiences = len(valid)
        if not valid:
            raise SystemExit(f"{self.label}: no valid experience in {self.source} (invalid files: {invalid})")
        return self

    async def __aexit__(self, *exc) -> None:
        if self.app is not None:
            await self.app.close()
        self.frozen.update(source_after=digest(self.source), memory_after=digest(self.path, MEMORY_PARTS))
        self.frozen["unchanged"] = (
            self.frozen["source_before"] == self.frozen["source_after"]
            and self.frozen["memory_before"] == self.frozen["memory_after"]
        )

    async def block(
        self, query: str, functions: list[str] | tuple[str, ...] = (), held: frozenset[str] = frozenset()
    ) -> tuple[str, dict]:
        """The memory block for ``query`` and what went into it (paths, scores, relevance, exact tokens, results
        the token budget left out); ``functions``: the task's tools, passed as ``tools=`` when the delivery says so;
        ``held``: the paths of earlier blocks of the task, left out (``repeated``) unless the delivery shows
        repeats. The search is the same either way: a held result is dropped from its answer, not replaced."""
        rules = "rules" in self.fields  # the plugin's own projection: its rules, its budget counted on them
        response = await self.app.run_job(
            "procedure_search",
            query=query[:4096],
            index=self.view,
            limit=self.k,
            **self.delivery.arguments(functions),
            **({"detail": "rules"} if rules else {}),
        )
        answer = json.loads(response.answer)
        if not response.success:
            raise RuntimeError(f"{self.label}: procedure_search failed: {answer}")
        results = answer.get("results", [])
        repeated = [] if self.delivery.repeats else [r["path"] for r in results if r["path"] in held]
        results = [r for r in results if r["path"] not in repeated]
        shown = [r if rules else r["experience"] for r in results]
        block = memory_block(shown, self.fields)
        tokens = (
            await self.app.context.components["procedure_memory"]["default"].workspace.tokens.acount(block)
            if block
            else 0
        )
        return block, {
            "paths": [r["path"] for r in results],
            "scores": [round(r["score"], 5) for r in results if "score" in r],  # a rules answer has none
            "relevance": [r.get("relevance") for r in results],
            "tokens": tokens,
            "budget_left_out": answer.get("token_budget", {}).get("left_out", 0),
            "repeated": repeated,
            "vector_search": answer.get("vector_search", {}).get("available", True),
            "pending": len(answer.get("pending_indexes", [])),
        }


async def library_workspace(library: Path, workspace: Path, tokenizer: Path, dimensions: int | None) -> dict:
    """ReMe's released experiences as a workspace (``_library.place_library``: one experience file per line, citing
    the library's own file copied into ``session/trajectories/``, so every one is valid and the overlap check sees the
    tasks it has seen); indexed by the real ``procedure_reindex`` job, which must index and find all of them."""
    from extraction import application

    experiences = load_library(library)
    place_library(workspace, experiences, library)
    app = application(workspace, tokenizer, app_settings(dimensions), with_model=False)
    await app.start()
    try:
        answer = await index_placed(app, experiences)
        return {"experiences": len(experiences), "indexed": answer["indexed"]}
    finally:
        await app.close()


# -- solving one task (BFCL's multi-turn function-calling loop) -----------------------------------------------------


@dataclass
class Arm:
    name: str
    endpoint: Endpoint
    tag: str  # unique per run and arm: BFCL caches its API instances under model name + task id
    memory: Memory | None = None
    inject: str = "every"
    results: list[dict] = field(default_factory=list)


def score(lib: SimpleNamespace, task: Task, decoded: list, tag: str, inference_error: str | None) -> dict:
    """BFCL's verdict for the decoded calls (``[turn][step][call]``), as its evaluation runner reaches it: an
    inference error or a force-terminated task (fewer turns than the ground truth) fails before the checker."""
    if inference_error is not None:
        return {"valid": False, "error_type": "multi_turn:inference_error", "error_message": inference_error}
    if len(decoded) != len(task.ground_truth):
        return {
            "valid": False,
            "error_type": "multi_turn:force_terminated",
            "error_message": f"{len(decoded)} of {len(task.ground_truth)} turns (step limit)",
        }
    entry = {k: v for k, v in task.entry.items() if k != "function"}
    try:
        result = lib.checker(decoded, task.ground_truth, entry, CATEGORY, tag)
    except Exception as exc:  # noqa: BLE001  (BFCL's runner would stop; one task's crash must not end a long run)
        return {"valid": False, "error_type": "checker_exception", "error_message": f"{type(exc).__name__}: {exc}"}
    return {
        "valid": bool(result["valid"]),
        "error_type": result.get("error_type"),
        "error_message": result.get("error_message"),
    }


async def solve(lib: SimpleNamespace, task: Task, arm: Arm) -> dict:
    """One task with one arm: BFCL's ``inference_multi_turn_FC`` loop (a turn ends at a reply without decodable
    calls; more than ``MAXIMUM_STEP_LIMIT`` steps end the task), the memory block in front of each turn's message."""
    entry = task.entry
    config, classes = entry.get("initial_config", {}), entry["involved_classes"]
    tools = lib.tools(entry["function"])
    lib.execute([], config, classes, arm.tag, task.id)  # the instances, as BFCL creates them before the first turn
    messages: list[dict] = []
    decoded_turns: list[list[list[str]]] = []
    raw_turns: list[list] = []
    memory_log: list[dict] = []
    requests = prompt = completion = missing = 0
    error: str | None = None
    started = time.monotonic()
    for turn_index, turn in enumerate(entry["question"]):
        turn = copy.deepcopy(turn)
        if arm.memory is not None and inject_at(arm.inject, turn_index):
            query = turn[-1]["content"]
            held = frozenset(path for shown in memory_log for path in shown["paths"])
            block, found = await arm.memory.block(query, [f["name"] for f in entry["function"]], held)
            turn[-1]["content"] = with_block(block, query)
            memory_log.append({"turn": turn_index, **found})
        messages.extend(turn)
        decoded_steps: list[list[str]] = []
        raw_steps: list = []
        steps = 0
        while True:
            try:
                reply = await asyncio.to_thread(arm.endpoint.complete, messages, tools)
            except Exception as exc:  # BFCL records the task as an inference error and goes on
                error = f"{type(exc).__name__}: {exc}"
                break
            requests += 1
            prompt += reply.prompt_tokens or 0
            completion += reply.completion_tokens or 0
            missing += reply.prompt_tokens is None
            messages.append(reply.message)
            raw_steps.append(reply.responses)
            try:
                calls = lib.decode(reply.responses)
            except Exception:  # text, or arguments that are not a JSON object: the turn ends
                break
            if lib.is_empty(calls):
                break
            decoded_steps.append(calls)
            outputs, _ = lib.execute(calls, config, classes, arm.tag, task.id)
            messages.extend(
                {"role": "tool", "content": out, "tool_call_id": call_id}
                for out, call_id in zip(outputs, reply.call_ids)
            )
            steps += 1
            if steps > lib.step_limit:
                break
        if error is not None:
            break
        decoded_turns.append(decoded_steps)
        raw_turns.append(raw_steps)
        if steps > lib.step_limit:
            break
    verdict = score(lib, task, decoded_turns, arm.tag, error)
    return {
        "id": task.id,
        "arm": arm.name,
        "passed": verdict["valid"],
        "error_type": verdict["error_type"],
        "error_message": verdict["error_message"],
        "requests": requests,
        "prompt_tokens": prompt if requests and missing < requests else None,
        "completion_tokens": completion if requests and missing < requests else None,
        "usage_missing": missing,
        "memory": memory_log,
        "task_turns": [len(t) for t in task.ground_truth],
        "decoded": decoded_turns,
        "bfcl_result": f"Error during inference: {error}" if error else raw_turns,
        "seconds": round(time.monotonic() - started, 1),
        "messages": messages,
    }


async def run_arm(lib: SimpleNamespace, tasks: list[Task], arm: Arm, keep_messages: bool) -> list[dict]:
    for task in tasks:
        result = await solve(lib, task, arm)
        if not keep_messages:
            result.pop("messages")
        arm.results.append(result)
        print(
            f"  [{arm.name}] {task.id}: {'pass' if result['passed'] else 'FAIL ' + str(result['error_type'])} "
            f"({result['requests']} requests, {result['prompt_tokens']} prompt tokens, {result['seconds']} s)",
            flush=True,
        )
    return arm.results


async def run_arms(
    lib: SimpleNamespace, tasks: list[Task], arms: list[Arm], keep_messages: bool = False, concurrent: bool = True
) -> list[dict]:
    """Every arm on every task; arms concurrently (each its own endpoint), or one after the other."""
    if concurrent:
        done = await asyncio.gather(*(run_arm(lib, tasks, arm, keep_messages) for arm in arms))
    else:
        done = [await run_arm(lib, tasks, arm, keep_messages) for arm in arms]
    return [r for rows in done for r in rows]


# -- scripted endpoints (smoke mode and tests) ----------------------------------------------------------------------


def tool_call_of(call: str, functions: list[dict]) -> tuple[str, dict]:
    """A ground-truth call string (``mv(source='a', destination='b')``, also positional) as a tool name and its
    JSON arguments; positional arguments take the documented parameters' names in order."""
    node = ast.parse(call.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain call: {call}")
    name = node.func.id
    params = next((list(f["parameters"]["properties"]) for f in functions if f["name"] == name), [])
    arguments = {params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    arguments.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
    return name, arguments


REPLAY_REPLY = "Done with this request."  # the shared replays' reply after a turn's calls


class ScriptedEndpoint(LocalServer):
    """A local OpenAI-compatible ``/v1/chat/completions`` server on 127.0.0.1 (started and stopped by its user) that
    plays a model from the conversation it is sent, statelessly:

    * ``ground_truth``: at the first step of a turn, the turn's ground-truth calls as parallel tool calls; then a
      text reply (the turn ends);
    * ``silent``: a text reply, no call, ever;
    * ``drop_last``: as ``ground_truth`` without the last call of the task's last turn;
    * ``replay``: the turn's ground-truth calls one per step, each after the answer of the one before, then
      ``REPLAY_REPLY`` (the shape of the shared ground-truth replays, ``replays`` below).

    The task is the one whose user messages so far end the conversation's user messages (a memory block may precede
    them) and whose functions are the request's tools. Every request body is kept in ``requests``."""

    def __init__(self, mode: str, tasks: list[Task], lib: SimpleNamespace) -> None:
        if mode not in ("ground_truth", "silent", "drop_last", "replay"):
            raise ValueError(mode)
        self.mode, self.tasks, self.lib = mode, tasks, lib
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with endpoint._lock:
                    endpoint.requests.append(body)
                try:
                    payload, code = endpoint.reply(body), 200
                except Exception as exc:  # noqa: BLE001  (the client sees the reason)
                    payload, code = {"error": {"message": f"{type(exc).__name__}: {exc}", "type": "server_error"}}, 500
                send_json(self, payload, code)

        super().__init__(Handler)

    def _task(self, users: list[str], tool_names: set[str]) -> Task:
        found = [
            t
            for t in self.tasks
            if len(t.messages) >= len(users)
            and all(u.endswith(m) for u, m in zip(users, t.messages))
            and {f["name"] for f in t.entry["function"]} == tool_names
        ]
        turn = len(users) - 1
        if not found or len({json.dumps(t.ground_truth[turn]) for t in found}) > 1:
            raise LookupError(f"no single scripted task for this conversation ({[t.id for t in found]})")
        return found[0]

    def reply(self, body: dict) -> dict:
        messages = body.get("messages", [])
        users = [m["content"] for m in messages if m.get("role") == "user"]
        last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
        step = sum(1 for m in messages[last_user:] if m.get("role") == "assistant")
        calls: list[str] = []
        if self.mode == "replay":
            task = self._task(users, {t["function"]["name"] for t in body.get("tools", [])})
            calls = list(task.ground_truth[len(users) - 1])[step : step + 1]
        elif self.mode != "silent" and step == 0:
            task = self._task(users, {t["function"]["name"] for t in body.get("tools", [])})
            turn = len(users) - 1
            calls = list(task.ground_truth[turn])
            if self.mode == "drop_last" and turn == len(task.ground_truth) - 1:
                calls = calls[:-1]
        if calls:
            tool_calls = []
            for n, call in enumerate(calls):
                name, arguments = tool_call_of(call, task.entry["function"])
                tool_calls.append(
                    {
                        "id": f"call_{len(messages)}_{n}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)},
                    }
                )
            message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
            finish = "tool_calls"
        else:
            text = {"silent": "I cannot help.", "replay": REPLAY_REPLY}.get(self.mode, "Done.")
            message = {"role": "assistant", "content": text}
            finish = "stop"
        prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in messages)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 1 + 10 * len(calls),
                "total_tokens": prompt_tokens + 1 + 10 * len(calls),
            },
        }


# -- the report -----------------------------------------------------------------------------------------------------


def report(summary: dict, settings: dict) -> str:
    lines = [
        f"\n{'arm':8} {'pass':>9} {'rate':>6} {'req/task':>9} {'prompt/task':>12} {'compl/task':>11} "
        f"{'mem tok/inj turn':>17} {'mem tok/turn':>13}  failing error types"
    ]
    for arm, s in summary["arms"].items():
        rate = s["pass_rate"] if s["pass_rate"] is not None else "-"
        lines.append(
            f"{arm:8} {s['passed']:>4}/{s['tasks']:<4} {rate:>6} "
            f"{s['requests_per_task']!s:>9} {s['prompt_tokens_per_task']!s:>12} "
            f"{s['completion_tokens_per_task']!s:>11} {s['memory_tokens_per_injected_turn']!s:>17} "
            f"{s['memory_tokens_per_turn']!s:>13}  "
            + (", ".join(f"{k} {v}" for k, v in sorted(s["error_types"].items())) or "-")
        )
    for arm, t in summary["paired"].items():
        lines.append(
            f"\n{arm} vs none over {t['tasks']} tasks: both pass {t['both']}, only with memory "
            f"{t['only_with']}, only without {t['only_without']}, neither {t['neither']}; "
            f"McNemar exact p = {t['p']:.4g}"
        )
    lines.append(f"\nsettings: {json.dumps(settings)}")
    return "\n".join(lines)


def per_task_table(results: list[dict], arms: list[str]) -> str:
    rows = {}
    for r in results:
        rows.setdefault(r["id"], {})[r["arm"]] = r
    head = f"{'task':22}" + "".join(f" {arm + ' (pass, req, prompt, compl, mem/turn)':>46}" for arm in arms)
    out = [head]
    for task_id in sorted(rows, key=task_number):
        cells = []
        for arm in arms:
            r = rows[task_id].get(arm)
            if r is None:
                cells.append(f" {'-':>46}")
                continue
            mem = mean([m["tokens"] for m in r["memory"]]) if r["memory"] else 0
            cells.append(
                f" {('pass' if r['passed'] else 'fail'):>14} {r['requests']:>5} {r['prompt_tokens']!s:>9} "
                f"{r['completion_tokens']!s:>7} {mem!s:>8}"
            )
        out.append(f"{task_id:22}" + "".join(cells))
    return "\n".join(out)


# -- one measurement from several runs -------------------------------------------------------------------------------

# what may differ between the runs ``combine`` merges: each run's tasks and endpoints (its answerers) and how it ran
PER_RUN_SETTINGS = ("task_ids", "urls", "timeout", "concurrent", "keep_messages")
# issue 31's verification bar: a memory arm's prompt tokens per task at most this much over ``none``'s
PROMPT_TOKEN_BAR = 0.15


def combine(runs: list[dict]) -> dict:
    """One measurement from the ``--json`` of runs over disjoint tasks with the same arms, memory and delivery (the
    two halves of a test set run side by side, each with its own answerers): the results together, summarized as
    one run's (``summarize``), the settings they share (``PER_RUN_SETTINGS`` as lists, one per run) and
    ``comparison``. ``ValueError`` for runs that share a task, differ in another setting, or whose memory changed
    during the run (a void measurement)."""
    if not runs:
        raise ValueError("no run to combine")
    shared = {k: v for k, v in runs[0]["settings"].items() if k not in PER_RUN_SETTINGS}
    for n, one in enumerate(runs[1:], 2):
        other = {k: v for k, v in one["settings"].items() if k not in PER_RUN_SETTINGS}
        differ = sorted(k for k in shared.keys() | other.keys() if shared.get(k) != other.get(k))
        if differ:
            raise ValueError(f"run {n} differs from run 1 in {', '.join(differ)}: not one measurement")
    void = [
        f"run {n}: {label}" for n, one in enumerate(runs, 1) for label, f in one["frozen"].items() if not f["unchanged"]
    ]
    if void:
        raise ValueError(f"a memory changed during {'; '.join(void)}: the measurement is void")
    seen: dict[str, int] = {}
    for n, one in enumerate(runs, 1):
        for task_id in one["settings"]["task_ids"]:
            if task_id in seen:
                raise ValueError(f"{task_id} is in run {seen[task_id]} and run {n}: the runs must be disjoint")
            seen[task_id] = n
    results = [r for one in runs for r in one["results"]]
    arms = shared["arms"]
    summary = summarize(results, arms)
    per_run = {k: [one["settings"].get(k) for one in runs] for k in PER_RUN_SETTINGS}
    return {
        "settings": {**shared, **per_run},
        "summary": summary,
        "comparison": comparison(summary, results),
        "results": results,
        "runs": len(runs),
    }


def comparison(summary: dict, results: list[dict]) -> dict:
    """Per memory arm against ``none``: the tasks only it passed and only ``none`` passed (by number), the net, the
    change of prompt tokens per task, McNemar's p, and the verification bars (prompt tokens at most
    ``PROMPT_TOKEN_BAR`` over ``none``; no net loss of tasks)."""
    out = {}
    verdicts: dict[str, dict[str, bool]] = {}
    for r in results:
        verdicts.setdefault(r["arm"], {})[r["id"]] = r["passed"]
    none = verdicts.get("none", {})
    base = summary["arms"].get("none", {}).get("prompt_tokens_per_task")
    for arm, paired in summary["paired"].items():
        mine = verdicts[arm]
        common = sorted((t for t in mine if t in none), key=task_number)
        tokens = summary["arms"][arm]["prompt_tokens_per_task"]
        change = round(tokens / base - 1, 4) if base and tokens is not None else None
        out[arm] = {
            "only_with": [task_number(t) for t in common if mine[t] and not none[t]],
            "only_without": [task_number(t) for t in common if none[t] and not mine[t]],
            "net": paired["only_with"] - paired["only_without"],
            "p": paired["p"],
            "prompt_tokens_change": change,
            "within_prompt_token_bar": change is not None and change <= PROMPT_TOKEN_BAR,
            "no_net_loss": paired["only_with"] >= paired["only_without"],
        }
    return out


def comparison_lines(compared: dict) -> list[str]:
    def ids(numbers):
        return ", ".join(map(str, numbers)) or "-"

    lines = []
    for arm, c in compared.items():
        change = "-" if c["prompt_tokens_change"] is None else f"{c['prompt_tokens_change']:+.1%}"
        lines.append(
            f"{arm} vs none: net {c['net']:+d} (only with memory: {ids(c['only_with'])}; only without: "
            f"{ids(c['only_without'])}; p = {c['p']:.4g}); prompt tokens per task {change} "
            f"(at most {PROMPT_TOKEN_BAR:+.0%}: {'yes' if c['within_prompt_token_bar'] else 'NO'}; "
            f"no net loss: {'yes' if c['no_net_loss'] else 'NO'})"
        )
    return lines


# -- commands -------------------------------------------------------------------------------------------------------


def endpoint_urls(specs: list[str], arms: list[str], default: str | None) -> dict[str, str]:
    """``ARM=URL`` overrides; every other arm uses ``default`` (``LLM_BASE_URL``)."""
    urls = {}
    for spec in specs:
        arm, _, url = spec.partition("=")
        if arm not in ARMS or not url:
            raise SystemExit(f"--endpoint takes ARM=URL with ARM one of {', '.join(ARMS)}: {spec!r}")
        urls[arm] = url
    for arm in arms:
        urls.setdefault(arm, default or "")
        if not urls[arm]:
            raise SystemExit(f"no endpoint for arm {arm}: set LLM_BASE_URL or pass --endpoint {arm}=URL")
    return {arm: urls[arm] for arm in arms}


def default_tokenizer() -> Path:
    return Path(
        os.environ.get("PROCEDURE_TOKENIZER_SOURCE")
        or shared_dir() / "data" / "tokenizers" / "qwen3" / "tokenizer.json"
    )


@dataclass
class RunSettings:
    task_ids: list[str]
    arms: list[str]
    urls: dict[str, str]
    workspace: Path | None = None
    library: Path | None = None
    view: str = "when_to_use_content"
    k: int = 3
    fields: tuple[str, ...] = FIELD_NAMES
    inject: str = "every"
    model: str = "model"
    api_key: str = "none"
    temperature: float = 0.001
    timeout: float = 4000.0
    tokenizer: Path = field(default_factory=default_tokenizer)
    dimensions: int | None = None
    concurrent: bool = True
    keep_messages: bool = False
    delivery: Delivery = field(default_factory=Delivery)


async def run(settings: RunSettings, workdir: Path, lib: SimpleNamespace | None = None) -> dict:
    """The measurement: refuses seen test tasks, opens the memories, runs every arm, checks the memories froze."""
    lib = lib or bfcl()
    tasks = load_tasks(lib)
    unknown = [t for t in settings.task_ids if t not in tasks]
    if unknown:
        raise SystemExit(f"unknown {CATEGORY} ids: {', '.join(unknown)}")
    sources: dict[str, Path] = {}
    library_info = None
    if "plugin" in settings.arms:
        if settings.workspace is None:
            raise SystemExit("the plugin arm needs --workspace (a directory made by the build step)")
        sources["plugin"] = settings.workspace
    if "library" in settings.arms:
        if settings.library is None or not settings.library.is_file():
            raise SystemExit(f"the library arm needs the released library (--library): {settings.library}")
        sources["library"] = workdir / "library-workspace"
        if sources["library"].exists():
            shutil.rmtree(sources["library"])
        library_info = await library_workspace(
            settings.library, sources["library"], settings.tokenizer, settings.dimensions
        )
    seen = {label: seen_task_ids(source_texts(path), tasks) for label, path in sources.items()}
    refuse_overlap(settings.task_ids, seen)
    tag = f"downstream_{uuid.uuid4().hex[:8]}"
    arms, memories = [], []
    for name in settings.arms:
        endpoint = Endpoint(
            settings.urls[name], settings.model, settings.api_key, settings.temperature, settings.timeout
        )
        memory = None
        if name in sources:
            memory = Memory(
                name,
                sources[name],
                workdir / f"{name}-copy",
                settings.view,
                settings.k,
                settings.fields,
                settings.tokenizer,
                settings.dimensions,
                settings.delivery,
            )
            memories.append(memory)
        arms.append(Arm(name, endpoint, f"{tag}_{name}", memory, settings.inject))
    started = time.monotonic()
    opened = []
    try:
        for memory in memories:
            opened.append(await memory.__aenter__())
        results = await run_arms(
            lib, [tasks[t] for t in settings.task_ids], arms, settings.keep_messages, settings.concurrent
        )
    finally:
        for memory in reversed(opened):
            await memory.__aexit__(None, None, None)
    frozen = {m.label: m.frozen for m in memories}
    summary = summarize(results, settings.arms)
    return {
        "summary": summary,
        "results": results,
        "frozen": frozen,
        "memories": {
            m.label: {
                "source": str(m.source),
                "valid_experiences": m.valid_experiences,
                "seen_tasks": sorted(seen[m.label], key=task_number),
            }
            for m in memories
        },
        "library": library_info,
        "seconds": round(time.monotonic() - started, 1),
    }


def smoke(task_ids: list[str] | None = None, modes: tuple[str, ...] = ("ground_truth", "silent")) -> dict:
    """Offline self-check: the ground-truth replay passes every task, the endpoint that calls nothing none (and
    ``drop_last``, the replay without the last call, whatever BFCL says). Per mode: the ``none`` arm's summary and
    its per-task results (named after the mode, for ``bfcl-export``)."""
    lib = bfcl()
    tasks = load_tasks(lib)
    ids = task_ids or [f"{CATEGORY}_0", f"{CATEGORY}_1"]
    out = {}
    with tempfile.TemporaryDirectory(prefix="downstream-smoke-") as tmp:
        for mode in modes:
            with ScriptedEndpoint(mode, [tasks[t] for t in ids], lib) as endpoint:
                settings = RunSettings(ids, ["none"], {"none": endpoint.base_url}, model=f"scripted-{mode}")
                result = asyncio.run(run(settings, Path(tmp), lib))
            out[mode] = {
                "summary": result["summary"]["arms"]["none"],
                "results": [{**r, "arm": mode} for r in result["results"]],
            }
    return out


def settings_from(args, arms: list[str]) -> RunSettings:
    fields = parse_fields(args.fields)
    urls = endpoint_urls(args.endpoint, arms, os.environ.get("LLM_BASE_URL"))
    library = args.library
    if library is None and "library" in arms:
        library = find_shared(args.shared, "data/experience-library") / "data/experience-library/bfcl_qwen3_8b.jsonl"
    return RunSettings(
        parse_ids(args.tasks),
        arms,
        urls,
        args.workspace,
        library,
        args.view,
        args.k,
        fields,
        args.inject,
        os.environ.get("LLM_MODEL_NAME", "model"),
        os.environ.get("LLM_API_KEY", "none"),
        args.temperature,
        args.timeout,
        default_tokenizer(),
        args.embedding_dimensions,
        not args.sequential_arms,
        args.keep_messages,
        delivery_from(args),
    )


def delivery_from(args) -> Delivery:
    """``run``'s delivery flags: ``--min-relevance`` (default: the plugin's setting), ``--tools task|none``,
    ``--memory-tokens`` (0: no budget), ``--repeats show|drop``, ``--min-evidence`` (0: every rule)."""
    return Delivery(
        min_relevance=args.min_relevance,
        task_tools=args.tools == "task",
        max_tokens=args.memory_tokens or None,
        repeats=args.repeats == "show",
        min_evidence=args.min_evidence,
    )


def hosted_embeddings(args) -> bool:
    """Whether the plugin embeds without the hash server: ``--embedded`` (its own model: every ``EMBEDDING_*`` is
    cleared so none is taken from the environment) or a configured ``EMBEDDING_BASE_URL``."""
    if args.embedded:
        for name in ("EMBEDDING_BACKEND", "EMBEDDING_MODEL_NAME", "EMBEDDING_API_KEY", "EMBEDDING_BASE_URL"):
            os.environ.pop(name, None)
        print("embeddings: the plugin's embedded MiniLM (int8, 384 dimensions)")
        return True
    return bool(os.environ.get("EMBEDDING_BASE_URL"))


def local_servers(args, workdir: Path, model: bool, embeddings: bool):
    """The shared 1.5B model adapter and/or the hash embedding server (``real_model.Servers``), env set for both."""
    from real_model import Servers

    if not (model or embeddings):
        return None
    shared = find_shared(args.shared, "tools")
    args.model = args.model or args.real_llm_dir / "models" / "qwen2.5-coder-1.5b-instruct.gguf"
    servers = Servers(args, shared, workdir, embeddings=embeddings, model=model)
    if model:
        os.environ.update(
            LLM_BACKEND="openai",
            LLM_MODEL_NAME="local",
            LLM_API_KEY="x",
            LLM_BASE_URL=f"http://127.0.0.1:{servers.model_port}/v1",
        )
    if embeddings:
        os.environ.update(
            EMBEDDING_BACKEND="openai",
            EMBEDDING_MODEL_NAME="hash",
            EMBEDDING_API_KEY="x",
            EMBEDDING_BASE_URL=f"http://127.0.0.1:{servers.embed_port}/v1",
        )
        print("embeddings: the shared hash embedding server (plumbing only; ranks worse than BM25 alone)")
    return servers


def shown_settings(settings) -> dict:
    """A run's settings as its report and ``--json`` show them: JSON values (paths as text, the delivery as a dict),
    without the task ids (listed apart) and the key."""

    def plain(value):
        if isinstance(value, Path):
            return str(value)
        return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value

    return {k: plain(v) for k, v in vars(settings).items() if k not in ("task_ids", "api_key")}


def command_run(args) -> None:
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not arms or any(a not in ARMS for a in arms) or len(set(arms)) != len(arms):
        raise SystemExit(f"--arms: a comma list of {', '.join(ARMS)}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="downstream-"))
    workdir.mkdir(parents=True, exist_ok=True)
    memory_arms = any(a != "none" for a in arms)
    if args.local_model:
        args.ctx = args.ctx or 16384
    servers = local_servers(args, workdir, args.local_model, memory_arms and not hosted_embeddings(args))
    try:
        settings = settings_from(args, arms)
        print(f"machine: {describe()}; load average {os.getloadavg()}; plugin {revision()}")
        print(
            f"arms {arms} on {len(settings.task_ids)} tasks; endpoints {settings.urls}; model {settings.model}; "
            f"embeddings {os.environ.get('EMBEDDING_MODEL_NAME')}; workdir {workdir}"
        )
        result = asyncio.run(run(settings, workdir))
    finally:
        if servers is not None:
            servers.stop()
    shown = shown_settings(settings)
    print("\n" + per_task_table(result["results"], arms))
    print(report(result["summary"], shown))
    for label, frozen in result["frozen"].items():
        print(
            f"memory {label}: {result['memories'][label]['valid_experiences']} valid experiences; "
            f"{'unchanged' if frozen['unchanged'] else 'CHANGED'} during the run"
        )
    print(f"total {result['seconds']} s; load average at end {os.getloadavg()}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"settings": {**shown, "task_ids": settings.task_ids}, **result},
                indent=1,
                ensure_ascii=False,
                default=str,
            )
        )
    if not all(f["unchanged"] for f in result["frozen"].values()):
        raise SystemExit("a memory changed during the run: the measurement is void")


def command_combine(args) -> None:
    runs = [json.loads(path.read_text()) for path in args.runs]
    try:
        combined = combine(runs)
    except ValueError as e:
        raise SystemExit(f"combine: {e}") from None
    arms = combined["settings"]["arms"]
    print(f"{combined['runs']} runs, {len(combined['results']) // len(arms)} tasks")
    print("\n" + per_task_table(combined["results"], arms))
    print(report(combined["summary"], combined["settings"]))
    print("\n" + "\n".join(comparison_lines(combined["comparison"])))
    if args.json:
        args.json.write_text(json.dumps(combined, indent=1, ensure_ascii=False, default=str))


def rollout_jsonl(task: Task, messages: list[dict]) -> bytes:
    """A rollout as a trajectory file in the shared trajectories' JSONL form: a system line naming the API classes,
    then the chat, each ``tool`` message with the ``name`` of the call it answers."""
    classes = ", ".join(task.entry["involved_classes"])
    names = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or []}
    lines = [{"role": "system", "content": f"You are an assistant with tools from: {classes}."}]
    lines += [
        {**m, "name": names[m["tool_call_id"]]} if m.get("role") == "tool" and m.get("tool_call_id") in names else m
        for m in messages
    ]
    return "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in lines).encode("utf-8")


def replays(task_ids: list[str], out: Path, lib: SimpleNamespace | None = None) -> list[Path]:
    """Ground-truth replays of ``task_ids`` written to ``out/<id>.jsonl`` in the shared replays' form (a system line
    naming the API classes; per turn the user message, each ground-truth call alone with the simulated API's answer,
    then ``REPLAY_REPLY``): BFCL's own execution through the ``replay`` scripted endpoint. SystemExit if BFCL's checker
    does not pass one (a replay must be the ground truth)."""
    lib = lib or bfcl()
    tasks = load_tasks(lib)
    chosen = [tasks[t] for t in task_ids]
    with ScriptedEndpoint("replay", chosen, lib) as endpoint:
        arm = Arm("replay", Endpoint(endpoint.base_url, "replay", "none", 0.0, 60.0), f"replay_{uuid.uuid4().hex[:8]}")
        results = asyncio.run(run_arms(lib, chosen, [arm], keep_messages=True))
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for task, result in zip(chosen, results):
        if not result["passed"]:
            raise SystemExit(f"the ground-truth replay of {task.id} fails BFCL's checker: {result['error_message']}")
        path = out / f"{task.id}.jsonl"
        path.write_bytes(rollout_jsonl(task, result["messages"]))
        paths.append(path)
    return paths


def command_build(args) -> None:
    """Import training trajectories through the exact ``procedure_auto_memory`` job (``extraction.extract``) with
    the configured model: the ground-truth replays of ``shared/data/trajectories/base`` and, optionally, the model's
    own rollouts of the same tasks (all, or only those BFCL's checker passes)."""
    from extraction import extract, task_of

    shared = find_shared(args.shared)
    out = args.out
    if (out / "ws").exists():
        raise SystemExit(f"{out / 'ws'} exists: build into a new --out directory")
    (out / "rollouts").mkdir(parents=True, exist_ok=True)
    train = parse_ids(args.train)
    base = shared / "data" / "trajectories" / "base"
    found = {task_id: sorted(base.glob(f"{task_id}.*")) for task_id in train}
    generated = [task_id for task_id in train if not found[task_id]]
    made = dict(zip(generated, replays(generated, out / "replays"))) if generated else {}
    paths = [found[task_id][0] if found[task_id] else made[task_id] for task_id in train]
    if args.start_from is not None:  # the memory grows from an earlier workspace (a copy; the original is kept)
        shutil.copytree(args.start_from, out / "ws", symlinks=True)
    if args.local_model:
        args.segment, args.summary, args.ctx = args.segment or 1024, args.summary or 256, args.ctx or 16384
        args.reserve, args.max_iters = args.reserve or 1024, args.max_iters or 8
    elif not os.environ.get("LLM_BASE_URL"):
        raise SystemExit("set LLM_BACKEND/LLM_MODEL_NAME/LLM_API_KEY/LLM_BASE_URL, or pass --local-model")
    servers = local_servers(args, out, args.local_model, not hosted_embeddings(args))
    try:
        rollouts = []
        if args.rollouts != "none":
            lib = bfcl()
            tasks = load_tasks(lib)
            endpoint = Endpoint(
                os.environ["LLM_BASE_URL"],
                os.environ.get("LLM_MODEL_NAME", "model"),
                os.environ.get("LLM_API_KEY", "none"),
                args.temperature,
                args.timeout,
            )
            arm = Arm("rollout", endpoint, f"downstream_{uuid.uuid4().hex[:8]}_rollout")
            results = asyncio.run(run_arms(lib, [tasks[t] for t in train], [arm], keep_messages=True))
            for result in results:
                keep = args.rollouts == "all" or result["passed"]
                rollouts.append(
                    {k: result[k] for k in ("id", "passed", "error_type", "requests", "prompt_tokens")}
                    | {"imported": keep}
                )
                if keep:
                    path = out / "rollouts" / f"rollout_{result['id']}.jsonl"
                    path.write_bytes(rollout_jsonl(tasks[result["id"]], result["messages"]))
                    paths.append(path)
        tokenizer = default_tokenizer()
        print(
            f"importing {len(paths)} trajectories into {out / 'ws'} with {os.environ.get('LLM_MODEL_NAME')} at "
            f"{os.environ.get('LLM_BASE_URL')}",
            flush=True,
        )
        settings = SimpleNamespace(**{**vars(args), "smoke": False, "snapshot_at": None})  # what extract() reads
        imports = [{"path": p, "task": task_of(p)} for p in paths]
        result = asyncio.run(extract(settings, imports, out, tokenizer, prefix=f"build-{uuid.uuid4().hex[:8]}"))
    finally:
        if servers is not None:
            servers.stop()
    manifest = {
        "train": train,
        "generated_replays": generated,
        "start_from": str(args.start_from) if args.start_from is not None else None,
        "rollouts": rollouts,
        "imports": result["imports"],
        "valid_experiences": len(result["valid"]),
        "invalid_files": result["invalid"],
        "model": os.environ.get("LLM_MODEL_NAME"),
        "embeddings": os.environ.get("EMBEDDING_MODEL_NAME"),
        "revision": revision(),
        "workspace": str(out / "ws"),
    }
    (out / "build.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False))
    complete = sum(i["status"] == "complete" for i in result["imports"])
    print(
        f"\n{complete}/{len(paths)} imports complete; {len(result['valid'])} valid experiences, "
        f"{len(result['invalid'])} invalid files; workspace {out / 'ws'} (manifest {out / 'build.json'})"
    )


def command_bfcl_export(args) -> None:
    """A run's model responses in bfcl-eval's result layout, one project root per arm, for ``bfcl evaluate``."""
    data = json.loads(args.json.read_text())
    by_arm: dict[str, list[dict]] = {}
    for r in data["results"]:
        by_arm.setdefault(r["arm"], []).append({"id": r["id"], "result": r["bfcl_result"]})
    for arm, rows in by_arm.items():
        target = args.out / arm / "result" / BFCL_MODEL / "multi_turn" / f"BFCL_v4_{CATEGORY}_result.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        rows.sort(key=lambda r: task_number(r["id"]))
        target.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{arm}: {len(rows)} tasks -> {target}")
    print(
        f"then, in a venv with bfcl-eval and its own dependencies, for each arm:\n  BFCL_PROJECT_ROOT={args.out}/ARM "
        f"bfcl evaluate --model {BFCL_MODEL} --test-category {CATEGORY} --partial-eval"
    )


def command_bfcl_compare(args) -> None:
    """The driver's verdicts against ``bfcl evaluate``'s score files (failing ids and error types)."""
    data = json.loads(args.json.read_text())
    mismatches = total = 0
    for arm in sorted({r["arm"] for r in data["results"]}):
        score = args.out / arm / "score" / BFCL_MODEL / "multi_turn" / f"BFCL_v4_{CATEGORY}_score.json"
        lines = [json.loads(line) for line in score.read_text().splitlines() if line.strip()]
        failing = {row["id"]: row.get("error", {}).get("error_type") for row in lines[1:]}
        header = lines[0]
        for r in (r for r in data["results"] if r["arm"] == arm):
            total += 1
            theirs = r["id"] not in failing
            same = theirs == r["passed"] and (theirs or failing[r["id"]] == r["error_type"])
            mismatches += not same
            if not same:
                print(
                    f"MISMATCH {arm} {r['id']}: driver {r['passed']} {r['error_type']}, bfcl {theirs} "
                    f"{failing.get(r['id'])}"
                )
        print(
            f"{arm}: bfcl accuracy {header.get('accuracy')} ({header.get('correct_count')}/"
            f"{header.get('total_count')}); driver {sum(r['passed'] for r in data['results'] if r['arm'] == arm)}"
        )
    print(f"{total - mismatches}/{total} verdicts (and failing error types) equal")
    if mismatches:
        raise SystemExit(1)


def main(argv=None) -> None:
    cache = Path(os.environ.get("REAL_LLM_DIR", Path.home() / ".cache" / "real-llm"))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    def common(q):
        q.add_argument("--shared", type=Path, default=None, help="the shared directory (default: beside the repo)")
        q.add_argument("--local-model", action="store_true", help="start the shared 1.5B model adapter (real-llm/)")
        q.add_argument("--real-llm-dir", type=Path, default=cache)
        q.add_argument("--model", type=Path, default=None, help="GGUF for --local-model")
        q.add_argument("--threads", type=int, default=1)
        q.add_argument("--max-tokens", type=int, default=512, help="adapter cap on one reply (--local-model)")
        q.add_argument("--ctx", type=int, default=None, help="model context (--local-model: 16384)")
        q.add_argument("--temperature", type=float, default=0.001, help="solver temperature (BFCL's default 0.001)")
        q.add_argument("--timeout", type=float, default=4000.0, help="seconds per model request (relay: long)")
        q.add_argument("--embedding-dimensions", type=int, default=None)
        q.add_argument(
            "--embedded",
            action="store_true",
            help="the plugin's embedded MiniLM (the relevance floor's model), not the hash server",
        )

    s = sub.add_parser("smoke", help="offline self-check with scripted endpoints (100%% and 0%%)")
    s.add_argument("--tasks", default="0,1")
    s.add_argument("--modes", default="ground_truth,silent", help="scripted endpoints (also drop_last)")
    s.add_argument("--json", type=Path, default=None, help="per-task results, the arm named after the endpoint")
    r = sub.add_parser("run", help="measure arms on test tasks")
    common(r)
    r.add_argument("--tasks", required=True, help="test task ids: 44-63,70 (multi_turn_base_<n>)")
    r.add_argument("--arms", default="none,plugin")
    r.add_argument("--workspace", type=Path, default=None, help="the plugin arm's workspace (build's OUT/ws)")
    r.add_argument("--library", type=Path, default=None, help="released library JSONL (default: shared bfcl_qwen3_8b)")
    r.add_argument("--endpoint", action="append", default=[], metavar="ARM=URL", help="this arm's endpoint")
    r.add_argument("--view", default="when_to_use_content", choices=("when_to_use", "when_to_use_content"))
    r.add_argument("--k", type=int, default=3, help="experiences per block (procedure_search limit)")
    r.add_argument("--fields", default="all", help="'all' or e.g. when-to-use,content or description,rules")
    r.add_argument("--inject", default="every", choices=("every", "first"), help="before every turn, or the first")
    r.add_argument(
        "--min-relevance",
        type=float,
        default=None,
        help="procedure_search's relevance floor (default: the plugin's setting; 0: none)",
    )
    r.add_argument(
        "--tools",
        default="task",
        choices=("task", "none"),
        help="task: only experiences naming one of the task's functions (procedure_search tools=)",
    )
    r.add_argument(
        "--memory-tokens",
        type=int,
        default=DEFAULT_MEMORY_TOKENS,
        help="most tokens of experience text per block, whole experiences best first (0: no budget)",
    )
    r.add_argument(
        "--repeats",
        default="drop",
        choices=("show", "drop"),
        help="drop (default): leave out of a block the experiences an earlier block of the same task showed",
    )
    r.add_argument(
        "--min-evidence",
        type=int,
        default=0,
        help="procedure_search min_evidence: leave out of each result the rules shown by fewer trajectories than this",
    )
    r.add_argument("--sequential-arms", action="store_true", help="one arm after the other (one shared endpoint)")
    r.add_argument("--keep-messages", action="store_true", help="keep every conversation in --json")
    r.add_argument("--workdir", type=Path, default=None)
    r.add_argument("--json", type=Path, default=None)
    b = sub.add_parser("build", help="import training trajectories into a new workspace (OUT/ws)")
    common(b)
    b.add_argument("--out", type=Path, required=True)
    b.add_argument(
        "--train",
        required=True,
        help="training task ids (0..39: the shared replays; others: ground-truth replays made here, OUT/replays)",
    )
    b.add_argument(
        "--start-from", type=Path, default=None, help="a workspace to copy into OUT/ws first: the memory grows from it"
    )
    b.add_argument(
        "--rollouts",
        default="none",
        choices=("none", "passed", "all"),
        help="also import the model's own rollouts of the training tasks",
    )
    for option in ("--segment", "--summary", "--reserve", "--max-iters"):
        b.add_argument(option, type=int, default=None)
    m = sub.add_parser("combine", help="one measurement from runs over disjoint tasks (e.g. two halves)")
    m.add_argument("runs", type=Path, nargs="+", help="the runs' --json files")
    m.add_argument("--json", type=Path, default=None, help="the combined results, summary and comparison")
    e = sub.add_parser("bfcl-export", help="a run's model responses in bfcl-eval's result layout")
    c = sub.add_parser("bfcl-compare", help="the driver's verdicts against bfcl evaluate's score files")
    for q in (e, c):
        q.add_argument("--json", type=Path, required=True, help="a run's --json")
        q.add_argument("--out", type=Path, required=True, help="the export directory")
    args = p.parse_args(argv)
    if args.command == "smoke":
        started = time.monotonic()
        modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
        out = smoke(parse_ids(args.tasks), tuple(dict.fromkeys(("ground_truth", "silent") + modes)))
        for mode, o in out.items():
            s = o["summary"]
            print(
                f"{mode}: {s['passed']}/{s['tasks']} passed, {s['requests_per_task']} requests per task, "
                f"failing: {s['error_types'] or '-'}"
            )
        if args.json:
            args.json.write_text(json.dumps({"results": [r for o in out.values() for r in o["results"]]}, indent=1))
        replay, silent = out["ground_truth"]["summary"], out["silent"]["summary"]
        ok = replay["passed"] == replay["tasks"] > 0 and silent["passed"] == 0
        print(f"smoke {'OK' if ok else 'FAILED'} in {time.monotonic() - started:.1f} s")
        raise SystemExit(0 if ok else 1)
    {
        "run": command_run,
        "build": command_build,
        "combine": command_combine,
        "bfcl-export": command_bfcl_export,
        "bfcl-compare": command_bfcl_compare,
    }[args.command](args)


if __name__ == "__main__":
    main()
