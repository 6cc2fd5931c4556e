"""A local OpenAI-compatible chat endpoint scripted per conversation, for the real AgentScope path."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Callable

from reme_procedure_memory.extraction.finish import FINISH_TOOL
from reme_procedure_memory.schema import AGENT_TOOLS

from helpers import LocalServer, send_json
from helpers.corpus import JSONL

TOOLS = sorted([FINISH_TOOL, *AGENT_TOOLS])  # what every extraction request offers the model


INJECTED_KEYS = ("_procedure_grant", "_procedure_sources", "tool_context_id")


SEGMENT = re.compile(r"segment (\d+) of (\d+)")


EXPERIENCE = {
    "filename": "rebuild-search-after-config-change.json",
    "description": "Rebuild search after a configuration change",
    "when_to_use": "After changing search configuration when results appear stale",
    "content": "Rebuild the affected indexes, then verify a known query before resuming.",
}


def text_of(message: dict) -> str:
    """The text of an OpenAI chat message (string content or a list of content parts)."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


class Conversation:
    """A view of one chat-completions request body: which segment, which step, what the tools answered."""

    def __init__(self, body: dict) -> None:
        self.body = body
        self.messages: list[dict] = body.get("messages") or []
        start = next(
            (i for i, m in enumerate(self.messages) if m.get("role") == "user" and SEGMENT.search(text_of(m))), None
        )
        self.prompt = text_of(self.messages[start]) if start is not None else ""
        found = SEGMENT.search(self.prompt)
        self.segment, self.total = (int(found[1]), int(found[2])) if found else (0, 0)
        after = self.messages[start + 1 :] if start is not None else []
        self.step = sum(1 for m in after if m.get("role") == "assistant")  # model turns already taken
        self.tool_results = [text_of(m) for m in after if m.get("role") == "tool"]
        self.system = text_of(self.messages[0]) if self.messages and self.messages[0].get("role") == "system" else ""

    @property
    def tool_names(self) -> list[str]:
        return sorted(t["function"]["name"] for t in self.body.get("tools") or [])

    @property
    def forced_final(self) -> bool:
        """AgentScope's last call after ``max_iters``: tools must not be called."""
        return self.body.get("tool_choice") == "none"

    def last_tool_answer(self) -> dict:
        return json.loads(self.tool_results[-1]) if self.tool_results else {}


def is_probe(body: dict) -> bool:
    """The import preflight's request: one user message, one token, no tools (extraction/preflight.py)."""
    from reme_procedure_memory.extraction.preflight import PROBE_TEXT

    messages = body.get("messages") or []
    return (
        body.get("max_tokens") == 1
        and not body.get("tools")
        and len(messages) == 1
        and text_of(messages[0]) == PROBE_TEXT
    )


def call(name: str, **arguments) -> dict:
    return {"tool_calls": [(name, arguments)]}


def say(text: str) -> dict:
    return {"text": text}


class ChatEndpoint(LocalServer):
    """A local OpenAI-compatible ``POST /v1/chat/completions`` server on 127.0.0.1.

    ``script(conversation) -> {"text": ...} | {"tool_calls": [(name, args), ...]}`` decides every answer from the
    request alone (deterministic). Answers are JSON or SSE chunks, whichever the request's ``stream`` asks for.
    The import preflight's one-token probe is answered "ok" without the script and kept in ``probes``, not in
    ``requests``. ``refuse = (status, body)`` answers every request (probe or not) with that HTTP error until reset to
    None; ``refuse_after_probe`` does the same for everything but the probe.
    ``hold(conversation) -> bool`` can park a request without answering until ``release()`` (``held`` is set
    when one is parked). ``delay`` seconds are slept before each answer.
    """

    def __init__(self, script: Callable[[Conversation], dict]) -> None:
        self.script = script
        self.requests: list[dict] = []
        self.probes: list[dict] = []
        self.refuse: tuple[int, dict] | None = None
        self.refuse_after_probe: tuple[int, dict] | None = None
        self.errors: list[str] = []
        self.delay = 0.0
        self.hold: Callable[[Conversation], bool] | None = None
        self.held = threading.Event()
        self._released = threading.Event()
        self._lock = threading.Lock()
        self._ids = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self.send_error(404)
                    return
                probe = is_probe(body)
                refusal = endpoint.refuse or (None if probe else endpoint.refuse_after_probe)
                if refusal is not None:
                    (endpoint.probes if probe else endpoint.requests).append(body)
                    send_json(self, refusal[1], refusal[0])
                    return
                if probe:
                    endpoint.probes.append(body)
                    send_json(self, endpoint._completion(say("ok"), body))
                    return
                try:
                    answer = endpoint._answer(body)
                except Exception as exc:  # a script bug must fail the test, not hang the client
                    endpoint.errors.append(f"{type(exc).__name__}: {exc}")
                    send_json(self, {"error": {"message": str(exc), "type": "invalid_request_error"}}, 400)
                    return
                if answer is None:  # parked, and the client went away meanwhile
                    return
                try:
                    if body.get("stream"):
                        self._stream(answer, body)
                    else:
                        self._json(answer, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _json(self, answer: dict, body: dict) -> None:
                send_json(self, endpoint._completion(answer, body))

            def _stream(self, answer: dict, body: dict) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in endpoint._chunks(answer, body):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        super().__init__(Handler)

    # -- protocol ---------------------------------------------------------------------------------------------

    def conversations(self) -> list[Conversation]:
        return [Conversation(body) for body in self.requests]

    def release(self) -> None:
        self._released.set()

    def _answer(self, body: dict) -> dict | None:
        conversation = Conversation(body)
        with self._lock:
            self.requests.append(body)
        if self.hold is not None and self.hold(conversation):
            self.held.set()
            self._released.wait(timeout=120)
            return None
        if self.delay:
            time.sleep(self.delay)
        return self.script(conversation)

    def _next_id(self) -> str:
        with self._lock:
            self._ids += 1
            return f"call_{self._ids}"

    def _tool_calls(self, answer: dict) -> list[dict]:
        return [
            {"id": self._next_id(), "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
            for name, arguments in answer.get("tool_calls") or []
        ]

    @staticmethod
    def _usage(body: dict) -> dict:
        prompt = sum(len(text_of(m)) for m in body.get("messages") or []) // 4 + 1
        return {"prompt_tokens": prompt, "completion_tokens": 7, "total_tokens": prompt + 7}

    def _completion(self, answer: dict, body: dict) -> dict:
        calls = self._tool_calls(answer)
        message: dict[str, Any] = {"role": "assistant", "content": answer.get("text")}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": self._usage(body),
        }

    def _chunks(self, answer: dict, body: dict) -> list[dict]:
        base = {
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
        }
        chunks = [
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
        ]
        text = answer.get("text")
        if text:  # in two pieces, as a real stream would deliver it
            half = len(text) // 2
            for piece in (text[:half], text[half:]):
                chunks.append({**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
        for index, tool_call in enumerate(self._tool_calls(answer)):
            arguments = tool_call["function"]["arguments"]
            half = len(arguments) // 2
            chunks.append(
                {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {
                                "tool_calls": [
                                    {
                                        "index": index,
                                        "id": tool_call["id"],
                                        "type": "function",
                                        "function": {
                                            "name": tool_call["function"]["name"],
                                            "arguments": arguments[:half],
                                        },
                                    }
                                ]
                            },
                            "finish_reason": None,
                        }
                    ],
                }
            )
            chunks.append(
                {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]},
                            "finish_reason": None,
                        }
                    ],
                }
            )
        finish = "tool_calls" if answer.get("tool_calls") else "stop"
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        chunks.append({**base, "choices": [], "usage": self._usage(body)})
        return chunks

    def stop(self) -> None:
        self.release()


def llm_components(base_url: str, *, stream: bool = True) -> dict:
    """``as_llm.default`` (ReMe's openai backend) + ``agent_wrapper.default`` (agentscope), as in default.yaml."""
    return {
        "as_llm": {
            "default": {
                "backend": "openai",
                "model": "fake-chat",
                "stream": stream,
                "context_size": 262144,
                "max_retries": 1,
                "credential": {"api_key": "test", "base_url": base_url},
                "parameters": {"max_tokens": 4096, "thinking_enable": False},
            }
        },
        "agent_wrapper": {
            "default": {
                "backend": "agentscope",
                "as_llm": "default",
                "permission_mode": "bypass",
                "react_config": {"max_iters": 30},
                "context_config": {"trigger_ratio": 0.8, "reserve_ratio": 0.1, "tool_result_limit": 50000},
                "model_config": {"max_retries": 1},
            }
        },
    }


def search_create_summarize(conversation: Conversation) -> dict:
    """search -> create -> final reply with the rolling summary."""
    if conversation.step == 0:
        return call("procedure_search", query="stale search after config change")
    if conversation.step == 1:
        return call("procedure_create", **EXPERIENCE)
    return say(
        "Created one experience.\n<summary>The user rebuilt a stale search index after a config change.</summary>"
    )


def search_forever(conversation: Conversation) -> dict:
    """Never finishes by itself; on AgentScope's forced last call it even offers a summary (must not count)."""
    if conversation.forced_final:
        return say("I ran out of iterations.\n<summary>premature summary</summary>")
    return call("procedure_search", query=f"search attempt {conversation.step}")


ROLLOUT = "".join(  # 12 JSONL records of 28 word-tokenizer tokens each
    f'{{"turn": {i}, "role": "assistant", "content": "step {i} of the rollout procedure"}}\n' for i in range(12)
).encode("utf-8")


def experience_name(segment: int) -> str:
    return f"rollout-segment-{segment}.json"


def one_experience_per_segment(conversation: Conversation) -> dict:
    """Deterministic from the request: per segment one create (stable key), then the final reply with a summary.

    A segment whose prompt already lists its experience (the operation ledger of an earlier attempt) reads it
    instead of writing again; a create answered ``already_exists`` (or replayed) goes on to the summary.
    """
    segment = conversation.segment
    assert segment > 0, "no 'segment N of M' in the prompt"
    name = experience_name(segment)
    if conversation.step == 0:
        if f"procedures/{name}" in conversation.prompt:
            return call("procedure_read", path=f"procedures/{name}")
        return call(
            "procedure_create",
            filename=name,
            description=f"Roll out part {segment} of the procedure",
            when_to_use=f"When the rollout reaches part {segment} of {conversation.total}",
            content=f"Run the steps of part {segment} in order and verify each before moving on.",
        )
    answer = conversation.last_tool_answer()
    ok = answer.get("status") in ("created", "ok") or answer.get("error", {}).get("code") == "already_exists"
    assert ok, f"unexpected tool answer in segment {segment}: {answer}"
    return say(f"Recorded part {segment}.\n<summary>Read segments 1-{segment} of a staged rollout.</summary>")


def write_original(tmp_path: Path, name: str = "run.jsonl", data: str = JSONL) -> Path:
    path = tmp_path / "originals" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data, encoding="utf-8")
    return path


def assert_offered_only_the_extraction_tools(body: dict, injected_keys=INJECTED_KEYS) -> None:
    tools = body.get("tools") or []
    # the four job tools and finish_segment: no bash/read/write/edit/glob/grep built-ins
    assert sorted(t["function"]["name"] for t in tools) == TOOLS
    for tool in tools:
        schema = tool["function"].get("parameters") or {}
        for key in injected_keys:  # injected keys are hidden from the model
            assert key not in (schema.get("properties") or {}), tool
            assert key not in (schema.get("required") or []), tool
    serialized = json.dumps(tools)
    assert all(key not in serialized for key in injected_keys)
