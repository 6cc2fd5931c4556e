"""One clear stderr line, ``reme: error: <code>: <what to do>``, and exit status 1 for the failures an operator
fixes from one sentence — in a one-shot job, a service start and a client call alike.

ReMe's console script (``reme.reme:main``) lets an exception raised while the application is built or started
propagate to the interpreter, which prints the whole traceback (the useful line is the last of ~23). ReMe offers no
hook for this, so the least invasive fix is a chained ``sys.excepthook``, installed when ReMe loads the plugin's
backends (before the application creates the workspace) by every process that enables the plugin. It handles only
what ``operator_line`` recognises and hands every other exception to the previous hook unchanged:

- ``StartupError`` (a busy workspace, bad settings, a workspace that cannot be written, a missing workspace);
- an ``OSError`` of ReMe's own creation of the workspace directories (a path under a file, a read-only workspace):
  answered like the plugin's own storage failures at start (``storage_error`` / ``disk_full``);
- ReMe's ``KeyError("Job 'procedure_…' not found")`` of ``reme start job=…`` and the client's HTTP 404 / 405 for a
  ``procedure_*`` job: ``unknown_job`` with the closest job name, or how to run a job the service does not serve.

The traceback goes into ReMe's log file only (``log_to_file``; ReMe's console log is the user's terminal, stdout in
service mode, so it gets the one line without the traceback). The interpreter then exits with status 1.

A service (``reme start`` without a job) starts its application inside uvicorn's lifespan, which would print a
StartupError as three tracebacks and exit 3. ``install_service_guard`` wraps the service's ``run_app`` so that the
application's ``start`` answers the same one line and exits 1: the component raises its StartupError there as
``ServiceStartAborted`` (a BaseException, so ReMe logs no traceback on the way and still rolls the start back), and
the guard prints the line and ends the process with ``os._exit(1)`` — any exception it raised instead would reach
Starlette's lifespan, which logs every exception with its traceback. Nothing is served yet at that point and every
component has been closed by the rollback.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import sys
import traceback
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from reme.components.service import CliService
from reme.utils import get_logger

from .errors import ErrorCode, ServiceStartAborted, StartStorageError, StartupError

_console_logging = False  # whether ReMe's logger also writes to the console (set by the component)
_logger_ready = False  # ReMe has configured its logger (the component was built); before, only the line is printed
SERVING = "procedure_memory.serving"  # app_context.metadata key: this application is started by a service's run_app
UNKNOWN_JOB = re.compile(r"^Job '(procedure[^']*)' not found$")  # ReMe's Application._get_enabled_job


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc).split())


def _coded(code: ErrorCode, sentence: str) -> str:
    return sentence if sentence.startswith(f"{code}: ") else f"{code}: {sentence}"


@lru_cache(maxsize=1)
def plugin_jobs() -> dict[str, bool]:
    """The plugin's job names (``plugin.yaml``), each with whether a service serves it (``enable_serve``)."""
    import yaml

    manifest = yaml.safe_load(resources.files(__package__).joinpath("plugin.yaml").read_text(encoding="utf-8"))
    jobs = manifest.get("application_defaults", {}).get("jobs", {})
    return {name: bool(config.get("enable_serve", True)) for name, config in jobs.items()}


def unknown_job_sentence(name: str, *, served_only: bool) -> str:
    """What to say about a ``procedure_*`` job name ReMe did not find: the closest name of the plugin's (served)
    jobs, or, for a job the service does not serve, how to run it one-shot."""
    jobs = plugin_jobs()
    if served_only and name in jobs and not jobs[name]:
        return (
            f"`{name}` is not served by the service (imports, writes, reindex and export run one-shot): run "
            f"reme start job={name} plugins='[\"procedure-memory\"]' workspace_dir=<workspace> ..."
        )
    candidates = sorted(n for n, served in jobs.items() if served or not served_only)
    # compared without the shared prefix, which would make every name look close; a name it begins comes first
    stem = {candidate.removeprefix("procedure_"): candidate for candidate in candidates}
    given = name.removeprefix("procedure").lstrip("s_")
    begun = [s for s in stem if given and s.startswith(given)]
    close = begun if len(begun) == 1 else difflib.get_close_matches(given, list(stem), n=1, cutoff=0.6)
    guess = f"; did you mean `{stem[close[0]]}`?" if close else "."
    which = "served " if served_only else ""
    return f"There is no {which}job `{name}`{guess} The {which}jobs of procedure-memory: {', '.join(candidates)}."


def _raised_in(tb, function: str) -> bool:
    return any(frame.name == function for frame in traceback.extract_tb(tb))


def operator_line(exc: BaseException, tb=None) -> str | None:
    """``<code>: <sentence>`` for a failure an operator fixes from one line (see the module docstring), else None."""
    if isinstance(exc, ServiceStartAborted):
        exc = exc.error
    if isinstance(exc, StartupError):
        return _coded(exc.code, _one_line(exc))
    if isinstance(exc, OSError) and _raised_in(tb, "_setup_workspace_directories"):  # ReMe creating the workspace
        error = StartStorageError(exc)
        return _coded(error.code, _one_line(error))
    if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str):
        found = UNKNOWN_JOB.match(exc.args[0])
        if found:
            return _coded(ErrorCode.UNKNOWN_JOB, unknown_job_sentence(found.group(1), served_only=False))
    request, response = getattr(exc, "request", None), getattr(exc, "response", None)
    if type(exc).__name__ == "HTTPStatusError" and response is not None and response.status_code in (404, 405):
        name = str(request.url.path).strip("/")
        if name.startswith("procedure") and "/" not in name:  # ReMe's client posting a job name to the service
            return _coded(ErrorCode.UNKNOWN_JOB, unknown_job_sentence(name, served_only=True))
    return None


def _own_log_file() -> Path | None:
    """This process's ReMe log file (``logs/<time>_<pid>.log`` under the cwd), if file logging is on."""
    files = sorted(Path("logs").glob(f"*_{os.getpid()}.log"), key=lambda p: p.stat().st_mtime)
    return files[-1] if files else None


def _log(line: str, exc_type, exc, tb) -> None:
    """The error with its traceback into the log file; only its one line into a console log."""
    logger, message = get_logger(), f"procedure-memory could not start: {line}"
    if _console_logging:
        logger.error(message)
        log_file = _own_log_file()
        if log_file is not None:
            with open(log_file, "a", encoding="utf-8") as handle:
                handle.write("".join(traceback.format_exception(exc_type, exc, tb)))
    elif hasattr(logger, "opt"):  # loguru, file sink only
        logger.opt(exception=(exc_type, exc, tb)).error(message)
    else:
        logger.error(message, exc_info=(exc_type, exc, tb))


def report(line: str, exc_type, exc, tb) -> None:
    """Log the failure (once ReMe configured its logger: a client call or ReMe's own set-up of the workspace comes
    before) and print its one line."""
    if _logger_ready:
        try:
            _log(line, exc_type, exc, tb)
        except Exception:  # the log is best effort; the one line below is the answer
            pass
    print(f"reme: error: {line}", file=sys.stderr, flush=True)


def install_cli_error_hook(console_logging: bool | None = None) -> None:
    """Chain the hook once per process (idempotent); ``console_logging`` is ReMe's ``log_to_console`` (None: keep)."""
    global _console_logging, _logger_ready
    if console_logging is not None:
        _console_logging, _logger_ready = bool(console_logging), True
    previous = sys.excepthook
    if getattr(previous, "procedure_memory", False):
        return

    def hook(exc_type, exc, tb) -> None:
        line = operator_line(exc, tb)
        if line is None:
            previous(exc_type, exc, tb)
            return
        report(line, exc_type, exc, tb)

    hook.procedure_memory = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def _end_process(status: int) -> None:
    """Flush every log and stream, then end the process at once (see the module docstring for why not raise)."""
    logging.shutdown()
    try:
        from loguru import logger

        logger.remove()  # closes (flushes) its sinks
    except Exception:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(status)


def install_service_guard(service: Any) -> None:
    """Make a service's start answer a StartupError like a one-shot job: one line, exit 1 (module docstring).
    Idempotent; the one-shot ``cli`` service needs none (its start runs outside any server)."""
    if service is None or isinstance(service, CliService) or getattr(service.run_app, "procedure_memory", False):
        return
    run_app = service.run_app

    def guarded_run_app(app) -> None:
        start = app.start

        async def guarded_start() -> None:
            try:
                await start()
            except ServiceStartAborted as aborted:
                error = aborted.error
                report(operator_line(error), type(error), error, error.__traceback__)
                _end_process(1)

        app.context.metadata[SERVING] = True
        app.start = guarded_start
        run_app(app)

    guarded_run_app.procedure_memory = True  # type: ignore[attr-defined]
    service.run_app = guarded_run_app


def serving(app_context: Any) -> bool:
    """Whether this application is being started by a guarded service (``install_service_guard``)."""
    return app_context is not None and bool(app_context.metadata.get(SERVING))
