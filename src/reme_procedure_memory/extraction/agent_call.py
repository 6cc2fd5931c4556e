"""How the plugin calls a ReMe agent wrapper, and how it reads why a reply stopped.

Contract: pure functions. ``merged_reply_kwargs`` gives the kwargs of every agent call (no built-in tools, the
plugin's budget merged into the wrapper's, cancellation raised, a fresh session id, AgentScope's runtime reminders
off (``reme_internals.quiet_agents``, which the loop applies to its wrapper); with a run exactly the four job
tools and its grant, plus ``finish_segment`` when given (AgentScope backend: ``ends_with_tool``; the plugin builds
that toolkit, its tools as an extraction agent sees them: ``schema.agent_description``,
``schema.agent_parameters``), without one no tools); ``stop_reason`` says why a reply did not complete, for every
ReMe wrapper backend, or None; ``reply_text`` is a completed reply's text (a ``finish_segment`` summary between
``<summary>`` tags); ``remove_session_file`` removes the session file a reply left (AgentScope: the whole
conversation, segment text included), which nothing reads again: every call has a fresh session id, and a resumed
import restarts from its checkpoint.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from agentscope.tool import Toolkit
from reme.components.agent_wrapper.as_agent_wrapper import AsAgentWrapper

from ..reme_internals import QUIET_REPLY, job_tool, reply_result_text, resolve_jobs
from ..schema import AGENT_TOOLS, agent_description, agent_parameters
from .finish import reply_summary
from .summary import tagged


def ends_with_tool(wrapper) -> bool:
    """Whether the wrapper's agent can end a reply through ``finish_segment`` (ReMe's AgentScope backend, which
    takes a prebuilt toolkit); other backends end a reply with its text."""
    return isinstance(wrapper, AsAgentWrapper)


def reply_text(result: dict) -> str:
    """A completed reply's text: the ``finish_segment`` summary between ``<summary>`` tags (as given when it has
    them already; a fixed sentence when none was asked for), else the reply's final text."""
    summary = reply_summary(result)
    if summary is None:
        return reply_result_text(result)
    return tagged(summary) if summary else "(ended with finish_segment)"


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


def agent_tool(wrapper, job, context_id: str | None, injected: dict[str, Any]):
    """``job`` as the AgentScope tool ReMe builds for it (``reme_internals.job_tool``), its description and schema as
    an extraction agent sees them (``schema.agent_description``, ``schema.agent_parameters``)."""
    tool = job_tool(wrapper, job, context_id, injected)
    tool.description = agent_description(job.name, tool.description)
    if (parameters := agent_parameters(job.name, tool.input_schema)) is not None:
        tool.input_schema = parameters
    return tool


def merged_reply_kwargs(wrapper, run, max_iters: int, finish=None) -> dict[str, Any]:
    """Reply kwargs of every agent call: no built-in tools, budgets merged into the wrapper's (not replacing them),
    cancellation raised, a fresh session id (never reused: some SDKs refuse a used id), and for the AgentScope backend
    ``QUIET_REPLY`` (an agent without runtime reminders, once the wrapper is prepared). With a run: exactly the four
    job tools and the run's injected grant, and with ``finish`` (a ``FinishSegment``, AgentScope only) a toolkit of
    those four built as the wrapper builds them plus ``finish``; without a run (summary repairs): no tools at all."""
    react = {
        **(wrapper.kwargs.get("react_config") or {}),
        "max_iters": max_iters,
        "interruption_raise_cancelled_error": True,
    }
    kwargs: dict[str, Any] = {"builtin_tools": [], "react_config": react, "session_id": str(uuid.uuid4())}
    if run is None:
        kwargs["job_tools"] = []
    else:
        injected = run.injected()
        kwargs.update(job_tools=list(AGENT_TOOLS), injected_job_kwargs=injected, tool_context_id=run.context_id)
        if finish is not None:
            jobs = resolve_jobs(wrapper, list(AGENT_TOOLS))
            kwargs["toolkit"] = Toolkit(
                tools=[*(agent_tool(wrapper, job, run.context_id, injected) for job in jobs), finish]
            )
    if ends_with_tool(wrapper):
        kwargs[QUIET_REPLY] = True  # no runtime reminder re-sent with every request (reme_internals.quiet_agents)
    if getattr(wrapper, "backend", "") == "claude_code":
        kwargs.update(tools=[], max_turns=max_iters)  # no built-in Claude Code tools; its own budget knob
    return kwargs


def session_file(wrapper, kwargs: dict[str, Any]) -> Path | None:
    """The file where ``wrapper`` keeps the session of a reply made with ``kwargs`` (ReMe's AgentScope backend dumps
    ``<session_path>/<session id>.jsonl`` after every reply); None for backends whose SDK keeps its own store."""
    if not isinstance(wrapper, AsAgentWrapper) or not kwargs.get("session_id"):
        return None
    return Path(wrapper.session_path) / f"{str(kwargs['session_id']).lower()}.jsonl"


def remove_session_file(wrapper, kwargs: dict[str, Any], logger) -> None:
    """Remove the session file of a finished (or failed) reply, when the backend left one; a failure is logged, not
    raised (the file is private to ReMe's generic jobs either way: storage/guard.py)."""
    path = session_file(wrapper, kwargs)
    if path is None:
        return
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        logger.warning(f"procedure memory could not remove the agent session file {path}: {exc}")
