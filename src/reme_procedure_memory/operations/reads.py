"""Reads: the answers of the read-only jobs (``procedure_search``, ``procedure_read``).

Contract: nothing here writes. A search answer holds full current experiences read from their files at answer time
(never the indexed text), each with its path, version and fused and per-branch scores; files pending an index are
excluded from results and listed in ``pending_indexes`` (``index_complete=false``); a vector branch that failed is
reported as ``vector_search.available=false`` beside BM25-only results. Each result carries its absolute
``relevance`` (search/relevance.py); a search may leave out the candidates below ``min_relevance`` (unread), those
whose content names none of ``tools`` and, best first, those beyond a ``max_tokens`` budget, and out of each result's
content the rules shown by fewer trajectories than ``min_evidence`` (delivery.py). Experience paths are validated
against the procedure directory (containment in paths.py; the file itself by ``ExperienceFiles.read``, the one
validation search, read and update share). Trajectory excerpts count decoded characters and are capped by characters and exact tokens;
masked (``mask``), the credentials in them are replaced by ``[masked:<kind>]`` labels (``credentials.py``) before the token
cap, while offsets and lengths still count the copy's characters. The copy itself is never changed.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..answers import (
    ExperienceAnswer,
    ExperienceFields,
    RulesResult,
    SearchAnswer,
    SearchResult,
    TokenBudget,
    TrajectoryAnswer,
)
from ..errors import ErrorCode, ProcedureError, TokenizerUnavailable
from ..schema import check_name
from ..credentials import mask_label, mask_secrets, masked_prefix, secrets_within
from ..storage.experiences import BadFile, StoredExperience
from ..storage.paths import resolve_inside
from .delivery import evident_content, experience_text, names_any, rules_of, tool_pattern, within_budget

if TYPE_CHECKING:
    from ..search.fusion import Fused
    from ..storage.experiences import ExperienceFiles
    from ..workspace import Workspace
    from .recovery import Recovery


RELEVANCE_DIGITS = 4  # a result's relevance as answered


def search_result(hit: Fused, item: StoredExperience, relevance: float, min_evidence: int = 0) -> SearchResult:
    """One result of a search answer: the current experience with its path, version, relevance and scores; its
    content without the rules shown by fewer trajectories than ``min_evidence`` (``rules_left_out`` says how many)."""
    fields = item.experience.fields()
    content, left_out = evident_content(fields["content"], min_evidence)
    result: SearchResult = {
        "path": item.path,
        "version": item.version,
        "relevance": round(relevance, RELEVANCE_DIGITS),
        "score": hit.score,
        "scores": {
            "rrf": hit.score,
            "vector": hit.vector_score,
            "vector_rank": hit.vector_rank,
            "keyword": hit.keyword_score,
            "keyword_rank": hit.keyword_rank,
        },
        "experience": {**fields, "content": content},
    }
    if left_out:
        result["rules_left_out"] = left_out
    return result


# A compact answer (what an extraction agent gets by default) keeps a result only when one of its branch scores is at
# least this share of that branch's best score among the results: the rest match neither by meaning nor by words.
COMPACT_KEEP_SHARE = 0.5
COMPACT_CONTENT_CHARS = 4000  # the best result's content beyond this is left to procedure_read


def compact_answer(
    answer: SearchAnswer, shown: set[tuple[str, str]] | None = None, *, every_content: bool = False
) -> SearchAnswer:
    """A search answer with less to read, under the names of the full answer: each result's path, version,
    ``scores.vector`` (the vector branch's cosine, rounded, when it ran), description and ``when-to-use``; the best
    result's content too, up to ``COMPACT_CONTENT_CHARS`` characters; results whose vector and BM25 scores are both
    below ``COMPACT_KEEP_SHARE`` of the best of their branch left out (``left_out`` says how many). A result in
    ``shown`` (path and version an earlier answer of the same run showed; updated here) is only named
    (``shown_before``), and the content goes to the best result not shown before.

    ``every_content`` (an extraction agent's ``detail=full``): every result, each with its content (bounded the same
    way), none left out or only named; still without the raw scores and sources, which an agent does not use."""
    shown = set() if shown is None else shown
    results = answer["results"]
    best = {branch: max((r["scores"][branch] or 0.0 for r in results), default=0.0) for branch in ("vector", "keyword")}

    def strong(result: dict[str, Any]) -> bool:
        return any(best[b] > 0 and (result["scores"][b] or 0.0) >= COMPACT_KEEP_SHARE * best[b] for b in best)

    kept = [r for n, r in enumerate(results) if every_content or n == 0 or strong(r)]
    compact, content_given = [], False
    for result in kept:
        identity = (result["path"], result["version"])
        if identity in shown and not every_content:
            compact.append({"path": result["path"], "version": result["version"], "shown_before": True})
            continue
        shown.add(identity)
        experience = result["experience"]
        entry = {
            "path": result["path"],
            "version": result["version"],
            "description": experience["description"],
            "when-to-use": experience["when-to-use"],
        }
        if result["scores"]["vector"] is not None:  # fused RRF scores hardly differ; the cosine tells how close
            entry["scores"] = {"vector": round(result["scores"]["vector"], 2)}
        if every_content or not content_given:
            content, content_given = experience["content"], True
            entry["content"] = content[:COMPACT_CONTENT_CHARS]
            if len(content) > COMPACT_CONTENT_CHARS:
                entry["content_truncated"] = True
            if "rules_left_out" in result:
                entry["rules_left_out"] = result["rules_left_out"]
        compact.append(entry)
    out: SearchAnswer = {**answer, "results": compact, "detail": "full" if every_content else "compact"}
    if len(kept) < len(results):
        out["left_out"] = len(results) - len(kept)
    if every_content:
        if any(r.get("content_truncated") for r in compact):
            out["read_more"] = "procedure_read path=<path> shows a whole experience."
    elif len(compact) > 1 or out.get("left_out") or any(r.get("content_truncated") for r in compact):
        out["read_more"] = "procedure_read path=<path> shows a whole experience; detail=full shows all results whole."
    return out


def rules_answer(answer: SearchAnswer) -> SearchAnswer:
    """``detail=rules``: each result's path, version and relevance with its description, when-to-use and ``rules``
    (``delivery.rules_of`` its content: the conventions without the steps; ``""`` when it has none) and
    ``rules_left_out`` when it has it, nothing else of it; the rest of the answer as it is."""
    results: list[RulesResult] = [
        {
            "path": r["path"],
            "version": r["version"],
            "relevance": r["relevance"],
            "description": r["experience"]["description"],
            "when-to-use": r["experience"]["when-to-use"],
            "rules": rules_of(r["experience"]["content"]),
            **({"rules_left_out": r["rules_left_out"]} if "rules_left_out" in r else {}),
        }
        for r in answer["results"]
    ]
    return {**answer, "results": results, "detail": "rules"}


class Reads:
    """Search answers and reads of one ProcedureMemory; keeps the last decoded trajectory (an agent rereads it)."""

    def __init__(self, workspace: Workspace, recovery: Recovery) -> None:
        self.workspace = workspace
        self.recovery = recovery
        self._decoded: tuple[tuple, str] | None = None  # (path, size, mtime) and text of the last trajectory read

    def forget(self) -> None:
        """Drop the cached trajectory text (at close)."""
        self._decoded = None

    async def search(
        self,
        query: str,
        view: str,
        limit: int,
        *,
        min_relevance: float = 0.0,
        tools: tuple[str, ...] = (),
        max_tokens: int | None = None,
        delivered: Callable[[ExperienceFields], str] = experience_text,
        min_evidence: int = 0,
    ) -> SearchAnswer:
        """Hybrid search of one view; full current experiences with path, version, relevance and scores.

        Hits of pending files are skipped; a hit whose file was edited by hand into an invalid one since indexing is
        excluded and reported (``pending_indexes``), never served stale. Candidates below ``min_relevance`` are
        passed over unread; with ``tools``, an experience whose content names none of them is passed over. The
        page's files are read in the search's one scan-thread call (``Views.search_page``), past missing and invalid
        files until ``limit`` are valid; a second worker call reads further candidates only if a file read there
        turned pending meanwhile. Each result's content leaves out the rules shown by fewer trajectories than
        ``min_evidence`` (``delivery.evident_content``; ``tools`` still match the whole content). With ``max_tokens``
        the results are then cut to the budget (``token_budget``), each counted as the ``delivered`` text of what is
        handed of its experience (``delivery.rules_text`` for a ``detail=rules`` answer).
        """
        ws, recovery = self.workspace, self.recovery
        views = ws.views
        await recovery.ensure_reconciled()
        await recovery.retries.maybe_start()
        files = ws.files.checked()  # one validation context for this answer's reads
        pattern = tool_pattern(tools) if tools else None

        def wanted(item: StoredExperience) -> bool:
            return pattern is None or names_any(item.experience.content, pattern)

        def first_page(fused: list[Fused], relevance) -> tuple[list[Fused], Any, list[tuple[Fused, Any]], int]:
            def relevant(hit: Fused) -> bool:
                return relevance(hit) >= min_relevance

            return (fused, relevance, *self._read_page(files, fused, 0, limit, relevant, wanted))

        (fused, relevance, read, position), vector_error = await recovery.without_rebuild(
            lambda: views.search_page(view, query, limit, ws.settings.vector_weight, first_page),
        )
        results = []
        while True:
            for hit, item in read:
                if hit.path in ws.pending:  # it turned pending while the files were read
                    continue
                if item is None:
                    continue
                if isinstance(item, BadFile):  # edited by hand since indexing: exclude and report, never stale
                    recovery.mark_invalid(item)
                    continue
                results.append(search_result(hit, item, relevance(hit), min_evidence))
            if len(results) >= limit or position >= len(fused):
                break
            read, position = await asyncio.to_thread(
                self._read_page,
                files,
                fused,
                position,
                limit - len(results),
                lambda hit: relevance(hit) >= min_relevance,
                wanted,
            )
        answer: SearchAnswer = {
            "status": "ok",
            "index": view,
            "query": query,
            "min_relevance": min_relevance,
            "min_evidence": min_evidence,
            "results": results,
            "index_complete": not ws.pending,
            "pending_indexes": ws.pending.entries(),
        }
        if max_tokens is not None:
            answer["token_budget"] = await self._budget(answer, max_tokens, delivered)
        if vector_error:
            answer["vector_search"] = {"available": False, "error": vector_error}
        return answer

    async def _budget(
        self, answer: SearchAnswer, max_tokens: int, delivered: Callable[[ExperienceFields], str]
    ) -> TokenBudget:
        """Cut ``answer``'s results to the best first ones whose ``delivered`` texts fit ``max_tokens`` (exact
        tokens); what the answer says about it."""
        results = answer["results"]
        try:
            counts = await self.workspace.tokens.acount_many([delivered(r["experience"]) for r in results])
        except TokenizerUnavailable as exc:
            raise ProcedureError(ErrorCode.TOKENIZER_UNAVAILABLE, str(exc)) from None
        kept = within_budget(counts, max_tokens)
        answer["results"] = results[:kept]
        return {"max_tokens": max_tokens, "tokens": sum(counts[:kept]), "left_out": len(results) - kept}

    def _read_page(
        self,
        files: ExperienceFiles,
        fused: list[Fused],
        start: int,
        wanted: int,
        relevant: Callable[[Fused], bool] = lambda hit: True,
        admitted: Callable[[StoredExperience], bool] = lambda item: True,
    ) -> tuple[list[tuple[Fused, Any]], int]:
        """Read the files of the candidates from ``fused[start]`` on, skipping pending files and the candidates
        that are not ``relevant`` (unread), until ``wanted`` of them are valid experiences that are ``admitted``
        (blocking: a worker thread). Returns each candidate read with what ``ExperienceFiles.read`` gave (an
        experience, a BadFile or None; an experience not admitted is left out) and the position after the last one
        read."""
        pending = self.workspace.pending
        read: list[tuple[Fused, Any]] = []
        position = start
        while wanted > 0 and position < len(fused):
            hit = fused[position]
            position += 1
            if hit.path in pending or not relevant(hit):
                continue
            item = files.read(hit.path)
            if isinstance(item, StoredExperience):
                if not admitted(item):
                    continue
                wanted -= 1
            read.append((hit, item))
        return read, position

    def experience_path(self, raw) -> str:
        """Validate an experience path argument: ``<procedure_dir>/<valid name>.json`` inside the directory.

        An entry of the directory under an invalid name, or a symbolic link, is left to the shared file validation
        (``ExperienceFiles.read``), so read and update answer what search reports in ``pending_indexes``.
        """
        ws = self.workspace
        listed = ws.files.listed(raw.strip() if isinstance(raw, str) else raw)
        if listed is not None:
            return listed
        rel, _ = resolve_inside(ws.root, ws.settings.procedure_dir, raw, what="experience")
        parent, _, name = rel.rpartition("/")
        problem = check_name(name)
        if parent != ws.settings.procedure_dir or problem:
            raise ProcedureError(
                ErrorCode.INVALID_ARGUMENT,
                f"`path` must be {ws.settings.procedure_dir}/<name>.json; {problem or 'no subdirectories'}",
            )
        return rel

    def experience(self, raw_path) -> ExperienceAnswer:
        """One experience with its current version."""
        rel = self.experience_path(raw_path)
        item = self.workspace.files.read(rel)
        if item is None:
            raise ProcedureError(ErrorCode.NOT_FOUND, f"No experience at {rel}.", path=rel)
        if isinstance(item, BadFile):
            raise ProcedureError(
                ErrorCode.INVALID_EXPERIENCE,
                f"{rel} is not a valid experience: {item.error}",
                path=rel,
                version=item.version,
            )
        return {
            "status": "ok",
            "kind": "experience",
            "path": rel,
            "version": item.version,
            "experience": item.experience.fields(),
        }

    async def trajectory(self, raw_path, offset: int, length: int, *, mask: bool = False) -> TrajectoryAnswer:
        """An excerpt of a copied trajectory by decoded characters, capped by characters and exact tokens.

        ``mask``: the secrets in the excerpt (also those that only reach into it) are replaced by their labels, the
        token cap applies to the masked text, and the answer says how many were masked (``secrets_masked``) and of
        which kinds; ``length`` and ``next_offset`` still count characters of the copy.
        """
        ws = self.workspace
        rel, target = resolve_inside(ws.root, ws.trajectory_rel_dir, raw_path, what="trajectory")
        if not target.is_file():
            raise ProcedureError(ErrorCode.NOT_FOUND, f"No trajectory at {rel}.", path=rel)
        text = await self._decoded_text(rel, target)
        length = min(length, ws.settings.read_max_chars)
        start = min(len(text), offset)
        excerpt = text[start : start + length]
        findings = await asyncio.to_thread(secrets_within, text, start, start + len(excerpt)) if mask else []
        served = mask_secrets(excerpt, findings) if findings else excerpt
        try:
            capped = await asyncio.to_thread(ws.tokens.prefix_within, served, ws.settings.read_max_tokens)
            kept, covered = masked_prefix(findings, len(capped))  # a label cut by the cap is left out whole
            if covered == 0 and findings and findings[0].start == 0:  # a label alone over the cap: served whole,
                kept, covered = len(mask_label(findings[0].kind)), findings[0].end  # so that paging moves on
            capped = served[:kept]
            tokens = await ws.tokens.acount(capped)
        except TokenizerUnavailable as exc:
            raise ProcedureError(ErrorCode.TOKENIZER_UNAVAILABLE, str(exc)) from None
        end = start + covered
        answer: TrajectoryAnswer = {
            "status": "ok",
            "kind": "trajectory",
            "path": rel,
            "offset": offset,
            "length": covered,
            "total_chars": len(text),
            "tokens": tokens,
            "truncated_by_token_cap": covered < len(excerpt),
            "next_offset": end if end < len(text) else None,
            "text": capped,
        }
        if mask:
            shown = [f for f in findings if f.end <= covered]
            answer["secrets_masked"] = len(shown)
            if shown:
                answer["masked_kinds"] = dict(Counter(f.kind for f in shown))
                answer["note"] = (
                    f"{len(shown)} secret(s) in this excerpt are masked as [masked:<kind>] (the copy "
                    "itself is unchanged); offset, length and next_offset count the copy's characters."
                )
        return answer

    async def _decoded_text(self, rel: str, target: Path) -> str:
        """The decoded trajectory, cached for the last file read (an agent reads one trajectory many times)."""
        stat = target.stat()
        key = (str(target), stat.st_size, stat.st_mtime_ns)
        if self._decoded is None or self._decoded[0] != key:
            try:
                text = (await asyncio.to_thread(target.read_bytes)).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ProcedureError(ErrorCode.INVALID_ARGUMENT, f"{rel} is not UTF-8 text: {exc}", path=rel) from None
            self._decoded = (key, text)
        return self._decoded[1]
