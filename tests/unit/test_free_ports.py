"""The test harness's ports: free, consecutive, and below the kernel's ephemeral range, so
that no client connection's local port can take a broker's port while it restarts."""

from __future__ import annotations

import socket

import pytest

from kaas.testing import procs


def test_free_ports_are_consecutive_free_and_below_the_ephemeral_range():
    top = procs._ephemeral_low()
    for n in (1, 3, 5):
        base = procs.free_ports(n)
        assert procs.PORTS_FROM <= base and base + n <= top
        for port in range(base, base + n):
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))


def test_a_taken_port_is_never_handed_out(monkeypatch):
    """With every port of the range but a 3-port window taken, that window comes back."""
    free = {24000, 24001, 24002}
    monkeypatch.setattr(procs, "_ephemeral_low", lambda: 24010)
    monkeypatch.setattr(procs, "PORTS_FROM", 23990)
    monkeypatch.setattr(procs, "_bindable", lambda port: port in free)
    assert procs.free_ports(3) == 24000


def test_without_room_below_the_ephemeral_range_the_kernel_picks(monkeypatch):
    monkeypatch.setattr(procs, "_ephemeral_low", lambda: 1024)
    base = procs.free_ports(2)
    assert base >= 1024
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", base))
        b.bind(("127.0.0.1", base + 1))


def test_no_free_window_is_an_error(monkeypatch):
    monkeypatch.setattr(procs, "_bindable", lambda port: False)
    with pytest.raises(RuntimeError, match="no free port range"):
        procs.free_ports(3)
