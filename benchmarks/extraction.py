"""Extraction quality: what the plugin extracts from real trajectories with a given model, and how findable it is.

Run from the repository root, in a venv with the plugin installed, against any OpenAI-compatible model::

    export LLM_BACKEND=openai LLM_MODEL_NAME=... LLM_API_KEY=... LLM_BASE_URL=https://...
    export EMBEDDING_BACKEND=openai EMBEDDING_MODEL_NAME=... EMBEDDING_API_KEY=... EMBEDDING_BASE_URL=https://...
    python benchmarks/extraction.py --json /tmp/extraction.json             # all 40 BFCL base trajectories
    python benchmarks/extraction.py --limit 8                                # the first 8 (reference tasks first)

    python benchmarks/extraction.py --local-model --limit 3                  # the shared 1.5B model (real-llm/)

    # transfer to new tasks (below): extract the training half into a kept workspace, then evaluate it again later
    python benchmarks/extraction.py --transfer --workdir /tmp/transfer-run --embed-python /tmp/minilm/bin/python
    python benchmarks/extraction.py --transfer --workspace /tmp/transfer-run/ws --embed-python /tmp/minilm/bin/python
    python benchmarks/extraction.py --transfer --reference-only --embed-python /tmp/minilm/bin/python
    python benchmarks/extraction.py --compare before.json after.json         # two `--transfer --json` answers
    python benchmarks/extraction.py --smoke                                  # offline, seconds, no model (CI)

Trajectories: the BFCL multi-turn conversations of ``../shared/data/trajectories/base/`` (``.jsonl``, ``.json``,
``.md``, ``.log``; parsed by ``benchlib/turns.py``); the first user message of each is its task. Every trajectory is imported,
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
(``benchlib/library.py``: ``description`` = the first sentence of ``content``, each citing a stand-in trajectory copied into
that workspace; the run stops unless all are indexed and searchable) and searched with the same queries, views and
metrics; and the plugin's figures are repeated for the same matched tasks. Only 3 of the 40 base tasks have released
experiences.

Transfer (``--transfer``; definitions in ``benchlib/transfer.py``): the base trajectories are split by number, 0..19 to
extract from and 20..39 to test on. The training half is extracted as above into ``<workdir>/ws`` (``--limit`` takes
its first N), unless ``--workspace DIR`` names a workspace extracted before (e.g. a capable model's run kept with
``--workdir``: a copy of it is evaluated after a ``procedure_reindex`` with this run's embeddings; it must hold no
copy of a test trajectory) or ``--reference-only`` skips it. Every user turn of the test half that led to tool calls is
then a query, on both views, with ``limit`` 3: coverage@1 and @3 (the share of the turn's distinct called functions
that the top-k experiences name as whole identifiers), turns fully covered, results that name none of the turn's
functions, and the tokens of the top-k experiences handed to an agent. The same turns are asked of ReMe's released
library, all of it but the experiences whose task query is a user message of the test half. ``--compare`` says per
view whether quality did not fall while tokens fell between two ``--transfer --json`` answers (before, after).

``--smoke`` runs extraction and transfer end to end offline in seconds, for CI: a scripted agent (no model) that writes
one experience per training trajectory listing each turn's calls, through the real ``procedure_auto_memory`` job;
fake hashed embeddings; a word-level tokenizer; the shared trajectories and library, or ``tests/fixtures`` without
``../shared``. Its figures say that the instrument runs, nothing about extraction quality.

Embeddings: ``--embed-python PY`` starts the real MiniLM server (``benchlib/minilm.py``, 384 dimensions); else
``EMBEDDING_*`` when ``EMBEDDING_BASE_URL`` is set; else the shared hash embedding server (``tools/embed_server.py``,
plumbing only: it ranks worse than BM25 alone). ``--local-model`` starts the shared adapter with
Qwen2.5-Coder-1.5B-Instruct (see ``real_model.py``) and uses small budgets that fit it (segment 1,024, context 16,384,
summary 256, ``max_iters`` 8); without it the plugin's defaults apply. Nothing here is a test.
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
import time
from contextlib import ExitStack
from pathlib import Path

from benchlib.library import (
    TRAJECTORY_DIR,
    index_placed,
    load_library,
    place_library,  # benchmarks/benchlib/library.py
    queries_of,
)
from benchlib.machine import describe  # noqa: E402  (benchmarks/benchlib/machine.py)
from benchlib.shared import find_shared  # noqa: E402  (benchmarks/benchlib/shared.py)
from benchlib.transfer import (
    cases_of,
    ceiling,
    copies_of,
    search_cases,
    split,
    table,  # benchmarks/benchlib/transfer.py
    training_calls,
    verdict,
)
from benchlib.turns import read_turns  # noqa: E402  (benchmarks/benchlib/turns.py)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
VIEWS = ("when_to_use", "when_to_use_content")
LIBRARY = Path("data/experience-library/bfcl_qwen3_8b.jsonl")  # inside the shared directory
FIXTURES = REPO / "tests" / "fixtures"  # the smoke run's data without ../shared
sys.path.append(str(REPO / "tests"))  # tests/helpers/: the smoke run's test doubles and word-level tokenizer


# -- tasks ----------------------------------------------------------------------------------------------------------


def task_of(path: Path) -> str:
    """The first user message of a BFCL conversation in any of the four shared formats."""
    turns = read_turns(path)
    return turns[0].message if turns else ""


def base_trajectories(base: Path) -> list[Path]:
    """The ``multi_turn_base_<n>`` trajectories of a directory, by number."""
    return sorted(base.glob("multi_turn_base_*"), key=lambda p: int(re.findall(r"\d+", p.name)[-1]))


def load_tasks(paths: list[Path], limit: int | None, reference_tasks: set[str], first: bool = True) -> list[dict]:
    """Trajectories and their tasks; with ``first``, the tasks with released reference experiences go first, so that
    a small ``limit`` includes them."""
    tasks = [{"path": p, "task": task_of(p)} for p in paths]
    if first:
        tasks.sort(key=lambda t: t["task"] not in reference_tasks)
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
        out[view] = {
            "hit@1": round(hits1 / n, 3),
            "hit@5": round(hits5 / n, 3),
            "mrr@10": round(reciprocal / n, 3),
            "tasks": len(tasks),
        }
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
    from reme_procedure_memory.storage.experiences import BadFile

    valid, invalid = {}, []
    for item in memory.workspace.files.scan():
        if isinstance(item, BadFile):
            invalid.append(item.path)
        else:
            valid[item.path] = tuple(item.experience.sources)
    return valid, invalid


async def experience_sizes(memory) -> dict:
    """How large the valid experiences of a workspace are, in the configured tokenizer's tokens: per experience the
    three text fields together (what an agent is handed) and the content alone; median and largest of each
    (an experience's size stays bounded as the trajectories behind it grow)."""
    from statistics import median

    from reme_procedure_memory.storage.experiences import BadFile

    experiences = [item.experience for item in memory.workspace.files.scan() if not isinstance(item, BadFile)]
    if not experiences:
        return {"experiences": 0}
    texts = [[e.description, e.when_to_use, e.content] for e in experiences]
    counts = await memory.workspace.tokens.acount_many([t for three in texts for t in three])
    fields = [counts[i : i + 3] for i in range(0, len(counts), 3)]
    total, content = [sum(f) for f in fields], [f[2] for f in fields]
    return {
        "experiences": len(experiences),
        "median": median(total),
        "largest": max(total),
        "content_median": median(content),
        "content_largest": max(content),
        "when_to_use_largest": max(f[1] for f in fields),
    }


def experience_faithfulness(memory) -> dict:
    """How many of the valid experiences' steps can be traced to a trajectory they cite (``benchlib/faithfulness.py``):
    a call or quoted literal of the step found in a cited copy's text."""
    from benchlib.faithfulness import faithfulness
    from reme_procedure_memory.storage.experiences import BadFile

    experiences = [
        (item.experience.content, list(item.experience.sources))
        for item in memory.workspace.files.scan()
        if not isinstance(item, BadFile)
    ]
    texts: dict[str, str] = {}

    def text_of(source: str) -> str:
        if source not in texts:
            path = memory.workspace_path / source
            texts[source] = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        return texts[source]

    return faithfulness(experiences, text_of)


def print_sizes(label: str, sizes: dict) -> None:
    if not sizes.get("experiences"):
        print(f"{label}: no valid experience")
        return
    print(
        f"{label}: {sizes['experiences']} experiences; description + when-to-use + content: median "
        f"{sizes['median']}, largest {sizes['largest']} tokens; content median {sizes['content_median']}, largest "
        f"{sizes['content_largest']}; when-to-use largest {sizes['when_to_use_largest']}"
    )


def revisions(memory, request_ids: list[str]) -> dict:
    """Writes of trajectories after the first: revisions of earlier experiences vs new files."""
    from reme_procedure_memory.storage.journal import INDEXED, PUBLISHED, SUPERSEDED

    done = (INDEXED, PUBLISHED, SUPERSEDED)
    created_by: dict[str, int] = {}
    revised, new = set(), set()
    for position, request_id in enumerate(request_ids):
        for op in memory.workspace.journal.records(request_id):
            if op.status not in done:
                continue
            if op.tool == "create":
                created_by.setdefault(op.path, position)
                if position > 0:
                    new.add(op.path)
            elif position > 0 and created_by.get(op.path, position) < position:
                revised.add(op.path)
    later = len(revised) + len(new)
    return {
        "later_revised": len(revised),
        "later_created": len(new),
        "revised_share": round(len(revised) / later, 3) if later else None,
    }


# -- workspaces -----------------------------------------------------------------------------------------------------


def application(workspace: Path, tokenizer: Path, args, with_model: bool = False, scripts: list | None = None):
    """An unstarted ``Application`` with the plugin on ``workspace``: with ``with_model`` ReMe's default model and agent
    wrapper; with ``scripts`` a scripted agent wrapper instead (``tests/helpers.ScriptedAgent``); under ``--smoke``
    the fake hashed embedding of the tests."""
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
        limits = {
            k: v
            for k, v in (
                ("segment", args.segment),
                ("summary", args.summary),
                ("context", args.ctx),
                ("reserve", args.reserve),
            )
            if v
        }
        memory["token_limits"] = limits
        if args.max_iters:
            memory["extraction"] = {"max_iters": args.max_iters}
        if args.ctx:
            components["as_llm"]["default"]["context_size"] = args.ctx
    app = Application(
        plugins=["procedure-memory"],
        workspace_dir=str(workspace),
        service={"backend": "cli"},
        enable_logo=False,
        log_to_console=False,
        log_to_file=False,
        components=components,
    )
    if args.smoke or scripts is not None:
        from helpers import FakeEmbeddingModel, ScriptedAgent  # tests/helpers/: the doubles the tests may use

        if args.smoke:
            app.context.components["as_embedding"]["procedure"].model = FakeEmbeddingModel(args.embedding_dimensions)
        if scripts is not None:
            app.agent = ScriptedAgent(scripts, name="default", app_context=app.context)
            app.context.components.setdefault("agent_wrapper", {})["default"] = app.agent
    return app


async def extract(
    args, tasks: list[dict], workdir: Path, tokenizer: Path, scripts: list | None = None, prefix: str = "extraction"
) -> dict:
    """Import ``tasks`` one after the other into ``<workdir>/ws`` (the configured model, or ``scripts``), as the
    requests ``<prefix>-001``, ``<prefix>-002``, ... (a workspace that holds earlier imports needs another prefix)."""
    from reme.utils.evaluation_interface import check_agent_token_usage

    app = application(workdir / "ws", tokenizer, args, with_model=scripts is None, scripts=scripts)
    await app.start()
    try:
        memory = app.context.components["procedure_memory"]["default"]
        wrapper = app.context.components["agent_wrapper"]["default"].name
        (workdir / "in").mkdir(parents=True, exist_ok=True)
        imports, snapshots = [], {}
        for n, task in enumerate(tasks, 1):
            source = workdir / "in" / task["path"].name
            source.write_bytes(task["path"].read_bytes())
            before = check_agent_token_usage(wrapper, app.context)
            started = time.monotonic()
            response = await app.run_job(
                "procedure_auto_memory", file=str(source), filename=source.name, request_id=f"{prefix}-{n:03d}"
            )
            answer = json.loads(response.answer)
            after = check_agent_token_usage(wrapper, app.context)
            used = {m: (after[m] or 0) - (before[m] or 0) for m in ("input_tokens", "output_tokens")}
            text = source.read_text(encoding="utf-8")
            imports.append(
                {
                    "trajectory": source.name,
                    "task": task["task"],
                    "request_id": f"extraction-{n:03d}",
                    "copy": answer.get("path"),
                    "status": answer.get("status"),
                    "error": (answer.get("error") or {}).get("code"),
                    "seconds": round(time.monotonic() - started, 1),
                    "trajectory_tokens": await memory.workspace.tokens.acount(text),
                    **used,
                }
            )
            print(
                f"  {source.name}: {answer.get('status')} {imports[-1]['error'] or ''} "
                f"experiences {answer.get('experiences')} in {imports[-1]['seconds']} s",
                flush=True,
            )
            if n in (args.snapshot_at or ()):  # the size after n imports, and the workspace as it is then
                snapshots[n] = await experience_sizes(memory)
                print_sizes(f"after {n} imports", snapshots[n])
                shutil.copytree(workdir / "ws", workdir / f"ws-at-{n}", symlinks=True, dirs_exist_ok=True)
        valid, invalid = scan(memory)
        snapshots[len(tasks)] = await experience_sizes(memory)
        faithful = experience_faithfulness(memory)
        ranked = await search_all(app, [t["task"] for t in tasks])
        return {
            "imports": imports,
            "valid": valid,
            "invalid": invalid,
            "ranked": ranked,
            "revisions": revisions(memory, [i["request_id"] for i in imports]),
            "sizes": snapshots,
            "faithfulness": faithful,
        }
    finally:
        await app.close()


async def reference(args, tasks: list[dict], library: Path, workdir: Path, tokenizer: Path) -> dict:
    """ReMe's released experiences of the same tasks, placed as experience files (``benchlib/library.py``) and searched
    alike."""
    wanted = {t["task"] for t in tasks}
    experiences = [e for e in load_library(library) if e["query"] in wanted]
    relevant = queries_of(experiences)
    workspace = workdir / "reference"
    place_library(workspace, experiences, library)
    app = application(workspace, tokenizer, args)
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
        "valid_experiences": len(valid),
        "invalid_files": len(result["invalid"]),
        "valid_per_trajectory": round(sum(per_trajectory) / (len(tasks) or 1), 2),
        "trajectories_with_an_experience": len(covered),
        "retrieval_all_tasks": retrieval(result["ranked"], relevant, [t["task"] for t in tasks]),
        "retrieval_tasks_with_experiences": retrieval(result["ranked"], relevant, covered),
        "retrieval_reference_tasks": retrieval(result["ranked"], relevant, matched),
        "reference_released_experiences": retrieval(ref["ranked"], ref["relevant"], matched),
        "revisions": {
            **result["revisions"],
            "experiences_citing_2plus_trajectories": multi,
            "share_citing_2plus": round(multi / len(valid), 3) if valid else None,
        },
        "model_tokens_per_trajectory_token": {
            "input": round(tokens_in / trajectory_tokens, 2),
            "output": round(tokens_out / trajectory_tokens, 3),
        },
        "tokens": {"input": tokens_in, "output": tokens_out, "trajectory": trajectory_tokens},
        "experience_tokens": result.get("sizes", {}),
        "faithfulness": result.get("faithfulness"),
    }
    return summary


def print_report(s: dict) -> None:
    print(f"\ntrajectories {s['trajectories']}, complete {s['complete']}, stopped {s['stopped'] or 'none'}")
    print(
        f"valid experiences {s['valid_experiences']} (invalid files {s['invalid_files']}); per trajectory "
        f"{s['valid_per_trajectory']}; trajectories with at least one: {s['trajectories_with_an_experience']}"
    )
    rows = [
        ("plugin, all tasks", s["retrieval_all_tasks"]),
        ("plugin, tasks with experiences", s["retrieval_tasks_with_experiences"]),
        ("plugin, reference tasks", s["retrieval_reference_tasks"]),
        ("ReMe released (Qwen3-8B), reference tasks", s["reference_released_experiences"]),
    ]
    print(f"\n{'':44} {'view':20} {'tasks':>5} {'hit@1':>6} {'hit@5':>6} {'MRR@10':>7}")
    for label, figures in rows:
        for view in VIEWS:
            f = figures[view]
            print(f"{label:44} {view:20} {f['tasks']:5d} {f['hit@1']:6.3f} {f['hit@5']:6.3f} {f['mrr@10']:7.3f}")
    r = s["revisions"]
    print(
        f"\nlater trajectories: revised {r['later_revised']}, created {r['later_created']} "
        f"(revised share {r['revised_share']}); experiences citing 2+ trajectories {r['experiences_citing_2plus_trajectories']}"
    )
    t = s["model_tokens_per_trajectory_token"]
    print(f"model tokens per trajectory token: input {t['input']}, output {t['output']} ({s['tokens']})")
    for n, sizes in sorted(s.get("experience_tokens", {}).items()):
        print_sizes(f"experience size after {n} imports", sizes)
    print_faithfulness("experiences", s.get("faithfulness"))


def print_faithfulness(label: str, f: dict | None) -> None:
    if f and f["with_evidence"]:
        print(
            f"{label}: {f['traceable']} of {f['with_evidence']} steps with a call or quoted literal are traceable "
            f"to a cited trajectory ({f['share']:.1%}); {f['steps'] - f['with_evidence']} of {f['steps']} steps "
            "have neither"
        )


# -- transfer -------------------------------------------------------------------------------------------------------


async def searched(args, workspace: Path, tokenizer: Path, cases: list[dict], prepare) -> dict:
    """Start an Application on ``workspace``, ``await prepare(app)`` (kept as ``index``), then ask the transfer
    ``cases`` (``_transfer.search_cases``); ``sizes``: how large its experiences are (``experience_sizes``)."""
    app = application(workspace, tokenizer, args)
    await app.start()
    try:
        index = await prepare(app)
        memory = app.context.components["procedure_memory"]["default"]
        sizes, faithful = await experience_sizes(memory), experience_faithfulness(memory)
        return {"index": index, "sizes": sizes, "faithfulness": faithful, **await search_cases(app, cases)}
    finally:
        await app.close()


async def reindexed(app) -> dict:
    """Rebuild the views of an evaluated workspace copy with this run's embeddings (the real ``procedure_reindex``)."""
    response = await app.run_job("procedure_reindex")
    answer = json.loads(response.answer)
    if not response.success or answer.get("status") != "complete":
        raise RuntimeError(f"reindex of the evaluated workspace failed: {answer}")
    return {"indexed": answer["indexed"], "invalid_files": answer.get("invalid_files", [])}


async def transfer_plugin(args, workspace: Path, test: list[Path], tokenizer: Path, workdir: Path) -> dict:
    """Transfer figures of an extracted workspace, evaluated on a copy (the original is left as it is)."""
    leaked = copies_of(test, workspace / TRAJECTORY_DIR)
    if leaked:
        raise SystemExit(f"{workspace} holds copies of the test trajectories {leaked}: not a transfer evaluation")
    copy = workdir / "transfer-plugin"
    shutil.copytree(workspace, copy, symlinks=True)
    return await searched(args, copy, tokenizer, cases_of(test), reindexed)


async def transfer_reference(args, library: Path, test: list[Path], tokenizer: Path, workdir: Path) -> dict:
    """Transfer figures of ReMe's released library, without the experiences whose task query is a user message of
    the test half (those were extracted from the test tasks)."""
    test_messages = {turn.message for path in test for turn in read_turns(path)}
    everything = load_library(library)
    experiences = [e for e in everything if e["query"] not in test_messages]
    workspace = workdir / "transfer-reference"
    place_library(workspace, experiences, library)
    result = await searched(args, workspace, tokenizer, cases_of(test), lambda app: index_placed(app, experiences))
    return {**result, "experiences": len(experiences), "excluded": len(everything) - len(experiences)}


def copying_script(path: Path):
    """The smoke run's scripted extraction reply for one trajectory: one experience whose when-to-use is the first
    task that led to calls and whose content lists every such turn with its calls (no model involved)."""
    from helpers import summary

    turns = [t for t in read_turns(path) if t.functions]

    def words(text: str, n: int) -> str:
        return " ".join(text.split()[:n])

    async def script(tools, prompt, kwargs):
        if turns:
            ok, answer = await tools.call(
                "procedure_create",
                filename=re.sub(r"[^a-z0-9]+", "-", path.stem.lower()).strip("-") + ".json",
                operation_key="copy-1",
                description=f"Calls made for: {words(turns[0].message, 12)}",
                when_to_use=words(turns[0].message, 80),
                content="\n".join(
                    f"{n}. {words(t.message, 40)} Call {', '.join(t.functions)}." for n, t in enumerate(turns, 1)
                ),
            )
            if not ok:
                raise RuntimeError(f"the scripted create failed: {answer}")
        return summary(f"Wrote the calls of {path.name} as one experience.")

    return script


def transfer(args, trajectories: list[Path], library: Path, tokenizer: Path, workdir: Path) -> dict:
    """The transfer mode (and, with ``args.smoke``, its offline smoke run); prints and returns its figures."""
    return asyncio.run(transferred(args, trajectories, library, tokenizer, workdir))


async def transferred(args, trajectories: list[Path], library: Path, tokenizer: Path, workdir: Path) -> dict:
    """``transfer`` in one event loop: a run's applications leave clients (the OpenAI embedding client's connection
    pool) that close when collected, which must happen in the loop they were opened in, not after an earlier
    ``asyncio.run`` closed it ("Event loop is closed")."""
    train, test = split(trajectories)
    if not test:
        raise SystemExit(f"the transfer mode needs at least two trajectories, got {len(trajectories)}")
    out: dict = {
        "split": {"train": [p.name for p in train], "test": [p.name for p in test]},
        "cases": len(cases_of(test)),
        "training_calls": ceiling(cases_of(test), [training_calls(train)]),
    }
    print(
        f"split: {len(train)} training trajectories ({train[0].name} .. {train[-1].name}), {len(test)} test "
        f"({test[0].name} .. {test[-1].name}); {out['cases']} test turns with tool calls"
    )
    if not args.reference_only:
        workspace = args.workspace
        if workspace is None:
            tasks = load_tasks(train, args.limit, set(), first=False)
            scripts = [copying_script(t["path"]) for t in tasks] if args.smoke else None
            result = await extract(args, tasks, workdir, tokenizer, scripts)
            ref = await reference(args, tasks, library, workdir, tokenizer)
            out["extraction"] = report(result, ref, tasks)
            print_report(out["extraction"])
            workspace = workdir / "ws"
        out["plugin"] = await transfer_plugin(args, workspace, test, tokenizer, workdir)
        out["plugin"]["workspace"] = str(workspace)
    out["reference"] = await transfer_reference(args, library, test, tokenizer, workdir)
    rows = [("plugin", out["plugin"]["views"])] if "plugin" in out else []
    rows.append((f"ReMe released ({out['reference']['experiences']})", out["reference"]["views"]))
    print(
        f"\ntransfer to the test half ({out['cases']} turns; released experiences of test tasks excluded: "
        f"{out['reference']['excluded']}):\n\n{table(rows)}"
    )
    bound = out["training_calls"]
    print(
        f"\nbounds: a text naming every function the training half called covers {bound['coverage']:.3f} "
        f"(full {bound['full']:.3f})"
    )
    for label in ("plugin", "reference"):
        if label in out:
            print_sizes(f"{label}: experience size", out[label]["sizes"])
            print_faithfulness(label, out[label]["faithfulness"])
            bound = out[label]["ceiling"]
            print(
                f"{label}: all {bound['experiences']} experiences handed for every turn cover "
                f"{bound['coverage']:.3f} (full {bound['full']:.3f})"
            )
        if out.get(label, {}).get("pending"):
            print(f"{label}: the search reported {len(out[label]['pending'])} unindexed experiences")
    return out


def compare(before: Path, after: Path) -> dict:
    """``verdict`` per view of two ``--transfer --json`` answers, for the workspaces both hold."""
    b, a = (json.loads(p.read_text(encoding="utf-8"))["transfer"] for p in (before, after))
    out = {
        label: verdict(b[label]["views"], a[label]["views"])
        for label in ("plugin", "reference")
        if label in b and label in a
    }
    for label, views in out.items():
        print(table([(f"{label}, before", b[label]["views"]), (f"{label}, after", a[label]["views"])]))
        for view, v in views.items():
            print(
                f"{label} `{view}`: quality {'kept' if v['quality_kept'] else 'fell: ' + ', '.join(v['worse'])}; "
                f"tokens@3 {'fell' if v['tokens_fell'] else 'did not fall'}: {'PASS' if v['pass'] else 'FAIL'}"
            )
    return out


# -- main -----------------------------------------------------------------------------------------------------------


def parse_args(argv=None):
    cache = Path(os.environ.get("REAL_LLM_DIR", Path.home() / ".cache" / "real-llm"))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trajectories", nargs="*", help="file names in shared/data/trajectories/base (default: all)")
    p.add_argument("--limit", type=int, default=None, help="only the first N (reference tasks first)")
    p.add_argument("--shared", type=Path, default=None)
    p.add_argument("--transfer", action="store_true", help="extract the training half, evaluate on the test half")
    p.add_argument("--workspace", type=Path, default=None, help="--transfer: evaluate this extracted workspace")
    p.add_argument("--reference-only", action="store_true", help="--transfer: only ReMe's released library")
    p.add_argument("--smoke", action="store_true", help="the transfer mode offline: scripted agent, fake embeddings")
    p.add_argument(
        "--compare",
        type=Path,
        nargs=2,
        metavar=("BEFORE", "AFTER"),
        default=None,
        help="quality kept and tokens fallen? between two --transfer --json answers",
    )
    p.add_argument("--embed-python", default=None, help="start the MiniLM embedding server with this python")
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
    p.add_argument(
        "--snapshot-at",
        type=lambda v: {int(n) for n in v.split(",")},
        default=None,
        help="N[,M]: after the N-th import, print the experiences' sizes and copy the workspace to "
        "<workdir>/ws-at-N (e.g. for --transfer --workspace)",
    )
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    args.transfer = args.transfer or args.smoke
    if (args.workspace or args.reference_only) and not args.transfer:
        p.error("--workspace and --reference-only belong to --transfer")
    return args


def smoke_inputs(shared: Path | None) -> tuple[list[Path], Path]:
    """The smoke run's trajectories and library: the shared ones, else the fixtures of ``tests/fixtures``."""
    if shared is not None:
        return base_trajectories(shared / "data" / "trajectories" / "base"), shared / LIBRARY
    return base_trajectories(FIXTURES / "trajectories"), FIXTURES / "experiences.jsonl"


def start_servers(args, shared: Path, workdir: Path, stack: ExitStack, model: bool) -> None:
    """The model adapter (``--local-model``) and an embedding server unless ``EMBEDDING_BASE_URL`` is set: MiniLM with
    ``--embed-python``, else the hash server; everything started is stopped when ``stack`` closes."""
    from real_model import Servers

    if args.embed_python:
        from benchlib.minilm import DIMENSIONS, MODEL, EmbeddingServer

        server = stack.enter_context(
            EmbeddingServer(args.embed_python, shared / "tools" / "embed_server_minilm.py", None)
        )
        os.environ.update(
            EMBEDDING_BACKEND="openai",
            EMBEDDING_MODEL_NAME=MODEL,
            EMBEDDING_API_KEY="local",
            EMBEDDING_BASE_URL=server.base_url,
        )
        args.embedding_dimensions = DIMENSIONS
    hash_server = not os.environ.get("EMBEDDING_BASE_URL")
    if model and args.local_model:
        args.model = args.model or args.real_llm_dir / "models" / "qwen2.5-coder-1.5b-instruct.gguf"
        args.segment, args.summary, args.ctx = args.segment or 1024, args.summary or 256, args.ctx or 16384
        args.reserve, args.max_iters = args.reserve or 1024, args.max_iters or 8
        servers = Servers(args, shared, workdir, embeddings=hash_server)
        stack.callback(servers.stop)
        os.environ.update(
            LLM_BACKEND="openai",
            LLM_MODEL_NAME="local",
            LLM_API_KEY="x",
            LLM_BASE_URL=f"http://127.0.0.1:{servers.model_port}/v1",
        )
    elif model and not os.environ.get("LLM_BASE_URL") and not os.environ.get("LLM_API_KEY"):
        raise SystemExit("set LLM_BACKEND/LLM_MODEL_NAME/LLM_API_KEY/LLM_BASE_URL, or pass --local-model")
    elif hash_server:
        servers = Servers(args, shared, workdir, model=False)
        stack.callback(servers.stop)
    if hash_server:
        os.environ.update(
            EMBEDDING_BACKEND="openai",
            EMBEDDING_MODEL_NAME="hash",
            EMBEDDING_API_KEY="x",
            EMBEDDING_BASE_URL=f"http://127.0.0.1:{servers.embed_port}/v1",
        )
        print("embeddings: the shared hash embedding server (plumbing only; ranks worse than BM25 alone)")


def main(argv=None) -> dict:
    """Run the mode ``argv`` asks for; the answer is also written to ``--json``. A temporary workdir is removed at
    the end unless this run extracted with a model (its workspace, ``<workdir>/ws``, is what a later
    ``--transfer --workspace`` evaluates)."""
    args = parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    started = time.monotonic()
    extracting = not args.smoke and not (args.transfer and (args.workspace or args.reference_only))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="extraction-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        out = run(args, workdir, extracting)
    finally:
        if not args.workdir and not extracting:
            shutil.rmtree(workdir, ignore_errors=True)
    if extracting:
        print(f"workspace kept: {workdir / 'ws'}")
    print(f"\ntotal {round(time.monotonic() - started, 1)} s; load average at end {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, ensure_ascii=False))
    return out


def run(args, workdir: Path, extracting: bool) -> dict:
    if args.smoke:  # offline: no server, no model, the tests' word-level tokenizer
        from helpers import write_word_tokenizer

        try:
            shared = find_shared(args.shared)
        except SystemExit:
            shared = None
        trajectories, library = smoke_inputs(shared)
        args.embedding_dimensions = args.embedding_dimensions or 64
        tokenizer = write_word_tokenizer(workdir / "tokenizer.json")
        return {"transfer": transfer(args, trajectories, library, tokenizer, workdir)}
    shared = find_shared(args.shared)
    library = shared / LIBRARY
    tokenizer = Path(os.environ.get("PROCEDURE_TOKENIZER_SOURCE") or shared / "data/tokenizers/qwen3/tokenizer.json")
    base = shared / "data" / "trajectories" / "base"
    with ExitStack() as stack:
        start_servers(args, shared, workdir, stack, model=extracting)
        print(f"machine: {describe()}; load average {os.getloadavg()}")
        print(
            f"model: {os.environ.get('LLM_MODEL_NAME') if extracting else 'none'}; embeddings "
            f"{os.environ.get('EMBEDDING_MODEL_NAME')} ({args.embedding_dimensions or 'default'} dimensions); "
            f"workdir {workdir}"
        )
        if args.transfer:
            return {"transfer": transfer(args, base_trajectories(base), library, tokenizer, workdir)}
        return quality(args, base, library, tokenizer, workdir)


def quality(args, base: Path, library: Path, tokenizer: Path, workdir: Path) -> dict:
    """The extraction-quality run (the default mode): import, search each task, compare with the reference."""
    paths = [base / n for n in args.trajectories] or base_trajectories(base)
    tasks = load_tasks(paths, args.limit, set(queries_of(load_library(library))), first=not args.trajectories)
    print(f"{len(tasks)} trajectories")

    async def both():  # one event loop, as ``transferred``
        return await extract(args, tasks, workdir, tokenizer), await reference(args, tasks, library, workdir, tokenizer)

    result, ref = asyncio.run(both())
    summary = report(result, ref, tasks)
    print_report(summary)
    return {
        "summary": summary,
        "imports": result["imports"],
        "experiences": {p: list(s) for p, s in result["valid"].items()},
    }


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
