"""Local ports for the servers a benchmark or a test starts (embedding servers, model doubles, ``reme`` services).

A port handed out here is bound later by another process, so it must not be taken in between. Two things could take
it: the OS, which gives out its ephemeral range (``ip_local_port_range``, 32768-60999 on Linux) to every outgoing
connection and every ``bind(port 0)``, and another process of the same run (pytest-xdist workers start services side
by side). So ports come from below the ephemeral range, each process in a slice of its own (the xdist worker's number,
else its pid), one after the other, each checked free by a bind at the moment it is handed out.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

LOW = 20_000  # the first port handed out; below it sit the well-known services and common development servers
SLICE = 500  # ports per process: a full test run starts a few dozen services per worker
SLICES = 24  # LOW + SLICES * SLICE must stay at or below the ephemeral range's start (32,768 here; 32,000 is the
# lowest common default)


def slice_index(worker: str | None, pid: int) -> int:
    """The slice of a process: an xdist worker's number (``gw3`` -> 3), else its pid, modulo ``SLICES``."""
    match = re.fullmatch(r"gw(\d+)", worker or "")
    return (int(match.group(1)) if match else pid) % SLICES


def candidates(index: int, start: int = 0):
    """Every port of slice ``index`` once, from offset ``start`` on, wrapping round."""
    first = LOW + index * SLICE
    return (first + (start + n) % SLICE for n in range(SLICE))


def ephemeral_range() -> tuple[int, int]:
    """The OS's ephemeral port range (Linux; elsewhere the IANA range 49152-65535)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 49_152, 65_535


def is_free(port: int) -> bool:
    """Whether ``port`` can be bound on 127.0.0.1 right now (no ``SO_REUSEADDR``: a port in TIME_WAIT is not free)."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


_offset = 0  # where this process's next search starts in its slice: a port just handed out is not handed out again


def free_port() -> int:
    """A TCP port on 127.0.0.1, free now, that neither the OS nor another worker of this run hands out (the caller
    binds it soon after). Falls back to an OS-chosen port when the slice lies in the ephemeral range or is full."""
    global _offset
    index = slice_index(os.environ.get("PYTEST_XDIST_WORKER"), os.getpid())
    if LOW + SLICES * SLICE <= ephemeral_range()[0]:
        for port in candidates(index, _offset):
            if is_free(port):
                _offset = port - (LOW + index * SLICE) + 1
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
