"""The listings at scale: ``procedure_list`` over N experiences and ``procedure_imports`` over M
imports, through the real jobs of an in-process ReMe Application.

What runs: the shipped plugin.yaml, real ReMe jobs, file stores and BM25, the tests' word-level tokenizer file; the
embedding model is ``benchlib.corpus.HashedProjectionEmbedding`` (1,024 dimensions). N experience files (the texts of
``search.py``'s corpus) are written into a fresh workspace and indexed once by ``procedure_reindex``, so every entry
is ``indexed``. M imports are written in the plugin's own record formats (an import record, a checkpoint of 4
segments with a 4 KiB summary, and 3 final journal records each) — a fixture, no agent runs.

Reported (median of ``--repeats`` calls, each the whole job call: validation, the reads, the JSON answer):
- ``list``: the first page (50), a page in the middle (50, by cursor), a page of 500, and a walk over every page
  (``--walk-limit`` each, 500); beside them the directory listing alone (``ExperienceFiles.paths``, the floor every
  page pays);
- ``imports``: the same pages and walk; beside them the read of every import record alone (``ImportRegistry.scan``,
  which every page pays: imports are ordered by request id).

The walks check what they read: every experience and every import exactly once, in order, each experience
``indexed`` and each import with the status its fixture implies (one in ten has a checkpoint left ``processing`` by
no running import: ``incomplete``); the run stops otherwise. Nothing asserts on time.

    python benchmarks/listing.py                       # 10,000 experiences, 10,000 imports
    python benchmarks/listing.py --smoke               # CI: 200 and 200, one call each, walks of 64

``--smoke`` (CI, ``tests/benchmarks/test_smokes.py``) runs every measurement and check above on 200 experiences and
200 imports, one call each, walks of 64 per page, with the corpus built from ``tests/fixtures/experiences.jsonl``
when ``../shared`` is absent; an option given explicitly still counts. It shows that the listings answer and turn
pages correctly; its timings are noise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from benchlib import corpus as _corpus  # benchmarks/benchlib/corpus.py
from benchlib.corpus import Corpus, HashedProjectionEmbedding, experience_bytes, log, machine
from benchlib.shared import load_test_helpers, smoke_library

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may wait on the Hugging Face hub

SOURCE = "session/trajectories/bench-run.jsonl"


def build_application(ws: Path, tokenizer: Path, model):
    """The plugin on ``ws``, started as ``reme start job=procedure_reindex`` starts (indexing left to the job)."""
    from reme.application import Application

    app = Application(
        plugins=["procedure-memory"],
        workspace_dir=str(ws),
        enable_logo=False,
        log_to_console=False,
        log_to_file=False,
        service={"backend": "cli", "job": "procedure_reindex"},
        components={
            "procedure_memory": {"default": {"tokenizer_source": str(tokenizer)}},
            "as_embedding": {"procedure": {"dimensions": 1024}},
        },
    )
    app.context.components["as_embedding"]["procedure"].model = model
    return app


def write_experiences(ws: Path, n: int, seed: int) -> None:
    corpus = Corpus(seed)
    (ws / "procedures").mkdir(parents=True, exist_ok=True)
    (ws / SOURCE).parent.mkdir(parents=True, exist_ok=True)
    (ws / SOURCE).write_text('{"role": "user", "content": "bench"}\n')
    for i in range(n):
        exp = corpus.experience(i)
        (ws / "procedures" / exp["filename"]).write_bytes(experience_bytes(exp, SOURCE))


def write_imports(memory, m: int) -> None:
    """M imports in the plugin's record formats: record, checkpoint (4 segments, 4 KiB summary), 3 journal records."""
    from reme_procedure_memory.storage.atomic import write_json
    from reme_procedure_memory.storage.checkpoints import COMPLETE, PROCESSING, Checkpoint
    from reme_procedure_memory.storage.imports import COPIED, ImportRecord
    from reme_procedure_memory.storage.journal import INDEXED, Operation

    target = experience_bytes({"description": "d", "when_to_use": "w " * 200, "content": "c " * 1000}, SOURCE)
    for i in range(m):
        request_id = f"req-2026{i:08d}"
        record = ImportRecord(
            request_id=request_id,
            source=f"/data/runs/{i}.jsonl",
            filename=f"run-{i}.jsonl",
            path=f"session/trajectories/run-{i}.jsonl",
            sha256="0" * 64,
            size=1000,
            status=COPIED,
        )
        write_json(memory.workspace.imports.path(request_id), record.__dict__, sync_dir=False)
        checkpoint = Checkpoint(
            request_id=request_id,
            path=record.path,
            fingerprint={"sha256": "0" * 64},
            plugin_version="bench",
            segments=[[k, k + 1] for k in range(4)],
            next_segment=4,
            summary="s" * 4096,
            status=COMPLETE if i % 10 else PROCESSING,
        )
        write_json(memory.workspace.checkpoints.path(request_id), checkpoint.to_record(), sync_dir=False)
        for k, tool in enumerate(("create", "create", "update")):
            op = Operation(
                scope=request_id,
                key=f"k{k}",
                tool=tool,
                request="r",
                path=f"procedures/e{i}-{k % 2}.json",
                target=target.decode(),
                expected_version=None,
                status=INDEXED,
            )
            path = memory.workspace.journal.record_file(
                op.scope, op.key
            )  # the journal's own layout, as search.py writes history
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, op.__dict__, sync_dir=False)


async def median_ms(call, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


async def job(app, name: str, **args) -> dict:
    response = await app.run_job(name, **args)
    answer = json.loads(response.answer)
    assert response.success, answer
    return answer


async def walk(app, name: str, limit: int) -> tuple[int, list[dict]]:
    """Every page of a listing: (the number of pages, the entries in order)."""
    cursor, pages, entries = None, 0, []
    key = "experiences" if name == "procedure_list" else "imports"
    while True:
        answer = await job(app, name, limit=limit, **({"cursor": cursor} if cursor else {}))
        pages += 1
        entries += answer[key]
        cursor = answer["next"]
        if cursor is None:
            return pages, entries


def check_walks(experiences: list[dict], paths: list[str], imports: list[dict], ids: list[str]) -> dict:
    """What the walks must have read (else the run stops): each entry once, in order, in the state its fixture has."""
    if [e["path"] for e in experiences] != paths:
        raise SystemExit("procedure_list's pages did not list every experience exactly once, by path")
    states = {e["state"] for e in experiences}
    if states != {"indexed"}:
        raise SystemExit(f"procedure_list: states {states} after a reindex; expected only indexed")
    if [i["request_id"] for i in imports] != ids:
        raise SystemExit("procedure_imports' pages did not list every import exactly once, by request id")
    expected = {f"req-2026{i:08d}": "complete" if i % 10 else "incomplete" for i in range(len(ids))}
    wrong = [
        i["request_id"]
        for i in imports
        if i["status"] != expected[i["request_id"]]
        or i["segments"] != {"done": 4, "total": 4}
        or i["experiences"] != {"created": 2, "updated": 0}
    ]
    if wrong:
        raise SystemExit(f"procedure_imports: {len(wrong)} entries unlike their fixture, e.g. {wrong[0]}")
    complete = sum(1 for i in imports if i["status"] == "complete")
    return {
        "experiences": len(experiences),
        "imports": len(imports),
        "complete": complete,
        "incomplete": len(imports) - complete,
    }


async def measure(args, root: Path) -> dict:
    ws = root / "ws"
    write_experiences(ws, args.n, args.seed)
    tokenizer = load_test_helpers().write_word_tokenizer(root / "tok" / "tokenizer.json")  # the tests' real one
    app = build_application(ws, tokenizer, HashedProjectionEmbedding())
    await app.start()
    try:
        memory = app.context.components["procedure_memory"]["default"]
        log(f"indexing {args.n} experiences")
        await job(app, "procedure_reindex")
        log(f"writing {args.imports} imports")
        write_imports(memory, args.imports)
        r = args.repeats
        middle = sorted(memory.workspace.files.paths())[args.n // 2]
        first = await job(app, "procedure_list", limit=1)
        assert first["experiences"][0]["state"] == "indexed", first
        out = {
            "n": args.n,
            "imports": args.imports,
            "repeats": r,
            "walk_limit": args.walk_limit,
            "list": {},
            "imports_listing": {},
        }

        async def paths():
            await asyncio.to_thread(memory.workspace.files.paths)

        out["list"]["directory_listing_ms"] = await median_ms(paths, r)
        out["list"]["first_page_50_ms"] = await median_ms(lambda: job(app, "procedure_list"), r)
        out["list"]["middle_page_50_ms"] = await median_ms(lambda: job(app, "procedure_list", cursor=middle), r)
        out["list"]["page_500_ms"] = await median_ms(lambda: job(app, "procedure_list", limit=500), r)
        started = time.perf_counter()
        out["list"]["walk_pages"], listed = await walk(app, "procedure_list", args.walk_limit)
        out["list"]["walk_s"] = time.perf_counter() - started

        async def scan():
            await asyncio.to_thread(memory.workspace.imports.scan)

        ids = sorted(f"req-2026{i:08d}" for i in range(args.imports))
        imports = out["imports_listing"]
        imports["record_scan_ms"] = await median_ms(scan, r)
        imports["first_page_50_ms"] = await median_ms(lambda: job(app, "procedure_imports"), r)
        imports["middle_page_50_ms"] = await median_ms(
            lambda: job(app, "procedure_imports", cursor=ids[len(ids) // 2]), r
        )
        imports["page_500_ms"] = await median_ms(lambda: job(app, "procedure_imports", limit=500), r)
        started = time.perf_counter()
        imports["walk_pages"], walked = await walk(app, "procedure_imports", args.walk_limit)
        imports["walk_s"] = time.perf_counter() - started
        out["checked"] = check_walks(listed, sorted(memory.workspace.files.paths()), walked, ids)
        return out
    finally:
        await app.close()


def report(r: dict) -> str:
    lines = [
        f"procedure_list over {r['n']:,} experiences, procedure_imports over {r['imports']:,} imports "
        f"(median of {r['repeats']} calls)",
        "",
    ]
    for title, part, floor in (
        ("procedure_list", r["list"], "directory_listing_ms"),
        ("procedure_imports", r["imports_listing"], "record_scan_ms"),
    ):
        lines += [
            f"{title}:",
            f"  {floor.replace('_ms', '').replace('_', ' ') + ' alone':26s}{part[floor]:8.1f} ms",
            f"  first page of 50          {part['first_page_50_ms']:8.1f} ms",
            f"  middle page of 50         {part['middle_page_50_ms']:8.1f} ms",
            f"  page of 500               {part['page_500_ms']:8.1f} ms",
            f"  {'every page of ' + str(r['walk_limit']) + ' (' + str(part['walk_pages']) + ')':26s}"
            f"{part['walk_s']:8.2f} s",
            "",
        ]
    c = r["checked"]
    lines.append(
        f"checked: the walks listed each of {c['experiences']:,} experiences once (all indexed) and each of "
        f"{c['imports']:,} imports once ({c['complete']:,} complete, {c['incomplete']:,} incomplete)"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, help="experiences (default 10,000; 200 with --smoke)")
    parser.add_argument("--imports", type=int, help="imports (default 10,000; 200 with --smoke)")
    parser.add_argument("--repeats", type=int, help="calls per median (default 7; 1 with --smoke)")
    parser.add_argument(
        "--walk-limit",
        type=int,
        help="page size of the walks over every page (default 500; 64 with --smoke, so that they turn pages)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="CI smoke run (seconds): 200 experiences, 200 imports, one call each; tests/fixtures' "
        "library without ../shared",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the raw numbers here")
    parser.add_argument("--keep", action="store_true", help="keep the workspace")
    args = parser.parse_args(argv)
    for name, full, smoke in (("n", 10_000, 200), ("imports", 10_000, 200), ("repeats", 7, 1), ("walk_limit", 500, 64)):
        if getattr(args, name) is None:  # an option given explicitly counts, also with --smoke
            setattr(args, name, smoke if args.smoke else full)
    if args.smoke:
        _corpus.LIBRARY = smoke_library()
    if min(args.n, args.imports, args.repeats) < 1 or not 1 <= args.walk_limit <= 500:
        parser.error("--n, --imports and --repeats must be positive, --walk-limit 1-500")
    root = Path(tempfile.mkdtemp(prefix="procedure-listing-bench-"))
    try:
        result = asyncio.run(measure(args, root))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    result["machine"] = machine()
    print(report(result))
    print(result["machine"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
