"""The write path: validation of a write, journal → publish → index, replay of an operation key.

Contract:

* Only a live run writes: the steps find it with ``AttemptGrants.attempt_for`` (attempts.py), which fails closed.
* No write carries a credential (``secret_guard.py``): the steps check every argument the agent wrote before anything
  else reads it (so no other answer can echo it), and the write path checks the experience it would write, an
  update's fields kept from the file included; nothing is written.
* ``Writes.create``/``update`` take arguments their step validated through the job's model (``jobs/arguments.py``;
  the filename check is ``canonical_filename`` here, the path check the reads' ``experience_path``), count the fields
  exactly (``field_too_long``: nothing is written), then, under the workspace's write lock, journal the intent,
  publish the file and index both views. A publish that cannot be made
  durable answers ``disk_full``/``storage_error`` and is remembered on the run; an index failure answers
  ``index_pending`` (the file is saved and excluded from search until indexed).
* An operation key seen before in the run's scope replays: an identical request resumes or repeats its answer,
  anything else is ``operation_key_conflict``; a write overtaken by another is ``stale_version``. A write given no
  key gets one derived from its segment and its arguments (``derived_key``): an identical retry replays.

* An update of a file whose content the journal does not hold (changed or placed by hand) records that content as a
  change made by hand first (``HandChanges.record_edit``), so the experience's history has the update's predecessor.

The durable files are written by ``storage/`` (journal, experience files); this module decides what and in which
order, on the shared state of the ``Workspace`` (files, journal, views, pending, write lock, change counters).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..answers import WriteAnswer
from ..errors import ErrorCode, IndexFailure, ProcedureError, TokenizerUnavailable, storage_failure
from ..schema import (
    ADVICE_MARKER,
    ARG_TO_FIELD,
    FIELD_TO_ARG,
    NAME_EXAMPLE,
    TEXT_FIELDS,
    Experience,
    canonical_name,
    check_name,
    version_of,
)
from ..settings import TokenLimits
from ..storage.experiences import BadFile, StoredExperience
from ..storage.journal import (
    ABANDONED,
    INDEX_PENDING,
    INDEXED,
    INTENT,
    PUBLISHED,
    SUPERSEDED,
    Operation,
    recover_intent,
)
from ..tokens import TokenCounter
from .hand_changes import HandChanges
from .attempts import AgentAttempt
from .secret_guard import refuse_assembled, refuse_secrets

if TYPE_CHECKING:
    from ..workspace import Workspace

# How an answer asks for a different write: the runtime derives a key from the request (a different request has a
# different key), so only a caller that gives its own key must give a new one; extraction agents give none.
NEW_KEY = "a new operation_key, if you give one"


# An update's additions: argument -> the field it is added to (``_append`` of the field's argument name)
APPEND_TO_FIELD = {f"{arg}_append": field for arg, field in ARG_TO_FIELD.items() if arg != "description"}


def request_digest(tool: str, args: dict[str, Any]) -> str:
    """What an operation key stands for: the tool and the arguments as given (an identical retry digests alike). An
    addition (``*_append``) counts only when given, so digests journaled before additions existed stay the same."""
    payload = {k: args.get(k) for k in ("filename", "path", "expected_version", *ARG_TO_FIELD)}
    payload.update({k: args[k] for k in APPEND_TO_FIELD if args.get(k) is not None})
    return hashlib.sha256(json.dumps([tool, payload], sort_keys=True).encode()).hexdigest()


def appended_fields(args) -> dict[str, str]:
    """An update's additions given (validated arguments), keyed by the field they are added to."""
    return {field: getattr(args, arg) for arg, field in APPEND_TO_FIELD.items() if getattr(args, arg) is not None}


def with_addition(text: str, addition: str) -> str:
    """``addition`` on a new line after ``text``; when ``text`` ends with the extractor's advice (``ADVICE_MARKER``),
    the addition's steps go before it and the addition's own advice (after its marker) after it, so advice stays
    last."""
    at = text.find(ADVICE_MARKER)
    if at < 0:
        return f"{text.rstrip()}\n{addition.strip()}"
    steps, _, advice = addition.partition(ADVICE_MARKER)
    head, tail = text[:at].rstrip(), text[at:].rstrip()
    head = "\n".join(part for part in (head, steps.strip()) if part)
    tail = f"{tail}\n{advice.strip()}" if advice.strip() else tail
    return f"{head}\n{tail}" if head else tail


def derived_key(segment: int | None, request: str) -> str:
    """The operation key of a write that was given none: its segment and its request digest, so an identical retry in
    the same segment (also on resume) is the same operation and any other write a new one (docs/decisions.md 2)."""
    where = f"s{segment + 1}" if segment is not None else "run"
    return f"auto-{where}-{request[:16]}"


def bare_name(raw: str, procedure_dir: str) -> str:
    """The filename as given, stripped and without a leading ``<procedure_dir>/``."""
    name, prefix = raw.strip(), procedure_dir + "/"
    return name[len(prefix) :] if name.startswith(prefix) else name


def canonical_filename(raw: str, procedure_dir: str) -> str:
    """The canonical spelling of an experience filename (``schema.canonical_name``), or invalid_argument."""
    name = bare_name(raw, procedure_dir)
    canonical = canonical_name(name)
    if canonical is None:
        problem = check_name(name) or "it has no canonical lowercase-hyphenated spelling"
        raise ProcedureError(
            ErrorCode.INVALID_ARGUMENT,
            f"Invalid `filename` {raw!r}: {problem}. Use letters a-z and digits 0-9 in words joined by "
            f"hyphens, ending in .json, e.g. {NAME_EXAMPLE}.",
        )
    return canonical


def experience_fields(args) -> dict[str, str]:
    """The experience fields given (validated create or update arguments), keyed as in the file."""
    return {field: getattr(args, arg) for arg, field in ARG_TO_FIELD.items() if getattr(args, arg) is not None}


async def counted(tokens: TokenCounter, texts: list[str]) -> list[int]:
    """Exact token counts of ``texts``; a tokenizer that cannot load answers ``tokenizer_unavailable``."""
    try:
        return await tokens.acount_many(texts)
    except TokenizerUnavailable as exc:
        raise ProcedureError(ErrorCode.TOKENIZER_UNAVAILABLE, str(exc)) from None


async def check_lengths(
    tokens: TokenCounter, limits: TokenLimits, fields: dict[str, str], *, added: bool = False
) -> None:
    """Count fields exactly; over an acceptance ceiling, ask for a shorter field (targets only are shown). ``added``:
    the fields are an existing text with an addition, so the way out is a shorter rewrite of the whole field."""
    names = list(fields)
    counts = await counted(tokens, [fields[n] for n in names])
    too_long = []
    for name, count in zip(names, counts):
        target = limits.field_target(name)
        if count > limits.ceiling(target):
            too_long.append({"field": FIELD_TO_ARG[name], "tokens": count, "limit": target})
    if too_long:
        parts = ", ".join(f"`{t['field']}` has {t['tokens']} tokens (limit {t['limit']})" for t in too_long)
        way_out = (
            (
                "With the addition, " + parts + ". procedure_read the experience and rewrite the field(s) within "
                f"the limit ({NEW_KEY})."
            )
            if added
            else f"{parts}. Shorten the field(s) to the limit and call again ({NEW_KEY})."
        )
        raise ProcedureError(ErrorCode.FIELD_TOO_LONG, f"Nothing was written: {way_out}", fields=too_long)


async def check_growth(
    tokens: TokenCounter,
    limit: int,
    ceiling: int,
    before: dict[str, str],
    after: dict[str, str],
    rel: str,
    added: bool,
) -> None:
    """An update may take an experience's three text fields (``before`` -> ``after``, keyed as in the file) to at
    most ``ceiling`` tokens, the acceptance ceiling of the target ``limit`` (``extraction.grow_limit``, the one the
    agent is told; 0: no bound; ``extraction.grow_ceiling``), or leave them no larger than they were: past it the
    answer asks for one consolidated rewrite within ``limit``, since revisions that add each trajectory's case make
    an experience grow with every trajectory instead of generalising. ``added``: the update is an addition."""
    if limit <= 0:
        return
    counts = await counted(tokens, [before[n] for n in TEXT_FIELDS] + [after[n] for n in TEXT_FIELDS])
    was, total = sum(counts[: len(TEXT_FIELDS)]), sum(counts[len(TEXT_FIELDS) :])
    if total <= ceiling or total <= was:
        return
    what = "with the addition" if added else "with this update"
    raise ProcedureError(
        ErrorCode.CONSOLIDATE_REQUIRED,
        f"Nothing was written: {what}, {rel} would hold {total} tokens (now {was}); an update may grow an "
        f"experience to at most {limit}. Fold this case into its general procedure instead: procedure_update it with "
        "`content` (and `when_to_use` if needed) rewritten as one procedure that covers this case too (a "
        "placeholder for a value that varies, a condition where a step differs, a rule's count raised; one short "
        f"example per step at most), within {limit} tokens for its three text fields"
        + ("; procedure_read it first if you were not shown its content." if added else "."),
        path=rel,
        tokens=total,
        limit=limit,
    )


def check_sources(workspace: Path, run: AgentAttempt) -> None:
    """The run's source trajectories must still exist when it writes."""
    for source in run.sources:
        if not (workspace / source).is_file():
            raise ProcedureError(ErrorCode.NOT_FOUND, f"Source trajectory {source} no longer exists.")


def already_exists(rel: str, note: str = "", **extra) -> ProcedureError:
    return ProcedureError(
        ErrorCode.ALREADY_EXISTS,
        f"{rel} already exists{note}. Read it and use procedure_update with its expected_version, or choose another "
        "meaningful filename.",
        path=rel,
        **extra,
    )


class Writes:
    """Create and update experiences for a live run (see the module docstring)."""

    def __init__(self, workspace: Workspace, hand_changes: HandChanges) -> None:
        self.workspace = workspace
        self.hand_changes = hand_changes

    # -- create and update --------------------------------------------------------------------------------------

    async def create(self, run: AgentAttempt, args, raw: dict[str, Any]) -> WriteAnswer:
        """Create a new experience (journal, publish, index both views) from validated ``args`` (``raw``: the
        arguments as given).

        The filename is used in its canonical spelling (``canonical_filename``); when that differs from what the
        agent wrote, the answer says so (``filename_used``). ``already_exists`` applies to the canonical name.
        """
        ws, directory = self.workspace, self.workspace.settings.procedure_dir
        raw_name, canonical = raw["filename"], args.filename
        rel = ws.files.rel(canonical)
        fields = experience_fields(args)
        # what is stored is judged: the fields, together too, and the name as spelled on disk (the underscores of a
        # token's prefix became hyphens: both spellings are judged)
        refuse_secrets(
            {
                "filename": [canonical, canonical.replace("-", "_")],
                **{FIELD_TO_ARG[name]: text for name, text in fields.items()},
            }
        )
        refuse_assembled({FIELD_TO_ARG[name]: text for name, text in fields.items()})
        await check_lengths(ws.tokens, ws.settings.token_limits, fields)
        check_sources(ws.root, run)
        experience = Experience.model_validate({**fields, "sources": list(run.sources)})
        # the request digest (idempotent retries) sees the name used
        request = request_digest("create", {**raw, "when_to_use": args.when_to_use, "filename": canonical})
        op = Operation(
            scope=run.scope,
            key=args.operation_key or derived_key(run.segment, request),
            tool="create",
            request=request,
            path=rel,
            target=experience.to_bytes().decode("utf-8"),
            expected_version=None,
            segment=run.segment,
        )
        renamed = {"filename_used": canonical, "filename_given": raw_name}
        renamed = renamed if canonical != bare_name(raw_name, directory) else {}
        note = f" (the filename {raw_name!r} is used as {canonical})" if renamed else ""
        async with ws.write_lock:
            existing = ws.journal.get(run.scope, op.key)
            if existing is not None:
                return {**await self._replay(run, existing, op), **renamed}
            if ws.files.read_bytes(rel) is not None or self._reserved(rel):
                raise already_exists(rel, note, **renamed)
            return {**await self._commit(run, op), **renamed}

    async def update(self, run: AgentAttempt, args, raw: dict[str, Any]) -> WriteAnswer:
        """Revise an existing experience at its expected version (validated ``args``; ``raw``: as given); existing
        sources are kept."""
        ws = self.workspace
        rel, expected = args.path, args.expected_version
        fields, additions = experience_fields(args), appended_fields(args)
        both = [FIELD_TO_ARG[name] for name in additions if name in fields]
        if both:
            raise ProcedureError(
                ErrorCode.INVALID_ARGUMENT,
                f"Give `{both[0]}` (the whole new text) or `{both[0]}_append` (an addition), not both.",
            )
        refuse_secrets(
            {
                **{FIELD_TO_ARG[name]: text for name, text in fields.items()},
                **{f"{FIELD_TO_ARG[name]}_append": text for name, text in additions.items()},
            }
        )
        if fields:
            await check_lengths(ws.tokens, ws.settings.token_limits, fields)
        check_sources(ws.root, run)
        request = request_digest(
            "update", {**raw, "when_to_use": args.when_to_use, **{arg: getattr(args, arg) for arg in APPEND_TO_FIELD}}
        )
        key = args.operation_key or derived_key(run.segment, request)
        async with ws.write_lock:
            existing = ws.journal.get(run.scope, key)
            if existing is not None:
                probe = Operation(run.scope, key, "update", request, rel, existing.target, expected)
                return await self._replay(run, existing, probe)
            current = ws.files.read(rel)
            if current is None:
                raise ProcedureError(ErrorCode.NOT_FOUND, f"No experience at {rel}; use procedure_create.", path=rel)
            if isinstance(current, BadFile):  # never rewritten: whoever placed it fixes it by hand
                raise ProcedureError(
                    ErrorCode.INVALID_EXPERIENCE,
                    f"{rel} is not a valid experience ({current.error}); it cannot be updated by the agent.",
                    path=rel,
                    version=current.version,
                )
            if current.version != expected:
                # additions keep whatever changed (nothing is overwritten), so they may be retried without a read
                how = (
                    f"Retry the additions with expected_version {current.version} (read it first if they may "
                    "repeat what changed)"
                    if not fields
                    else "Read it again and retry with the current expected_version"
                )
                raise ProcedureError(
                    ErrorCode.STALE_VERSION,
                    f"{rel} is at version {current.version}, not {expected}. {how} ({NEW_KEY}).",
                    path=rel,
                    current_version=current.version,
                )
            kept = {
                FIELD_TO_ARG[n]: t
                for n, t in current.experience.fields().items()
                if n in FIELD_TO_ARG and n not in fields
            }
            refuse_secrets(kept, already_in=rel)  # a hand-edited file: the write would publish its secret again
            now = current.experience.fields()
            grown = {name: with_addition(now[name], text) for name, text in additions.items()}
            # the grown field is judged, not the addition alone: an addition may complete what the field began
            refuse_secrets({f"{FIELD_TO_ARG[name]}_append": text for name, text in grown.items()}, added=True)
            refuse_assembled(
                {FIELD_TO_ARG[name]: text for name, text in {**now, **fields, **grown}.items() if name in FIELD_TO_ARG}
            )
            if grown:
                await check_lengths(ws.tokens, ws.settings.token_limits, grown, added=True)
            merged = {**now, **fields, **grown}
            extraction = ws.settings.extraction
            await check_growth(
                ws.tokens, extraction.grow_limit, extraction.grow_ceiling(), now, merged, rel, added=bool(grown)
            )
            self._record_predecessor(rel, current.version)
            merged["sources"] = list(dict.fromkeys([*current.experience.sources, *run.sources]))
            experience = Experience.model_validate(merged)
            op = Operation(
                scope=run.scope,
                key=key,
                tool="update",
                request=request,
                path=rel,
                target=experience.to_bytes().decode("utf-8"),
                expected_version=expected,
                segment=run.segment,
            )
            return await self._commit(run, op)

    def _record_predecessor(self, rel: str, version: str) -> None:
        """Record the content about to be updated when the journal does not hold it (a change made by hand). A
        failure only costs the history that version (logged): the update itself goes on and answers for itself."""
        try:
            self.hand_changes.record_edit(rel, version)
        except OSError as exc:
            self.workspace.logger.warning(
                f"procedure memory: the content of {rel} before this update was not recorded: {exc}"
            )

    # -- journal → publish → index --------------------------------------------------------------------------------

    def _reserved(self, rel: str) -> bool:
        """Whether an unfinished create intent holds this name."""
        return any(op.path == rel and op.status == INTENT for op in self.workspace.journal.open_records())

    async def _commit(self, run: AgentAttempt, op: Operation) -> WriteAnswer:
        """Journal the intent, publish the file, then index it (caller holds the write lock).

        A write that cannot be made durable (a full disk, a directory that is not writable — the journal's or the
        experience directory) answers ``disk_full``/``storage_error`` and is remembered on the run: its segment
        cannot advance until a later write of the same path or content succeeds (see ``AgentAttempt.failed_writes``).
        """
        ws = self.workspace
        ws.mark_changed()
        try:
            ws.journal.put(op)
            try:
                ws.files.publish(op.path, op.target_bytes)
            except OSError as exc:
                if ws.files.read_bytes(op.path) != op.target_bytes:  # resolve the intent: it holds no name now
                    ws.journal.set_status(op, ABANDONED, f"publish failed: {storage_failure(exc)[1]}")
                    raise
            ws.journal.set_status(op, PUBLISHED)
        except OSError as exc:
            code, message = storage_failure(exc, op.path)
            run.write_failed(op, code, message)
            raise ProcedureError(
                code,
                f"{message} The write did not complete. Retry the identical call (the same operation_key) later; if "
                "it keeps failing, finish the segment: the import then stops, and once the cause is fixed a resume "
                "runs this segment again.",
                path=op.path,
                operation_key=op.key,
            ) from None
        return await self._index_published(run, op)

    async def _index_published(self, run: AgentAttempt, op: Operation) -> WriteAnswer:
        ws = self.workspace
        ws.mark_changed()
        stored = ws.files.read(op.path)
        assert isinstance(stored, StoredExperience) and stored.version == op.target_version
        run.write_succeeded(op)  # published: an index failure is reported (and gated) as pending instead
        try:
            await ws.views.index([(stored, ws.mtime(op.path))])
        except Exception as exc:
            if not isinstance(exc, IndexFailure):  # structural: exclusion itself failed; keep the record, fail loud
                ws.pending.mark(op.path, stored.version, f"{type(exc).__name__}: {exc}")
                ws.journal.set_status(op, INDEX_PENDING, f"{type(exc).__name__}: {exc}")
                raise
            ws.pending.mark(op.path, stored.version, str(exc))
            ws.journal.set_status(op, INDEX_PENDING, str(exc))
            raise ProcedureError(
                ErrorCode.INDEX_PENDING,
                f"{op.path} was saved (version {stored.version}) but could not be indexed: {exc}. The file is "
                "excluded from search until it is indexed. Retry this identical call for a temporary failure; "
                "if the content itself is rejected, procedure_read it and procedure_update it with its current "
                f"expected_version ({NEW_KEY}).",
                status="index_pending",
                path=op.path,
                version=stored.version,
                operation_key=op.key,
            ) from None
        ws.pending.clear(op.path)
        ws.journal.set_status(op, INDEXED)
        ws.count_write()
        ws.journal.supersede_path(op.path, keep=op)
        status = "created" if op.tool == "create" else "updated"
        return {
            "status": status,
            "path": op.path,
            "version": stored.version,
            "operation_key": op.key,
            "sources": list(stored.experience.sources),
        }

    async def _replay(self, run: AgentAttempt, existing: Operation, op: Operation) -> WriteAnswer:
        """An operation key seen before: an identical retry resumes it, anything else is a conflict."""
        ws = self.workspace
        if not existing.same_request(op):
            raise ProcedureError(
                ErrorCode.OPERATION_KEY_CONFLICT,
                f"operation_key {op.key!r} was already used for a different write; use a new operation_key.",
            )
        if existing.status == INTENT:
            recover_intent(existing, ws.files, ws.journal)
        if existing.status == ABANDONED:
            return await self._retry_abandoned(run, existing)
        if existing.status == SUPERSEDED:
            raise ProcedureError(
                ErrorCode.STALE_VERSION,
                f"This write was {existing.status} ({existing.error}). Read {existing.path} again and write "
                f"again ({NEW_KEY}).",
                path=existing.path,
            )
        current = ws.files.read_bytes(existing.path)
        if existing.status == INDEXED:
            return {
                "status": "created" if existing.tool == "create" else "updated",
                "path": existing.path,
                "version": existing.target_version,
                "operation_key": existing.key,
                "replayed": True,
            }
        if current != existing.target_bytes:
            ws.journal.set_status(existing, SUPERSEDED, "the file changed after this write")
            raise ProcedureError(
                ErrorCode.STALE_VERSION,
                f"{existing.path} changed after this write; read it again and write again ({NEW_KEY}).",
                path=existing.path,
            )
        return await self._index_published(run, existing)

    async def _retry_abandoned(self, run: AgentAttempt, op: Operation) -> WriteAnswer:
        """The identical retry of a write that never became durable (its publish failed, or a crash dropped its
        intent) publishes it now when its precondition still holds: a create's name is free, an update's file is
        still at its expected version. Otherwise it is refused like a new write, and a failure of it stays on the
        run until a later write of the path or of the content succeeds."""
        current = self.workspace.files.read_bytes(op.path)
        if op.tool == "create" and (current is not None or self._reserved(op.path)):
            raise already_exists(op.path)
        if op.tool == "update" and (current is None or version_of(current) != op.expected_version):
            raise ProcedureError(
                ErrorCode.STALE_VERSION,
                f"{op.path} changed after this write failed ({op.error}); read it again and write with a new "
                "operation_key.",
                path=op.path,
            )
        return await self._commit(run, replace(op, status=INTENT, error="", segment=run.segment))
