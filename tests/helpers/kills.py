"""A kill before any mutating file-system call below a directory (issue 30 item 7: the fault matrix sees every one).

``MutatingCalls`` patches the calls that change the file system — ``os.open`` with a writing or creating flag and
``open()`` (also ``io.open``: pathlib) in a writing mode, ``os.rename``/``os.replace``, ``os.unlink``/``os.remove``, ``os.rmdir``, ``os.mkdir``,
``os.link``, ``os.symlink``, ``os.truncate`` — and counts those whose target lies below ``root`` (the plugin's and
ReMe's writes alike: the atomic writer's temporary file, its rename and the directory creations, markers, removals,
view logs, ReMe's own files). The ``kill_at``-th raises ``Killed`` (a BaseException the plugin never catches) before
the call is made, as a SIGKILL just before it; every later call dies too, as a dead process makes none.
"""

from __future__ import annotations

import builtins
import io
import os
import re
from pathlib import Path

WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Killed(BaseException):
    """The process died before a mutating file-system call."""


class MutatingCalls:
    """Counts the mutating calls below ``root`` and kills the process at the ``kill_at``-th (None: never)."""

    def __init__(self, monkeypatch, root: Path, kill_at: int | None = None) -> None:
        self.root, self.kill_at, self.done = str(root), kill_at, []
        real = {
            name: getattr(os, name)
            for name in (
                "open",
                "rename",
                "replace",
                "unlink",
                "remove",
                "rmdir",
                "mkdir",
                "link",
                "symlink",
                "truncate",
            )
        }
        real_builtin_open = builtins.open

        def resolve(path, dir_fd=None) -> str:
            path = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ""
            if dir_fd is not None and not os.path.isabs(path):
                try:
                    path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
                except OSError:
                    pass
            return os.path.abspath(path) if path else path

        def fake_open(path, flags, mode=0o777, *, dir_fd=None):
            if flags & WRITING:
                self._check(f"open {resolve(path, dir_fd)}")
            return real["open"](path, flags, mode, dir_fd=dir_fd)

        def fake_builtin_open(file, mode="r", *args, **kwargs):
            if isinstance(file, (str, bytes, os.PathLike)) and set(mode) & set("wax+"):
                self._check(f"open {resolve(file)}")
            return real_builtin_open(file, mode, *args, **kwargs)

        def two_paths(name):
            def call(src, dst, *args, src_dir_fd=None, dst_dir_fd=None, **kwargs):
                self._check(f"{name} {resolve(src, src_dir_fd)} -> {resolve(dst, dst_dir_fd)}")
                return real[name](src, dst, *args, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, **kwargs)

            return call

        def one_path(name):
            def call(path, *args, dir_fd=None, **kwargs):
                self._check(f"{name} {resolve(path, dir_fd)}")
                if dir_fd is None:
                    return real[name](path, *args, **kwargs)
                return real[name](path, *args, dir_fd=dir_fd, **kwargs)

            return call

        def fake_symlink(src, dst, *args, dir_fd=None, **kwargs):
            self._check(f"symlink {resolve(dst, dir_fd)}")
            return real["symlink"](src, dst, *args, dir_fd=dir_fd, **kwargs)

        def fake_truncate(path, length):
            self._check(f"truncate {resolve(path) if not isinstance(path, int) else path}")
            return real["truncate"](path, length)

        monkeypatch.setattr(os, "open", fake_open)
        monkeypatch.setattr(builtins, "open", fake_builtin_open)
        monkeypatch.setattr(io, "open", fake_builtin_open)  # pathlib's write_text, write_bytes and open
        for name in ("rename", "replace", "link"):
            monkeypatch.setattr(os, name, two_paths(name))
        for name in ("unlink", "remove", "rmdir", "mkdir"):
            monkeypatch.setattr(os, name, one_path(name))
        monkeypatch.setattr(os, "symlink", fake_symlink)
        monkeypatch.setattr(os, "truncate", fake_truncate)

    def _check(self, call: str) -> None:
        target = call.split(" ", 1)[1]
        if not (target.startswith(self.root + os.sep) or f"-> {self.root}{os.sep}" in target):
            return
        if len(self.done) == self.kill_at:
            raise Killed(f"killed before mutating call {self.kill_at}: {call}")
        self.done.append(self.normalized(call))

    def normalized(self, call: str) -> str:
        """``call`` as two runs of the same work make it: workspace-relative, without the atomic writer's random
        characters, record times (a marker's µs) and the digests of keys that hold a time (changes made by hand)."""
        call = call.replace(self.root + os.sep, "")
        call = re.sub(r"\.[0-9a-f]{8}\.tmp", ".<tmp>", call)
        call = re.sub(r"\.[0-9]{10,20}\.", ".<time>.", call)
        return re.sub(r"[0-9a-f]{64}", "<digest>", call)
