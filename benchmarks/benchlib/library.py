"""ReMe's released experience library placed as valid experience files of a workspace (``retrieval.py`` and both
reference halves of ``extraction.py`` use this one placement).

The library (``shared/data/experience-library/bfcl_qwen3_8b.jsonl``: ``when_to_use``, ``content`` and
``metadata.task_query`` per line) comes without the trajectories it was extracted from, but an experience file is
served only if every one of its ``sources`` names an existing copy directly in ``session/trajectories/`` (README,
"Experiences"). So ``place_library`` copies the library file itself, byte for byte, to
``session/trajectories/<library name>`` (what the experiences were made from, as far as this data goes; it also lets
``downstream.py`` see which tasks the library has seen) and every placed experience cites it. ``index_placed`` then runs the real ``procedure_reindex``
job and fails loudly unless every placed file was indexed and each comes back from ``procedure_search`` for its own
when-to-use.

Each library line becomes ``procedures/exp-<line number>.json``: ``when-to-use`` = ``when_to_use``, ``content`` =
``content``, ``description`` = the first sentence of ``content`` (``first_sentence``), as
``shared/data/README.md`` describes.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

TRAJECTORY_DIR = "session/trajectories"  # where imports leave their copies (the plugin's default layout)
PROCEDURE_DIR = "procedures"
SENTENCE_END = re.compile(r"(?<=[.!?])\s")
LIST_MARKER = re.compile(r"^\s*(?:\d+[.)]|[-*])\s+")


def first_sentence(content: str) -> str:
    """The description: the first sentence of the first non-empty line of ``content`` (without a list marker),
    at most 40 words."""
    line = next((ln for ln in content.splitlines() if ln.strip()), content)
    line = LIST_MARKER.sub("", line).strip()
    sentence = SENTENCE_END.split(line, maxsplit=1)[0].strip()
    words = sentence.split()
    return " ".join(words[:40]) or "experience"


def load_library(path: Path) -> list[dict]:
    """``[{filename, description, when_to_use, content, query}]`` in file order (names ``exp-<line>.json``); the
    query is ``metadata.task_query`` (or a top-level ``task_query``, as in ``tests/fixtures/experiences.jsonl``)."""
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        out.append(
            {
                "filename": f"exp-{number:04d}.json",
                "description": first_sentence(row["content"]),
                "when_to_use": row["when_to_use"],
                "content": row["content"],
                "query": ((row.get("metadata") or {}).get("task_query") or row.get("task_query") or "").strip(),
            }
        )
    return out


def path_of(experience: dict) -> str:
    """The workspace-relative path ``place_library`` gives an experience of ``load_library``."""
    return f"{PROCEDURE_DIR}/{experience['filename']}"


def queries_of(experiences: list[dict]) -> dict[str, set[str]]:
    """Each distinct task query and the paths of its experiences (the relevant set)."""
    out: dict[str, set[str]] = {}
    for exp in experiences:
        if exp["query"]:
            out.setdefault(exp["query"], set()).add(path_of(exp))
    return out


def place_library(workspace: Path, experiences: list[dict], library: Path) -> str:
    """Copy ``library`` into ``workspace``'s trajectory directory and write one valid experience file per item of
    ``experiences`` (from ``load_library(library)``) citing it; returns the source path every file cites."""
    from reme_procedure_memory.schema import Experience

    source = f"{TRAJECTORY_DIR}/{library.name}"
    (workspace / TRAJECTORY_DIR).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(library, workspace / source)
    (workspace / PROCEDURE_DIR).mkdir(parents=True, exist_ok=True)
    for exp in experiences:
        experience = Experience.model_validate(
            {
                "description": exp["description"],
                "when-to-use": exp["when_to_use"],
                "content": exp["content"],
                "sources": [source],
            }
        )
        (workspace / path_of(exp)).write_bytes(experience.to_bytes())
    return source


async def index_placed(app, experiences: list[dict]) -> dict:
    """Run ``procedure_reindex`` on a started ``app`` holding the placed ``experiences``; RuntimeError unless all
    were indexed, none is invalid, and a ``procedure_search`` (view ``when_to_use``, limit 5) for each one's own
    when-to-use returns it. Returns the reindex answer."""
    response = await app.run_job("procedure_reindex")
    answer = json.loads(response.answer)
    if (
        not response.success
        or answer.get("status") != "complete"
        or answer.get("indexed") != len(experiences)
        or answer.get("invalid_files")
    ):
        raise RuntimeError(f"reindex did not index the {len(experiences)} placed experiences: {answer}")
    missing = []
    for exp in experiences:
        response = await app.run_job("procedure_search", query=exp["when_to_use"], index="when_to_use", limit=5)
        found = json.loads(response.answer)
        if (
            not response.success
            or found.get("pending_indexes")
            or path_of(exp) not in {r["path"] for r in found.get("results", [])}
        ):
            missing.append(path_of(exp))
    if missing:
        raise RuntimeError(f"search does not return {len(missing)} placed experiences, e.g. {missing[:3]}")
    return answer
