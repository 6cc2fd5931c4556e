"""What both benchmarks print about the machine they ran on."""

import os
import platform


def describe(*versions: str) -> str:
    """``"<n> cores (<cpu model>), Python x.y.z, <versions...>, <OS> <release>"``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or "unknown cpu"
    parts = [f"{os.cpu_count()} cores ({cpu})", f"Python {platform.python_version()}", *versions]
    return ", ".join(parts) + f", {platform.system()} {platform.release()}"
