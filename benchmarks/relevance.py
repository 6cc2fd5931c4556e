"""Calibration of the relevance floor: how well does ``relevance`` separate on-topic from off-topic queries?

Run from the repository root (a venv with the plugin, the ``benchmarks`` extra and ``bfcl-eval``; see
``benchmarks/README.md``, "relevance.py")::

    python benchmarks/relevance.py                     # BFCL tasks 20-99, the embedded MiniLM
    python benchmarks/relevance.py --json /tmp/relevance.json
    EMBEDDING_BACKEND=openai EMBEDDING_MODEL_NAME=... EMBEDDING_API_KEY=... EMBEDDING_BASE_URL=... \\
        python benchmarks/relevance.py                 # recalibrate for a provider (its own similarity scale)
    python benchmarks/relevance.py --smoke             # CI: tasks 20-29, seconds

What runs, all real (the plugin's embedding as configured: with no ``EMBEDDING_*`` the embedded all-MiniLM-L6-v2):

1. The memory is the example workspace (``examples/bfcl-workspace``: the experiences extracted from BFCL
   ``multi_turn_base`` 0-19), copied and opened by an in-process ``Application(plugins=["procedure-memory"])``.
2. The queries are the user turns of BFCL ``multi_turn_base`` tasks 20-99, which the memory has not seen (ids 100-199
   are reserved for independent verification and never read). A turn's gold functions are the names in its
   ground-truth calls. A function is *covered* when an experience's content names it (``operations/delivery.py``:
   as a whole identifier), an API class when one of its functions is covered. A turn is **on-topic** when one of its
   gold functions is covered, **off-topic** when none of its gold functions belongs to a covered class (an API no
   experience concerns: travel booking, trading, vehicles, tickets), and left out otherwise (an uncovered function of
   a covered class) or when it calls nothing.
3. Each query goes through the real ``procedure_search`` job per view with ``min_relevance=0`` and ``limit=5``; the
   answer's relevance values say what every floor would deliver. A result is *useful* when its content names one of
   the turn's gold functions.
4. Per view: the distribution of the best relevance of on- and off-topic queries, the AUC of that separation (the
   probability that an on-topic query's best relevance exceeds an off-topic one's), and per floor the share of
   off-topic queries answered with 0 results, the share of on-topic ones answered with at least one and with at least
   one useful result, and the delivered results per on-topic query and the share of them that are useful. The
   suggested floor is the lowest of the grid at which at least ``--target`` (99%) of the off-topic queries answer 0
   in every view.

``--smoke`` (CI, ``tests/benchmarks/test_smokes.py``) runs the same on tasks 20-29 with the embedded model; it shows
the instrument works, its numbers are too few to calibrate anything.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.machine import describe, revision  # noqa: E402  (benchmarks/benchlib/machine.py)
from benchlib.shared import load_test_helpers  # noqa: E402  (benchmarks/benchlib/shared.py)
from downstream import bfcl, load_tasks, parse_ids, task_number  # noqa: E402  (benchmarks/downstream.py)

REPO = Path(__file__).resolve().parent.parent
WORKSPACE = REPO / "examples" / "bfcl-workspace"
VIEWS = ("when_to_use", "when_to_use_content")
TASKS, SMOKE_TASKS = "20-99", "20-29"
RESERVED = range(100, 200)  # independent verification only: never read
LIMIT = 5
FLOORS = [round(0.1 + 0.025 * i, 3) for i in range(21)]  # 0.10 ... 0.60
TARGET = 0.99
CALL = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*\(")


@dataclass
class Case:
    task: str
    turn: int
    query: str
    gold: list[str]
    topic: str  # "on" or "off"
    relevance: dict[str, list[float]] = field(default_factory=dict)  # view -> the answer's relevances, best first
    useful: dict[str, list[bool]] = field(default_factory=dict)  # view -> whether each result names a gold function


# -- pure parts -------------------------------------------------------------------------------------------------------


def call_names(calls: list[str]) -> list[str]:
    """The distinct function names of ground-truth call strings (``cd(folder='x')`` -> ``cd``), in order."""
    return list(dict.fromkeys(m.group(1) for m in map(CALL.match, calls) if m))


def label(gold: list[str], covered: set[str], class_of: dict[str, str], covered_classes: set[str]) -> str | None:
    """``on``, ``off`` or None (left out) for a turn's gold functions (see the module docstring)."""
    if not gold:
        return None
    if any(name in covered for name in gold):
        return "on"
    if all(class_of.get(name) not in covered_classes for name in gold):
        return "off"
    return None


def auc(positive: list[float], negative: list[float]) -> float | None:
    """P(a positive's value > a negative's), ties counting half (the Mann-Whitney U over both sizes)."""
    if not positive or not negative:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative)
    return wins / (len(positive) * len(negative))


def quantiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {
        "min": round(ordered[0], 3),
        "p05": at(0.05),
        "p25": at(0.25),
        "p50": at(0.5),
        "p75": at(0.75),
        "p95": at(0.95),
        "max": round(ordered[-1], 3),
    }


def at_floor(cases: list[Case], view: str, floor: float) -> dict:
    """What a floor delivers in one view (see the module docstring, point 4)."""
    on = [c for c in cases if c.topic == "on"]
    off = [c for c in cases if c.topic == "off"]
    delivered = [[u for r, u in zip(c.relevance[view], c.useful[view]) if r >= floor] for c in on]
    results = sum(len(d) for d in delivered)
    return {
        "floor": floor,
        "off_answer_0": round(sum(not any(r >= floor for r in c.relevance[view]) for c in off) / len(off), 3)
        if off
        else None,
        "on_answer_1": round(sum(bool(d) for d in delivered) / len(on), 3) if on else None,
        "on_useful_1": round(sum(any(d) for d in delivered) / len(on), 3) if on else None,
        "on_results": round(results / len(on), 2) if on else None,
        "on_precision": round(sum(sum(d) for d in delivered) / results, 3) if results else None,
    }


def summarize(cases: list[Case], target: float = TARGET) -> dict:
    out: dict = {
        "cases": {"on": sum(c.topic == "on" for c in cases), "off": sum(c.topic == "off" for c in cases)},
        "views": {},
    }
    for view in VIEWS:
        best = {
            topic: [max(c.relevance[view], default=0.0) for c in cases if c.topic == topic] for topic in ("on", "off")
        }
        useful_best = [
            max((r for r, u in zip(c.relevance[view], c.useful[view]) if u), default=0.0)
            for c in cases
            if c.topic == "on"
        ]
        out["views"][view] = {
            "best_on": quantiles(best["on"]),
            "best_off": quantiles(best["off"]),
            "best_useful_on": quantiles(useful_best),
            "auc": round(auc(best["on"], best["off"]), 3) if auc(best["on"], best["off"]) is not None else None,
            "floors": [at_floor(cases, view, f) for f in FLOORS],
        }
    suggested = next(
        (
            f
            for f in FLOORS
            if all(
                (row["off_answer_0"] or 0) >= target
                for view in VIEWS
                for row in out["views"][view]["floors"]
                if row["floor"] == f
            )
        ),
        None,
    )
    out["suggested_floor"], out["target_off_answer_0"] = suggested, target
    return out


# -- the run ----------------------------------------------------------------------------------------------------


def function_classes() -> dict[str, str]:
    """Function name -> its BFCL API class, from bfcl-eval's own function documents."""
    import bfcl_eval
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    directory = Path(bfcl_eval.__file__).parent / "data" / "multi_turn_func_doc"
    out: dict[str, str] = {}
    for cls, name in MULTI_TURN_FUNC_DOC_FILE_MAPPING.items():
        for line in (directory / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.setdefault(json.loads(line)["name"], cls)
    return out


def experiences(workspace: Path) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((workspace / "procedures").glob("*.json"))]


def build_cases(task_ids: list[str], contents: list[str]) -> list[Case]:
    """The labelled user turns of ``task_ids`` (see the module docstring, point 2)."""
    from reme_procedure_memory.operations.delivery import names_any, tool_pattern

    class_of = function_classes()
    covered = {name for name in class_of if any(names_any(c, tool_pattern([name])) for c in contents)}
    covered_classes = {class_of[name] for name in covered}
    tasks = load_tasks(bfcl())
    cases = []
    for task_id in task_ids:
        if task_number(task_id) in RESERVED:
            raise SystemExit(f"refused: {task_id} is reserved for independent verification (ids 100-199)")
        task = tasks[task_id]
        for n, (turn, calls) in enumerate(zip(task.entry["question"], task.ground_truth)):
            query = "\n".join(m["content"] for m in turn if m.get("role") == "user").strip()[:4096]
            gold = call_names(calls)
            topic = label(gold, covered, class_of, covered_classes)
            if query and topic:
                cases.append(Case(task_id, n, query, gold, topic))
    return cases


async def measure(cases: list[Case], workdir: Path) -> dict:
    """Every case through the real procedure_search job of both views (floor 0); the embedding as configured."""
    from reme.application import Application
    from reme_procedure_memory.operations.delivery import names_any, tool_pattern

    helpers = load_test_helpers()
    ws = workdir / "ws"
    shutil.copytree(WORKSPACE, ws)
    tokenizer = helpers.write_word_tokenizer(workdir / "tokenizer.json")
    app = Application(
        plugins=["procedure-memory"],
        workspace_dir=str(ws),
        service={"backend": "cli"},
        enable_logo=False,
        log_to_console=False,
        log_to_file=False,
        components={"procedure_memory": {"default": {"tokenizer_source": str(tokenizer)}}},
    )
    await app.start()
    try:
        for case in cases:
            pattern = tool_pattern(case.gold)
            for view in VIEWS:
                response = await app.run_job(
                    "procedure_search", query=case.query, index=view, limit=LIMIT, min_relevance=0
                )
                answer = json.loads(response.answer)
                if not response.success or answer.get("vector_search"):
                    raise SystemExit(f"procedure_search failed or ran without vectors: {answer}")
                case.relevance[view] = [r["relevance"] for r in answer["results"]]
                case.useful[view] = [names_any(r["experience"]["content"], pattern) for r in answer["results"]]
        return {"experiences": len(experiences(ws)), "embedding": embedding_name()}
    finally:
        await app.close()


def embedding_name() -> str:
    """The embedding the run used, as the plugin's defaults choose it (``plugin.yaml``)."""
    backend = os.environ.get("EMBEDDING_BACKEND")
    if not backend:
        return "embedded all-MiniLM-L6-v2 (int8)"
    return f"{backend} {os.environ.get('EMBEDDING_MODEL_NAME', 'text-embedding-v4')}"


def cell(number) -> str:
    return "—" if number is None else f"{number}"


def report(result: dict) -> str:
    s = result["summary"]
    lines = [
        f"relevance calibration: {result['experiences']} experiences, {s['cases']['on']} on-topic and "
        f"{s['cases']['off']} off-topic user turns (tasks {result['tasks']}), embedding {result['embedding']}"
    ]
    for view, v in s["views"].items():
        on, off = v["best_on"] or {}, v["best_off"] or {}
        lines += [
            "",
            f"{view}: AUC {cell(v['auc'])}; best relevance on-topic p05 {cell(on.get('p05'))} p50 "
            f"{cell(on.get('p50'))} p95 {cell(on.get('p95'))}; off-topic p50 {cell(off.get('p50'))} p95 "
            f"{cell(off.get('p95'))} max {cell(off.get('max'))}",
            "| floor | off-topic: 0 results | on-topic: >= 1 result | on-topic: >= 1 useful | results per "
            "on-topic | useful share |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for row in v["floors"]:
            lines.append(
                f"| {row['floor']:.3f} | {cell(row['off_answer_0'])} | {cell(row['on_answer_1'])} | "
                f"{cell(row['on_useful_1'])} | {cell(row['on_results'])} | {cell(row['on_precision'])} |"
            )
    lines.append(
        f"\nsuggested floor (the lowest at which >= {s['target_off_answer_0']:.0%} of the off-topic turns "
        f"answer 0 results in every view): {cell(s['suggested_floor'])}"
    )
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--smoke", action="store_true", help=f"CI: tasks {SMOKE_TASKS}")
    parser.add_argument("--tasks", default=None, help=f"BFCL multi_turn_base ids (default {TASKS}; never 100-199)")
    parser.add_argument("--target", type=float, default=TARGET, help="off-topic share that must answer 0")
    parser.add_argument("--json", type=Path, help="write the cases and the summary here")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    spec = args.tasks or (SMOKE_TASKS if args.smoke else TASKS)
    task_ids = parse_ids(spec)
    cases = build_cases(task_ids, [e["content"] for e in experiences(WORKSPACE)])
    with tempfile.TemporaryDirectory(prefix="relevance-") as tmp:
        measured = asyncio.run(measure(cases, Path(tmp)))
    result = {
        **measured,
        "tasks": spec,
        "revision": revision(),
        "machine": describe(),
        "summary": summarize(cases, args.target),
    }
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps({**result, "cases": [asdict(c) for c in cases]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
