"""Extraction quality: what the plugin extracts from real trajectories with a given model, and how findable it is.

Run from the repository root, in a venv with the plugin installed, against any OpenAI-compatible model::

    export LLM_BACKEND=openai LLM_MODEL_NAME=... LLM_API_KEY=... LLM_BASE_URL=https://...
    export EMBEDDING_BACKEND=openai EMBEDDING_MODEL_NAME=... EMBEDDING_API_KEY=... EMBEDDING_BASE_URL=https://...
    python benchmarks/extraction.py --json /tmp/extraction.json             # all 40 BFCL base trajectories
    python benchmarks/extraction.py --limit 8                                # the first 8 (reference tasks first)

    python benchmarks/extraction.py --local-model --limit 3                  # the shared 1.5B model (real-llm/)

Trajectories: the BFCL multi-turn conversations of ``../shared/data/trajectories/base/`` (``.jsonl``, ``.json``,
``.md``, ``.log``; parsed by ``_turns.py``); the first user message of each is its task. Every trajectory is imported,
one after the other, into ONE shared workspace through the real ``procedure_auto_memory`` job (the one-shot CLI's job)
of an in-process ``Application`` with ``plugins=["procedure-memory"]`` and ReMe's configured agent wrapper and model.
Then, for each task query and each view (``when_to_use``, ``when_to_use_content``), ``procedure_search`` (limit 10)
is run, and:

* valid experiences per trajectory: experience files that parse as valid experiences and cite the trajectory's copy
  in ``sources`` (invalid files are counted apart);
* hit@1, hit@5 and MRR@10: is an experience whose ``sources`` include that trajectory at rank 1, in the top 5, and
  1/rank of the first one within 10 (0 when none), averaged over all tasks (a task without any experience counts
  as a miss) and over the tasks that have at least one;
* revised rather than duplicated: of the experiences that trajectories after the first wrote, the share that were
  revisions of an experience an earlier trajectory created (``procedure_update``) rather than new files
  (``procedure_create``); and the share of all experiences citing two or more trajectories;
* model tokens per trajectory token: input and output tokens the provider reported for the import (ReMe's agent
  token counter, summary repairs included), divided by the trajectory's exact tokens (configured tokenizer).

Beside it, the reference: ReMe's released experiences of the same tasks
(``../shared/data/experience-library/bfcl_qwen3_8b.jsonl``, extracted by ReMe's earlier procedural memory with
Qwen3-8B, matched by ``metadata.task_query`` = the task) are placed as experience files in a second workspace
(``_library.py``: ``description`` = the first sentence of ``content``, each citing a stand-in trajectory copied into
that workspace; the run stops unless all are indexed and searchable) and searched with the same queries, views and
metrics; and the plugin's figures are repeated for the same matched tasks. Only 3 of the 40 base tasks have released
experiences.

Embeddings: ``EMBEDDING_*`` when ``EMBEDDING_BASE_URL`` is set, else the shared hash embedding server
(``tools/embed_server.py``, plumbing only: it ranks worse than BM25 alone). ``--local-model`` starts the shared
adapter with Qwen2.5-Coder-1.5B-Instruct (see ``real_model.py``) and uses small budgets that fit it (segment 1,024,
context 16,384, summary 256, ``max_iters`` 8); without it the plugin's defaults apply. Nothing here is a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from _library import index_placed, load_library, place_library, queries_of  # noqa: E402  (benchmarks/_library.py)
from _machine import describe  # noqa: E402  (benchmarks/_machine.py)
from _shared import find_shared  # noqa: E402  (benchmarks/_shared.py)
from _turns import read_turns  # noqa: E402  (benchmarks/_turns.py)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
VIEWS = ("when_to_use", "when_to_use_content")
LIBRARY = Path("data/experience-library/bfcl_qwen3_8b.jsonl")  # inside the shared directory


# -- tasks ----------------------------------------------------------------------------------------------------------


def task_of(path: Path) -> str:
    """The first user message of a BFCL conversation in any of the four shared formats."""
    turns = read_turns(path)
    return turns[0].message if turns else ""


def load_tasks(shared: Path, names: list[str], limit: int | None, library: set[str]) -> list[dict]:
    """Trajectories and their tasks: the named ones, else all of base/ with the reference tasks first."""
    base = shared / "data" / "trajectories" / "base"
    paths = [base / n for n in names] if names else sorted(base.iterdir(), key=lambda p: int(re.findall(r"\d+", p.name)[-1]))
    tasks = [{"path": p, "task": task_of(p)} for p in paths]
    if not names:  # the tasks with released reference experiences first, so a small --limit includes them
        tasks.sort(key=lambda t: t["task"] not in library)
    return tasks[:limit] if limit else tasks


# -- metrics --------------------------------------------------------------------------------------------------------


def retrieval(ranked: dict[str, dict[str, list[str]]], relevant: dict[str, set[str]], tasks: list[str]) -> dict:
    """hit@1, hit@5, MRR@10 per view over ``tasks``; ``ranked[task][view]`` are result paths, best first."""
    out = {}
    for view in VIEWS:
        hits1 = hits5 = reciprocal = 0.0
        for task in tasks:
            paths = ranked[task][view][:10]
            rank = next((i + 1 for i, p in enumerate(paths) if p in relevant.get(task, set())), None)
            hits1 += rank == 1
            hits5 += rank is not None and rank <= 5
            reciprocal += 1 / rank if rank else 0.0
        n = len(tasks) or 1
        out[view] = {"hit@1": round(hits1 / n, 3), "hit@5": round(hits5 / n, 3), "mrr@10": round(reciprocal / n, 3),
                     "tasks": len(tasks)}
    return out


async def search_all(app, queries: list[str]) -> dict[str, dict[str, list[str]]]:
    ranked = {}
    for query in queries:
        ranked[query] = {}
        for view in VIEWS:
            response = await app.run_job("procedure_search", query=query, index=view, limit=10)
            answer = json.loads(response.answer)
            ranked[query][view] = [r["path"] for r in answer.get("results", [])]
    return ranked


def scan(memory) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """Valid experiences (path -> sources) and invalid experience files of a workspace."""
    from reme_procedure_memory.experiences import BadFile

    valid, invalid = {}, []
    for item in memory.files.scan():
        if isinstance(item, BadFile):
            invalid.append(item.path)
        else:
            valid[item.path] = tuple(item.experience.sources)
    return valid, invalid


def revisions(memory, request_ids: list[str]) -> dict:
    """Writes of trajectories after the first: revisions of earlier experiences vs new files."""
    from reme_procedure_memory.store import INDEXED, PUBLISHED, SUPERSEDED

    done = (INDEXED, PUBLISHED, SUPERSEDED)
    created_by: dict[str, int] = {}
    revised, new = set(), set()
    for position, request_id in enumerate(request_ids):
        for op in memory.journal.records(request_id):
            if op.status not in done:
                continue
            if op.tool == "create":
                created_by.setdefault(op.path, position)
                if position > 0:
                    new.add(op.path)
            elif position > 0 and created_by.get(op.path, position) < position:
                revised.add(op.path)
    later = len(revised) + len(new)
    return {"later_revised": len(revised), "later_created": len(new),
            "revised_share": round(len(revised) / later, 3) if later else None}


# -- workspaces -----------------------------------------------------------------------------------------------------


def application(workspace: Path, tokenizer: Path, args, with_model: bool):
    from reme.application import Application

    memory: dict = {"tokenizer_source": str(tokenizer)}
    components: dict = {"procedure_memory": {"default": memory}}
    if args.embedding_dimensions:
        components["as_embedding"] = {"procedure": {"dimensions": args.embedding_dimensions}}
    if with_model:  # ReMe's default model and agent wrapper (LLM_* settings), as `reme start` configures them
        from reme.config.config_parser import resolve_app_config

        defaults = resolve_app_config(log_config=False)["components"]
        components["as_llm"] = {"default": defaults["as_llm"]["default"]}
        components["agent_wrapper"] = {"default": defaults["agent_wrapper"]["default"]}
        limits = {k: v for k, v in (("segment", args.segment), ("summary", args.summary), ("context", args.ctx),
                                    ("reserve", args.reserve)) if v}
        memory["token_limits"] = limits
        if args.max_iters:
            memory["extraction"] = {"max_iters": args.max_iters}
        if args.ctx:
            components["as_llm"]["default"]["context_size"] = args.ctx
    return Application(plugins=["procedure-memory"], workspace_dir=str(workspace), service={"backend": "cli"},
                       enable_logo=False, log_to_console=False, log_to_file=False, components=components)


async def extract(args, tasks: list[dict], workdir: Path, tokenizer: Path) -> dict:
    from reme.utils.evaluation_interface import check_agent_token_usage

    app = application(workdir / "ws", tokenizer, args, with_model=True)
    await app.start()
    try:
        memory = app.context.components["procedure_memory"]["default"]
        wrapper = app.context.components["agent_wrapper"]["default"].name
        (workdir / "in").mkdir(parents=True, exist_ok=True)
        imports = []
        for n, task in enumerate(tasks, 1):
            source = workdir / "in" / task["path"].name
            source.write_bytes(task["path"].read_bytes())
            before = check_agent_token_usage(wrapper, app.context)
            started = time.monotonic()
            response = await app.run_job("procedure_auto_memory", file=str(source), filename=source.name,
                                         request_id=f"extraction-{n:03d}")
            answer = json.loads(response.answer)
            after = check_agent_token_usage(wrapper, app.context)
            used = {m: (after[m] or 0) - (before[m] or 0) for m in ("input_tokens", "output_tokens")}
            text = source.read_text(encoding="utf-8")
            imports.append({"trajectory": source.name, "task": task["task"], "request_id": f"extraction-{n:03d}",
                            "copy": answer.get("path"), "status": answer.get("status"),
                            "error": (answer.get("error") or {}).get("code"),
                            "seconds": round(time.monotonic() - started, 1),
                            "trajectory_tokens": await memory.tokens.acount(text), **used})
            print(f"  {source.name}: {answer.get('status')} {imports[-1]['error'] or ''} "
                  f"experiences {answer.get('experiences')} in {imports[-1]['seconds']} s", flush=True)
        valid, invalid = scan(memory)
        ranked = await search_all(app, [t["task"] for t in tasks])
        return {"imports": imports, "valid": valid, "invalid": invalid, "ranked": ranked,
                "revisions": revisions(memory, [i["request_id"] for i in imports])}
    finally:
        await app.close()


async def reference(args, tasks: list[dict], library: Path, workdir: Path, tokenizer: Path) -> dict:
    """ReMe's released experiences of the same tasks, placed as experience files (``_library.py``) and searched
    alike."""
    wanted = {t["task"] for t in tasks}
    experiences = [e for e in load_library(library) if e["query"] in wanted]
    relevant = queries_of(experiences)
    workspace = workdir / "reference"
    place_library(workspace, experiences, library)
    app = application(workspace, tokenizer, args, with_model=False)
    await app.start()
    try:
        await index_placed(app, experiences)
        queries = [t["task"] for t in tasks if t["task"] in relevant]
        return {"relevant": relevant, "ranked": await search_all(app, queries), "tasks": queries}
    finally:
        await app.close()


def report(result: dict, ref: dict, tasks: list[dict]) -> dict:
    imports, valid = result["imports"], result["valid"]
    copy_of = {i["task"]: i["copy"] for i in imports}
    relevant = {task: {p for p, sources in valid.items() if copy_of.get(task) in sources} for task in copy_of}
    per_trajectory = [len(relevant[t["task"]]) for t in tasks]
    covered = [t["task"] for t in tasks if relevant[t["task"]]]
    matched = ref["tasks"]
    tokens_in = sum(i["input_tokens"] for i in imports)
    tokens_out = sum(i["output_tokens"] for i in imports)
    trajectory_tokens = sum(i["trajectory_tokens"] for i in imports) or 1
    multi = sum(1 for sources in valid.values() if len(set(sources)) > 1)
    summary = {
        "trajectories": len(tasks),
        "complete": sum(i["status"] == "complete" for i in imports),
        "stopped": {i["trajectory"]: i["error"] for i in imports if i["status"] != "complete"},
        "valid_experiences": len(valid), "invalid_files": len(result["invalid"]),
        "valid_per_trajectory": round(sum(per_trajectory) / (len(tasks) or 1), 2),
        "trajectories_with_an_experience": len(covered),
        "retrieval_all_tasks": retrieval(result["ranked"], relevant, [t["task"] for t in tasks]),
        "retrieval_tasks_with_experiences": retrieval(result["ranked"], relevant, covered),
        "retrieval_reference_tasks": retrieval(result["ranked"], relevant, matched),
        "reference_released_experiences": retrieval(ref["ranked"], ref["relevant"], matched),
        "revisions": {**result["revisions"], "experiences_citing_2plus_trajectories": multi,
                      "share_citing_2plus": round(multi / len(valid), 3) if valid else None},
        "model_tokens_per_trajectory_token": {"input": round(tokens_in / trajectory_tokens, 2),
                                              "output": round(tokens_out / trajectory_tokens, 3)},
        "tokens": {"input": tokens_in, "output": tokens_out, "trajectory": trajectory_tokens},
    }
    return summary


def print_report(s: dict) -> None:
    print(f"\ntrajectories {s['trajectories']}, complete {s['complete']}, stopped {s['stopped'] or 'none'}")
    print(f"valid experiences {s['valid_experiences']} (invalid files {s['invalid_files']}); per trajectory "
          f"{s['valid_per_trajectory']}; trajectories with at least one: {s['trajectories_with_an_experience']}")
    rows = [("plugin, all tasks", s["retrieval_all_tasks"]),
            ("plugin, tasks with experiences", s["retrieval_tasks_with_experiences"]),
            ("plugin, reference tasks", s["retrieval_reference_tasks"]),
            ("ReMe released (Qwen3-8B), reference tasks", s["reference_released_experiences"])]
    print(f"\n{'':44} {'view':20} {'tasks':>5} {'hit@1':>6} {'hit@5':>6} {'MRR@10':>7}")
    for label, figures in rows:
        for view in VIEWS:
            f = figures[view]
            print(f"{label:44} {view:20} {f['tasks']:5d} {f['hit@1']:6.3f} {f['hit@5']:6.3f} {f['mrr@10']:7.3f}")
    r = s["revisions"]
    print(f"\nlater trajectories: revised {r['later_revised']}, created {r['later_created']} "
          f"(revised share {r['revised_share']}); experiences citing 2+ trajectories {r['experiences_citing_2plus_trajectories']}")
    t = s["model_tokens_per_trajectory_token"]
    print(f"model tokens per trajectory token: input {t['input']}, output {t['output']} ({s['tokens']})")


def main() -> None:
    cache = Path(os.environ.get("REAL_LLM_DIR", Path.home() / ".cache" / "real-llm"))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trajectories", nargs="*", help="file names in shared/data/trajectories/base (default: all)")
    p.add_argument("--limit", type=int, default=None, help="only the first N (reference tasks first)")
    p.add_argument("--shared", type=Path, default=None)
    p.add_argument("--local-model", action="store_true", help="start the shared 1.5B model adapter (real-llm/)")
    p.add_argument("--real-llm-dir", type=Path, default=cache)
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--segment", type=int, default=None, help="token_limits.segment (default: the plugin's)")
    p.add_argument("--summary", type=int, default=None)
    p.add_argument("--ctx", type=int, default=None, help="token_limits.context and the model's context_size")
    p.add_argument("--reserve", type=int, default=None)
    p.add_argument("--max-iters", type=int, default=None)
    p.add_argument("--embedding-dimensions", type=int, default=None)
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    shared = find_shared(args.shared)
    library = shared / LIBRARY
    tasks = load_tasks(shared, args.trajectories, args.limit, set(queries_of(load_library(library))))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="extraction-"))
    workdir.mkdir(parents=True, exist_ok=True)
    tokenizer = Path(os.environ.get("PROCEDURE_TOKENIZER_SOURCE") or shared / "data/tokenizers/qwen3/tokenizer.json")
    servers = None
    if args.local_model:
        from real_model import Servers

        args.model = args.model or args.real_llm_dir / "models" / "qwen2.5-coder-1.5b-instruct.gguf"
        args.segment, args.summary, args.ctx = args.segment or 1024, args.summary or 256, args.ctx or 16384
        args.reserve, args.max_iters = args.reserve or 1024, args.max_iters or 8
        servers = Servers(args, shared, workdir, embeddings=not os.environ.get("EMBEDDING_BASE_URL"))
        os.environ.update(LLM_BACKEND="openai", LLM_MODEL_NAME="local", LLM_API_KEY="x",
                          LLM_BASE_URL=f"http://127.0.0.1:{servers.model_port}/v1")
    elif not os.environ.get("LLM_BASE_URL") and not os.environ.get("LLM_API_KEY"):
        raise SystemExit("set LLM_BACKEND/LLM_MODEL_NAME/LLM_API_KEY/LLM_BASE_URL, or pass --local-model")
    if not os.environ.get("EMBEDDING_BASE_URL"):
        if servers is None:
            from real_model import Servers

            servers = Servers(args, shared, workdir, model=False)
        os.environ.update(EMBEDDING_BACKEND="openai", EMBEDDING_MODEL_NAME="hash", EMBEDDING_API_KEY="x",
                          EMBEDDING_BASE_URL=f"http://127.0.0.1:{servers.embed_port}/v1")
        print("embeddings: the shared hash embedding server (plumbing only; ranks worse than BM25 alone)")
    print(f"machine: {describe()}; load average {os.getloadavg()}")
    print(f"model: {os.environ.get('LLM_MODEL_NAME')} at {os.environ.get('LLM_BASE_URL')}; embeddings "
          f"{os.environ.get('EMBEDDING_MODEL_NAME')}; {len(tasks)} trajectories; workdir {workdir}")
    started = time.monotonic()
    try:
        result = asyncio.run(extract(args, tasks, workdir, tokenizer))
        ref = asyncio.run(reference(args, tasks, library, workdir, tokenizer))
    finally:
        if servers is not None:
            servers.stop()
    summary = report(result, ref, tasks)
    print_report(summary)
    print(f"\ntotal {round(time.monotonic() - started, 1)} s; load average at end {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "imports": result["imports"],
                                         "experiences": {p: list(s) for p, s in result["valid"].items()}},
                                        indent=1, ensure_ascii=False))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
