"""Throughput of the views' BM25 tokenizer (``procedure_snowball``) beside ReMe's ``regex`` tokenizer, in one run.

Run from the repository root::

    python benchmarks/tokenizer.py            # 10,000 experiences (20,000 view texts), 5 interleaved repetitions
    python benchmarks/tokenizer.py --n 2000 --reps 3
    python benchmarks/tokenizer.py --smoke    # CI: 100 experiences, 1 repetition (seconds)

The texts are what a reindex of ``benchmarks/search.py``'s corpus tokenizes: the when-to-use and the when-to-use +
content of N generated experiences. Per repetition, in turn (so machine load hits all alike):

- ``regex``: ReMe's ``RegexTokenizer`` with its stopwords (the baseline);
- ``snowball, new``: a freshly started ``SnowballTokenizer``, its term memo empty (every distinct word stemmed once);
- ``snowball, warm``: the same tokenizer again, the memo filled (a long-running service, a second reindex);
- ``naive stemming``: regex tokens, then PyStemmer's ``stemWord`` on every token (no memo), for reference.

Tokens/s counts the regex tokens (stemming keeps their number). Nothing asserts on time; the run stops unless the
Snowball tokens equal the regex tokens stemmed one by one.

``--smoke`` (CI, ``tests/benchmarks/test_smokes.py``): 100 experiences (200 texts), 1 repetition, the corpus built
from ``tests/fixtures/experiences.jsonl`` when ``../shared`` is absent. It checks that the four tokenizers run and agree
and prints the table; its throughputs on so few texts are start-up noise.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.machine import revision  # noqa: E402
from benchlib import corpus as _corpus  # noqa: E402  (benchmarks/benchlib/corpus.py)
from benchlib.corpus import Corpus, machine, view_texts  # noqa: E402
from benchlib.shared import smoke_library  # noqa: E402  (benchmarks/benchlib/shared.py)


async def started(tokenizer):
    await tokenizer.start()
    return tokenizer


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=10_000, help="experiences (default 10000: 20,000 texts)")
    p.add_argument("--reps", type=int, default=5, help="interleaved repetitions (default 5)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--smoke", action="store_true", help="CI smoke run: --n 100 --reps 1, tests/fixtures' library without ../shared"
    )
    args = p.parse_args(argv)
    if args.smoke:
        args.n, args.reps = min(args.n, 100), 1
        _corpus.LIBRARY = smoke_library()

    import Stemmer
    from reme.components.tokenizer import RegexTokenizer

    from reme_procedure_memory.search.keyword.tokenizer import SnowballTokenizer

    load_start = os.getloadavg()
    corpus = Corpus(args.seed)
    texts = [t for i in range(args.n) for t in view_texts(corpus.experience(i))]
    regex = asyncio.run(started(RegexTokenizer()))
    stemmer = Stemmer.Stemmer("english", 0)
    warm = asyncio.run(started(SnowballTokenizer()))
    warm.tokenize(texts)
    regex_tokens = regex.tokenize(texts)
    count = sum(len(t) for t in regex_tokens)
    distinct = len({t for toks in regex_tokens for t in toks})
    if warm.tokenize(texts) != [[stemmer.stemWord(t) for t in toks] for toks in regex_tokens]:
        raise SystemExit("snowball tokens differ from regex tokens + Snowball stems")

    def naive(batch):
        return [[stemmer.stemWord(t) for t in toks] for toks in regex.tokenize(batch)]

    def fresh():
        tokenizer = asyncio.run(started(SnowballTokenizer()))  # started (stopwords read) before the timer
        return lambda: tokenizer.tokenize(texts)

    calls = {
        "regex": lambda: lambda: regex.tokenize(texts),
        "snowball, new": fresh,
        "snowball, warm": lambda: lambda: warm.tokenize(texts),
        "naive stemming": lambda: lambda: naive(texts),
    }
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.reps):
        for name, prepare in calls.items():
            call = prepare()
            gc.collect()
            started_at = time.perf_counter()
            call()
            seconds[name].append(time.perf_counter() - started_at)

    print(f"procedure-memory tokenizer throughput — {machine()}")
    print(f"command: {' '.join(['python', *sys.argv])}   revision {revision()}")
    print(
        "load average (1/5/15 min) at start {:.2f}/{:.2f}/{:.2f}, at end {:.2f}/{:.2f}/{:.2f}".format(
            *load_start, *os.getloadavg()
        )
    )
    print(
        f"{len(texts):,} texts from {_corpus.LIBRARY.name} + synthetic vocabulary: {count:,} regex tokens, "
        f"{distinct:,} distinct; medians of {args.reps} interleaved repetitions\n"
    )
    base = statistics.median(seconds["regex"])
    print("| tokenizer | median | M tokens/s | × regex time |")
    print("|---|---|---|---|")
    for name, values in seconds.items():
        med = statistics.median(values)
        print(f"| {name} | {med:.2f} s | {count / med / 1e6:.3f} | {med / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
