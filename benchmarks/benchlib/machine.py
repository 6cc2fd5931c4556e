"""What the benchmarks print about the machine they ran on and the code they measured."""

import os
import platform
from pathlib import Path


def describe(*versions: str) -> str:
    """``"<n> cores (<cpu model>), Python x.y.z, <versions...>, <OS> <release>"``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or "unknown cpu"
    parts = [f"{os.cpu_count()} cores ({cpu})", f"Python {platform.python_version()}", *versions]
    return ", ".join(parts) + f", {platform.system()} {platform.release()}"


def revision() -> str:
    """Where the measured plugin was imported from, and its git revision (``-dirty``: uncommitted changes)."""
    import subprocess

    import reme_procedure_memory

    source = Path(reme_procedure_memory.__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"],
            cwd=source,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return f"{out.stdout.strip()} ({source})"
    except (OSError, subprocess.SubprocessError):
        return f"not a git checkout ({source})"
