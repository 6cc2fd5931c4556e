"""OS-level write faults below chosen directories (tests run as root, where permissions deny nothing)."""

from __future__ import annotations

import builtins
import errno
import os
import stat
from pathlib import Path


class Faults:
    """OS-level write faults below chosen directories (see the module docstring)."""

    def __init__(self, monkeypatch) -> None:
        self.denied: set[Path] = set()  # os.open(..., O_CREAT) -> EACCES
        self.full: set[Path] = set()  # os.fsync of a regular file -> ENOSPC
        self.hits: list[str] = []
        real_open, real_fsync = os.open, os.fsync

        def fake_open(path, flags, mode=0o777, *, dir_fd=None):
            if flags & os.O_CREAT and self._below(path, self.denied):
                self.hits.append(f"open {path}")
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_open(path, flags, mode, dir_fd=dir_fd)

        def fake_fsync(fd):
            if self.full and stat.S_ISREG(os.fstat(fd).st_mode):
                target = os.readlink(f"/proc/self/fd/{fd}")
                if self._below(target, self.full):
                    self.hits.append(f"fsync {target}")
                    raise OSError(errno.ENOSPC, "No space left on device")
            return real_fsync(fd)

        def fake_builtin_open(file, mode="r", *args, **kwargs):  # Python's open() does not call os.open
            if (
                isinstance(file, (str, bytes, os.PathLike))
                and set(mode) & set("wax+")
                and self._below(os.fsdecode(file), self.denied)
            ):
                self.hits.append(f"open {os.fsdecode(file)}")
                raise PermissionError(errno.EACCES, "Permission denied", os.fsdecode(file))
            return real_builtin_open(file, mode, *args, **kwargs)

        real_builtin_open = builtins.open
        monkeypatch.setattr(os, "open", fake_open)
        monkeypatch.setattr(os, "fsync", fake_fsync)
        monkeypatch.setattr(builtins, "open", fake_builtin_open)

    @staticmethod
    def _below(path, roots: set[Path]) -> bool:
        parent = Path(path).absolute().parent
        return any(parent == root or root in parent.parents for root in roots)
