"""The secret guard's rule set (``credentials.py`` of the plugin): false positives on real data, recall, cost per MB.

Run from the repository root::

    python benchmarks/secret_guard.py                 # ../shared's trajectories and released library, 50 seeds (~1 min)
    python benchmarks/secret_guard.py --library       # the same corpora through detect-secrets too, if it is installed
    python benchmarks/secret_guard.py --smoke         # CI: tests/fixtures without ../shared, 3 seeds (seconds)

What it measures, in one run:

- **False positives** per corpus, as the guard meets them: every trajectory file whole (what a masked read scans);
  every text of every released experience (each JSON string of a line, as a write checks a field); the experiences
  of the fixture workspace; the trajectories and the experiences a capable model extracted of
  ``examples/bfcl-workspace``; the look-alikes of ``tests/helpers/planted.py`` (ids, hashes, UUIDs, base64 images,
  tool call ids, paging tokens, placeholders, code references; ``--seeds`` variants each). Every finding there is a
  false positive: none of these corpora holds a credential.
- **Recall**: the planted corpus of ``tests/helpers/planted.py`` (every kind in several formats, synthetic), each
  secret in each context (as planted, inside an experience field's sentence, in a JSONL tool call as escaped JSON, a
  Markdown transcript line, a log line): caught when a finding of its kind is there, per kind.
- **Cost**: CPU seconds per MB of ``find_secrets`` (medians of 3) on the real trajectories repeated to ``--mb`` MB,
  and on JSONL with base64 screenshots; the CPU milliseconds of one masked excerpt (``secrets_within``, 65,536
  characters in the middle of a trajectory of ``--mb`` MB, median of 20).

``--library`` runs detect-secrets (``pip install detect-secrets``: not a dependency of the plugin) over the same
corpora with its default plugins and filters, through its own file scan (``SecretsCollection.scan_file``), for the
decision between a library and a rule set (docs/decisions.md#secret-guard).

Not named after the standard library's ``secrets`` module: a script of this directory runs with the directory first on
``sys.path``, where it would shadow that module for every other script (starlette imports it).

``--smoke`` (CI, ``tests/benchmarks/test_smokes.py``): ``tests/fixtures``' five trajectories and 40 released
experiences when ``../shared`` is absent, 3 seeds, 1 MB; it shows the instrument works: its figures on so little
data are not the recorded ones (benchmarks/RUNS.md, "Secret guard"). Nothing asserts on time; the run exits 1 if
a real corpus has a finding or a planted secret is missed, so a regression of the rule set shows here too.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.machine import describe, revision  # noqa: E402
from benchlib.shared import FIXTURES, LIBRARY, find_shared, load_test_helpers, smoke_data  # noqa: E402

from reme_procedure_memory.credentials import KINDS, find_secrets, secrets_within  # noqa: E402

load_test_helpers()
from helpers.planted import in_field, in_trajectory, look_alikes, planted  # noqa: E402

CONTEXTS = ("as planted", "experience field", "jsonl", "md", "log")
MIB = 1024 * 1024


def strings(value) -> list[str]:
    """Every string inside a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    if isinstance(value, dict):
        return [s for item in value.values() for s in strings(item)]
    return []


def corpora(trajectories: Path, library: Path) -> list[tuple[str, list[tuple[str, str]]]]:
    """(corpus name, [(where, text)]) of the real data: none of it holds a credential."""
    files = sorted(p for p in trajectories.rglob("*") if p.is_file())
    lines = [json.loads(line) for line in library.read_text().splitlines() if line.strip()]
    experiences = sorted((FIXTURES / "four-experiences" / "procedures").glob("*.json"))
    example = FIXTURES.parents[1] / "examples" / "bfcl-workspace"
    example_files = sorted((example / "session" / "trajectories").iterdir())
    example_experiences = sorted((example / "procedures").glob("*.json"))
    return [
        (f"trajectories, whole files ({len(files)}, {trajectories})", [(p.name, p.read_text()) for p in files]),
        (
            f"released library, every text of {len(lines)} experiences ({library.name})",
            [(f"line {i + 1}", s) for i, row in enumerate(lines) for s in strings(row)],
        ),
        (
            f"fixture workspace experiences ({len(experiences)})",
            [(p.name, s) for p in experiences for s in strings(json.loads(p.read_text()))],
        ),
        (
            f"example workspace: trajectories, whole files ({len(example_files)})",
            [(p.name, p.read_text()) for p in example_files],
        ),
        (
            f"example workspace: every text of {len(example_experiences)} extracted experiences",
            [(p.name, s) for p in example_experiences for s in strings(json.loads(p.read_text()))],
        ),
    ]


def contexts(item) -> list[tuple[str, str]]:
    return [
        ("as planted", item.text),
        ("experience field", in_field(item)),
        *[(style, in_trajectory(item, style)) for style in ("jsonl", "md", "log")],
    ]


def cpu_median(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.process_time()
        fn()
        times.append(time.process_time() - started)
    return statistics.median(times)


def screenshots_jsonl(mb: float, seed: int) -> str:
    """JSONL messages each carrying a base64 PNG screenshot (random bytes after the PNG signature) and tool ids."""
    rng, lines, size = random.Random(seed), [], 0
    while size < mb * MIB:
        png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + rng.randbytes(48_000)).decode()
        line = (
            json.dumps(
                {
                    "role": "tool",
                    "tool_call_id": f"call_{rng.getrandbits(96):024x}",
                    "content": [{"type": "image", "data": png}],
                }
            )
            + "\n"
        )
        lines.append(line)
        size += len(line)
    return "".join(lines)


class DetectSecrets:
    """detect-secrets' file scan with its default plugins and filters (``--library``)."""

    def __init__(self) -> None:
        from detect_secrets import SecretsCollection
        from detect_secrets.settings import default_settings

        self.collection, self.settings = SecretsCollection, default_settings
        self.workdir = Path(tempfile.mkdtemp(prefix="detect-secrets-"))

    def count(self, text: str) -> int:
        path = self.workdir / "scan.txt"
        path.write_text(text)
        with self.settings():
            found = self.collection()
            found.scan_file(str(path))
        return sum(len(secrets) for secrets in found.data.values())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shared", type=Path, help="the shared directory (default: found beside the repository)")
    p.add_argument("--seeds", type=int, default=50, help="variants of the planted corpus and the look-alikes (50)")
    p.add_argument("--mb", type=float, default=20, help="size of the cost corpora in MB (20)")
    p.add_argument("--library", action="store_true", help="also run detect-secrets, if installed")
    p.add_argument("--smoke", action="store_true", help="CI smoke run: tests/fixtures without ../shared, 3 seeds, 1 MB")
    args = p.parse_args(argv)
    if args.smoke:
        args.seeds, args.mb = 3, 1
        trajectories = smoke_data("data/trajectories", FIXTURES / "trajectories")
        library = smoke_data(LIBRARY, FIXTURES / "experiences.jsonl")
    else:
        shared = find_shared(args.shared)
        trajectories, library = shared / "data/trajectories", shared / LIBRARY
    print(f"machine: {describe()}")
    print(f"plugin: {revision()}")
    library_scan = DetectSecrets() if args.library else None
    failed = False

    print("\n## False positives (every finding here is one: these corpora hold no credential)\n")
    print("| corpus | texts | MB | flagged texts | findings | detect-secrets findings |")
    print("|---|---:|---:|---:|---:|---:|")
    real = corpora(trajectories, library)
    real.append(
        (
            f"look-alikes ({args.seeds} seeds)",
            [(label, text) for seed in range(args.seeds) for label, text in look_alikes(seed)],
        )
    )
    for name, texts in real:
        findings = {where: [f.kind for f in find_secrets(text)] for where, text in texts}
        flagged = {where: kinds for where, kinds in findings.items() if kinds}
        size = sum(len(text.encode()) for _, text in texts) / 1e6
        other = sum(library_scan.count(text) for _, text in texts) if library_scan else "—"
        print(f"| {name} | {len(texts)} | {size:.3f} | {len(flagged)} | {sum(map(len, flagged.values()))} | {other} |")
        for where, kinds in list(flagged.items())[:5]:
            print(f"|   flagged: {where}: {', '.join(kinds)} | | | | | |")
        failed |= bool(flagged)

    print("\n## Recall on the planted corpus (synthetic secrets, every kind, every context)\n")
    items = [item for seed in range(args.seeds) for item in planted(seed)]
    caught: dict[str, list[int]] = {kind: [0, 0] for kind in KINDS}
    by_context = {context: [0, 0] for context in CONTEXTS}
    other_caught = 0
    for item in items:
        for context, text in contexts(item):
            hit = item.kind in {f.kind for f in find_secrets(text)}
            for tally in (caught[item.kind], by_context[context]):
                tally[0] += hit
                tally[1] += 1
            if library_scan and context == "as planted":
                other_caught += library_scan.count(text) > 0
    print("| kind | caught / planted |")
    print("|---|---:|")
    for kind, (hit, total) in caught.items():
        print(f"| {kind} | {hit}/{total} |")
    print("| context | caught / planted |")
    print("|---|---:|")
    for context, (hit, total) in by_context.items():
        print(f"| {context} | {hit}/{total} |")
    hits, total = sum(h for h, _ in caught.values()), sum(t for _, t in caught.values())
    print(
        f"\nrecall: caught {hits}/{total} planted secrets ({len(KINDS)} kinds, {len(CONTEXTS)} contexts, "
        f"{args.seeds} seeds)"
    )
    if library_scan:
        print(f"detect-secrets: caught {other_caught}/{len(items)} of the secrets as planted")
    failed |= hits != total

    print("\n## Cost (CPU time, medians)\n")
    base = "".join(text for _, text in real[0][1])
    repeated = base * max(1, int(args.mb * MIB / max(1, len(base.encode()))))
    screenshots = screenshots_jsonl(args.mb, seed=1)
    for name, text in (("real trajectories, repeated", repeated), ("JSONL with base64 screenshots", screenshots)):
        mb = len(text.encode()) / 1e6
        seconds = cpu_median(lambda text=text: find_secrets(text), repeats=3)
        line = f"find_secrets on {name} ({mb:.1f} MB): {seconds / mb * 1000:.0f} ms CPU per MB"
        if library_scan:
            part = text[: MIB // 4]
            other = cpu_median(lambda part=part: library_scan.count(part), repeats=1)
            line += f"; detect-secrets {other / (len(part.encode()) / 1e6) * 1000:.0f} ms CPU per MB"
        print(line)
    middle = len(repeated) // 2
    excerpt = cpu_median(lambda: secrets_within(repeated, middle, middle + 65_536), repeats=20)
    print(
        f"masked excerpt: secrets_within of 65,536 characters in a {len(repeated.encode()) / 1e6:.1f} MB "
        f"trajectory: {excerpt * 1000:.1f} ms CPU"
    )
    print(
        "\nresult: "
        + (
            "FAIL (a false positive or a missed secret above)"
            if failed
            else "0 false positives, every planted secret caught"
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
