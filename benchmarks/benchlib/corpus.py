"""The benchmarks' synthetic experience corpus and fake embedding model (``search.py``, ``service.py``,
``maintenance.py`` and ``tokenizer.py`` share them), and small timing helpers.

``Corpus`` generates any number of varied experiences deterministically from the 96 released BFCL experiences (their
when-to-use sentences, generalised queries, content steps and tool names); ``HashedProjectionEmbedding`` is a seeded
random projection of the hashed bag of words (about 0.1 ms per text), a cheap stand-in for a real model whose vectors
spread like real ones, unlike the tests' 64-dimension bag of words. Nothing here is a test double of the plugin.
"""

from __future__ import annotations

import bisect
import json
import random
import re
import statistics
import sys
import time
import zlib
from types import SimpleNamespace

import numpy as np

from .machine import describe  # benchmarks/benchlib/machine.py
from .shared import shared_dir  # benchmarks/benchlib/shared.py

LIBRARY = shared_dir() / "data" / "experience-library" / "bfcl_qwen3_8b.jsonl"
DIMENSIONS = 1024

WORD = re.compile(r"\w+")


class HashedProjectionEmbedding:
    """A deterministic, cheap stand-in for an AgentScope embedding model (``await model(texts).embeddings``).

    Each lowercase word is hashed (CRC32) to one of ``buckets`` rows of a seeded Gaussian matrix; a text's vector is
    the normalised sum of its words' rows (a random projection of its hashed bag of words). Texts that share words
    get similar vectors, which is enough to exercise ranking plumbing (never to judge retrieval quality).
    """

    def __init__(self, dimensions: int = DIMENSIONS, buckets: int = 4096, seed: int = 7) -> None:
        self.dimensions = dimensions
        self.model = "bench-hashed-projection"
        self.table = np.random.default_rng(seed).standard_normal((buckets, dimensions)).astype(np.float32)
        self.buckets = buckets
        self.calls = 0
        self.texts = 0
        self.seconds = 0.0

    def vector(self, text: str) -> np.ndarray:
        rows = [zlib.crc32(w.encode()) % self.buckets for w in WORD.findall(text.lower())] or [0]
        vec = self.table[rows].sum(axis=0)
        return vec / max(float(np.linalg.norm(vec)), 1e-12)

    async def __call__(self, inputs, **kwargs):
        started = time.perf_counter()
        out = [self.vector(str(t)) for t in inputs]
        self.calls += 1
        self.texts += len(inputs)
        self.seconds += time.perf_counter() - started
        return SimpleNamespace(embeddings=out)


VERBS = (
    "verify check validate confirm inspect fetch retrieve update create delete rename move copy archive restore "
    "rebuild reindex configure deploy rollback migrate authenticate authorize refresh schedule cancel retry "
    "compare summarize export import normalize parse filter sort paginate lock unlock start stop restart book "
    "transfer convert estimate calculate notify escalate approve reject register resolve"
).split()


NOUNS = (
    "account balance booking calendar cache certificate channel cluster config credential customer dataset "
    "deadline dependency directory document driver endpoint engine environment file flight folder fuel invoice "
    "ticket message order package parameter password payment permission pipeline portfolio price quota record "
    "reservation schema secret server session snapshot stock symbol table tenant timeout token trade trip user "
    "vehicle version watchlist workspace index queue budget report route tire door brake currency exchange"
).split()


QUALIFIERS = (
    "current pending stale missing duplicate expired locked remote local primary secondary partial complete "
    "invalid valid latest previous temporary persistent shared private empty large nested unknown failed"
).split()


CLAUSES = (
    "especially when the {n1} of the {n2} is {q} and the user expects a {n3} afterwards",
    "or whenever a {n1} request arrives while the {n2} is {q}",
    "in particular for the {x} {n1} where the {n2} must be {q} before you {v} it",
    "typically after the user mentions {x} or {y} together with a {q} {n1}",
    "and the previous attempt to {v} the {n1} failed because the {n2} was {q}",
    "including cases where several {n1} entries share the same {n2} in {x}",
    "when the {n1} belongs to the {x} tenant and its {n2} has to stay {q}",
)


STEPS = (
    "Call {t} with the {n1} identifier and confirm the response lists the {q} {n2}.",
    "Before you {v} the {n1}, read the {n2} and make sure it is not {q}.",
    "If the {n1} is {q}, {v} the {n2} first and only then retry {t}.",
    "Record the {n1} returned by {t} so that later steps reuse it instead of asking the user again.",
    "Use {t} to {v} the {n1} of {x}; pass the exact {n2} value, never a guessed one.",
    "Compare the {q} {n1} with the {n2} from the previous step and stop if they differ.",
    "Report the final {n1} and {n2} to the user in one short message, including {x} when relevant.",
    "Do not {v} the {n1} twice: check {t} for an existing {q} {n2} first.",
)


def _syllable_words(rng: random.Random, count: int) -> list[str]:
    """Pseudo-words (project, product and host names) for a realistic long-tailed vocabulary."""
    onsets, vowels, codas = (
        "b c d f g h k l m n p r s t v z br cl dr gr pl st tr".split(),
        "a e i o u ai ou".split(),
        ["", "n", "r", "s", "x", "l", "m"],
    )
    words: set[str] = set()
    while len(words) < count:
        word = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(rng.randint(2, 3))) + rng.choice(codas)
        if rng.random() < 0.15:
            word += str(rng.randint(2, 99))
        words.add(word)
    return sorted(words)


class Corpus:
    """Deterministic experience texts built from the BFCL experience library plus a synthetic vocabulary.

    when-to-use: 20-60 words; content: 100-300 words in numbered steps; description: one line (< 30 words).
    """

    def __init__(self, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.records = [json.loads(line) for line in LIBRARY.read_text(encoding="utf-8").splitlines() if line.strip()]
        self.lexicon = _syllable_words(self.rng, 6000)
        weights = [1.0 / (rank + 1) ** 1.07 for rank in range(len(self.lexicon))]  # Zipf-like
        self._cum = list(np.cumsum(weights) / sum(weights))
        self.tools = sorted({t for r in self.records for t in re.findall(r"\b[a-z]+(?:_[a-z]+)+\b", r["content"])}) or [
            "get_status"
        ]
        self.library_steps = [
            s.strip(" -0123456789.") + "."
            for r in self.records
            for s in re.split(r"\n|(?<=\.)\s+", r["content"])
            if len(s.split()) >= 4
        ]

    def lex(self) -> str:
        return self.lexicon[min(bisect.bisect_left(self._cum, self.rng.random()), len(self.lexicon) - 1)]

    def _fill(self, template: str) -> str:
        r = self.rng
        return template.format(
            n1=r.choice(NOUNS),
            n2=r.choice(NOUNS),
            n3=r.choice(NOUNS),
            q=r.choice(QUALIFIERS),
            v=r.choice(VERBS),
            t=r.choice(self.tools),
            x=self.lex(),
            y=self.lex(),
        )

    @staticmethod
    def _cut(words: list[str], n: int) -> str:
        text = " ".join(words[:n]).rstrip(",;:")
        return text if text.endswith(".") else text + "."

    def experience(self, index: int) -> dict[str, str]:
        r = self.rng
        base = r.choice(self.records)
        meta = base.get("metadata") or {}
        # when-to-use: the library sentence, its generalised query, then clauses until the target length
        target = r.randint(20, 60)
        words = base["when_to_use"].rstrip(". ").split()
        generalized = meta.get("generalized_query") or ""
        if generalized:
            words += ["-", "for", "example:"] + generalized[0].lower().split() + generalized.split()[1:]
        while len(words) < target:
            words += self._fill(r.choice(CLAUSES)).split()
        when_to_use = self._cut(words, target)
        # content: numbered steps from the library and synthetic steps until the target length
        target = r.randint(100, 300)
        steps: list[str] = [s.strip() for s in base["content"].split("\n") if s.strip()]
        steps = [re.sub(r"^\d+\.\s*", "", s) for s in steps]
        count = sum(len(s.split()) for s in steps)
        while count < target:
            step = r.choice(self.library_steps) if r.random() < 0.4 else self._fill(r.choice(STEPS))
            steps.append(step)
            count += len(step.split())
        lines, used = [], 0
        for number, step in enumerate(steps, 1):
            w = step.split()
            if used + len(w) > target:
                w = w[: max(3, target - used)]
            lines.append(f"{number}. " + self._cut(w, len(w)))
            used += len(w)
            if used >= target:
                break
        content = "\n".join(lines)
        description = self._cut(
            (generalized or base["when_to_use"]).rstrip(". ").split()[:14] + ["in", self.lex()],
            16,
        )
        slug = "-".join(re.findall(r"[a-z0-9]+", description.lower())[:6]) or "experience"
        return {
            "filename": f"{slug}-{index:06d}.json",
            "description": description,
            "when_to_use": when_to_use,
            "content": content,
        }

    def query(self, experiences: list[dict[str, str]]) -> str:
        """A search query: a library task query, or a window of an experience's when-to-use with substitutions."""
        r = self.rng
        if r.random() < 0.3:
            return (r.choice(self.records).get("metadata") or {}).get("task_query") or r.choice(self.records)[
                "when_to_use"
            ]
        words = r.choice(experiences)["when_to_use"].rstrip(".").split()
        size = min(len(words), r.randint(6, 14))
        start = r.randint(0, len(words) - size)
        window = words[start : start + size]
        for _ in range(r.randint(0, 2)):
            window[r.randrange(len(window))] = r.choice([*NOUNS, *VERBS, self.lex()])
        return " ".join(window)


def experience_bytes(exp: dict[str, str], source: str) -> bytes:
    """An experience file exactly as the plugin writes it (4 fields, two-space indent, trailing newline)."""
    obj = {
        "description": exp["description"],
        "when-to-use": exp["when_to_use"],
        "content": exp["content"],
        "sources": [source],
    }
    return (json.dumps(obj, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def view_texts(exp: dict[str, str]) -> list[str]:
    """The texts both views embed for an experience (as views.view_text)."""
    return [exp["when_to_use"], exp["when_to_use"] + "\n\n" + exp["content"]]


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def summary_ms(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {
        "p50_ms": pct(ms, 50),
        "p95_ms": pct(ms, 95),
        "p99_ms": pct(ms, 99),
        "mean_ms": statistics.fmean(ms) if ms else float("nan"),
        "count": len(ms),
    }


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def machine() -> str:
    from importlib.metadata import version

    return describe(f"numpy {np.__version__}", f"reme-ai {version('reme-ai')}")
