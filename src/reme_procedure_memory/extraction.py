"""The per-segment extraction run: prompt, context budget, agent call, rolling summary and its repair, checkpoint.

One ``Extraction`` processes one imported trajectory whose segments are fixed in its checkpoint. For each segment
from the checkpoint's position:

1. render the prompt (summary so far, the segment, the caller's hint, the ledger of an earlier attempt) and check
   that system prompt + user message + tool schemas fit ``context - reserve`` exact tokens, before any model call;
2. open a run (secret grant, source = the copy) and let the agent work with exactly the four job tools;
3. an interrupted, cancelled, failed or iteration-exhausted reply stops the import resumably, never advancing;
4. a completed reply is saved in the checkpoint first, so a failed advance reuses it instead of re-running;
5. a segment whose own writes failed to publish (and were not corrected by a later write of the same path or
   content in that attempt) cannot advance; the summary between ``<summary>`` tags must exist and fit its ceiling,
   else it is repaired within a bounded budget; a segment whose own writes are still index-pending cannot advance;
6. the checkpoint advances atomically: position + 1, the new summary, the reply cleared.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import uuid
from pathlib import Path
from typing import Any, Callable

import yaml
from reme.steps.evolve._evolve import agent_reply_result_text

from .schema import ErrorCode, ProcedureError
from .store import ABANDONED, INDEX_PENDING, INTENT, PUBLISHED, CheckpointStore
from .tokens import TokenizerUnavailable

TOOLS = ("procedure_search", "procedure_read", "procedure_create", "procedure_update")
PROMPTS = yaml.safe_load((Path(__file__).with_name("prompts.yaml")).read_text(encoding="utf-8"))
SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.DOTALL)


class ExtractionStopped(Exception):
    """The import stopped resumably; code and message say why and how to go on (``details`` go into the answer)."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


def parse_summary(reply: str) -> str | None:
    """The reply's rolling summary, stripped, or None.

    The summary runs from the last ``<summary>`` to the last ``</summary>`` after it, so a summary that quotes a
    closing tag stays whole; when that span is empty (e.g. the reply mentions an empty tag pair at the end), the
    last non-empty ``<summary>...</summary>`` block counts.
    """
    reply = reply or ""
    start, end = reply.rfind("<summary>"), reply.rfind("</summary>")
    if start >= 0 and end > start:
        span = reply[start + len("<summary>"):end].strip()
        if span:
            return span
    blocks = [block.strip() for block in SUMMARY.findall(reply) if block.strip()]
    return blocks[-1] if blocks else None


# Placeholders a model may copy back instead of summarising: the first segment's sentence (the prompt shows no
# summary block then) and the placeholder earlier versions put in that block.
NO_SUMMARY_YET = PROMPTS["first_segment"].strip()
PLACEHOLDERS = (NO_SUMMARY_YET, "(none yet: this is the first segment)")


def _comparable(text: str) -> str:
    """Text compared for sameness: case, runs of whitespace and enclosing brackets, quotes or dots ignored."""
    return " ".join(text.casefold().split()).strip(" .()[]\"'")


def summary_problem(reply: str, summary: str | None, previous: str, segment: str) -> str | None:
    """Why a parsed rolling summary is not a summary (its size is checked separately), or None.

    Invalid: none at all, an empty one, the prompt's own placeholder copied back, or the previous summary unchanged
    although the segment had content (a summary must take in every segment).
    """
    if summary is None:
        if "<summary>" in (reply or "") and "</summary>" in (reply or ""):
            return "the summary between <summary> and </summary> is empty."
        return "it has no <summary>...</summary> section."
    if _comparable(summary) in {_comparable(p) for p in PLACEHOLDERS}:
        return (f"the summary is the prompt's placeholder {summary.strip()!r}, not a summary; write what the "
                "trajectory read so far shows.")
    if previous.strip() and segment.strip() and _comparable(summary) == _comparable(previous):
        return ("the summary is the previous summary unchanged, but this segment has content; add what this segment "
                "shows.")
    return None


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


# Tokens an agent SDK adds around what the plugin counts: role markers of the chat template and AgentScope's runtime
# reminder message (measured ~130 tokens with AgentScope 2.0.10); the budget check counts this allowance on top.
FRAMING_ALLOWANCE = 512
REPAIR_ITERATIONS = 2  # a summary repair needs no tools: one answer, plus the SDK's forced final turn


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


class Extraction:
    """Processes the remaining segments of one import; see the module docstring."""

    def __init__(self, memory, wrapper, record, text: str, fmt: str, checkpoint: dict,
                 checkpoints: CheckpointStore, progress: Callable[[str], None]) -> None:
        self.memory = memory
        self.wrapper = wrapper
        self.record = record
        self.text = text
        self.format = fmt
        self.checkpoint = checkpoint
        self.checkpoints = checkpoints
        self.progress = progress
        self.limits = memory.settings.token_limits

    # -- checkpoint ---------------------------------------------------------------------------------------------

    def _save(self) -> None:
        self.checkpoints.put(self.record.request_id, self.checkpoint)

    def _ledger(self, index: int):
        """The operation ledger of a segment: its journaled writes (durable before each publish), oldest first."""
        return [op for op in self.memory.journal.records(self.record.request_id) if op.segment == index]

    # -- prompts ------------------------------------------------------------------------------------------------

    def _system_prompt(self) -> str:
        """The same for every segment and import with the same targets, so a provider's prefix cache covers it."""
        limits = self.limits
        return PROMPTS["system_prompt"].format(
            description=limits.description, when_to_use=limits.when_to_use, content=limits.content,
            summary=limits.summary,
        )

    def _user_message(self, index: int) -> str:
        start, end = self.checkpoint["segments"][index]
        hint = self.checkpoint.get("memory_hint") or ""
        summary = self.checkpoint.get("summary") or ""
        ledger = self._ledger(index)
        lines = [
            f"- {op.tool} {op.path} (operation_key {op.key}) FAILED, not saved: {op.error}" if op.status == ABANDONED
            else f"- {op.tool} {op.path} (operation_key {op.key}, {op.status}, version {op.target_version})"
            for op in ledger
        ]
        journaled = {op.key for op in ledger}
        lines += [  # failed writes the journal could not record (e.g. its directory was not writable)
            f"- {f['tool']} {f['path']} (operation_key {f['operation_key']}) FAILED, not saved: {f['error']}"
            for f in self._failed_writes(index) if f["operation_key"] not in journaled
        ]
        entries = "\n".join(lines)
        return PROMPTS["segment_user"].format(
            path=self.record.path, format=self.format, number=index + 1, total=len(self.checkpoint["segments"]),
            start=start, end=end, hint=PROMPTS["memory_hint"].format(memory_hint=hint) if hint else "",
            previous=PROMPTS["previous_summary"].format(summary=summary) if summary else PROMPTS["first_segment"],
            ledger=PROMPTS["ledger"].format(entries=entries) if lines else "",
            segment=self.text[start:end], summary_limit=self.limits.summary,
        )

    def _tool_schemas(self) -> str:
        """The four tool schemas as function-calling requests carry them."""
        jobs = self.memory.app_context.jobs
        return json.dumps(
            [{"type": "function", "function": {"name": name, "description": jobs[name].description,
                                               "parameters": jobs[name].parameters}} for name in TOOLS],
            ensure_ascii=False,
        )

    def _user_tokens(self, user: str, index: int) -> int:
        """Exact tokens of the user message: the segment and the rolling summary inside it keep the counts recorded
        when they were cut and validated (if the checkpoint has them), so mostly the text around them is encoded
        (``TokenCounter.count_around``)."""
        start, end = self.checkpoint["segments"][index]
        counts = self.checkpoint.get("segment_counts")
        known = []
        for part, tokens in ((self.text[start:end], counts[index] if counts else None),
                             (self.checkpoint.get("summary") or "", self.checkpoint.get("summary_tokens"))):
            at = user.find(part) if part and tokens is not None else -1
            if at >= 0 and all(at >= e or at + len(part) <= s for s, e, _ in known):
                known.append((at, at + len(part), tokens))
        return self.memory.tokens.count_around(user, known)

    async def _check_context(self, system: str, user: str, *, tools: bool = True) -> int:
        """Exact tokens of the initial input; raise ExtractionStopped before any model call when it does not fit."""
        tokens, index = self.memory.tokens, self.checkpoint["next_segment"]
        schemas = self._tool_schemas() if tools else ""
        try:
            sizes = await asyncio.to_thread(
                lambda: [tokens.count(system), self._user_tokens(user, index), tokens.count(schemas)])
        except TokenizerUnavailable as exc:
            raise ExtractionStopped(ErrorCode.TOKENIZER_UNAVAILABLE, str(exc)) from None
        total, available = sum(sizes) + FRAMING_ALLOWANCE, self.limits.context - self.limits.reserve
        if total > available:
            raise ExtractionStopped(
                "context_budget_exceeded",
                f"The initial input of this segment needs {total} tokens (system {sizes[0]}, input {sizes[1]}, tool "
                f"schemas {sizes[2]}, message framing {FRAMING_ALLOWANCE}) but only {available} fit (token_limits.context {self.limits.context} minus "
                f"reserve {self.limits.reserve}). Configure a model with a larger context and raise "
                "components.procedure_memory.default.token_limits.context, then resume with the same request_id.",
            )
        return total

    # -- the loop -----------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Process segments until the end (raises ExtractionStopped to stop resumably)."""
        segments = self.checkpoint["segments"]
        while self.checkpoint["next_segment"] < len(segments):
            index = self.checkpoint["next_segment"]
            reply = self.checkpoint.get("saved_reply")
            if not reply or reply.get("segment") != index:
                reply = await self._run_agent(index)
            self._check_failed_writes(index)
            summary, summary_tokens = await self._valid_summary(index, reply["text"])
            self._check_pending_writes(index)
            self.checkpoint.get("failed_writes", {}).pop(str(index), None)
            self.checkpoint.update(next_segment=index + 1, summary=summary, summary_tokens=summary_tokens,
                                   saved_reply=None)
            self._save()
            done = self.written()
            self.progress(
                f"segment {index + 1}/{len(segments)} done: {len(done['created'])} created, "
                f"{len(done['updated'])} updated so far",
            )

    async def _run_agent(self, index: int) -> dict:
        number, total = index + 1, len(self.checkpoint["segments"])
        system, user = self._system_prompt(), self._user_message(index)
        tokens = await self._check_context(system, user)
        self.progress(f"segment {number}/{total}: {tokens} input tokens, running the extraction agent")
        attempts = self.checkpoint.setdefault("attempts", {})
        attempts[str(index)] = attempts.get(str(index), 0) + 1
        self._save()  # durable before the agent runs: a kill mid-run still counts the attempt
        run = self.memory.begin_run(self.record.request_id, [self.record.path], segment=index)
        kwargs = merged_reply_kwargs(self.wrapper, run, self.memory.settings.extraction.max_iters)
        try:
            result = await self.wrapper.reply(user, system_prompt=system, **kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the SDK failed or its own budget ran out: resumable
            subtype = getattr(exc, "subtype", "")
            code = "agent_budget_exhausted" if subtype == "error_max_turns" else "agent_failed"
            raise ExtractionStopped(
                code, f"The extraction agent failed on segment {number}/{total}: {type(exc).__name__}: {exc}",
            ) from exc
        finally:
            self.memory.end_run(run)
            # this attempt's uncorrected failed writes: they gate the segment and the next attempt's ledger shows them
            failed = [{k: v for k, v in f.items() if k != "target"} for f in run.failed_writes.values()]
            self.checkpoint.setdefault("failed_writes", {})[str(index)] = failed
            self._save()
        reason = stop_reason(result)
        if reason:
            code = "agent_budget_exhausted" if "exceed_max_iters" in reason else "agent_interrupted"
            raise ExtractionStopped(code, f"Segment {number}/{total} did not finish: {reason}.")
        reply = {"segment": index, "text": agent_reply_result_text(result)}
        self.checkpoint["saved_reply"] = reply
        self._save()
        return reply

    async def _valid_summary(self, index: int, reply: str) -> tuple[str, int]:
        """The reply's summary and its exact token count, repaired by the agent (no tools) at most
        ``summary_repair_attempts`` times."""
        ceiling = self.limits.ceiling(self.limits.summary)
        attempts = self.memory.settings.extraction.summary_repair_attempts
        start, end = self.checkpoint["segments"][index]
        previous, segment = self.checkpoint.get("summary") or "", self.text[start:end]
        for attempt in range(attempts + 1):
            summary = parse_summary(reply)
            problem = summary_problem(reply, summary, previous, segment)
            # What the repair needs to see: the reply when it may hold the summary (no tags, or too long), the
            # segment when the reply holds none (no tags, empty, a placeholder, unchanged). A placeholder or an
            # unchanged summary is never quoted: it would only be copied back.
            quote = summary is None and "<summary>" not in (reply or "")
            show_segment = True
            if problem is None:
                try:
                    size = await self.memory.tokens.acount(summary)
                except TokenizerUnavailable as exc:
                    raise ExtractionStopped(ErrorCode.TOKENIZER_UNAVAILABLE, str(exc)) from None
                if size <= ceiling:
                    return summary, size
                problem = f"the summary has {size} tokens; the limit is {self.limits.summary}."
                quote, show_segment = True, False  # shortening needs the summary, not the segment
            if attempt == attempts:
                break
            reply = await self._repair(index, reply if quote else "", problem, attempt + 1, show_segment)
        self.checkpoint["saved_reply"] = None  # the next resume lets the agent run this segment again
        self._save()
        raise ExtractionStopped(
            "summary_invalid",
            f"Segment {index + 1}: the rolling summary is still invalid after {attempts} repair attempts "
            f"({problem}). Resume with the same request_id to run the segment again.",
        )

    async def _repair(self, index: int, reply: str, problem: str, attempt: int, show_segment: bool) -> str:
        """One tool-less repair turn: the problem, the quoted reply (when given) and, when the summary must be
        written from the segment, the segment's own message. Its input is checked against the context budget."""
        number, total = index + 1, len(self.checkpoint["segments"])
        quoted = PROMPTS["repair_reply"].format(number=number, total=total, reply=reply) if reply else ""
        message = PROMPTS["summary_repair"].format(
            segment_message=self._user_message(index) if show_segment else "", number=number, total=total,
            problem=problem, reply=quoted, summary_limit=self.limits.summary,
        )
        system = self._system_prompt()
        await self._check_context(system, message, tools=False)
        self.progress(f"segment {index + 1}: repairing the rolling summary (attempt {attempt})")
        kwargs = merged_reply_kwargs(self.wrapper, None, REPAIR_ITERATIONS)
        try:
            result = await self.wrapper.reply(message, system_prompt=system, **kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise ExtractionStopped("agent_failed", f"Summary repair failed: {type(exc).__name__}: {exc}") from exc
        reason = stop_reason(result)
        if reason:
            raise ExtractionStopped("agent_interrupted", f"Summary repair did not finish: {reason}.")
        return agent_reply_result_text(result)

    def _failed_writes(self, index: int) -> list[dict[str, str]]:
        """Failed, uncorrected writes of the segment's last attempt (as saved in the checkpoint)."""
        return list((self.checkpoint.get("failed_writes") or {}).get(str(index)) or [])

    def _check_failed_writes(self, index: int) -> None:
        """A segment whose last attempt has failed writes it did not correct cannot advance: nothing it meant to
        save may be lost silently. The next attempt runs with these failures in its ledger."""
        failed = self._failed_writes(index)
        if not failed:
            return
        self.checkpoint["saved_reply"] = None  # resume lets the agent run the segment again
        self._save()
        number, total = index + 1, len(self.checkpoint["segments"])
        code = "disk_full" if any(f["code"] == "disk_full" for f in failed) else "write_failed"
        listed = "; ".join(f"{f['tool']} {f['path']}: {f['error']}" for f in failed)
        raise ExtractionStopped(
            code,
            f"Segment {number}/{total}: {len(failed)} write(s) of the extraction agent failed and were not saved: "
            f"{listed} Fix the cause, then resume with the same request_id: the agent runs segment {number} again "
            "and sees these failed writes in its operation ledger.",
            failed_writes=failed,
        )

    def _check_pending_writes(self, index: int) -> None:
        """A segment whose own writes are still index-pending cannot advance."""
        written = {op.path for op in self._ledger(index) if op.status in (PUBLISHED, INDEX_PENDING)}
        pending = sorted(written & set(self.memory.pending))
        if pending:
            self.checkpoint["saved_reply"] = None  # resume lets the agent correct them
            self._save()
            raise ExtractionStopped(
                "pending_writes",
                f"Segment {index + 1} has writes that are not indexed yet: {', '.join(pending)}. Resume with the "
                "same request_id: the agent runs the segment again with its operation ledger and corrects them.",
            )

    def written(self) -> dict[str, list[str]]:
        """Experiences created and updated by this import (its journaled, published writes), each path once."""
        created, updated = {}, {}
        for op in self.memory.journal.records(self.record.request_id):
            if op.status in (INTENT, ABANDONED):
                continue
            if op.tool == "create":
                created[op.path] = True
            elif op.path not in created:
                updated[op.path] = True
        return {"created": list(created), "updated": list(updated)}


def make_progress(logger) -> Callable[[str], None]:
    """Progress to ReMe's log and, in a terminal, to stderr."""
    tty = sys.stderr.isatty()

    def report(message: str) -> None:
        logger.info(f"procedure import: {message}")
        if tty:
            print(f"[procedure-memory] {message}", file=sys.stderr, flush=True)

    return report


def raise_as_procedure_error(exc: ExtractionStopped) -> ProcedureError:
    """An ExtractionStopped as the job's failure."""
    return ProcedureError(exc.code, exc.message, status="incomplete")
