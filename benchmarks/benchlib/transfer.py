"""Transfer to new tasks: do the experiences found for a user turn name the functions the gold trajectory called?

Used by ``extraction.py --transfer`` and ``--smoke`` (see its docstring and ``benchmarks/RUNS.md``, "Transfer");
the pure parts (split, naming, per-turn and summary metrics, verdict) are tested in
``tests/benchmarks/test_extraction_transfer.py``.

* **Split.** The trajectories are ordered by the number in their name (``multi_turn_base_<n>``); the first half is
  the training half (extracted from), the second the test half (only searched with): for ``base/``, 0..19 and
  20..39. Every format (``.jsonl``, ``.md``, ``.log``, ``.json`` rotate with the number) is in both halves.
* **Cases.** Every user turn of a test trajectory that led to at least one tool call (``_turns.read_turns``): its
  message is the query, the distinct names of the functions called until the next user message are the gold.
* **Search.** The real ``procedure_search`` job per case and view (``when_to_use``, ``when_to_use_content``),
  ``limit`` = the largest k (3): the top-k results, best first, with ``min_relevance=0`` (no relevance floor: the
  instrument measures ranking, comparable with runs before the floor existed; what a floor delivers is the
  downstream benchmark's and ``relevance.py``'s).
* **An experience's text** is its ``description``, ``when-to-use`` and ``content`` joined by newlines (what an agent is
  handed; ``sources`` are paths, not guidance). It *names* a function if the name occurs in it as a whole
  identifier: case-sensitive, not preceded or followed by a letter, digit or underscore (``cd`` in ``cd ..`` or
  ``GorillaFileSystem.cd(folder)``, not in ``cdrom``; ``get_x`` not in ``get_x_y``). Function names that are also
  English words (``find``, ``sort``, ``touch``, ``cat``) count when the prose uses them, lower-case.
* **Metrics per turn and k**: coverage@k = the share of the turn's distinct functions named by at least one of the
  top-k texts (0 when nothing is returned); fully covered = coverage@k is 1.0; names-none = the top-k results that
  name none of the turn's functions; tokens@k = the tokens of the top-k texts together, counted with the configured
  tokenizer (``tokenizer_source``). **Per view**: means over the turns of coverage@k, the share of turns fully
  covered, the share of returned top-k results that name none (with their count), and the mean tokens@k per turn.
* **Bounds** (``ceiling``), to tell retrieval from content: the coverage if every experience of the workspace were
  handed for every turn, and the coverage of a text naming every function the training half called.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from .turns import read_turns

VIEWS = ("when_to_use", "when_to_use_content")
KS = (1, 3)
MAX_QUERY_CHARS = 4096  # procedure_search's limit on a query
NUMBER = re.compile(r"(\d+)(?=\.[A-Za-z]+$)")


# -- the split and the cases ----------------------------------------------------------------------------------------


def number_of(path: Path) -> int:
    """The number in a trajectory's file name (``multi_turn_base_23.json`` -> 23)."""
    found = NUMBER.search(path.name)
    if not found:
        raise ValueError(f"no number before the suffix of {path.name!r}")
    return int(found.group(1))


def split(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """(training half, test half): ordered by number, the first ``ceil(n / 2)`` trajectories and the rest."""
    ordered = sorted(paths, key=number_of)
    middle = (len(ordered) + 1) // 2
    return ordered[:middle], ordered[middle:]


def cases_of(paths: list[Path]) -> list[dict]:
    """``{trajectory, turn, message, functions}`` for every user turn of ``paths`` that led to tool calls."""
    return [
        {"trajectory": path.name, "turn": number, "message": turn.message, "functions": list(turn.functions)}
        for path in paths
        for number, turn in enumerate(read_turns(path))
        if turn.functions
    ]


def copies_of(paths: list[Path], trajectory_dir: Path) -> list[str]:
    """Names of ``paths`` whose bytes a file in ``trajectory_dir`` holds (a workspace that imported them)."""
    digests = {hashlib.sha256(p.read_bytes()).hexdigest(): p.name for p in paths}
    held = (
        {hashlib.sha256(f.read_bytes()).hexdigest() for f in trajectory_dir.iterdir() if f.is_file()}
        if trajectory_dir.is_dir()
        else set()
    )
    return sorted(name for digest, name in digests.items() if digest in held)


# -- metrics (pure) -------------------------------------------------------------------------------------------------


def experience_text(experience: dict) -> str:
    """What an agent is handed of an experience: description, when-to-use and content, one per line."""
    return "\n".join(str(experience.get(key) or "") for key in ("description", "when-to-use", "content"))


def names(text: str, function: str) -> bool:
    """Whether ``text`` names ``function`` as a whole identifier (case-sensitive)."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(function)}(?![A-Za-z0-9_])", text) is not None


def turn_metrics(functions: list[str], texts: list[str], tokens: list[int], ks=KS) -> dict[int, dict]:
    """Per k: ``coverage``, ``full``, ``results`` (returned within k), ``named_none`` and ``tokens`` of one turn
    whose gold is ``functions`` (distinct names) and whose results are ``texts`` (best first, with their
    ``tokens``)."""
    if not functions:
        raise ValueError("a turn without tool calls is not a case")
    named = [{f for f in functions if names(text, f)} for text in texts]
    out = {}
    for k in ks:
        covered = set().union(*named[:k])
        coverage = len(covered) / len(functions)
        out[k] = {
            "coverage": coverage,
            "full": coverage == 1.0,
            "results": len(named[:k]),
            "named_none": sum(1 for found in named[:k] if not found),
            "tokens": sum(tokens[:k]),
        }
    return out


def summarize(per_turn: list[dict[int, dict]], ks=KS) -> dict:
    """The view's figures over its turns (each a ``turn_metrics`` answer)."""
    n = len(per_turn)
    out: dict = {"turns": n}
    for k in ks:
        rows = [turn[k] for turn in per_turn]
        results = sum(r["results"] for r in rows)
        none = sum(r["named_none"] for r in rows)
        out[f"coverage@{k}"] = round(sum(r["coverage"] for r in rows) / n, 3) if n else None
        out[f"full@{k}"] = round(sum(r["full"] for r in rows) / n, 3) if n else None
        out[f"names_none@{k}"] = round(none / results, 3) if results else None
        out[f"names_none_count@{k}"] = none
        out[f"results@{k}"] = results
        out[f"tokens@{k}"] = round(sum(r["tokens"] for r in rows) / n, 1) if n else None
    return out


def ceiling(cases: list[dict], texts: list[str]) -> dict:
    """Mean coverage and share of turns fully covered if all ``texts`` were handed for every case."""
    whole = "\n".join(texts)
    per_turn = [turn_metrics(case["functions"], [whole], [0], ks=(1,))[1] for case in cases]
    n = len(per_turn) or 1
    return {
        "coverage": round(sum(t["coverage"] for t in per_turn) / n, 3),
        "full": round(sum(t["full"] for t in per_turn) / n, 3),
    }


def training_calls(train: list[Path]) -> str:
    """One text naming every function the trajectories ``train`` called (for ``ceiling``)."""
    return " ".join(sorted({f for case in cases_of(train) for f in case["functions"]}))


QUALITY = ("coverage@1", "coverage@3", "full@1", "full@3")  # higher is better
NOISE = ("names_none@1", "names_none@3")  # lower is better


def verdict(before: dict, after: dict) -> dict:
    """Per view of two ``summarize`` answers: did quality not fall (coverage and full not lower, names-none shares
    not higher) while tokens@3 fell? ``{view: {"quality_kept", "tokens_fell", "pass", "worse": [...]}}``."""
    out = {}
    for view in VIEWS:
        b, a = before[view], after[view]
        worse = [m for m in QUALITY if (a[m] or 0) < (b[m] or 0)]
        worse += [m for m in NOISE if (a[m] or 0) > (b[m] or 0)]
        fell = a["tokens@3"] is not None and b["tokens@3"] is not None and a["tokens@3"] < b["tokens@3"]
        out[view] = {"quality_kept": not worse, "tokens_fell": fell, "pass": not worse and fell, "worse": worse}
    return out


# -- search ---------------------------------------------------------------------------------------------------------


async def search_cases(app, cases: list[dict], k: int = max(KS)) -> dict:
    """Ask every case through ``procedure_search`` on both views of a started ``app``; returns ``{"views": {view:
    summary}, "turns": [case + {view: [{path, tokens}]}], "pending": paths the search reported unindexed,
    "ceiling": the bound of all the workspace's valid experiences}``. RuntimeError if a search fails or answers
    without its vector list."""
    from reme_procedure_memory.storage.experiences import StoredExperience

    memory = app.context.components["procedure_memory"]["default"]
    everything = [
        experience_text(item.experience.fields())
        for item in memory.workspace.files.scan()
        if isinstance(item, StoredExperience)
    ]
    token_cache: dict[str, int] = {}
    turns, per_view, pending = [], {view: [] for view in VIEWS}, set()
    for case in cases:
        row = dict(case)
        for view in VIEWS:
            response = await app.run_job(
                "procedure_search", query=case["message"][:MAX_QUERY_CHARS], index=view, limit=k, min_relevance=0
            )
            answer = json.loads(response.answer)
            if not response.success or answer.get("vector_search", {}).get("available") is False:
                raise RuntimeError(f"search failed or ran without vectors: {answer}")
            pending.update(p["path"] for p in answer.get("pending_indexes", []))
            texts, tokens, paths = [], [], []
            for result in answer["results"][:k]:
                text = experience_text(result["experience"])
                if text not in token_cache:
                    token_cache[text] = await memory.workspace.tokens.acount(text)
                texts.append(text)
                tokens.append(token_cache[text])
                paths.append(result["path"])
            metrics = turn_metrics(case["functions"], texts, tokens)
            per_view[view].append(metrics)
            row[view] = {
                "paths": paths,
                "tokens": tokens,
                **{f"coverage@{at}": m["coverage"] for at, m in metrics.items()},
            }
        turns.append(row)
    return {
        "views": {view: summarize(rows) for view, rows in per_view.items()},
        "turns": turns,
        "pending": sorted(pending),
        "ceiling": {"experiences": len(everything), **ceiling(cases, everything)},
    }


# -- report ---------------------------------------------------------------------------------------------------------


def table(rows: list[tuple[str, dict]]) -> str:
    """A Markdown table of ``(label, search_cases answer's "views")`` rows, one line per view."""
    lines = [
        "| experiences | view | turns | coverage@1 | coverage@3 | full@1 | full@3 | names none @1 | "
        "names none @3 | tokens@1 | tokens@3 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def number(value, spec: str) -> str:
        return "—" if value is None else format(value, spec)

    for label, views in rows:
        for view in VIEWS:
            s = views[view]
            cells = [label, f"`{view}`", str(s["turns"])]
            cells += [number(s[f"{metric}@{k}"], ".3f") for metric in ("coverage", "full") for k in KS]
            cells += [
                f"{number(s[f'names_none@{k}'], '.3f')} ({s[f'names_none_count@{k}']}/{s[f'results@{k}']})" for k in KS
            ]
            cells += [number(s[f"tokens@{k}"], ".1f") for k in KS]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
