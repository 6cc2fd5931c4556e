"""OS write faults (``helpers/faults.py``) inside a ``reme`` subprocess: Python imports this module at start-up when
this directory is on ``PYTHONPATH`` (``helpers.failures.fault_env``).

``PROCEDURE_TEST_DENIED`` (directories, ``os.pathsep``-separated): creating a file below one fails with EACCES, as
``Faults.denied`` makes it in-process, and so does creating a directory below one (ReMe's own set-up creates the
workspace's directories with ``mkdir``). ``PROCEDURE_TEST_FULL``: an fsync of a file below one fails with ENOSPC.
The tests run as root, where permissions deny nothing; this is how a subprocess meets an unwritable workspace.
"""

import errno
import importlib.util
import os
from pathlib import Path


def _roots(name: str) -> set[Path]:
    return {Path(p) for p in os.environ.get(name, "").split(os.pathsep) if p}


def _install() -> None:
    denied, full = _roots("PROCEDURE_TEST_DENIED"), _roots("PROCEDURE_TEST_FULL")
    if not denied and not full:
        return
    spec = importlib.util.spec_from_file_location("_procedure_test_faults", Path(__file__).parents[1] / "faults.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Patch:  # the one monkeypatch method Faults uses, for the whole process
        setattr = staticmethod(setattr)

    faults = module.Faults(Patch())
    faults.denied, faults.full = denied, full
    real_mkdir = os.mkdir

    def fake_mkdir(path, mode=0o777, *, dir_fd=None):
        parent = Path(os.fsdecode(path)).absolute().parent
        if any(parent == root or root in parent.parents for root in denied):
            raise PermissionError(errno.EACCES, "Permission denied", os.fsdecode(path))
        return real_mkdir(path, mode, dir_fd=dir_fd)

    os.mkdir = fake_mkdir


_install()
