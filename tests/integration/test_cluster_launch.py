"""How ``kaas cluster`` starts its brokers: forked from the supervisor, which imported the
broker's code once, by default (``--fork-brokers``); new interpreters with
``--exec-brokers``. Either way a broker killed is started again the same way and serves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kaas.testing import free_ports, wait_ready


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _broker_pid(data: Path, broker_id: int, other_than: int = 0, timeout: float = 30.0) -> int:
    """The pid the supervisor's pid file names once it names a live process (not ``other_than``)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid = int((data / "run" / f"kaas-{broker_id}.pid").read_text().strip())
            if pid != other_than:
                os.kill(pid, 0)
                return pid
        except (OSError, ValueError):
            pass
        assert time.monotonic() < deadline, f"no live broker {broker_id} in the pid file"
        time.sleep(0.05)


@pytest.mark.parametrize("flag", [None, "--exec-brokers"])
def test_brokers_forked_by_default_and_started_again_the_same_way(tmp_path, flag):
    data = tmp_path / "data"
    port = free_ports(2)
    argv = [sys.executable, "-m", "kaas.cli", "cluster", "--brokers", "2", "--data", str(data),
            "--base-port", str(port), "--restart-delay", "0.2", *([flag] if flag else [])]
    with open(tmp_path / "supervisor.log", "ab") as logf:
        sup = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        for i in range(2):
            wait_ready("127.0.0.1", port + i, proc=sup, timeout=60)
        forked = flag is None
        for i in range(2):
            pid = _broker_pid(data, i)
            assert _ppid(pid) == sup.pid
            # a fork runs the supervisor's own command line; an exec its own `kaas broker`
            assert (_cmdline(pid) == _cmdline(sup.pid)) is forked, _cmdline(pid)
            assert ("broker" in _cmdline(pid)) is not forked
        victim = _broker_pid(data, 0)
        os.kill(victim, signal.SIGKILL)
        again = _broker_pid(data, 0, other_than=victim)
        assert (_cmdline(again) == _cmdline(sup.pid)) is forked and _ppid(again) == sup.pid
        wait_ready("127.0.0.1", port, proc=sup, timeout=60)
    finally:
        sup.terminate()
        try:
            sup.wait(30)
        except subprocess.TimeoutExpired:
            sup.kill()
            sup.wait()
