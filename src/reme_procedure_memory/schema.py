"""The public schema: an experience, its name and version, and the names of the jobs and search views.

An experience file holds exactly four fields and no id::

    {"description": ..., "when-to-use": ..., "content": ..., "sources": [...]}

Its workspace-relative path (``procedures/<name>.json``) is its identity; its version is derived from its bytes.
``Job`` names every job of the plugin (``plugin.yaml`` defines them; a test keeps the two equal) and ``AGENT_TOOLS``
the ones an extraction agent is given; ``View`` names the two search views. The JSON answers of the jobs are declared
in ``answers.py``.
"""

from __future__ import annotations

import hashlib
import json
import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import InvalidExperience

NAME_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*\.json$")
MAX_NAME_CHARS = 120
VERSION_CHARS = 16
TEXT_FIELDS = ("description", "when-to-use", "content")


class Job(StrEnum):
    """Every job of the plugin, by the name callers use (``reme procedure_search``, ``POST /procedure_search``)."""

    SEARCH = "procedure_search"
    READ = "procedure_read"
    LIST = "procedure_list"
    IMPORTS = "procedure_imports"
    HISTORY = "procedure_history"
    CREATE = "procedure_create"
    UPDATE = "procedure_update"
    AUTO_MEMORY = "procedure_auto_memory"
    REINDEX = "procedure_reindex"
    EXPORT = "procedure_export"
    DELETE = "procedure_delete"
    DUMP = "procedure_dump"


FIELD_ALIAS = "when-to-use"  # accepted as ``when_to_use``: the key a model sees in the experiences it reads

# The job tools an extraction agent is given (with ``finish_segment``), in the order its request lists them; plain
# strings, as ReMe and the agent SDKs take tool names.
AGENT_TOOLS = tuple(job.value for job in (Job.SEARCH, Job.READ, Job.CREATE, Job.UPDATE))

# What an extraction agent's tools show where it differs from the job's own schema (the toolkit the plugin builds for
# ReMe's AgentScope backend; other backends build the job's whole schema). Every tool schema is re-sent with each
# request, so each argument shown costs every turn; the jobs still accept everything.
# - search: the query alone (the segment's message lists the best matches already; the agent's own search is a
#   fallback, served by the defaults of an extraction run: compact, no relevance floor);
# - read: an experience alone (a trajectory excerpt's arguments are a service caller's: the segment is in the
#   message, and no relay run's agent read one);
# - update: no additions (a revision folds new evidence into the rewritten field instead of appending a case:
#   docs/decisions.md#consolidated-experiences), and not the `when-to-use` alias (no relay run's agent used it);
# - create and update: no `operation_key` (the runtime derives one from the request, and an identical retry is an
#   identical request: docs/decisions.md#operation-keys; no relay run's agent gave one).
AGENT_HIDDEN_ARGUMENTS: dict[str, tuple[str, ...]] = {
    Job.SEARCH.value: ("index", "limit", "detail", "min_relevance", "tools", "max_tokens", "min_evidence"),
    Job.READ.value: ("kind", "offset", "length"),
    Job.CREATE.value: ("operation_key",),
    Job.UPDATE.value: ("when_to_use_append", "content_append", FIELD_ALIAS, "operation_key"),
}
# The descriptions that say what the narrowed tools do (replacing the job's and its arguments' own).
AGENT_DESCRIPTIONS: dict[str, str] = {
    Job.SEARCH.value: "Search the library's experiences: the best matches' paths, versions and texts.",
    Job.READ.value: "Read an experience: its fields and version.",
}
AGENT_ARGUMENT_DESCRIPTIONS: dict[str, dict[str, str]] = {
    Job.READ.value: {"path": "procedures/<name>.json"},
}


def agent_description(job: str, description: str) -> str:
    """The description of ``job``'s tool as an extraction agent sees it (``AGENT_DESCRIPTIONS``, else
    ``description``, the job's own)."""
    return AGENT_DESCRIPTIONS.get(job, description)


def agent_parameters(job: str, parameters: dict | None) -> dict | None:
    """``parameters`` (a job tool's JSON schema) as an extraction agent sees it for ``job``: without the arguments
    ``AGENT_HIDDEN_ARGUMENTS`` hides, with ``AGENT_ARGUMENT_DESCRIPTIONS``; a copy, or ``parameters`` itself when
    nothing differs."""
    hidden = AGENT_HIDDEN_ARGUMENTS.get(job, ())
    described = AGENT_ARGUMENT_DESCRIPTIONS.get(job, {})
    if not parameters or not (hidden or described):
        return parameters
    narrowed = dict(parameters)
    if "properties" in narrowed:
        narrowed["properties"] = {
            k: {**v, "description": described[k]} if k in described else v
            for k, v in narrowed["properties"].items()
            if k not in hidden
        }
    if "required" in narrowed:
        narrowed["required"] = [k for k in narrowed["required"] if k not in hidden]
    return narrowed


class View(StrEnum):
    """The two search views: ``when_to_use`` indexes the when-to-use text, ``when_to_use_content`` when-to-use +
    content (the ``index`` argument of ``procedure_search``, the keys of the ``views`` setting)."""

    WHEN_TO_USE = "when_to_use"
    WHEN_TO_USE_CONTENT = "when_to_use_content"


VIEW_NAMES = tuple(view.value for view in View)
# Tool arguments use underscores (function-calling friendly); files use the spec's hyphenated key.
ARG_TO_FIELD = {"description": "description", "when_to_use": "when-to-use", "content": "content"}
FIELD_TO_ARG = {v: k for k, v in ARG_TO_FIELD.items()}


class Experience(BaseModel):
    """One procedural experience: exactly the four spec fields, all required, nothing else."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = Field(min_length=1)
    when_to_use: str = Field(alias="when-to-use", min_length=1)
    content: str = Field(min_length=1)
    sources: tuple[str, ...] = Field(min_length=1)

    @field_validator("description", "when_to_use", "content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("sources")
    @classmethod
    def _unique_relative_paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for source in value:
            if not source or source.startswith("/") or "\\" in source or ".." in source.split("/"):
                raise ValueError(f"source {source!r} is not a workspace-relative trajectory path")
        if len(set(value)) != len(value):
            raise ValueError("sources must not repeat a path")
        return value

    def fields(self) -> dict[str, Any]:
        """The file's JSON object, keys in spec order."""
        return {
            "description": self.description,
            "when-to-use": self.when_to_use,
            "content": self.content,
            "sources": list(self.sources),
        }

    def to_bytes(self) -> bytes:
        """Canonical file bytes: UTF-8, two-space indent, trailing newline."""
        return (json.dumps(self.fields(), ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON value (strict JSON has no NaN or Infinity; write it as a string or null)")


_STRICT_DECODER = json.JSONDecoder(parse_constant=_no_constant)  # built once: json.loads builds one per call


def loads_strict(text: str) -> Any:
    """``json.loads`` as RFC 8259 reads it: NaN, Infinity and -Infinity are refused (ValueError)."""
    return _STRICT_DECODER.decode(text)


def parse_experience(data: bytes) -> Experience:
    """Parse experience file bytes; raise InvalidExperience with a readable reason."""
    try:
        obj = loads_strict(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InvalidExperience(f"not UTF-8: {exc}") from exc
    except ValueError as exc:  # a JSONDecodeError, or NaN/Infinity
        raise InvalidExperience(f"invalid JSON: {exc}") from exc
    except RecursionError:
        raise InvalidExperience("invalid JSON: nested too deeply") from None
    if not isinstance(obj, dict):
        raise InvalidExperience("the JSON value is not an object")
    try:
        return Experience.model_validate(obj)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'object'}: {e['msg']}" for e in exc.errors())
        raise InvalidExperience(problems) from exc


def version_of(data: bytes) -> str:
    """The version of a file: a prefix of the SHA-256 of its bytes (stable, changes with any edit)."""
    return hashlib.sha256(data).hexdigest()[:VERSION_CHARS]


NAME_EXAMPLE = "rebuild-index-after-config-change.json"
# The line that opens the extractor's own advice at the end of a content (the extraction prompt asks for it; an
# addition to a content is placed before it, so the advice stays last)
ADVICE_MARKER = "Advice (not shown in the trajectory):"
_SEPARATORS = re.compile(r"[ _-]+")  # spaces only: a newline or tab in a name is no spelling slip


def check_name(name: str) -> str | None:
    """Return why ``name`` is not a valid experience filename, or None when it is."""
    if len(name) > MAX_NAME_CHARS:
        return f"filename is longer than {MAX_NAME_CHARS} characters"
    if not NAME_PATTERN.match(name):
        return f"filename must be lowercase words joined by hyphens and end in .json, e.g. {NAME_EXAMPLE}"
    return None


def canonical_name(raw: str) -> str | None:
    """The canonical experience filename of ``raw``, or None when it has no unambiguous one.

    Only spelling is changed, never words: letters are lowercased, each run of underscores, spaces or hyphens becomes
    one hyphen (none at either end), and a missing ``.json`` is added. ``Rebuild_Index after change`` becomes
    ``rebuild-index-after-change.json``. Any other character (a newline or tab, a dot, a slash, a non-ASCII letter),
    another extension, or an empty name has no canonical form. The result always passes ``check_name`` or is None.
    """
    stem = raw.strip(" ")
    if stem.lower().endswith(".json"):
        stem = stem[: -len(".json")]
    stem = _SEPARATORS.sub("-", stem.lower()).strip("-")
    name = f"{stem}.json"
    return name if check_name(name) is None else None
