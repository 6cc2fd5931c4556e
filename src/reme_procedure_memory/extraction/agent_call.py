"""How the plugin calls a ReMe agent wrapper, and how it reads why a reply stopped.

Contract: pure functions. ``merged_reply_kwargs`` gives the kwargs of every agent call (no built-in tools, the
plugin's budget merged into the wrapper's, cancellation raised, a fresh session id; with a run exactly the four job
tools and its grant, without one no tools); ``stop_reason`` says why a reply did not complete, for every ReMe wrapper
backend, or None.
"""

from __future__ import annotations

import uuid
from typing import Any

from .prompt import TOOLS


def stop_reason(result: dict) -> str | None:
    """Why an agent reply did not finish normally (None when it completed), for every ReMe wrapper backend."""
    last = result.get("last_message")
    if isinstance(last, dict):
        finished = str(last.get("finished_reason") or "")
        if finished and finished != "completed":
            return f"the agent stopped with finished_reason={finished}"
        if last.get("is_error"):
            return f"the agent reported an error ({last.get('subtype') or 'unknown'})"
    turn = result.get("turn")
    if isinstance(turn, dict) and turn.get("status") not in (None, "completed"):
        return f"the agent turn ended with status={turn.get('status')}"
    return None


def merged_reply_kwargs(wrapper, run, max_iters: int) -> dict[str, Any]:
    """Reply kwargs of every agent call: no built-in tools, budgets merged into the wrapper's (not replacing them),
    cancellation raised, a fresh session id (never reused: some SDKs refuse a used id). With a run: exactly the four
    job tools and the run's injected grant; without one (summary repairs): no tools at all."""
    react = {**(wrapper.kwargs.get("react_config") or {}), "max_iters": max_iters,
             "interruption_raise_cancelled_error": True}
    kwargs: dict[str, Any] = {"builtin_tools": [], "react_config": react, "session_id": str(uuid.uuid4())}
    if run is None:
        kwargs["job_tools"] = []
    else:
        kwargs.update(job_tools=list(TOOLS), injected_job_kwargs=run.injected(), tool_context_id=run.context_id)
    if getattr(wrapper, "backend", "") == "claude_code":
        kwargs.update(tools=[], max_turns=max_iters)  # no built-in Claude Code tools; its own budget knob
    return kwargs
