"""``benchmarks/benchlib/ports.py``: ports for the services tests and benchmarks start, never one another worker or
the OS could hand out in between."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from benchlib import ports  # noqa: E402


def test_workers_get_disjoint_slices_below_the_ephemeral_range():
    slices = [set(ports.candidates(ports.slice_index(f"gw{n}", 0))) for n in range(4)]
    assert all(len(s) == ports.SLICE for s in slices)
    assert all(not (a & b) for i, a in enumerate(slices) for b in slices[i + 1 :])
    highest = max(max(s) for s in slices)
    assert ports.LOW + ports.SLICES * ports.SLICE <= 32_000 and highest < 32_000
    # outside xdist a process's slice follows its pid
    assert ports.slice_index(None, 4242) == 4242 % ports.SLICES
    assert ports.slice_index("master", 7) == 7 % ports.SLICES


def test_candidates_start_at_the_offset_and_wrap_round():
    first = ports.LOW + 2 * ports.SLICE
    order = list(ports.candidates(2, ports.SLICE - 1))
    assert order[:2] == [first + ports.SLICE - 1, first]
    assert sorted(order) == list(range(first, first + ports.SLICE))


def test_free_port_is_bindable_outside_the_ephemeral_range_and_not_handed_out_twice(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    monkeypatch.setattr(ports, "_offset", 0)
    first_of_slice = ports.LOW + 3 * ports.SLICE
    handed = [ports.free_port() for _ in range(5)]
    assert len(set(handed)) == 5
    assert all(first_of_slice <= p < first_of_slice + ports.SLICE for p in handed)
    assert ports.ephemeral_range()[0] > max(handed)
    for port in handed:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_skipped(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
    monkeypatch.setattr(ports, "_offset", 0)
    first_of_slice = ports.LOW + 5 * ports.SLICE
    with socket.socket() as holder:
        try:
            holder.bind(("127.0.0.1", first_of_slice))
        except OSError:
            pytest.skip(f"port {first_of_slice} is taken on this machine")
        holder.listen()
        assert ports.free_port() == first_of_slice + 1


def test_an_ephemeral_range_over_the_slices_falls_back_to_an_os_port(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (10_000, 60_999))
    port = ports.free_port()
    assert 10_000 <= port <= 60_999
