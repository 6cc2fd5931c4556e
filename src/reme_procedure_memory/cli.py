"""One clear stderr line and a non-zero exit for start failures a user fixes from one sentence.

ReMe's console script (``reme.reme:main``) lets an exception raised while the application is built or started
propagate to the interpreter, which prints the whole traceback (the useful line is the last of ~23). ReMe offers no
hook for this, so the least invasive fix is a chained ``sys.excepthook``, installed only by a process that builds
this plugin's component: it handles nothing but ``StartupError`` (a busy workspace, bad settings) — the message as
one line on stderr, the traceback into ReMe's log file only (``log_to_file``; ReMe's console log is the user's
terminal, stdout in service mode, so it gets the one line without the traceback) — and hands every other exception to
the previous hook unchanged. The interpreter then exits with status 1, as for any uncaught exception.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

from reme.utils import get_logger

from .errors import StartupError

_console_logging = False  # whether ReMe's logger also writes to the console (set by the component)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _own_log_file() -> Path | None:
    """This process's ReMe log file (``logs/<time>_<pid>.log`` under the cwd), if file logging is on."""
    files = sorted(Path("logs").glob(f"*_{os.getpid()}.log"), key=lambda p: p.stat().st_mtime)
    return files[-1] if files else None


def _log(exc_type, exc, tb) -> None:
    """The error with its traceback into the log file; only its one line into a console log."""
    logger, message = get_logger(), f"procedure-memory could not start: {_one_line(exc)}"
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


def install_cli_error_hook(console_logging: bool) -> None:
    """Chain the hook once per process (idempotent); ``console_logging`` is ReMe's ``log_to_console``."""
    global _console_logging
    _console_logging = bool(console_logging)
    previous = sys.excepthook
    if getattr(previous, "procedure_memory", False):
        return

    def hook(exc_type, exc, tb) -> None:
        if not isinstance(exc, StartupError):
            previous(exc_type, exc, tb)
            return
        try:
            _log(exc_type, exc, tb)
        except Exception:  # the log is best effort; the one line below is the answer
            pass
        print(f"reme: error: {_one_line(exc)}", file=sys.stderr, flush=True)

    hook.procedure_memory = True  # type: ignore[attr-defined]
    sys.excepthook = hook
