"""What a capable model's extraction run through the relay cost: requests, tokens and where they go.

Run from the repository root (a venv with the plugin installed) on a relay queue (``shared/tools/relay``: the folder
of ``N.req.json``, ``N.resp.json`` and ``usage.jsonl`` that the relay's server keeps)::

    python benchmarks/relay_costs.py /tmp/relay-q --trajectory-tokens 15188            # the whole queue
    python benchmarks/relay_costs.py /tmp/relay-q --trajectories a.jsonl b.md --first 1 --last 50 --json out.json
    python benchmarks/relay_costs.py --smoke        # CI: a small queue written here, the same figures

One conversation is one segment's agent run (a request without an assistant message starts one). It prints the
requests per segment (and their histogram), prompt and completion tokens per trajectory token (the relay's counts;
``--trajectories`` counts the files with the Qwen3 tokenizer, ``--trajectory-tokens`` takes the number) and what the
run would cost at one request per segment, tool calls by tool, segments with a read or a search, searches on segments
that wrote nothing, SDK schema refusals, finish_segment refusals, reads and updates of a path the conversation had not
shown (an answerer's memory of other conversations, which a model does not have), and the Qwen3 tokens of each part of
the prompts summed over the requests (tool schemas, system prompt, segments, the listed matches, the rest of the
segment messages, SDK reminders, the model's own calls re-sent, tool answers by tool). The figures are in
``benchmarks/RUNS.md``, "Extraction with a capable model through the relay (issue 23)".
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.relay_queue import conversations, cost, prompt_parts  # noqa: E402
from benchlib.shared import load_test_helpers  # noqa: E402


def write_smoke_queue(queue: Path) -> None:
    """Two segments' conversations as the relay writes them: search + create, then the final reply; a final reply at
    once."""
    system = {"role": "system", "content": "You extract reusable procedural experiences."}
    segment = {
        "role": "user",
        "content": '<segment>\n{"role": "user", "content": "rebuild the index"}\n'
        "</segment>\nThe text above is segment 1 of 1.\nExperiences in the library that match this segment "
        "best (path (version): description):\n- procedures/a.json (v1): Rebuild an index\n\n\nFinish.",
    }
    reminder = {"role": "user", "content": "<system-reminder>time</system-reminder>"}
    tools = [{"type": "function", "function": {"name": "procedure_create", "parameters": {"type": "object"}}}]
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "procedure_create", "arguments": '{"filename": "b"}'}}
        ],
    }
    answer = {"role": "tool", "tool_call_id": "c1", "name": "procedure_create", "content": '{"status": "created"}'}
    bodies = [
        ([system, segment, reminder], {"tool_calls": [{"name": "procedure_create", "arguments": {}}]}),
        ([system, segment, reminder, call, answer], {"content": "Done."}),
        ([system, segment, reminder], {"content": "Nothing reusable."}),
    ]
    with open(queue / "usage.jsonl", "w") as usage:
        for n, (messages, reply) in enumerate(bodies, 1):
            (queue / f"{n}.req.json").write_text(json.dumps({"messages": messages, "tools": tools}))
            (queue / f"{n}.resp.json").write_text(json.dumps(reply))
            usage.write(json.dumps({"request": n, "prompt_tokens": 100 * n, "completion_tokens": 10}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("queue", nargs="?", type=Path)
    parser.add_argument("--trajectory-tokens", type=int)
    parser.add_argument("--trajectories", nargs="*", type=Path, default=[])
    parser.add_argument("--first", type=int, default=1)
    parser.add_argument("--last", type=int, default=10**9)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(load_test_helpers().qwen3_tokenizer_dir() / "tokenizer.json"))

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    with tempfile.TemporaryDirectory() as scratch:
        if args.smoke:
            args.queue = Path(scratch)
            write_smoke_queue(args.queue)
            args.trajectory_tokens = 100
        if args.queue is None or not (args.queue / "usage.jsonl").is_file():
            raise SystemExit("give a relay queue folder (with usage.jsonl), or --smoke")
        tokens = args.trajectory_tokens or sum(count(p.read_text(encoding="utf-8")) for p in args.trajectories)
        if not tokens:
            raise SystemExit("give --trajectory-tokens N or --trajectories FILE ...")
        convs = conversations(args.queue, args.first, args.last)
        figures = cost(convs, tokens)
        parts = prompt_parts(args.queue, [n for c in convs if not c["probe"] for n in c["requests"]], count)
    print(f"queue: {args.queue if not args.smoke else '(smoke)'}; trajectory tokens {tokens:,}")
    print(
        f"segments {figures['segments']}, requests {figures['requests']}, requests per segment "
        f"{figures['requests_per_segment']} (histogram {figures['histogram']})"
    )
    print(
        f"prompt tokens {figures['prompt']:,} = {figures['prompt_per_trajectory_token']}x the trajectory; "
        f"completion {figures['completion']:,} = {figures['completion_per_trajectory_token']}x; at one request per "
        "segment (each segment's first request, and the probes) "
        f"{figures['first_request_prompt_per_trajectory_token']}x"
    )
    print(
        f"tool calls {figures['calls']}; segments with a read {figures['segments_with_read']}, with a search "
        f"{figures['segments_with_search']}; searches on segments that wrote nothing "
        f"{figures['searches_without_writes']}; schema refusals {figures['schema_refusals']}; finish_segment "
        f"refusals {figures['finish_refusals']}; model preflight probes {figures['probes']} "
        f"({figures['probe_prompt']:,} prompt tokens, counted above); reads and updates of a path the conversation had "
        f"not shown {figures['unshown_paths']} (in {figures['segments_with_unshown_path']} segments: the answerer's "
        "memory of other conversations)"
    )
    total = sum(parts.values()) or 1
    print("| part of the prompts | Qwen3 tokens | share |\n|---|---:|---:|")
    for name, value in parts.items():
        print(f"| {name} | {value:,} | {value / total:.1%} |")
    if args.json:
        args.json.write_text(json.dumps({"cost": figures, "parts": parts}, indent=1))


if __name__ == "__main__":
    main()
