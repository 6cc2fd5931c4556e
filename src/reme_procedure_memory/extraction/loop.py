"""The per-segment extraction run: prompt, context budget, agent call, rolling summary and its repair, checkpoint.

One ``Extraction`` processes one imported trajectory whose segments are fixed in its checkpoint. For each segment
from the checkpoint's position:

1. search the library for the experiences that match the segment best (``RELATED_LIMIT``, compact, with the
   functions the segment calls and pieces of the segment: ``related.py``; the import's own earlier writes first),
   render the prompt (the segment, summary so far, the caller's hint, those experiences (whole where they name a
   function the segment calls), the ledger of an
   earlier attempt) and check that system prompt + user message + tool schemas fit ``context - reserve`` exact
   tokens, before any model call;
2. open a run (secret grant, source = the copy) and let the agent work with exactly the four job tools, plus
   ``finish_segment`` where the wrapper takes it (AgentScope: ``finish.py``), which ends the reply in the turn of
   the writes (one request for a segment whose writes succeed) and carries the rolling summary; the session file
   the wrapper dumps after the reply (the whole conversation) is removed when the reply returns or fails;
3. an interrupted, cancelled, failed or iteration-exhausted reply stops the import resumably, never advancing;
4. a completed reply is saved in the checkpoint first, so a failed advance reuses it instead of re-running;
5. a segment whose own writes failed to publish (and were not corrected by a later write of the same path or
   content, in that attempt or an earlier one) cannot advance; before the last segment, the summary between
   ``<summary>`` tags must exist and fit its ceiling, else it is repaired within a bounded budget (after the last,
   nothing reads a summary: none is asked for); a segment whose own writes are still index-pending cannot advance;
6. the checkpoint advances atomically: position + 1, the new summary, the reply cleared.

Here: the loop, its gates, the checkpoint. What the agent is shown and the budget check: ``prompt.py``; the summary
rules: ``summary.py``; agent call kwargs and stop reasons: ``agent_call.py``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..errors import ErrorCode, ExtractionStopped, ProcedureError, TokenizerUnavailable
from ..operations.reads import compact_answer
from ..reme_internals import quiet_agents, reply_result_text
from ..schema import TEXT_FIELDS, View
from ..storage.experiences import StoredExperience
from ..storage.journal import INDEX_PENDING, PUBLISHED, written_paths
from . import prompt
from .agent_call import ends_with_tool, merged_reply_kwargs, remove_session_file, reply_text, stop_reason
from .finish import FinishSegment
from .related import called_names, listed_first, merged_related, related_queries, shown_whole, with_contents
from .summary import parse_summary, summary_problem, tagged

if TYPE_CHECKING:
    from ..operations.attempts import AttemptGrants
    from ..storage.checkpoints import Checkpoint
    from ..workspace import Workspace


Search = Callable[..., Awaitable[dict[str, Any]]]  # (query, view, limit, tools=...) -> a search answer
REPAIR_ITERATIONS = 2  # a summary repair needs no tools: one answer, plus the SDK's forced final turn
RELATED_VIEW, RELATED_LIMIT = View.WHEN_TO_USE_CONTENT, 5  # the experiences a segment's message lists
# all carry their content (weak matches are left out), shown whole where they name a function the segment calls:
# revised in place (folded, not appended to) without a read turn; bounded experiences (extraction.grow_limit) keep
# that affordable
RELATED_CONTENTS = RELATED_LIMIT
# the experiences the import wrote in its earlier segments are listed before the searched ones (whole where they name
# a function the segment calls): a continuing trajectory revises them most, and a model left without them read them
# (a request re-sending the segment each); at most this many entries in all
RELATED_MAX = 2 * RELATED_LIMIT


class Extraction:
    """Processes the remaining segments of one import; see the module docstring."""

    def __init__(
        self,
        workspace: Workspace,
        grants: AttemptGrants,
        search: Search,
        jobs,
        wrapper,
        record,
        text: str,
        fmt: str,
        checkpoint: Checkpoint,
        progress: Callable[[str], None],
    ) -> None:
        """``search``: the search answers of the workspace (``Reads.search``); ``jobs``: the application's jobs (the
        four tools' schemas are counted in the context budget)."""
        self.workspace = workspace
        self.grants = grants
        self.search = search
        self.jobs = jobs
        self.wrapper = wrapper
        if ends_with_tool(wrapper):
            quiet_agents(wrapper)  # its replies' agents (merged_reply_kwargs asks) re-send no runtime reminder
        self.record = record
        self.text = text
        self.format = fmt
        self.checkpoint = checkpoint
        self.progress = progress
        self.limits = workspace.settings.token_limits
        self._related: dict[int, list[str]] = {}  # per segment: its related experiences, once searched

    # -- checkpoint ---------------------------------------------------------------------------------------------

    def _save(self) -> None:
        self.workspace.checkpoints.put(self.checkpoint)

    def _ledger(self, index: int):
        """The operation ledger of a segment: its journaled writes (durable before each publish), oldest first."""
        return [op for op in self.workspace.journal.records(self.record.request_id) if op.segment == index]

    # -- prompts ------------------------------------------------------------------------------------------------

    def _system_prompt(self) -> str:
        extraction = self.workspace.settings.extraction
        return prompt.system_prompt(self.limits, extraction.advice, extraction.grow_limit)

    def _user_message(self, index: int) -> str:
        start, end = self.checkpoint.span(index)
        return prompt.user_message(
            path=self.record.path,
            fmt=self.format,
            number=index + 1,
            total=self.checkpoint.total,
            start=start,
            end=end,
            segment=self.text[start:end],
            hint=self.checkpoint.memory_hint,
            summary=self.checkpoint.summary,
            summary_limit=self.limits.summary,
            lines=prompt.ledger_lines(self._ledger(index), self._failed_writes(index)),
            related=self._related.get(index),
            finish_tool=ends_with_tool(self.wrapper),
        )

    async def _find_related(self, index: int) -> None:
        """The library's experiences that match segment ``index`` best, for its message: compact searches of the
        content view, first for the experiences naming the functions the segment calls (``related.called_names``),
        then with the hint and pieces of the segment (``related``), merged; the experiences the import wrote in its
        earlier segments come first (``_earlier_writes``); only those naming a function the segment calls are shown
        whole (``related.shown_whole``). The agent searches only for what they miss. A search that fails leaves the
        list out (the agent can still search)."""
        start, end = self.checkpoint.span(index)
        segment = self.text[start:end]
        names = tuple(called_names(segment))
        queries = [(" ".join(names), names)] if names else []  # first: an experience naming what the segment calls
        queries += [(query, ()) for query in related_queries(segment, self.checkpoint.memory_hint)]
        answers = []
        for query, tools in queries:
            try:
                answer = await self.search(query, RELATED_VIEW, RELATED_LIMIT, tools=tools)
                answers.append(with_contents(compact_answer(answer), compact_answer(answer, every_content=True)))
            except ProcedureError as exc:
                self.workspace.logger.warning(
                    f"procedure import: no related experiences for segment {index + 1}: {exc}"
                )
                return
        own = self._earlier_writes(index)
        searched = merged_related(answers, RELATED_LIMIT, RELATED_CONTENTS)
        listed = shown_whole(listed_first(own, searched, min(RELATED_MAX, RELATED_LIMIT + len(own))), names)
        limit = self.workspace.settings.extraction.grow_limit
        self._related[index] = prompt.related_lines(listed, await self._over_bound(listed, limit), limit)

    async def _over_bound(self, listed: list[dict[str, Any]], limit: int) -> dict[str, int]:
        """The three text fields' tokens (counted as ``check_growth`` counts them) of each entry shown whole whose
        experience, at the listed version, holds more than ``limit`` (0: no bound, nothing counted), by path."""
        paths, texts = [], []
        for entry in listed if limit > 0 else []:
            item = self.workspace.files.read(entry["path"]) if "content" in entry else None
            if isinstance(item, StoredExperience) and item.version == entry["version"]:
                fields = item.experience.fields()
                paths.append(entry["path"])
                texts += [fields[name] for name in TEXT_FIELDS]
        try:
            counts = await self.workspace.tokens.acount_many(texts) if texts else []
        except TokenizerUnavailable as exc:
            raise ExtractionStopped(ErrorCode.TOKENIZER_UNAVAILABLE, str(exc)) from None
        n = len(TEXT_FIELDS)
        sizes = {path: sum(counts[n * i : n * (i + 1)]) for i, path in enumerate(paths)}
        return {path: size for path, size in sizes.items() if size > limit}

    def _earlier_writes(self, index: int) -> list[dict[str, Any]]:
        """The experiences this import published in segments before ``index``, most recently written first, at most
        ``RELATED_MAX``, each as a listed entry carrying its current text (one deleted or invalid since is left
        out)."""
        ops = [op for op in self.workspace.journal.records(self.record.request_id) if (op.segment or 0) < index]
        paths = written_paths(ops)
        order = list(
            dict.fromkeys(reversed([op.path for op in ops if op.path in {*paths["created"], *paths["updated"]}]))
        )
        entries = []
        for path in order[:RELATED_MAX]:
            item = self.workspace.files.read(path)
            if isinstance(item, StoredExperience):
                fields = item.experience.fields()
                entries.append({"path": path, "version": item.version, **{k: fields[k] for k in TEXT_FIELDS}})
        return entries

    def _tool_schemas(self) -> str:
        return prompt.tool_schemas(self.jobs, ends_with_tool(self.wrapper))

    def _user_tokens(self, user: str, index: int) -> int:
        """The segment and the rolling summary inside the message keep the counts recorded when they were cut and
        validated (if the checkpoint has them)."""
        start, end = self.checkpoint.span(index)
        counts = self.checkpoint.segment_counts
        return prompt.user_tokens(
            self.workspace.tokens,
            user,
            (
                (self.text[start:end], counts[index] if counts else None),
                (self.checkpoint.summary, self.checkpoint.summary_tokens),
            ),
        )

    async def _check_context(self, system: str, user: str, *, tools: bool = True) -> int:
        """Exact tokens of the initial input; raise ExtractionStopped before any model call when it does not fit."""
        tokens, index = self.workspace.tokens, self.checkpoint.next_segment
        schemas = self._tool_schemas() if tools else ""
        try:
            sizes = await asyncio.to_thread(
                lambda: [tokens.count(system), self._user_tokens(user, index), tokens.count(schemas)]
            )
        except TokenizerUnavailable as exc:
            raise ExtractionStopped(ErrorCode.TOKENIZER_UNAVAILABLE, str(exc)) from None
        total, problem = prompt.budget_problem(sizes, self.limits)
        if problem:
            raise ExtractionStopped(ErrorCode.CONTEXT_BUDGET_EXCEEDED, problem)
        return total

    # -- the loop -----------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Process segments until the end (raises ExtractionStopped to stop resumably). After the last segment no
        rolling summary is asked for or checked: nothing reads it (the checkpoint keeps the final reply)."""
        checkpoint = self.checkpoint
        while not checkpoint.done:
            index = checkpoint.next_segment
            reply = checkpoint.saved_reply
            if not reply or reply.get("segment") != index:
                reply = await self._run_agent(index)
            self._check_failed_writes(index)
            if index == checkpoint.total - 1:
                summary, summary_tokens = checkpoint.summary, checkpoint.summary_tokens
            else:
                summary, summary_tokens = await self._valid_summary(index, reply["text"])
            self._check_pending_writes(index)
            checkpoint.failed_writes.pop(str(index), None)
            checkpoint.next_segment, checkpoint.saved_reply = index + 1, None
            checkpoint.summary, checkpoint.summary_tokens = summary, summary_tokens
            self._save()
            done = self.written()
            self.progress(
                f"segment {index + 1}/{checkpoint.total} done: {len(done['created'])} created, "
                f"{len(done['updated'])} updated so far",
            )

    async def _run_agent(self, index: int) -> dict:
        number, total = index + 1, self.checkpoint.total
        await self._find_related(index)
        system, user = self._system_prompt(), self._user_message(index)
        tokens = await self._check_context(system, user)
        self.progress(f"segment {number}/{total}: {tokens} input tokens, running the extraction agent")
        attempts = self.checkpoint.attempts
        attempts[str(index)] = attempts.get(str(index), 0) + 1
        self._save()  # durable before the agent runs: a kill mid-run still counts the attempt
        run = self.grants.begin_attempt(self.record.request_id, [self.record.path], segment=index)
        run.carry_failures(self._failed_writes(index))  # an earlier attempt's failures stay until a write corrects them
        kwargs = merged_reply_kwargs(
            self.wrapper, run, self.workspace.settings.extraction.max_iters, self._finish_tool(index)
        )
        try:
            result = await self.wrapper.reply(user, system_prompt=system, **kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the SDK failed or its own budget ran out: resumable
            subtype = getattr(exc, "subtype", "")
            code = ErrorCode.AGENT_BUDGET_EXHAUSTED if subtype == "error_max_turns" else ErrorCode.AGENT_FAILED
            raise ExtractionStopped(
                code,
                f"The extraction agent failed on segment {number}/{total}: {type(exc).__name__}: {exc}",
            ) from exc
        finally:
            remove_session_file(self.wrapper, kwargs, self.workspace.logger)  # the segment's text, unmasked
            self.grants.end_attempt(run)
            # the segment's uncorrected failed writes: they gate the segment and the next attempt's ledger shows them
            self.checkpoint.failed_writes[str(index)] = list(run.failed_writes.values())
            self._save()
        reason = stop_reason(result)
        if reason:
            code = ErrorCode.AGENT_BUDGET_EXHAUSTED if "exceed_max_iters" in reason else ErrorCode.AGENT_INTERRUPTED
            raise ExtractionStopped(code, f"Segment {number}/{total} did not finish: {reason}.")
        reply = {"segment": index, "text": reply_text(result)}
        self.checkpoint.saved_reply = reply
        self._save()
        return reply

    async def _summary_status(self, index: int, reply: str) -> tuple[str | None, int | None, str | None]:
        """The reply's summary, its exact tokens (when it is one) and what is wrong with it (None when valid)."""
        start, end = self.checkpoint.span(index)
        summary = parse_summary(reply)
        problem = summary_problem(reply, summary, self.checkpoint.summary, self.text[start:end])
        if problem is not None:
            return summary, None, problem
        try:
            size = await self.workspace.tokens.acount(summary)
        except TokenizerUnavailable as exc:
            raise ExtractionStopped(ErrorCode.TOKENIZER_UNAVAILABLE, str(exc)) from None
        if size > self.limits.ceiling(self.limits.summary):
            return summary, size, f"the summary has {size} tokens; the limit is {self.limits.summary}."
        return summary, size, None

    async def _valid_summary(self, index: int, reply: str) -> tuple[str, int]:
        """The reply's summary and its exact token count, repaired by the agent (no tools) at most
        ``summary_repair_attempts`` times."""
        attempts = self.workspace.settings.extraction.summary_repair_attempts
        for attempt in range(attempts + 1):
            summary, size, problem = await self._summary_status(index, reply)
            if problem is None:
                return summary, size
            # What the repair needs to see: the reply when it may hold the summary (no tags, or too long), the
            # segment when the reply holds none (no tags, empty, a placeholder, unchanged). A placeholder or an
            # unchanged summary is never quoted: it would only be copied back.
            if size is not None:  # too long: shortening needs the summary, not the segment
                quote, show_segment = True, False
            else:
                quote, show_segment = summary is None and "<summary>" not in (reply or ""), True
            if attempt == attempts:
                break
            reply = await self._repair(index, reply if quote else "", problem, attempt + 1, show_segment)
        self.checkpoint.saved_reply = None  # the next resume lets the agent run this segment again
        self._save()
        raise ExtractionStopped(
            ErrorCode.SUMMARY_INVALID,
            f"Segment {index + 1}: the rolling summary is still invalid after {attempts} repair attempts "
            f"({problem}). Resume with the same request_id to run the segment again.",
        )

    def _finish_tool(self, index: int) -> FinishSegment | None:
        """``finish_segment`` for segment ``index``'s reply (None where the wrapper cannot take it): it ends the
        reply in the turn of the writes, refusing while an answer of its turn is an unseen error or (before the last
        segment) the summary is not valid by the same rules as a final reply's."""
        if not ends_with_tool(self.wrapper):
            return None

        async def check(summary: str) -> str | None:
            return (await self._summary_status(index, tagged(summary)))[2]

        return FinishSegment(summary_required=index < self.checkpoint.total - 1, check=check)

    async def _repair(self, index: int, reply: str, problem: str, attempt: int, show_segment: bool) -> str:
        """One tool-less repair turn: the problem, the quoted reply (when given) and, when the summary must be
        written from the segment, the segment's own message. Its input is checked against the context budget."""
        number, total = index + 1, self.checkpoint.total
        message = prompt.repair_message(
            segment_message=self._user_message(index) if show_segment else "",
            number=number,
            total=total,
            problem=problem,
            reply=reply,
            summary_limit=self.limits.summary,
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
            raise ExtractionStopped(
                ErrorCode.AGENT_FAILED, f"Summary repair failed: {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            remove_session_file(self.wrapper, kwargs, self.workspace.logger)
        reason = stop_reason(result)
        if reason:
            raise ExtractionStopped(ErrorCode.AGENT_INTERRUPTED, f"Summary repair did not finish: {reason}.")
        return reply_result_text(result)

    def _failed_writes(self, index: int) -> list[dict[str, str]]:
        """Failed, uncorrected writes of the segment's last attempt (as saved in the checkpoint)."""
        return list(self.checkpoint.failed_writes.get(str(index)) or [])

    def _check_failed_writes(self, index: int) -> None:
        """A segment whose last attempt has failed writes it did not correct cannot advance: nothing it meant to
        save may be lost silently. The next attempt runs with these failures in its ledger."""
        failed = self._failed_writes(index)
        if not failed:
            return
        self.checkpoint.saved_reply = None  # resume lets the agent run the segment again
        self._save()
        raise failed_writes_stopped(failed, index + 1, self.checkpoint.total)

    def _check_pending_writes(self, index: int) -> None:
        """A segment whose own writes are still index-pending cannot advance."""
        written = {op.path for op in self._ledger(index) if op.status in (PUBLISHED, INDEX_PENDING)}
        pending = sorted(written & set(self.workspace.pending))
        if pending:
            self.checkpoint.saved_reply = None  # resume lets the agent correct them
            self._save()
            causes = "; ".join(f"{path}: {self.workspace.pending.error(path)}" for path in pending)
            raise ExtractionStopped(
                ErrorCode.PENDING_WRITES,
                f"Segment {index + 1} has writes that are not indexed yet ({causes}). If the embedding provider "
                "failed, check the EMBEDDING_* settings it names. Then resume with the same request_id: the agent "
                "runs the segment again with its operation ledger and corrects them.",
            )

    def written(self) -> dict[str, list[str]]:
        """Experiences created and updated by this import (its journaled, published writes), each path once."""
        return written_paths(self.workspace.journal.records(self.record.request_id))


def failed_writes_stopped(failed: list[dict[str, str]], number: int, total: int) -> ExtractionStopped:
    """The stop of segment ``number`` of ``total`` whose last attempt left these failed writes uncorrected."""
    code = ErrorCode.DISK_FULL if any(f["code"] == ErrorCode.DISK_FULL for f in failed) else ErrorCode.WRITE_FAILED
    listed = "; ".join(f"{f['tool']} {f['path']}: {f['error']}" for f in failed)
    failed = [{k: v for k, v in f.items() if k != "target"} for f in failed]  # the target version is internal
    return ExtractionStopped(
        code,
        f"Segment {number}/{total}: {len(failed)} write(s) of the extraction agent failed and were not saved: "
        f"{listed} Fix the cause, then resume with the same request_id: the agent runs segment {number} again "
        "and sees these failed writes in its operation ledger.",
        failed_writes=failed,
    )


def make_progress(logger) -> Callable[[str], None]:
    """Progress to ReMe's log and, in a terminal, to stderr."""
    tty = sys.stderr.isatty()

    def report(message: str) -> None:
        logger.info(f"procedure import: {message}")
        if tty:
            print(f"[procedure-memory] {message}", file=sys.stderr, flush=True)

    return report
