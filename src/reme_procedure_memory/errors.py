"""Every answer code and every exception of the plugin, declared once.

``ErrorCode`` lists the codes of the JSON answers (a failed job answers ``{"status": "error" | "incomplete" |
"rejected", "error": {"code", "message"}}``, built by ``error_answer`` alone); ``ProcedureError`` carries one to the
step that answers it. ``StartupError`` is what stops a start with one line on the CLI (``operator_errors.py``). The rest are the internal failures each layer raises and the
layer above turns into an answer code: storage (``StorageError`` → ``storage_failure`` → ``disk_full`` /
``storage_error``; ``DamagedRecord`` → ``metadata_damaged``), the views (``IndexFailure``, ``ProviderUnavailable`` →
``index_pending``; ``ViewStateError`` → a rebuild), extraction (``ExtractionStopped`` and the trajectory format and
tokenizer errors → an ``incomplete`` import). ``tests/test_errors.py`` keeps docs/reference.md's table of codes equal to this.
"""

from __future__ import annotations

import errno
from enum import StrEnum
from pathlib import Path
from typing import Any, TypedDict


class InvalidExperience(ValueError):
    """A file that is not a valid experience; the message says what is wrong."""


class ErrorCode(StrEnum):
    """Every code of a failed job answer (``docs/reference.md`` lists each with what to do; ``tests/test_errors.py``
    keeps the two equal and finds any code the package answers that is not declared here). Tool and read answers are
    ``status: error``; an import that can be resumed is ``status: incomplete``, one whose content can never be
    imported ``status: rejected``. A member is a ``str``: it compares equal to its value and JSON writes the value."""

    # arguments and paths
    INVALID_ARGUMENT = "invalid_argument"
    PATH_OUTSIDE = "path_outside_allowed_directory"
    PROTECTED_PATH = "protected_path"  # one of ReMe's own file jobs reached the plugin's directories (storage/guard.py)
    NOT_FOUND = "not_found"
    NOT_AVAILABLE = "not_available"
    # experiences and writes
    INVALID_EXPERIENCE = "invalid_experience"
    ALREADY_EXISTS = "already_exists"
    STALE_VERSION = "stale_version"
    FIELD_TOO_LONG = "field_too_long"
    CONSOLIDATE_REQUIRED = "consolidate_required"  # an addition past extraction.grow_limit: rewrite, do not append
    SECRET_DETECTED = "secret_detected"  # a write carried a credential (credentials.py): nothing written
    NO_ACTIVE_RUN = "no_active_extraction_run"
    OPERATION_KEY_CONFLICT = "operation_key_conflict"
    INDEX_PENDING = "index_pending"
    # storage
    DISK_FULL = "disk_full"
    STORAGE_ERROR = "storage_error"
    METADATA_DAMAGED = "metadata_damaged"
    INTERNAL_ERROR = "internal_error"
    # a start or a command line that stops before any job runs (one line on the CLI: operator_errors.py)
    WORKSPACE_BUSY = "workspace_busy"  # another process holds the workspace's lock
    WORKSPACE_NOT_FOUND = "workspace_not_found"  # a job that only reads was given a workspace without plugin state
    UNSUPPORTED_WORKSPACE = "unsupported_workspace"  # metadata in a layout this version does not read
    INVALID_SETTINGS = "invalid_settings"
    UNKNOWN_JOB = "unknown_job"  # a `procedure_*` job name that does not exist (or is not served)
    # the import: its copy and checkpoint
    REQUEST_ID_CONFLICT = "request_id_conflict"
    FILE_TOO_LARGE = "file_too_large"
    ORIGINAL_CHANGED = "original_changed"
    COPY_CORRUPTED = "copy_corrupted"
    COPY_PATH_TAKEN = "copy_path_taken"
    UNSUPPORTED_FORMAT = "unsupported_format"
    MALFORMED_INPUT = "malformed_input"
    INCOMPATIBLE_CHECKPOINT = "incompatible_checkpoint"
    TOKENIZER_UNAVAILABLE = "tokenizer_unavailable"
    EMBEDDING_UNAVAILABLE = "embedding_unavailable"  # the preflight's probe of the embedding provider failed
    SEGMENTATION_FAILED = "segmentation_failed"
    # the import: its agent and its segments
    CONTEXT_BUDGET_EXCEEDED = "context_budget_exceeded"
    AGENT_UNAVAILABLE = "agent_unavailable"
    AGENT_FAILED = "agent_failed"
    AGENT_INTERRUPTED = "agent_interrupted"
    AGENT_BUDGET_EXHAUSTED = "agent_budget_exhausted"
    SUMMARY_INVALID = "summary_invalid"
    PENDING_WRITES = "pending_writes"
    WRITE_FAILED = "write_failed"
    INTERRUPTED = "interrupted"  # SIGINT / SIGTERM during an import
    # the export to Agent Skills folders
    DESTINATION_NOT_ALLOWED = "destination_not_allowed"  # dest is (through links) in the workspace, or not a directory
    EXPORT_CONFLICT = "export_conflict"  # something the export did not write is in the way; nothing was written


class ErrorDetail(TypedDict):
    """The ``error`` of a failed answer."""

    code: ErrorCode
    message: str


def error_answer(code: ErrorCode, message: str, *, status: str = "error", **details: Any) -> dict[str, Any]:
    """The JSON answer of a failure, the one envelope every failed answer has:
    ``{"status": status, **details, "error": {"code": code, "message": message}}``. ``details`` (in their order,
    before ``error``) are what the answer keeps of the job's own answer (``path``, ``request_id``, ``segments``...)."""
    error: ErrorDetail = {"code": code, "message": message}
    return {"status": status, **details, "error": error}


class ProcedureError(Exception):
    """A failure the caller can act on: a code, a sentence, and optional details for the JSON answer."""

    def __init__(self, code: ErrorCode, message: str, *, status: str = "error", **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.details = details

    def answer(self) -> dict[str, Any]:
        """The JSON answer of this failure (``error_answer``)."""
        return error_answer(self.code, self.message, status=self.status, **self.details)


class StartupError(Exception):
    """An error that stops a start and that a user fixes from its one-line message (what, which key or holder,
    how to fix). The CLI prints it as one line, ``<code>: <message>``; in-process callers catch it like any
    exception."""

    code: ErrorCode = ErrorCode.INTERNAL_ERROR  # each subclass names its own


class ServiceStartAborted(BaseException):
    """A StartupError (``error``) of a service start (``reme start`` without a job): raised past ReMe's handlers,
    which would print its traceback, to the service's guard (``operator_errors.py``), which answers the one line and exits 1.
    A BaseException, so no ``except Exception`` logs it on the way; the start's rollback still runs."""

    def __init__(self, error: StartupError) -> None:
        super().__init__(str(error))
        self.error = error


class SettingsError(StartupError, ValueError):
    """Invalid settings; the message names each bad key and the fix."""

    code = ErrorCode.INVALID_SETTINGS


class ContainmentError(ProcedureError, ValueError, StartupError):
    """A configured directory is not a real directory inside the workspace; the message names it and the link.
    At start it is a StartupError (one line on the CLI); inside a job it is answered as JSON like any ProcedureError."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.PATH_OUTSIDE, message)


class StorageError(OSError):
    """A durable write failed; ``filename`` is the destination, ``errno``/``strerror`` the cause."""

    @property
    def disk_full(self) -> bool:
        return self.errno in DISK_FULL_ERRNOS


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def failure_cause(exc: OSError) -> str:
    """What failed, for a sentence: the system's message and errno, or the exception's own text when it has none
    (an ``OSError`` raised with a message only, e.g. by a library)."""
    said = exc.strerror or str(exc) or type(exc).__name__
    return f"{said} (errno {errno.errorcode.get(exc.errno, exc.errno)})" if exc.errno is not None else said


def storage_failure(exc: OSError, what: str = "") -> tuple[ErrorCode, str]:
    """The error code and sentence of a failed durable write: ``disk_full`` (what to free) or ``storage_error``.

    ``what`` names the write (e.g. "the copy of run.jsonl"); the destination comes from the exception.
    """
    target = exc.filename or "the workspace"
    cause = failure_cause(exc)
    subject = f"{what} ({target})" if what else str(target)
    if exc.errno in DISK_FULL_ERRNOS:
        return ErrorCode.DISK_FULL, (
            f"Writing {subject} failed: {cause}. Free space on the file system that holds "
            f"{Path(str(target)).parent} (or raise the quota); nothing half-written was kept."
        )
    if exc.errno == errno.ENOTDIR and Path(str(target)).is_file():  # a file where a directory must be
        return ErrorCode.STORAGE_ERROR, (
            f"Writing {subject} failed: {cause}. {target} is not a directory: move it aside (a directory the "
            "plugin rebuilds from its records)."
        )
    return ErrorCode.STORAGE_ERROR, (
        f"Writing {subject} failed: {cause}. Make sure {Path(str(target)).parent} exists and is writable by this "
        "process (permissions, a read-only mount, a failing disk); nothing half-written was kept."
    )


def access_failure(exc: OSError) -> tuple[ErrorCode, str]:
    """The error code and sentence of a file-system call that failed outside the plugin's durable writers (a read,
    a directory listing, a library's own write): ``disk_full`` or ``storage_error``, naming the path and the cause."""
    target = exc.filename or "the workspace"
    cause = failure_cause(exc)
    code = ErrorCode.DISK_FULL if exc.errno in DISK_FULL_ERRNOS else ErrorCode.STORAGE_ERROR
    return code, (
        f"Using {target} failed: {cause}. Make sure {Path(str(target)).parent} exists and is readable and "
        "writable by this process (permissions, a read-only mount, a full or failing disk), then run the "
        "command again."
    )


class StartStorageError(StartupError):
    """A start could not write what it must (the views' state, a directory of the workspace): one line on the CLI,
    ``<code>: <what failed and what to do>``, with the code (``disk_full`` or ``storage_error``) as ``code``."""

    def __init__(self, exc: OSError) -> None:
        self.code, message = storage_failure(exc)
        super().__init__(f"{self.code}: {message} Then start again.")


class DamagedRecord(ValueError):
    """A metadata record that cannot be parsed; the message names the file and what to do."""

    def __init__(self, path: Path, cause: str, set_aside: Path | None = None) -> None:
        self.path, self.cause, self.set_aside = path, cause, set_aside
        where = f"; it was set aside as {set_aside} (kept for inspection)" if set_aside else ""
        super().__init__(f"The metadata file {path} is damaged ({cause}){where}")


class WorkspaceBusy(StartupError, RuntimeError):
    """Another process (or another application in this process) holds the workspace."""

    code = ErrorCode.WORKSPACE_BUSY


class WorkspaceNotFound(StartupError):
    """A job that only reads (search, read, listings, history, export, reindex) was started on a workspace that
    does not exist or holds no plugin state; the message names the path and the fix. Nothing was created."""

    code = ErrorCode.WORKSPACE_NOT_FOUND


class UnsupportedWorkspace(StartupError):
    """The workspace's metadata is in a layout this version does not read (one written by an unreleased development
    build: docs/decisions.md#released-formats); the message names the path and what to do. Nothing was changed."""

    code = ErrorCode.UNSUPPORTED_WORKSPACE


class UnknownJob(StartupError):
    """A ``procedure_*`` job name that the plugin does not define (the message suggests the closest one), or one
    the service does not serve (the message says how to run it)."""

    code = ErrorCode.UNKNOWN_JOB


class TokenizerUnavailable(RuntimeError):
    """The configured tokenizer could not be loaded; the message names the source and how to fix it."""


class EmbeddedModelUnavailable(RuntimeError):
    """The embedded embedding model (``search/embedded_model.py``) cannot be used in this process; the message names the
    cause and what to do (install or reinstall its package, or configure a provider)."""


class UnsupportedTrajectory(ValueError):
    """The file's format is not one the import reads."""


class MalformedTrajectory(ValueError):
    """The file claims a supported format but its content does not match it."""


class SegmentationError(ValueError):
    """The text cannot be segmented within the budget (e.g. one character counts more tokens than the budget)."""


class ExtractionStopped(Exception):
    """The import stopped resumably; code and message say why and how to go on (``details`` go into the answer)."""

    def __init__(self, code: ErrorCode, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


class ImportInterrupted(BaseException):
    """SIGINT or SIGTERM stopped an import: ``answer`` is its ``incomplete`` answer (with the resume command) and the
    process exits with ``128 + signum`` (130, 143) once the application has closed. A BaseException, like the
    cancellation it replaces, so no ``except Exception`` turns it into an ordinary failure."""

    def __init__(self, answer: dict[str, Any], signum: int) -> None:
        super().__init__(answer.get("error", {}).get("message", "interrupted"))
        self.answer = answer
        self.signum = signum


class IndexFailure(RuntimeError):
    """Indexing an experience failed; the path has been removed from both views."""


class ProviderUnavailable(IndexFailure):
    """The embedding provider timed out, raised, or returned no vector at all: retrying other texts now is futile.

    ``certain`` is False when a single text got no vector: the provider may just refuse that one text.
    """

    def __init__(self, message: str, *, certain: bool = True) -> None:
        super().__init__(message)
        self.certain = certain


class ViewStateError(RuntimeError):
    """The persisted view state is missing a part or inconsistent: discard it and rebuild the view."""
