"""What tests import and search: the fixture corpus of experiences, trajectories to import, scripted agent replies."""

from __future__ import annotations

import json
import re
from pathlib import Path

from helpers import FIXTURES, experience_record, place_trajectory, summary


def corpus():
    rows = [json.loads(line) for line in (FIXTURES / "experiences.jsonl").read_text().splitlines()]
    return [
        (
            f"exp-{i:02d}.json",
            experience_record(r["content"].splitlines()[0][:100], r["when_to_use"], r["content"]),
            r["task_query"],
        )
        for i, r in enumerate(rows)
    ]


def write_corpus(ws: Path):
    (ws / "procedures").mkdir(parents=True, exist_ok=True)
    place_trajectory(ws)  # the experiences' source
    for name, record, _ in corpus():
        (ws / "procedures" / name).write_text(json.dumps(record, indent=2))


JSONL = (
    '{"role": "user", "content": "The search results look stale after I changed the index config."}\n'
    '{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", '
    '"function": {"name": "rebuild_index", "arguments": "{\\"index\\": \\"docs\\"}"}}]}\n'
    '{"role": "tool", "tool_call_id": "c1", "content": "rebuilt 1200 documents"}\n'
    '{"role": "assistant", "content": "Rebuilt the docs index and verified a known query."}\n'
)


# Two segments of the word-level test tokenizer (the JSONL twice: 324 tokens, segments of at most 200): the rolling
# summary is asked for after segment 1 (after the last segment, none is).
TWO_SEGMENTS = {"procedure_memory": {"default": {"token_limits": {"segment": 200}}}}


def two_segment_original(tmp_path: Path) -> Path:
    return write(tmp_path, "run.jsonl", JSONL + JSONL.replace('"c1"', '"c2"'))


def write(tmp_path: Path, name: str, data) -> Path:
    path = tmp_path / "originals" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def replies(text="Nothing reusable here."):
    async def script(tools, prompt, kwargs):
        return summary(text)

    return script


def summarises(text="Nothing reusable here."):
    """A reply whose rolling summary takes in the segment it read (an unchanged summary is invalid)."""

    async def script(tools, prompt, kwargs):
        number = re.search(r"segment (\d+) of", prompt)[1]
        return summary(f"{text} Read up to segment {number}.")

    return script


def long_trajectory(lines: int = 40) -> str:
    return "".join(
        f'{{"turn": {i}, "role": "assistant", "content": "step {i} of the rollout procedure"}}\n' for i in range(lines)
    )


def creates(*names: str, key_prefix: str = "k"):
    """A segment script that creates one experience per name and checks each answer."""

    async def script(tools, prompt, kwargs):
        for name in names:
            await tools.call(
                "procedure_create",
                filename=name,
                operation_key=f"{key_prefix}-{name}",
                description=f"About {name}",
                when_to_use=f"When {name} matters",
                content=f"Do the {name} steps.",
            )
        return summary(f"wrote {', '.join(names)}")

    return script
