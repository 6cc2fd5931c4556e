"""One process per workspace: an exclusive ``flock`` held while the component runs (refusal names the holder)."""

from __future__ import annotations

import fcntl
import os
import time
import weakref
from pathlib import Path

from ..errors import WorkspaceBusy
from .atomic import ensure_dir


class WorkspaceLock:
    """An exclusive, non-blocking ``flock`` on a lock file; released on ``release``, when this object is collected,
    or at process exit. The file records the holder (``pid=... since=...``) for the refusal message."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._finalizer = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise WorkspaceBusy naming the holder and the fix."""
        ensure_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "unknown"
            os.close(fd)
            raise WorkspaceBusy(
                f"The procedure-memory workspace is in use by another ReMe process ({holder}; lock file "
                f"{self.path}). Stop that process (for example the `reme start` service) and "
                "run the command again; only one process may use a workspace.",
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid={os.getpid()} since={time.strftime('%Y-%m-%dT%H:%M:%S')}".encode())
        self._fd = fd
        self._finalizer = weakref.finalize(self, os.close, fd)  # an owner dropped without release frees it

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self._fd is not None:
            self._finalizer.detach()
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
