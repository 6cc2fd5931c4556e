"""Job arguments, declared once: one pydantic model per job, the source of both validation and the advertised schema.

ReMe validates no job arguments (HTTP, MCP and the CLI pass anything through; the CLI sends ``007`` as a string), so
every job validates its own through its model. ``parameters(model)`` is the schema the job advertises in plugin.yaml
(what agents, MCP clients and AgentScope's ``jsonschema`` check see); a test keeps the two equal. It stays as plain as
ReMe's tool adapters expect: no ``title``, no ``default`` (applied here, stated in the descriptions), no ``anyOf``.

``validate(model, arguments)`` answers the model, or ``ProcedureError(invalid_argument, <sentence>)`` for the first
invalid argument: first a name the job does not take (in the caller's order; the sentence names the closest argument
the job does take), then the values in field order (the order the checks always had). Absent or ``None`` means "the
default". Checks that need the configuration (experience path, experience filename) come through the validation
context and raise their own ``ProcedureError`` in field order.

Names ReMe itself puts into a call are not the caller's arguments and are never refused (``is_runtime``): names that
start with ``_`` (ReMe's convention for injected, runtime-only tool arguments: the plugin's grant and sources, ReMe's
``_allowed_paths``), ``tool_context_id`` (agent wrappers, the Codex tool server), ``metadata`` (the field ReMe's HTTP
request model declares for every job), and what the step passes as ``runtime`` (the service's
``injected_job_kwargs`` and the job's own configuration keys, which ReMe merges into every call).
"""

from __future__ import annotations

import difflib
import json
from typing import Any, ClassVar, Collection, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.json_schema import SkipJsonSchema

from ..errors import ErrorCode, ProcedureError
from ..schema import ADVICE_MARKER, FIELD_ALIAS, NAME_EXAMPLE, VIEW_NAMES, Job, View
from .fields import (
    MAX_LIMIT,
    MAX_PAGE,
    AliasConflict,
    Conflict,
    Cursor,
    ExpectedVersion,
    ExportDest,
    FieldText,
    Filename,
    Flag,
    Fraction,
    ImportFile,
    ImportFilename,
    ImportText,
    Integer,
    OperationKey,
    Query,
    RawPath,
    RequestId,
    ToolNames,
    new_request_id,
)


class JobArguments(BaseModel):
    """Base of the job models. Names a job does not take are refused by ``validate`` before the model sees them
    (and by the advertised ``additionalProperties: false`` where the caller validates the schema: AgentScope); the
    model ignores the rest of a call's context (the names ReMe injects, ``is_runtime``)."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"additionalProperties": False})
    # Optional arguments where "" (the CLI's ``limit=``) means "use the default"; where any false value (0, [],
    # false) does, as it always did for ``kind``. Elsewhere "" is refused like any other blank text.
    EMPTY_IS_DEFAULT: ClassVar[frozenset[str]] = frozenset()
    FALSY_IS_DEFAULT: ClassVar[frozenset[str]] = frozenset()
    job: ClassVar[Job]  # the job whose arguments these are (its steps validate them; sentences name it)

    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = {k: v for k, v in data.items() if v is not None}
        for name, info in cls.model_fields.items():
            key = info.alias or name
            if info.is_required():
                data.setdefault(key, None)  # absent: the field's own check answers, in field order
            elif key in data and (
                (name in cls.EMPTY_IS_DEFAULT and data[key] == "") or (name in cls.FALSY_IS_DEFAULT and not data[key])
            ):
                del data[key]
        return data

    @model_validator(mode="before")
    @classmethod
    def _before(cls, data: Any) -> Any:
        return cls._normalise(data)


class SearchArguments(JobArguments):
    job = Job.SEARCH

    EMPTY_IS_DEFAULT = frozenset({"index", "limit", "detail", "min_relevance", "tools", "max_tokens", "min_evidence"})

    query: Query = Field(description="What you want to do, or the situation you are in.")
    index: Literal[VIEW_NAMES] = Field(
        View.WHEN_TO_USE_CONTENT,
        description="The fields searched (default when_to_use_content).",
    )
    limit: Integer = Field(5, ge=1, le=MAX_LIMIT, description="Maximum results (default 5).")
    detail: Literal["full", "compact", "rules"] = Field(
        None,
        description="full (default): every result whole; rules: each result's description, when-to-use and rules "
        "(the lines after its content's Rules: line), not its steps; compact (default in extraction runs): the best "
        "result's content, weak results left out.",
    )
    min_relevance: Fraction = Field(
        None, description="Leave out results less relevant than this, 0-1 (default: the configured floor)."
    )
    tools: ToolNames = Field(None, description="Only experiences whose content names one of these functions.")
    max_tokens: Integer = Field(None, ge=1, description="Most tokens of experience text in the answer, best first.")
    min_evidence: Integer = Field(
        None,
        ge=0,
        description="Leave out of each result the rules shown by fewer trajectories than this, their '(N "
        "trajectories)' (default: the configured minimum).",
    )


class ReadArguments(JobArguments):
    """Offset and length concern trajectories only: for an experience they are not read (nor checked)."""

    job = Job.READ

    EMPTY_IS_DEFAULT = frozenset({"offset", "length"})
    FALSY_IS_DEFAULT = frozenset({"kind"})

    kind: Literal["experience", "trajectory"] = Field("experience", description="experience (default) or trajectory.")
    offset: Integer = Field(0, ge=0, description="Trajectory only: first character (default 0).")
    length: Integer = Field(8192, ge=1, description="Trajectory only: characters to read (default 8192).")
    path: RawPath = Field(description="Workspace-relative path of an experience or a copied trajectory.")

    @classmethod
    def _normalise(cls, data: Any) -> Any:
        data = super()._normalise(data)
        if isinstance(data, dict) and data.get("kind", "experience") == "experience":
            data = {k: v for k, v in data.items() if k not in ("offset", "length")}
        return data


class _WriteArguments(JobArguments):
    """``when-to-use`` (the experience file's own key, which a model that has just read one sends) is read as
    ``when_to_use``; both with different texts are refused."""

    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get(FIELD_ALIAS) is not None:
            alias, value = data[FIELD_ALIAS], data.get("when_to_use")
            data = {k: v for k, v in data.items() if k != FIELD_ALIAS}
            if value is not None and value != alias:
                data[FIELD_ALIAS] = Conflict()
            else:
                data["when_to_use"] = alias
        return super()._normalise(data)


class CreateArguments(_WriteArguments):
    job = Job.CREATE

    operation_key: OperationKey = None  # None: derived from the call (writes.py ``derived_key``)
    when_to_use_alias: SkipJsonSchema[AliasConflict] = Field(None, alias=FIELD_ALIAS)
    filename: Filename = Field(description=f"Meaningful lowercase-hyphenated name, e.g. {NAME_EXAMPLE}")
    # the three fields are defined (with their token targets) by the extraction agent's system prompt: no description
    # here, which every request would re-send
    description: FieldText
    when_to_use: FieldText
    content: FieldText


class UpdateArguments(_WriteArguments):
    job = Job.UPDATE

    operation_key: OperationKey = None  # None: derived from the call (writes.py ``derived_key``)
    when_to_use_alias: AliasConflict = Field(None, alias=FIELD_ALIAS, description="Alias of when_to_use.")
    path: RawPath = Field(description="procedures/<name>.json")
    expected_version: ExpectedVersion = Field(description="The version you read.")
    description: FieldText = None
    when_to_use: FieldText = None
    content: FieldText = None
    when_to_use_append: FieldText = Field(None, description="Added after when_to_use; no read needed.")
    content_append: FieldText = Field(
        None, description=f'Added after content, before its "{ADVICE_MARKER}" part (which stays last); no read needed.'
    )


class AutoMemoryArguments(JobArguments):
    """``reme start job=procedure_auto_memory file=... filename=...``: a one-shot CLI job, not an agent tool."""

    job = Job.AUTO_MEMORY

    model_config = ConfigDict(json_schema_extra=None)  # advertised without additionalProperties: CLI only
    EMPTY_IS_DEFAULT = frozenset({"request_id"})
    FALSY_IS_DEFAULT = frozenset({"memory_hint", "source_id"})

    file: ImportFile
    filename: ImportFilename
    request_id: RequestId = Field(default_factory=new_request_id)
    memory_hint: ImportText = ""
    source_id: ImportText = ""


class _PageArguments(JobArguments):
    """A listing's page: ``limit`` entries after ``cursor`` (the ``next`` of the previous answer)."""

    EMPTY_IS_DEFAULT = frozenset({"limit", "cursor"})
    CURSOR_DESCRIPTION: ClassVar[str] = "The `next` of the previous answer; leave it out for the first page."


class ListArguments(_PageArguments):
    """``procedure_list [limit=50] [cursor=<next>]``: the experiences by path."""

    job = Job.LIST

    limit: Integer = Field(50, ge=1, le=MAX_PAGE, description="Experiences per page (default 50).")
    cursor: Cursor = Field(None, description=_PageArguments.CURSOR_DESCRIPTION)


class ImportsArguments(_PageArguments):
    """``procedure_imports [limit=50] [cursor=<next>]``: the imports by request id."""

    job = Job.IMPORTS

    limit: Integer = Field(50, ge=1, le=MAX_PAGE, description="Imports per page (default 50).")
    cursor: Cursor = Field(None, description=_PageArguments.CURSOR_DESCRIPTION)


class ReindexArguments(JobArguments):
    """``procedure_reindex`` takes no argument (and refuses any)."""

    job = Job.REINDEX

    model_config = ConfigDict(json_schema_extra=None)


class DumpArguments(JobArguments):
    """``procedure_dump`` takes no argument (and refuses any)."""

    job = Job.DUMP
    model_config = ConfigDict(json_schema_extra=None)


class ExportArguments(JobArguments):
    """``reme start job=procedure_export dest=/abs/dir``: a one-shot CLI job, not an agent tool."""

    job = Job.EXPORT

    model_config = ConfigDict(json_schema_extra=None)  # advertised without additionalProperties: CLI only

    dest: ExportDest = Field(
        description="Absolute path of the directory that receives one Agent Skills folder per "
        "experience (created when missing; never inside the workspace)."
    )


# -- procedure_history (reviewable revisions) ---------------------------------------------------------------------


class HistoryArguments(JobArguments):
    """``procedure_history path=procedures/<name>.json [diff=true] [offset=0] [limit=20]`` (read-only, served)."""

    job = Job.HISTORY

    EMPTY_IS_DEFAULT = frozenset({"diff", "offset", "limit"})

    path: RawPath = Field(description="procedures/<name>.json")
    diff: Flag = Field(
        False, description="Add to each version the unified diff from the version before it (default False)."
    )
    offset: Integer = Field(0, ge=0, description="Versions to skip, oldest first (default 0).")
    limit: Integer = Field(20, ge=1, le=MAX_LIMIT, description="Most versions to list (default 20).")


class DeleteArguments(JobArguments):
    """``reme start job=procedure_delete path=procedures/<name>.json``: a one-shot CLI job, not an agent tool."""

    job = Job.DELETE

    model_config = ConfigDict(json_schema_extra=None)  # advertised without additionalProperties: CLI only

    path: RawPath = Field(
        description="procedures/<name>.json: the experience to remove; or the copy of a rejected "
        "import (session/trajectories/<file>, as procedure_imports lists it)."
    )


# Every job's model, by its job (each model names its job: ``job``).
MODELS: dict[str, type[JobArguments]] = {
    model.job: model
    for model in (
        SearchArguments,
        ReadArguments,
        CreateArguments,
        UpdateArguments,
        AutoMemoryArguments,
        ReindexArguments,
        ListArguments,
        ImportsArguments,
        ExportArguments,
        HistoryArguments,
        DeleteArguments,
        DumpArguments,
    )
}


# Names ReMe puts into a job's context besides the caller's arguments (see the module docstring).
TOOL_CONTEXT_ID = "tool_context_id"  # agent wrappers' tool context (and the Codex child's injected one)
HTTP_METADATA = "metadata"  # ReMe's HTTP ``Request`` model declares it for every job
RUNTIME_NAMES = frozenset({TOOL_CONTEXT_ID, HTTP_METADATA})
SHOWN_NAME_CHARS = 80  # an unknown name longer than this is shortened in the sentence


def is_runtime(name: Any, runtime: Collection[str] = ()) -> bool:
    """Whether ``name`` is put into a call by ReMe rather than given by its caller (never refused)."""
    return isinstance(name, str) and (name.startswith("_") or name in RUNTIME_NAMES or name in runtime)


def argument_names(model: type[JobArguments]) -> list[str]:
    """The names a job takes, as callers write them (an alias instead of its field's name), in field order."""
    return [info.alias or name for name, info in model.model_fields.items()]


def advertised_names(model: type[JobArguments]) -> list[str]:
    """The names a job advertises, as a sentence lists them: required ones, then optional ones, then aliases."""
    schema = parameters(model)
    required = schema.get("required", [])
    aliases = {info.alias for info in model.model_fields.values() if info.alias}
    optional = [name for name in schema.get("properties", {}) if name not in required]
    return [*required, *[n for n in optional if n not in aliases], *[n for n in optional if n in aliases]]


def job_of(model: type[JobArguments]) -> str:
    return getattr(model, "job", "this job")


def validate(
    model: type[JobArguments], arguments: dict[str, Any], runtime: Collection[str] = (), **context: Any
) -> Any:
    """The validated arguments, or ProcedureError(invalid_argument) naming the first invalid one: a name the job
    does not take (``runtime``: names injected into this call besides ``is_runtime``'s), then the values."""
    names = argument_names(model)
    unknown = next((name for name in arguments if name not in names and not is_runtime(name, runtime)), None)
    if unknown is not None:
        raise ProcedureError(ErrorCode.INVALID_ARGUMENT, unknown_sentence(model, unknown))
    try:
        return model.model_validate(arguments, context=context)
    except ValidationError as exc:
        raise ProcedureError(ErrorCode.INVALID_ARGUMENT, _sentence(model, exc.errors()[0])) from None


def unknown_sentence(model: type[JobArguments], name: Any) -> str:
    """The refusal of a name ``model``'s job does not take: the closest name it advertises (``difflib``; on a tie the
    first listed), and all of them."""
    job, names, name = job_of(model), advertised_names(model), str(name)
    if not names:
        return f"`{shown(name)}` is not an argument of {job}, which takes none; leave it out."
    closest = max(names, key=lambda known: (_likeness(name, known), -names.index(known)))
    listed = ", ".join(f"`{known}`" for known in names)
    return f"`{shown(name)}` is not an argument of {job}; did you mean `{closest}`? It takes {listed}."


def _likeness(given: str, known: str) -> float:
    """How alike two names are, case and ``-``/``_`` aside (difflib's ratio)."""

    def plain(text: str) -> str:
        return text.lower().replace("-", "_")

    return difflib.SequenceMatcher(None, plain(given), plain(known)).ratio()


def shown(name: str) -> str:
    """A caller's name as a sentence can show it: control characters escaped, shortened, valid UTF-8."""
    cut = name[:SHOWN_NAME_CHARS] + ("..." if len(name) > SHOWN_NAME_CHARS else "")
    try:
        cut.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: escaped like every other character it cannot show
        return json.dumps(cut)[1:-1]
    return json.dumps(cut, ensure_ascii=False)[1:-1]


def _sentence(model: type[JobArguments], error: dict[str, Any]) -> str:
    """One sentence for one pydantic error, naming the argument as the caller wrote it."""
    name = str(error["loc"][0]) if error["loc"] else "arguments"
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == ErrorCode.INVALID_ARGUMENT:
        return ctx["message"]
    if kind in ("greater_than_equal", "less_than_equal"):
        bounds = parameters(model)["properties"][name]
        low, high = bounds.get("minimum"), bounds.get("maximum")
        within = f"between {low} and {high}" if high is not None else f"at least {low}"
        return f"`{name}` must be {within} (got {error['input']})."
    if kind == "literal_error":
        choices = model.model_json_schema()["properties"][name]["enum"]
        return f"`{name}` must be one of {', '.join(choices)}."
    return f"`{name}`: {error['msg']}."  # not reached by the models' own types


def parameters(model: type[JobArguments]) -> dict[str, Any]:
    """The JSON schema a job advertises (``parameters`` in plugin.yaml): pydantic's, without titles and defaults (and
    without the model's docstring: the job has its own description)."""
    schema = _plain(model.model_json_schema(by_alias=True))
    schema.pop("description", None)
    return schema


def _plain(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items() if k not in ("title", "default")}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node
