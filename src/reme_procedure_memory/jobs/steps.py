"""Thin ReMe steps: validate arguments, call one operation of the ProcedureMemory component, answer JSON.

ReMe validates no job arguments (HTTP, MCP and CLI pass anything through), so every step validates its own through
the job's model in ``arguments.py`` (refusing names the job does not take, except those ReMe injects into the call:
``runtime_names``) and hands the operation validated arguments. Every
answer is a JSON object in ``Response.answer`` (agents and MCP callers see only the answer); failures also set
``success=False``. The component instance is chosen by step config only (``procedure_memory: <name>``), never by
the caller; a step reaches its operation one way: ``self.memory.<operation>.<method>`` (``component.py``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from reme.components.prompt_handler import PromptHandler
from reme.components.service import CliService
from reme.steps.base_step import BaseStep

from ..component import ProcedureMemory
from ..export.destination import resolve_destination
from ..export.marker import MARKER_FILE
from ..errors import (
    DamagedRecord,
    ErrorCode,
    ImportInterrupted,
    ProcedureError,
    StorageError,
    access_failure,
    error_answer,
    storage_failure,
)
from ..operations.delivery import experience_text, rules_text
from ..operations.reads import compact_answer, rules_answer
from ..operations.secret_guard import refuse_secrets
from ..operations.writes import canonical_filename
from ..schema import AGENT_TOOLS, Job
from .arguments import (
    AutoMemoryArguments,
    CreateArguments,
    DeleteArguments,
    DumpArguments,
    HistoryArguments,
    ImportsArguments,
    ExportArguments,
    JobArguments,
    ListArguments,
    ReadArguments,
    ReindexArguments,
    SearchArguments,
    UpdateArguments,
    is_runtime,
    validate,
)
from ..interrupts import signal_name, signals_cancel_task

# Said to the extraction agent when its search finds nothing (small models took an empty list as "done").
EMPTY_SEARCH_NOTE = (
    "No experience matches yet: if the segment shows a reusable procedure for this, create it with procedure_create."
)


def check_unicode(arguments: dict[str, Any]) -> None:
    """Refuse any text argument (also nested in lists and objects) that is not valid Unicode.

    JSON (HTTP, MCP) can carry a lone surrogate such as ``"\\ud800"`` and a command line can carry undecodable
    bytes; such text cannot be tokenized, embedded, written as UTF-8 or used as a file name.
    """
    stack = [(name, value) for name, value in arguments.items() if isinstance(name, str)]
    while stack:
        name, value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ProcedureError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"`{name}` is not valid Unicode text: character {exc.start} is a lone surrogate "
                    f"({value[exc.start]!r}). Send UTF-8 text; nothing was read or written.",
                ) from None
        elif isinstance(value, (list, tuple)):
            stack += [(name, item) for item in value]
        elif isinstance(value, dict):
            stack += [(name, item) for item in value.values()]


class ClassPrompts(PromptHandler):
    """ReMe's prompt handler with each class's prompt file looked up once per process.

    ReMe builds a job's steps anew for every call, and ``BaseStep.__init__`` loads the prompts of every class in the
    step's MRO: an ``inspect.getfile`` and two ``stat`` calls per class, per request. The files are part of the
    installed code, so the prompts found for a class the first time are reused (the same merge: string entries,
    same overwrite rule).
    """

    _by_class: dict[type, dict[str, str]] = {}

    @classmethod
    def of(cls, handler: PromptHandler) -> "ClassPrompts":
        """A ClassPrompts with ``handler``'s language and prompts."""
        prompts = cls(language=handler.language)
        prompts.data = dict(handler.data)
        return prompts

    def load_prompt_by_class(self, cls: type, overwrite: bool = True) -> "ClassPrompts":
        found = self._by_class.get(cls)
        if found is None:
            found = self._by_class[cls] = PromptHandler().load_prompt_by_class(cls).data
        self.load_prompt_dict(found, overwrite)
        return self


class ProcedureStep(BaseStep):
    """Base of the plugin's steps: component lookup and the JSON answer contract."""

    @property
    def prompt(self) -> PromptHandler:
        return self.__dict__["prompt"]

    @prompt.setter
    def prompt(self, handler: PromptHandler) -> None:
        # BaseStep.__init__ sets a fresh PromptHandler, then loads the class prompts into it: swap in the cached kind
        self.__dict__["prompt"] = handler if isinstance(handler, ClassPrompts) else ClassPrompts.of(handler)

    @property
    def memory(self) -> ProcedureMemory:
        name = self.kwargs.get("procedure_memory", "default")
        component = (self.app_context.components.get("procedure_memory") or {}).get(name)
        if not isinstance(component, ProcedureMemory):
            raise ProcedureError(
                ErrorCode.NOT_AVAILABLE,
                f"components.procedure_memory.{name} is not configured; enable plugins='[\"procedure-memory\"]'.",
            )
        return component

    def arg(self, name: str) -> Any:
        assert self.context is not None
        return self.context.get(name)

    def runtime_names(self) -> frozenset[str]:
        """Names ReMe injects into this call besides those ``arguments.is_runtime`` knows: the keys of the service's
        ``injected_job_kwargs`` (added to every MCP tool call) and the configuration keys of the jobs that run this
        step (``jobs.<name>.<key>``: ReMe's BaseJob merges them into every call)."""
        app = self.app_context
        if app is None:
            return frozenset()
        injected = getattr(app.app_config.service, "injected_job_kwargs", None)
        names = set(injected) if isinstance(injected, dict) else set()
        for job in app.jobs.values():
            if any(cls is type(self) for cls, _ in getattr(job, "step_specs", ())):
                names.update(getattr(job, "kwargs", None) or {})
        return frozenset(names)

    def validated_arguments(self, arguments: dict[str, Any] | None = None, **context: Any):
        """The call's arguments (or ``arguments``) as the job's model validates them (``arguments.validate``)."""
        assert self.context is not None
        data = dict(self.context.data) if arguments is None else arguments
        return validate(self.arguments, data, self.runtime_names(), **context)

    # What each step declares: the model of its job's arguments, which names the job (``arguments.job``). Whether
    # extraction agents are given the job as a tool is ``schema.AGENT_TOOLS`` (extraction, below this layer, reads it).
    arguments: type[JobArguments]

    @property
    def job(self) -> Job:
        return self.arguments.job

    @property
    def is_agent_tool(self) -> bool:
        return self.job in AGENT_TOOLS

    async def execute(self) -> None:
        """Answer one JSON object. Inside an extraction run, a call identical to one the run already got an answer
        for, with nothing changed since, gets that answer again with a nudge instead of running again."""
        assert self.context is not None
        run, key = self._agent_call()
        repeated = run.repeated(key, self.memory.workspace.generation) if run is not None else None
        if repeated is not None:
            success, answer = repeated
        else:
            answer, success = await self._answer()
            if run is not None:
                run.remember(key, self.memory.workspace.generation, success, answer)
        self.context.response.success = success
        self.context.response.answer = json.dumps(answer, ensure_ascii=False)

    def _agent_call(self):
        """(live run, call identity) when an extraction agent makes this call, else (None, "")."""
        if not self.is_agent_tool:
            return None, ""
        try:
            memory = self.memory
        except ProcedureError:
            return None, ""
        run = memory.grants.live_attempt(
            self.arg("tool_context_id"),
            self.arg("_procedure_grant"),
            self.arg("_procedure_sources"),
        )
        return (run, run.call_key(self.job, self.context.data)) if run is not None else (None, "")

    async def _answer(self) -> tuple[dict[str, Any], bool]:
        try:
            check_unicode(self.context.data)
            answer = await self.run()
            return answer, answer.get("status") not in ("incomplete", "rejected", "error")
        except ProcedureError as exc:
            return exc.answer(), False
        except (StorageError, DamagedRecord) as exc:  # a full disk, an unwritable directory, a damaged record
            self.logger.exception(f"{self.name} failed: {exc}")
            code, message = (
                storage_failure(exc)
                if isinstance(exc, StorageError)
                else (ErrorCode.METADATA_DAMAGED, f"{exc}. Run the same command again to continue.")
            )
            return error_answer(code, message), False
        except OSError as exc:  # any other file-system failure (a read, a listing): still a storage code
            self.logger.exception(f"{self.name} failed: {exc}")
            return error_answer(*access_failure(exc)), False
        except Exception as exc:  # still one JSON answer (agents and MCP see only the answer); logged in full
            self.logger.exception(f"{self.name} failed: {exc}")
            return error_answer(ErrorCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"), False

    async def run(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError


class ProcedureSearchStep(ProcedureStep):
    """``procedure_search query=... index=when_to_use|when_to_use_content limit=5 [min_relevance=0.3]
    [tools=a,b] [max_tokens=800] [detail=full|compact|rules] [min_evidence=3]``. Inside an extraction run the
    relevance floor and the evidence minimum are 0 unless given: the agent looks for any related experience to
    revise, and revises the rules it has, the thin ones too."""

    arguments = SearchArguments

    async def run(self) -> dict[str, Any]:
        memory = self.memory
        args = self.validated_arguments()
        run = self._agent_call()[0]
        floor, minimum = args.min_relevance, args.min_evidence
        if floor is None:  # the agent looks for any related experience; a service caller gets the configured floor
            floor = 0.0 if run is not None else memory.settings.search.min_relevance
        if minimum is None:  # the agent sees every rule it may revise; a service caller gets the configured minimum
            minimum = 0 if run is not None else memory.settings.search.min_evidence
        detail = args.detail or ("compact" if run is not None else "full")
        answer = await memory.reads.search(
            args.query,
            args.index,
            args.limit,
            min_relevance=floor,
            tools=args.tools or (),
            max_tokens=args.max_tokens,
            delivered=rules_text if detail == "rules" else experience_text,  # the budget counts what is handed
            min_evidence=minimum,
        )
        if not answer["results"] and run is not None:  # the extraction agent's next step
            answer["note"] = EMPTY_SEARCH_NOTE
        if detail == "rules":
            answer = rules_answer(answer)
        elif detail == "compact":
            answer = compact_answer(answer, run.shown if run is not None else None)
        elif run is not None:  # the agent's "full": every result's content, not the raw scores and sources
            answer = compact_answer(answer, run.shown, every_content=True)
        return answer


class ProcedureReadStep(ProcedureStep):
    """``procedure_read path=procedures/x.json`` or ``kind=trajectory path=... offset=0 length=8192``."""

    arguments = ReadArguments

    async def run(self) -> dict[str, Any]:
        memory = self.memory
        args = self.validated_arguments()
        if args.kind == "experience":
            return memory.reads.experience(args.path)
        # a service caller gets the credentials in it masked; the extraction agent reads what its segment shows
        mask = memory.settings.mask_trajectory_secrets and self._agent_call()[0] is None
        return await memory.reads.trajectory(args.path, args.offset, args.length, mask=mask)


class ProcedureListStep(ProcedureStep):
    """``procedure_list [limit=50] [cursor=<next>]``: the experiences by path, a page at a time (read only)."""

    arguments = ListArguments

    async def run(self) -> dict[str, Any]:
        memory = self.memory
        args = self.validated_arguments()
        return await memory.listing.experiences(args.cursor, args.limit)


class ProcedureImportsStep(ProcedureStep):
    """``procedure_imports [limit=50] [cursor=<next>]``: the imports by request id, a page at a time (read only)."""

    arguments = ImportsArguments

    async def run(self) -> dict[str, Any]:
        memory = self.memory
        args = self.validated_arguments()
        return await memory.listing.imports(args.cursor, args.limit)


class _WriteStep(ProcedureStep):
    """Create/update: only with the live grant of an active extraction run (injected, never from the model)."""

    def run_of_call(self):
        return self.memory.grants.attempt_for(
            self.arg("tool_context_id"),
            self.arg("_procedure_grant"),
            self.arg("_procedure_sources"),
        )

    def write_args(self) -> dict[str, Any]:
        assert self.context is not None
        return dict(self.context.data)

    def validated(self):
        """The call's arguments as the job's model validated them (the filename and path checks know ``procedure_dir``),
        after the secret guard: an argument holding a credential is refused before any check could repeat it."""
        memory = self.memory
        directory = memory.settings.procedure_dir
        arguments, runtime = self.write_args(), self.runtime_names()
        # the secret guard first: no other refusal (an unknown name, a bad filename) may repeat a secret
        refuse_secrets({name: value for name, value in arguments.items() if not is_runtime(name, runtime)})
        return self.validated_arguments(
            arguments, filename=lambda name: canonical_filename(name, directory), path=memory.reads.experience_path
        )


class ProcedureCreateStep(_WriteStep):
    """``procedure_create filename description when_to_use content operation_key`` (agent tool only)."""

    arguments = CreateArguments

    async def run(self) -> dict[str, Any]:
        run = self.run_of_call()
        return await self.memory.writes.create(run, self.validated(), self.write_args())


class ProcedureUpdateStep(_WriteStep):
    """``procedure_update path expected_version [fields] operation_key`` (agent tool only)."""

    arguments = UpdateArguments

    async def run(self) -> dict[str, Any]:
        run = self.run_of_call()
        return await self.memory.writes.update(run, self.validated(), self.write_args())


class ProcedureReindexStep(ProcedureStep):
    """``reme start job=procedure_reindex plugins='["procedure-memory"]'``."""

    arguments = ReindexArguments

    async def run(self) -> dict[str, Any]:
        memory = self.memory
        self.validated_arguments()
        return await memory.recovery.reindex()


class ProcedureExportStep(ProcedureStep):
    """``reme start job=procedure_export plugins='["procedure-memory"]' workspace_dir=<ws> dest=/abs/dir`` (one-shot
    CLI). ``workspace_dir`` must be given, and a workspace without experience files never claims ``dest``
    (decisions.md, missing-workspace)."""

    arguments = ExportArguments

    async def run(self) -> dict[str, Any]:
        memory = self.memory
        dest = self.validated_arguments().dest
        config = self.app_context.app_config
        if "workspace_dir" not in config.model_fields_set:  # not ReMe's silent default (.reme in the cwd)
            raise ProcedureError(
                ErrorCode.INVALID_ARGUMENT,
                "procedure_export needs the workspace to export: add workspace_dir=<workspace> (without it ReMe "
                f"would use {memory.workspace_path}). Nothing was written.",
            )
        if not memory.workspace.files.paths():  # a refused destination says so first (the export checks it again)
            claimed = (resolve_destination(dest, memory.workspace_path) / MARKER_FILE).exists()
            if not claimed:
                raise ProcedureError(  # an empty export would claim the destination for this workspace
                    ErrorCode.NOT_FOUND,
                    f"{memory.workspace_path / memory.settings.procedure_dir} holds no experience, so there is nothing "
                    f"to export and {dest} was left as it was. Check workspace_dir, or import a trajectory first.",
                )
        return await memory.exporter.export(dest)


class ProcedureDeleteStep(ProcedureStep):
    """``reme start job=procedure_delete plugins='["procedure-memory"]' path=procedures/x.json`` (one-shot CLI):
    removes one experience, recorded in its history."""

    arguments = DeleteArguments

    async def run(self) -> dict[str, Any]:
        memory = self.memory
        return await memory.deletion.delete(self.validated_arguments().path)


class ProcedureAutoMemoryStep(ProcedureStep):
    """``reme start job=procedure_auto_memory file=/abs/run.jsonl filename=run.jsonl [request_id=...]``.

    The agent wrapper is pinned by step config (``agent_wrapper: default``), so callers cannot redirect it. Run from
    the command line (ReMe's ``cli`` service), a generated request id is printed on stderr before anything is copied,
    and SIGINT / SIGTERM end the import with its ``incomplete`` answer (on stderr, like every failed answer) and exit
    status 130 / 143 once the application has closed.
    """

    arguments = AutoMemoryArguments

    async def run(self) -> dict[str, Any]:
        args = self.validated_arguments()
        assert self.context is not None
        if not self._from_command_line():
            return await self.memory.importer.run(self.agent_wrapper, args)
        if not self.context.data.get("request_id"):  # the user's only handle on this import if it stops
            message = (
                f"request_id={args.request_id} (generated; to resume, run the same command with "
                f"request_id={args.request_id})"
            )
            self.memory.workspace.logger.info(f"procedure import: {message}")
            print(f"[procedure-memory] {message}", file=sys.stderr, flush=True)
        with signals_cancel_task() as received:
            try:
                return await self.memory.importer.run(self.agent_wrapper, args, received)
            except asyncio.CancelledError:  # before the import began (start-up reconciliation): nothing to resume
                if not received:
                    raise
                asyncio.current_task().uncancel()
                error = ProcedureError(
                    ErrorCode.INTERRUPTED,
                    f"Interrupted by {signal_name(received[0])} before the import began. Run the same command again.",
                    status="incomplete",
                    request_id=args.request_id,
                    filename=args.filename,
                )
                interrupted = ImportInterrupted(error.answer(), received[0])
            except ImportInterrupted as exc:
                interrupted = exc
        print(json.dumps(interrupted.answer, ensure_ascii=False), file=sys.stderr, flush=True)
        raise SystemExit(128 + interrupted.signum)

    def _from_command_line(self) -> bool:
        """Whether this job runs as ``reme start job=...`` (ReMe's one-shot ``cli`` service)."""
        return isinstance(getattr(self.app_context, "service", None), CliService)


# -- procedure_history (reviewable revisions) ---------------------------------------------------------------------


class ProcedureHistoryStep(ProcedureStep):
    """``procedure_history path=procedures/x.json [diff=true] [offset=0] [limit=20]``: every durable version of an
    experience, oldest first (read-only; served like ``procedure_read``, not an agent tool)."""

    arguments = HistoryArguments

    async def run(self) -> dict[str, Any]:
        memory = self.memory
        args = self.validated_arguments()
        return await memory.history.answer(args.path, with_diff=args.diff, offset=args.offset, limit=args.limit)


class ProcedureDumpStep(ProcedureStep):
    """``reme start job=procedure_dump plugins='["procedure-memory"]' workspace_dir=<ws>`` (one-shot CLI): every
    metadata file with its kind, format, status and size, for support (storage/dump.py; read-only)."""

    arguments = DumpArguments

    async def run(self) -> dict[str, Any]:
        memory = self.memory
        self.validated_arguments()
        return await asyncio.to_thread(memory.metadata.answer)
