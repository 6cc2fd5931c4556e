"""A readers-writer lock for structures searched in worker threads and mutated on the event loop."""

from __future__ import annotations

import threading
from contextlib import contextmanager


class ReadWriteLock:
    """Many concurrent readers or one writer; a waiting writer holds back new readers (no writer starvation).

    The writer's thread may take the lock again, to write or to read: ReMe's base classes call methods this plugin
    overrides while an override already holds the lock (``BM25Index.optimize_index`` calls ``clear`` when every
    document is deleted), and a non-reentrant lock would block that thread, the event loop, forever. A reader that
    asks to write still waits for the other readers (an upgrade is never granted; no caller does it)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer: int | None = None  # the thread that holds the write lock (only it sets this to itself)
        self._writers_waiting = 0

    def _held_by_me(self) -> bool:
        return self._writer == threading.get_ident()

    @contextmanager
    def read(self):
        if self._held_by_me():  # the writer reads what it is writing
            yield
            return
        with self._cond:
            while self._writer is not None or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self):
        if self._held_by_me():  # the outermost write releases it
            yield
            return
        with self._cond:
            self._writers_waiting += 1
            while self._writer is not None or self._readers:
                self._cond.wait()
            self._writers_waiting -= 1
            self._writer = threading.get_ident()
        try:
            yield
        finally:
            with self._cond:
                self._writer = None
                self._cond.notify_all()
