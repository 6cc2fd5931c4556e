"""The JSON answer of every job, declared once: what each successful answer holds (docs/reference.md, "Jobs").

Each answer is built as a dict literal where its job's work is done (``operations/``, ``extraction/importer.py``,
``export/exporter.py``) and annotated with its shape here; the shapes cost nothing at run time (a ``TypedDict`` is a
``dict``), so the search hot path builds its answer as before. Keys appear in an answer in the order its builder
writes them. A failed answer is ``errors.error_answer``'s envelope (``{"status", ..., "error": {"code",
"message"}}``), which may keep the fields of the answer it replaces (``path``, ``request_id``, ``segments``...).
``NotRequired`` marks a key an answer holds only in the case its comment names.
"""

from typing import Any, Literal, NotRequired, TypedDict

from .schema import Job

# An experience file's four fields as answers carry them (the file's own keys: ``when-to-use`` is hyphenated).
ExperienceFields = TypedDict(
    "ExperienceFields", {"description": str, "when-to-use": str, "content": str, "sources": list[str]}
)


class PendingEntry(TypedDict):
    """A file excluded from search until it is indexed (``pending_indexes[]``, ``pending_writes[]``)."""

    path: str
    version: str
    error: str


class AgentToolAnswer(TypedDict):
    """What an agent tool's answer may add: an identical call made again in the same state gets the first answer
    with ``repeated_call`` and a ``note`` (operations/attempts.py)."""

    repeated_call: NotRequired[bool]
    note: NotRequired[str]


class DamagedEntry(TypedDict):
    """A metadata record that cannot be read or is missing: reported, with what to do."""

    path: str
    error: str
    fix: str


# -- procedure_search ---------------------------------------------------------------------------------------------


class Scores(TypedDict):
    rrf: float
    vector: float | None  # None: the vector branch did not rank it (or did not run)
    vector_rank: int | None
    keyword: float | None
    keyword_rank: int | None


class SearchResult(TypedDict):
    path: str
    version: str
    relevance: float  # absolute, in [0, 1] (search/relevance.py)
    score: float  # the fused RRF score
    scores: Scores
    experience: ExperienceFields  # its content without the rules below min_evidence (then rules_left_out says so)
    rules_left_out: NotRequired[int]  # rules shown by fewer trajectories than min_evidence, not in the content


# A result of a compact answer (``detail=compact``, an extraction agent's search): a result shown to the run before
# is only named (``shown_before``); the content is the best result's (every result's with detail=full in a run).
CompactResult = TypedDict(
    "CompactResult",
    {
        "path": str,
        "version": str,
        "shown_before": NotRequired[bool],
        "description": NotRequired[str],
        "when-to-use": NotRequired[str],
        "scores": NotRequired[dict[str, float]],
        "content": NotRequired[str],
        "content_truncated": NotRequired[bool],
        "rules_left_out": NotRequired[int],
    },
)


# A result of a rules answer (``detail=rules``): the conventions of an experience without its steps.
RulesResult = TypedDict(
    "RulesResult",
    {
        "path": str,
        "version": str,
        "relevance": float,
        "description": str,
        "when-to-use": str,
        "rules": str,
        "rules_left_out": NotRequired[int],
    },
)


class TokenBudget(TypedDict):
    max_tokens: int
    tokens: int
    left_out: int


class VectorSearchState(TypedDict):
    available: Literal[False]
    error: str


class SearchAnswer(AgentToolAnswer):
    status: Literal["ok"]
    index: str  # the view searched
    query: str
    min_relevance: float
    min_evidence: int
    results: list[SearchResult] | list[CompactResult] | list[RulesResult]
    index_complete: bool
    pending_indexes: list[PendingEntry]
    token_budget: NotRequired[TokenBudget]  # with max_tokens
    vector_search: NotRequired[VectorSearchState]  # when the vector branch failed
    # note: an extraction agent's search that found nothing
    detail: NotRequired[Literal["full", "compact", "rules"]]  # a shaped answer (reads.compact_answer, rules_answer)
    left_out: NotRequired[int]
    read_more: NotRequired[str]


# -- procedure_read -----------------------------------------------------------------------------------------------


class ExperienceAnswer(AgentToolAnswer):
    status: Literal["ok"]
    kind: Literal["experience"]
    path: str
    version: str
    experience: ExperienceFields


class TrajectoryAnswer(AgentToolAnswer):
    status: Literal["ok"]
    kind: Literal["trajectory"]
    path: str
    offset: int
    length: int  # characters of the copy covered
    total_chars: int
    tokens: int
    truncated_by_token_cap: bool
    next_offset: int | None
    text: str
    secrets_masked: NotRequired[int]  # masked (served outside an extraction run)
    masked_kinds: NotRequired[dict[str, int]]
    # note: what was masked


# -- procedure_list, procedure_imports ----------------------------------------------------------------------------


class ListedExperience(TypedDict):
    path: str
    version: str
    state: Literal["indexed", "pending", "unindexed", "invalid"]
    description: NotRequired[str]  # not for an invalid file
    source_count: NotRequired[int]
    error: NotRequired[str]  # pending, invalid
    note: NotRequired[str]  # unindexed


class ListAnswer(TypedDict):
    status: Literal["ok"]
    experiences: list[ListedExperience]
    total: int
    next: str | None
    index_complete: bool
    pending_indexes: list[PendingEntry]


class Progress(TypedDict):
    done: int
    total: int


class ListedImport(TypedDict):
    request_id: str
    file: str  # the copy in the workspace
    filename: str | None
    created_at: str | None
    status: Literal["complete", "incomplete", "rejected", "processing", "damaged"]
    segments: Progress | None
    experiences: dict[str, int]  # {"created": n, "updated": n}
    error_code: NotRequired[str]  # rejected
    damaged_records: NotRequired[list[DamagedEntry]]
    note: NotRequired[str]


class ImportsAnswer(TypedDict):
    status: Literal["ok"]
    imports: list[ListedImport]
    total: int
    next: str | None
    damaged_records: NotRequired[list[DamagedEntry]]  # on the first page


# -- procedure_history --------------------------------------------------------------------------------------------


class HistoryVersion(TypedDict):
    number: int
    version: str
    change: Literal["create", "update", "hand_edit", "hand_delete", "unrecorded"]
    request_id: str | None
    segment: int | None
    operation_key: str | None
    at: str | None  # ISO 8601, UTC
    status: str | None
    previous_version: str | None
    recorded: bool
    current: bool
    text: str | None
    note: NotRequired[str]
    diff: NotRequired[str | None]  # with diff=true


class DamagedHistoryRecord(TypedDict):
    record: str
    error: str
    set_aside: bool
    fix: str


class Compacted(TypedDict):
    versions: int
    newest_at: str | None
    note: str


class HistoryAnswer(TypedDict):
    status: Literal["ok"]
    kind: Literal["history"]
    path: str
    exists: bool
    current_version: str | None
    total: int
    offset: int
    next_offset: int | None
    compacted: NotRequired[Compacted]
    damaged_records: NotRequired[list[DamagedHistoryRecord]]
    versions: list[HistoryVersion]


# -- procedure_create, procedure_update ---------------------------------------------------------------------------


class WriteAnswer(AgentToolAnswer):
    status: Literal["created", "updated"]
    path: str
    version: str
    operation_key: str
    sources: NotRequired[list[str]]  # the write made now
    replayed: NotRequired[bool]  # an identical retry of a write already made
    filename_used: NotRequired[str]  # a create whose filename was not canonical: the name used
    filename_given: NotRequired[str]


# -- procedure_delete ---------------------------------------------------------------------------------------------


class DeleteAnswer(TypedDict):
    status: Literal["deleted"]
    path: str
    version: str
    deleted_at: str
    note: str  # who removed it
    history: str


class DeletedImportAnswer(TypedDict):
    status: Literal["deleted"]
    kind: Literal["rejected_import"]
    path: str
    request_id: str
    error_code: str


# -- procedure_reindex --------------------------------------------------------------------------------------------


class InvalidFile(TypedDict):
    path: str
    version: str
    error: str


class ReindexAnswer(TypedDict):
    status: Literal["complete", "incomplete"]
    indexed: int
    invalid_files: list[InvalidFile]
    pending_indexes: list[PendingEntry]
    damaged_metadata: list[DamagedEntry]
    journal_records_compacted: int
    journal_markers_recreated: int
    seconds: float


# -- procedure_export ---------------------------------------------------------------------------------------------


class ExportAnswer(TypedDict):
    status: Literal["ok"]
    dest: str
    skills: int
    created: list[str]
    updated: list[str]
    unchanged: int
    removed: list[str]
    kept: list[dict[str, str]]  # {path, reason}
    invalid: list[dict[str, str]]  # {path, error}
    refused: list[dict[str, str]]  # {path, skill, reason}
    index: str


# -- procedure_auto_memory ----------------------------------------------------------------------------------------


class ImportAnswer(TypedDict):
    """A completed import (a stopped one is the error envelope with these fields and ``resume``)."""

    status: Literal["complete"]
    request_id: str
    filename: str
    path: str  # the copy
    same_bytes_as: NotRequired[list[dict[str, str]]]  # {request_id, path} of earlier imports of the same bytes
    format: str
    segments: Progress
    experiences: NotRequired[dict[str, list[str]]]  # {"created": [...], "updated": [...]}
    pending_writes: NotRequired[list[PendingEntry]]
    already_complete: NotRequired[bool]
    note: NotRequired[str]


# -- procedure_dump -------------------------------------------------------------------------------------------------


class DumpedFile(TypedDict):
    """One metadata file of a dump (``storage/dump.py``): never its text."""

    path: str  # workspace-relative
    kind: str
    bytes: int
    format: Any
    status: str | None
    error: NotRequired[str]


class DumpAnswer(TypedDict):
    """The metadata of a workspace for support: kinds, formats and sizes, no experience or trajectory text."""

    status: Literal["ok"]
    workspace: str
    state_dir: str
    formats: dict[str, Any]
    experiences: dict[str, int]  # {files, bytes}
    trajectories: dict[str, int]
    kinds: dict[str, int]
    damaged: int
    files: list[DumpedFile]


# The successful answers of each job (a failed one is ``errors.error_answer``'s envelope).
ANSWERS: dict[Job, tuple[type, ...]] = {
    Job.SEARCH: (SearchAnswer,),
    Job.READ: (ExperienceAnswer, TrajectoryAnswer),
    Job.LIST: (ListAnswer,),
    Job.IMPORTS: (ImportsAnswer,),
    Job.HISTORY: (HistoryAnswer,),
    Job.CREATE: (WriteAnswer,),
    Job.UPDATE: (WriteAnswer,),
    Job.AUTO_MEMORY: (ImportAnswer,),
    Job.REINDEX: (ReindexAnswer,),
    Job.EXPORT: (ExportAnswer,),
    Job.DELETE: (DeleteAnswer, DeletedImportAnswer),
    Job.DUMP: (DumpAnswer,),
}
