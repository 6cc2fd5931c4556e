"""SIGINT and SIGTERM during a one-shot CLI job: cancel the job's task instead of dying mid-write.

Without this, Ctrl-C raises ``KeyboardInterrupt`` wherever the interpreter happens to be (a 71-line traceback and no
answer) and SIGTERM kills the process outright. ``signals_cancel_task`` installs, for the duration of the job only,
handlers on the running loop that record the signal and cancel the current task once; the code under it turns the
cancellation into its answer (``importer.run_import``). The previous handlers (asyncio.run's own SIGINT handler)
are restored afterwards, so a second Ctrl-C while the application closes behaves as before.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def signal_name(signum: int) -> str:
    """``SIGINT``, ``SIGTERM``, ... for an answer's message."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@contextmanager
def signals_cancel_task() -> Iterator[list[int]]:
    """Yield a list that receives the first SIGINT/SIGTERM number while the current task is cancelled on it.

    Outside the main thread (where signals cannot be handled) the list stays empty and nothing is installed.
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    loop, task = asyncio.get_running_loop(), asyncio.current_task()

    def on_signal(signum: int) -> None:
        if not received and task is not None:
            received.append(signum)
            task.cancel()

    previous = {}
    for signum in SIGNALS:
        try:
            previous[signum] = signal.getsignal(signum)
            loop.add_signal_handler(signum, on_signal, signum)
        except (NotImplementedError, RuntimeError, ValueError):  # e.g. a loop without signal support
            previous.pop(signum, None)
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            loop.remove_signal_handler(signum)
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
