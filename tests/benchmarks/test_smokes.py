"""Every benchmark's smoke run, as a user runs it, so that none rots unseen.

Each script of ``benchmarks/`` runs as ``python benchmarks/<script> --smoke`` (``downstream.py smoke``) in a
subprocess from the repository root, offline, on the data a fresh clone has (``tests/fixtures``, the word-level
tokenizer the tests build, the Qwen3 tokenizer of the test extra) or ``../shared`` where it is there. A smoke passes
when the script exits 0 within its timeout and printed its result table or line with numbers in it, plus what the
script checks about itself (e.g. no provider call inside timed sections, every import complete). Timings and
PASS/FAIL verdicts against the benchmarks' targets are never checked: a smoke says the instrument works, not what it
measures.

The smokes run two at a time (``PARALLEL``; they wait on subprocesses, servers and fsync as much as they compute), only
those the session selected, started together by the first test that needs one. A script that starts its own
processes (``reme start``, children) is run in its own session and stopped as a group on timeout. The whole module
is ``slow``: ``pytest -m "not slow"`` leaves it out.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from reme_procedure_memory.credentials import KINDS

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PARALLEL = 2
NUMBER = r"-?\d[\d,]*(?:\.\d+)?"  # a sign too: a difference of timings can be negative on a loaded machine


@dataclass
class Run:
    code: int | None  # None: stopped at the timeout
    out: str
    err: str
    seconds: float


# name -> (arguments after the script path, timeout in seconds)
SMOKES: dict[str, tuple[list[str], float]] = {
    "search.py": (["--smoke"], 300),
    "segment.py": (["--smoke"], 300),
    "service.py": (["--smoke"], 300),
    "tokenizer.py": (["--smoke"], 120),
    "maintenance.py": (["--smoke"], 300),
    "prompt_overhead.py": (["--smoke"], 120),
    "read_cost.py": (["--smoke"], 120),
    "listing.py": (["--smoke"], 300),
    "retrieval.py": (["--smoke"], 300),
    "real_model.py": (["--smoke"], 300),
    "extraction.py": (["--smoke"], 300),
    "downstream.py": (["smoke"], 300),
    "secret_guard.py": (["--smoke"], 120),
    "relay_costs.py": (["--smoke"], 120),
    "relevance.py": (["--smoke"], 180),
}


def test_every_benchmark_script_has_a_smoke_here():
    scripts = {p.name for p in (REPO / "benchmarks").glob("*.py")} - {"httpclient.py"}  # service.py's load client
    assert scripts == set(SMOKES)


def run_smoke(name: str) -> Run:
    args, timeout = SMOKES[name]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBEDDING_", "LLM_", "REME_"))}
    env.update(HF_HUB_OFFLINE="1", PYTHONIOENCODING="utf-8")
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, f"benchmarks/{name}", *args],
        cwd=REPO,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the script and what it started (its own session)
        out, err = proc.communicate()
        code = None
    return Run(code, out, err, time.monotonic() - started)


@pytest.fixture(scope="module")
def smokes(request):
    """The selected smokes, started together (``PARALLEL`` at a time): name -> Future[Run]."""
    module = request.module
    selected = [
        item.callspec.params["name"]
        for item in request.session.items
        if item.module is module and hasattr(item, "callspec") and "name" in item.callspec.params
    ]
    pool = ThreadPoolExecutor(PARALLEL)
    futures: dict[str, Future] = {name: pool.submit(run_smoke, name) for name in dict.fromkeys(selected)}
    yield futures
    pool.shutdown(wait=True)


def finished(smokes, name: str) -> str:
    """The smoke's standard output, after checking that it exited 0 in time."""
    run = smokes[name].result()
    assert run.code is not None, f"{name} --smoke did not finish within {SMOKES[name][1]} s:\n{run.err[-3000:]}"
    assert run.code == 0, f"{name} --smoke exited {run.code}:\n{run.out[-3000:]}\n{run.err[-5000:]}"
    return run.out


def numbers(pattern: str, out: str) -> list[str]:
    """The groups of the first line matching ``pattern`` (``{N}`` is a number), failing with the output if none."""
    match = re.search(pattern.replace("{N}", f"({NUMBER})"), out, re.MULTILINE)
    assert match, f"no line matches {pattern!r} in:\n{out[-3000:]}"
    return list(match.groups())


def value(text: str) -> float:
    return float(text.replace(",", ""))


def check_search(out: str) -> None:
    for view in ("when_to_use", "when_to_use_content"):
        for row in ("memory.reads.search", "run_job procedure_search"):
            numbers(rf"^\| search {view} @ 200: {row} +\| +{{N}} ms \| +{{N}} ms \|", out)
        numbers(r"^\|   stock local: vector\+keyword\+_rrf_merge \(3 q\) +\| +{N} ms", out)
        assert 0 <= value(numbers(rf"^top-5 overlap stock vs plugin \({view}\): {{N}}$", out)[0]) <= 1
    numbers(r"^\| create @ 51 \(procedure_create job\) +\| +{N} ms", out)
    numbers(r"^\| create @ 201 \(procedure_create job\) +\| +{N} ms", out)
    numbers(r"^\| create @ \d+ \+ 200 journal records +\| +{N} ms", out)
    numbers(r"^\| reindex 200 \(procedure_reindex, cached embeddings\) +\| +{N} s", out)
    numbers(r"^\| ws-small \(50\) in a fresh process: start \(load views \+ reconcile\) +\| +{N} s", out)
    numbers(r"^\| ws-big \(200\) in a fresh process: start \(load views \+ reconcile\) +\| +{N} s", out)
    assert numbers(r"^embedding provider calls inside timed search/create sections: {N} ", out) == ["0"]


def check_segment(out: str) -> None:
    assert re.search(r"^tokenizer: .*tokenizer\.json;", out, re.MULTILINE), out
    segments = numbers(
        r"^\(b\) segment_counted \+ SpanCounter: median {N} s, {N} segments, .*; verified "
        r"lossless, counts exact, <= 8,192 each, same boundaries as \(d\)$",
        out,
    )[1]
    assert int(segments) >= 2  # a quarter MiB at 8,192 tokens: the segmenter really cuts
    numbers(r"^\(c\) import tokenization = \(b\) \+ the context check of every segment .*: median {N} s", out)
    numbers(r"^ratio \(b\)/\(a2\) = {N}, \(c\)/\(a2\) = {N} \(target <= 1\.3\) -> (?:PASS|FAIL)$", out)
    numbers(r"^  segment_lean_count: median {N} s", out)
    numbers(
        r"^peak memory \(fresh child per measurement, peak reset after loading; .*\(a\) {N} MiB, \(b\) {N} MiB$", out
    )


def check_service(out: str) -> None:
    numbers(r"^100 experiences, reindex process {N} s, service ready in {N} s$", out)
    one, eight, ratio = numbers(
        r"^throughput over HTTP \(median of 1 rounds of 40 searches\): 1 client {N}/s, 8 "
        r"clients {N}/s -> ratio {N} ",
        out,
    )
    assert value(one) > 0 and value(eight) > 0
    numbers(r"^service process CPU per request \(median\): 1 client {N} ms, 8 clients {N} ms", out)


def check_tokenizer(out: str) -> None:
    numbers(r"^200 texts from \S+ \+ synthetic vocabulary: {N} regex tokens, {N} distinct; medians of 1 ", out)
    for name in ("regex", "snowball, new", "snowball, warm", "naive stemming"):
        numbers(rf"^\| {name} \| {{N}} s \| {{N}} \| {{N}} \|$", out)


def check_maintenance(out: str) -> None:
    wall, empty, rebuild, ratio = numbers(
        r"^\| \S+ \S+ \| 50 \| {N} \| {N} \| {N} \| {N} \| <= 1\.3 (?:PASS|FAIL) \|$", out
    )
    assert value(wall) > 0 and value(empty) > 0 and value(rebuild) > 0  # the job answered its seconds


def check_prompt_overhead(out: str) -> None:
    system = numbers(r"^system prompt +{N}$", out)[0]
    tools = numbers(r"^tool schemas \(wire-form JSON\) +{N}$", out)[0]
    user = numbers(r"^user message, empty segment \+ summary +{N}$", out)[0]
    framing = numbers(r"^framing \(Qwen3 template, no reminder\) +{N}$", out)[0]  # the shipped revision is quiet
    total = numbers(r"^total fixed overhead per segment +{N} ", out)[0]
    parts = [int(system), int(tools), int(user), int(framing)]
    assert min(parts) > 0 and sum(parts) == int(total)
    assert numbers(r"^the plugin's context check counts +{N} ", out) == [str(sum(parts[:3]) + 512)]


def check_read_cost(out: str) -> None:
    assert value(numbers(r"^installed: {N} us per 5-result answer \(median of 1 x 20\)$", out)[0]) > 0


def check_listing(out: str) -> None:
    numbers(r"^procedure_list over {N} experiences, procedure_imports over {N} imports \(median of 1 calls\)$", out)
    for floor in ("directory listing", "record scan"):
        numbers(rf"^  {floor} alone +{{N}} ms$", out)
    for row in ("first page of 50", "middle page of 50", "page of 500"):
        assert len(re.findall(rf"^  {row} +{NUMBER} ms$", out, re.MULTILINE)) == 2, row
    assert re.findall(rf"^  every page of 64 \((\d+)\) +{NUMBER} s$", out, re.MULTILINE) == ["4", "4"]  # pages turned
    assert numbers(
        r"^checked: the walks listed each of {N} experiences once \(all indexed\) and each of {N} imports "
        r"once \({N} complete, {N} incomplete\)$",
        out,
    ) == ["200", "200", "180", "20"]


def check_retrieval(out: str) -> None:
    experiences, queries = numbers(r"^library \S+: {N} experiences, {N} task queries$", out)
    assert int(experiences) >= 40 and int(queries) > 0
    assert "embedding model: fake-hashed-bow (plumbing only" in out
    for view in ("when_to_use", "when_to_use_content"):
        for leg, tokenizer in (
            ("fused", "SnowballTokenizer"),
            ("fused", "RegexTokenizer"),
            ("bm25", "SnowballTokenizer"),
            ("bm25", "RegexTokenizer"),
            ("vector", "—"),
        ):
            row = numbers(
                rf"^\| `{view}` \| {leg} \| {tokenizer} \| (?:\*\*)?{{N}}(?:\*\*)? \| (?:\*\*)?{{N}}"
                rf"(?:\*\*)? \| (?:\*\*)?{{N}}(?:\*\*)? \|$",
                out,
            )
            assert all(0 <= value(v) <= 1 for v in row)
        for leg in ("fused", "bm25"):
            won, lost, tied, p = numbers(rf"^\| `{view}` \| {leg} \| {{N}} \| {{N}} \| {{N}} \| {{N}} \|$", out)
            assert int(won) + int(lost) + int(tied) == int(queries) and 0 <= value(p) <= 1
    # the plugin's embedded model (the real one, in-process) beside the hashed endpoint over HTTP: the BM25 list
    # alone does not depend on the embedder, so its figures and ranks agree; the others may differ
    assert re.search(
        r"^Embedded model \(all-MiniLM-L6-v2, EmbeddedEmbedding, in-process\) vs fake-hashed-bow over "
        r"HTTP \(OpenAIAsEmbedding\)",
        out,
        re.MULTILINE,
    ), out[-3000:]
    for view in ("when_to_use", "when_to_use_content"):
        for leg in ("fused", "bm25", "vector"):
            *pairs, differ = numbers(
                rf"^\| `{view}` \| {leg} \| {{N}} / {{N}} \| {{N}} / {{N}} \| {{N}} / {{N}} \| "
                rf"{{N}} \|$",
                out,
            )
            assert all(0 <= value(v) <= 1 for v in pairs) and 0 <= int(differ) <= int(queries)
            if leg == "bm25":
                assert pairs[0::2] == pairs[1::2] and differ == "0"


def check_real_model(out: str) -> None:
    done, total = numbers(r"^== multi_turn_base_\d+\.log: complete, segments {N}/{N}, .*, exit 0$", out)
    assert done == total and int(total) >= 2  # the rolling summary is handed from segment to segment
    calls = numbers(r"^   tool calls {N} by tool ", out)[0]
    assert int(calls) >= 2 * int(total)  # a search and a create per segment, through AgentScope and the CLI
    written, valid = numbers(r"^   experiences written {N} \({N} valid\)", out)
    assert written == valid == total
    assert numbers(r"^   rerun: complete, exit 0, {N} s, model calls {N}$", out)[1] == "0"
    assert "smoke OK: every import complete, every experience valid, no model call on the rerun" in out


def check_extraction(out: str) -> None:
    turns = numbers(r"^transfer to the test half \({N} turns;", out)[0]
    assert int(turns) > 0
    for arm in ("plugin", r"ReMe released \(\d+\)"):
        for view in ("when_to_use", "when_to_use_content"):
            numbers(rf"^\| {arm} \| `{view}` \| {turns} \| {{N}} \| {{N}} \|", out)


def check_downstream(out: str) -> None:
    passed, tasks = numbers(r"^ground_truth: {N}/{N} passed", out)
    assert passed == tasks == "2"
    assert numbers(r"^silent: {N}/{N} passed", out) == ["0", "2"]
    numbers(r"^smoke OK in {N} s$", out)


def check_secrets(out: str) -> None:
    for corpus in (
        "trajectories, whole files",
        "released library, every text of",
        "fixture workspace experiences",
        "example workspace: trajectories, whole files",
        "example workspace: every text of",
        "look-alikes",
    ):
        texts, megabytes, flagged, findings = numbers(
            rf"^\| {re.escape(corpus)}.* \| {{N}} \| {{N}} \| {{N}} \| "
            rf"{{N}} \| — \|$",
            out,
        )
        assert int(texts) > 0 and (flagged, findings) == ("0", "0")
    recall = rf"^recall: caught {{N}}/{{N}} planted secrets \({len(KINDS)} kinds, 5 contexts, 3 seeds\)$"
    caught, planted = numbers(recall, out)
    assert caught == planted and int(planted) > 0
    for corpus in ("real trajectories, repeated", "JSONL with base64 screenshots"):
        numbers(rf"^find_secrets on {re.escape(corpus)} \({{N}} MB\): {{N}} ms CPU per MB$", out)
    numbers(r"^masked excerpt: secrets_within of 65,536 characters in a {N} MB trajectory: {N} ms CPU$", out)
    assert "result: 0 false positives, every planted secret caught" in out


def check_relay_costs(out: str) -> None:
    # the smoke queue: 2 segments, 3 requests (100, 200, 300 prompt tokens; 10 completion each), one create
    assert numbers(r"^segments {N}, requests {N}, requests per segment {N} ", out) == ["2", "3", "1.5"]
    # each segment's first request: 100 and 300 tokens of 100 trajectory tokens
    pattern = r"^prompt tokens {N} = {N}x the trajectory; completion {N} = {N}x; at one request per segment .* {N}x$"
    assert numbers(pattern, out) == ["600", "6.0", "30", "0.3", "4.0"]
    assert "tool calls {'procedure_create': 1}" in out and "schema refusals 0" in out
    assert numbers(r"reads and updates of a path the conversation had not shown {N} \(in {N} segments", out) == [
        "0",
        "0",
    ]
    for part in (
        "tool schemas",
        "segment",
        "listed matches",
        "system prompt",
        "model's calls re-sent",
        "answers of procedure_create",
    ):
        assert int(numbers(rf"^\| {re.escape(part)} \| {{N}} \| {{N}}% \|$", out)[0]) > 0


def check_relevance(out: str) -> None:
    experiences, on, off = numbers(
        r"^relevance calibration: {N} experiences, {N} on-topic and {N} off-topic user "
        r"turns \(tasks 20-29\), embedding embedded all-MiniLM-L6-v2",
        out,
    )
    assert experiences == "11" and int(on) > 0 and int(off) > 0
    for view in ("when_to_use", "when_to_use_content"):
        figures = numbers(
            rf"^{view}: AUC {{N}}; best relevance on-topic p05 {{N}} p50 {{N}} p95 {{N}}; off-topic "
            rf"p50 {{N}} p95 {{N}} max {{N}}$",
            out,
        )
        assert all(0 <= value(v) <= 1 for v in figures)
    rows = re.findall(
        rf"^\| ({NUMBER}) \| ({NUMBER}) \| ({NUMBER}) \| ({NUMBER}) \| ({NUMBER}) \| ({NUMBER}|—) \|$",
        out,
        re.MULTILINE,
    )
    assert len(rows) == 2 * 21 and all(0 <= value(v) <= 1 for row in rows for v in row[:4])
    numbers(
        r"^suggested floor \(the lowest at which >= 99% of the off-topic turns answer 0 results in every view\): "
        r"(?:{N}|—)$",
        out,
    )


CHECKS = {
    "search.py": check_search,
    "segment.py": check_segment,
    "service.py": check_service,
    "tokenizer.py": check_tokenizer,
    "maintenance.py": check_maintenance,
    "prompt_overhead.py": check_prompt_overhead,
    "read_cost.py": check_read_cost,
    "listing.py": check_listing,
    "retrieval.py": check_retrieval,
    "real_model.py": check_real_model,
    "extraction.py": check_extraction,
    "downstream.py": check_downstream,
    "secret_guard.py": check_secrets,
    "relay_costs.py": check_relay_costs,
    "relevance.py": check_relevance,
}


@pytest.mark.parametrize("name", list(SMOKES))
def test_the_smoke_run_exits_0_and_prints_its_results(smokes, name):
    CHECKS[name](finished(smokes, name))
