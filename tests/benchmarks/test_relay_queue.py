"""The relay queue reader of ``benchmarks/relay_costs.py``: conversations, cost figures, prompt parts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from benchlib.relay_queue import conversations, cost, prompt_parts  # noqa: E402

SYSTEM = {"role": "system", "content": "sys"}
SEGMENT = {
    "role": "user",
    "content": [
        {
            "type": "text",
            "text": "<segment>\nabc\n</segment>\nsegment 1 of 1.\n"
            "Experiences that match this segment best:\n- a\n\n\nFinish.",
        }
    ],
}


def call(cid: str, name: str) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}],
    }


def answer(cid: str, name: str, text: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "name": name, "content": text}


def write_queue(queue: Path, requests: list[tuple[list[dict], dict]]) -> None:
    with open(queue / "usage.jsonl", "w") as usage:
        for n, (messages, reply) in enumerate(requests, 1):
            (queue / f"{n}.req.json").write_text(json.dumps({"messages": messages, "tools": [{"name": "t"}]}))
            (queue / f"{n}.resp.json").write_text(json.dumps(reply))
            usage.write(json.dumps({"request": n, "prompt_tokens": 10 * n, "completion_tokens": n}) + "\n")


def test_conversations_cost_and_parts(tmp_path):
    refused = answer("c1", "procedure_create", "Error: 'operation_key' is a required property")
    finish_refused = answer("c3", "finish_segment", '{"status": "error", "error": {"code": "summary_invalid"}}')
    write_queue(
        tmp_path,
        [
            ([SYSTEM, SEGMENT], {"tool_calls": [{"name": "procedure_search"}]}),  # a search, then nothing written
            (
                [SYSTEM, SEGMENT, call("c0", "procedure_search"), answer("c0", "procedure_search", "[]")],
                {"content": "Nothing."},
            ),
            ([SYSTEM, SEGMENT], {"tool_calls": [{"name": "procedure_create"}]}),  # a refused create, then a read
            ([SYSTEM, SEGMENT, call("c1", "procedure_create"), refused], {"tool_calls": [{"name": "procedure_read"}]}),
            (
                [
                    SYSTEM,
                    SEGMENT,
                    call("c1", "procedure_create"),
                    refused,
                    call("c2", "procedure_read"),
                    answer("c2", "procedure_read", "{}"),
                    call("c3", "finish_segment"),
                    finish_refused,
                ],
                {"tool_calls": [{"name": "finish_segment"}]},
            ),
        ],
    )
    convs = conversations(tmp_path)
    assert [c["requests"] for c in convs] == [[1, 2], [3, 4, 5]]
    figures = cost(convs, trajectory_tokens=10)
    assert figures["requests_per_segment"] == 2.5 and figures["histogram"] == {2: 1, 3: 1}
    assert figures["prompt"] == 150 and figures["prompt_per_trajectory_token"] == 15.0
    assert figures["searches_without_writes"] == 1 and figures["segments_with_read"] == 1
    assert figures["schema_refusals"] == 1  # the refused call is counted once, though re-sent twice
    assert figures["finish_refusals"] == 1
    assert cost(conversations(tmp_path, first=3), 10)["segments"] == 1
    parts = prompt_parts(tmp_path, [1, 2], lambda text: len(text))  # characters as tokens
    assert parts["system prompt"] == 6 and parts["segment"] == 2 * len("<segment>\nabc\n</segment>")
    assert parts["answers of procedure_search"] == 2 and parts["listed matches"] > 0


def test_a_model_preflight_probe_belongs_to_no_segment_but_its_tokens_count(tmp_path):
    """An import's preflight (one user message, no system prompt, no tools) between two segments' conversations:
    not a segment, not a request of the conversation before it; its prompt tokens are in the total."""
    bodies = [
        {"messages": [{"role": "user", "content": "Reply with the single word: ok"}]},
        {"messages": [SYSTEM, SEGMENT], "tools": [{"name": "t"}]},
        {"messages": [SYSTEM, SEGMENT, call("c0", "procedure_search"), answer("c0", "procedure_search", "[]")]},
        {"messages": [{"role": "user", "content": "Reply with the single word: ok"}]},
        {"messages": [SYSTEM, SEGMENT], "tools": [{"name": "t"}]},
    ]
    with open(tmp_path / "usage.jsonl", "w") as usage:
        for n, body in enumerate(bodies, 1):
            body.setdefault("tools", [{"name": "t"}] if n == 3 else None)
            (tmp_path / f"{n}.req.json").write_text(json.dumps(body))
            (tmp_path / f"{n}.resp.json").write_text(json.dumps({"content": "ok"}))
            usage.write(json.dumps({"request": n, "prompt_tokens": 10 * n, "completion_tokens": 1}) + "\n")
    convs = conversations(tmp_path)
    assert [(c["probe"], c["requests"]) for c in convs] == [(True, [1]), (False, [2, 3]), (True, [4]), (False, [5])]
    figures = cost(convs, trajectory_tokens=10)
    assert figures["segments"] == 2 and figures["requests"] == 3 and figures["requests_per_segment"] == 1.5
    assert figures["probes"] == 2 and figures["probe_prompt"] == 50
    assert figures["prompt"] == 150 and figures["prompt_per_trajectory_token"] == 15.0
    assert figures["first_request_prompt_per_trajectory_token"] == (10 + 20 + 40 + 50) / 10  # probes, first requests


def test_a_read_or_update_of_a_path_the_conversation_never_showed_is_counted(tmp_path):
    """A model knows only the paths its conversation showed (listed, or answered by a search); a read or update of
    another is an answerer's memory of other conversations. Arguments are read as the relay's answer files hold them."""
    listed = {"role": "user", "content": "<segment>\nx\n</segment>\nmatch this segment best:\n- procedures/a.json (v1)"}
    searched = answer("c0", "procedure_search", '{"results": [{"path": "procedures/b.json"}]}')
    read = {"name": "procedure_read", "arguments": {"path": "procedures/a.json"}}
    write_queue(
        tmp_path,
        [
            (
                [SYSTEM, listed],
                {"tool_calls": [read, {"name": "procedure_read", "arguments": {"path": "procedures/c.json"}}]},
            ),
            ([SYSTEM, listed], {"tool_calls": [{"name": "procedure_search", "arguments": {"query": "b"}}]}),
            (
                [SYSTEM, listed, call("c0", "procedure_search"), searched],
                {
                    "tool_calls": [
                        {"name": "procedure_update", "arguments": {"path": "procedures/b.json"}},  # shown by the search
                        {"name": "procedure_update", "arguments": {"path": "procedures/d.json"}},  # never shown
                    ]
                },
            ),
        ],
    )
    figures = cost(conversations(tmp_path), trajectory_tokens=10)
    assert figures["segments"] == 2 and figures["unshown_paths"] == 2 and figures["segments_with_unshown_path"] == 2
    assert figures["first_request_prompt_per_trajectory_token"] == (10 + 20) / 10
