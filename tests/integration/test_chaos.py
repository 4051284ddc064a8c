"""A short chaos run inside `make test`: the EOS harness on a fresh 3-broker cluster while
the transaction coordinators crash at each EndTxn failpoint, while random brokers are
SIGKILLed, while every broker is killed at once, and while the cluster's data volume (a
tmpfs of its own) is filled to the last byte and freed, three times. scripts/chaos exits 0 only if
exactly-once held. And the harness's own check: a broker deliberately broken (abort markers
dropped) makes it fail loudly, naming the violating records."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kaas import failpoints
from kaas.testing import BrokerProcess
from tests.tools import require_tmpfs_mount

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("scenario", ["endtxn-failpoints", "random-kills", "kill-all", "disk-full"])
def test_chaos_scenario_keeps_exactly_once(scenario):
    if scenario == "disk-full":
        require_tmpfs_mount()  # disk-full fills a tmpfs of its own
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "chaos"), "run", "--scenario", scenario, "--seed", "4242",
         "--messages", "1500", "--copiers", "2", "--duration", "25", "--timeout", "120"],
        capture_output=True, text=True, timeout=240, cwd=ROOT)
    tail = "\n".join(line for line in proc.stdout.splitlines() if not line.startswith("%"))[-3000:]
    assert proc.returncode == 0, tail
    assert f"{scenario}" in tail and "FAILED" not in tail


def test_harness_fails_loudly_when_a_broker_drops_abort_markers(tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    try:
        failpoints.arm(b.data / "run", b.broker_id,
                       {"marker.before_append": {"action": "drop", "match": {"commit": False}}})
        deadline = time.monotonic() + 10
        while "failpoints_armed" not in b.log_path.read_text():
            assert time.monotonic() < deadline, "the broker did not pick up the failpoint"
            time.sleep(0.1)
        proc = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "eos_harness"), "run", "--bootstrap", b.bootstrap,
             "--messages", "600", "--copiers", "1", "--commit-every", "20", "--abort-every", "3",
             "--input-partitions", "2", "--output-partitions", "2", "--timeout", "60", "--seed", "7"],
            capture_output=True, text=True, timeout=180, cwd=ROOT)
    finally:
        b.stop()
    out = "\n".join(line for line in proc.stdout.splitlines() if not line.startswith("%"))
    assert proc.returncode == 1, out[-3000:]
    assert "GUARANTEE BROKEN (seed 7)" in out
    # the records of the aborted transactions are listed, with where they were read
    broken = [line for line in out.splitlines() if line.strip().startswith(("aborted read:", "lost:"))]
    assert broken, out[-3000:]
    assert "txn_marker_dropped_by_failpoint" in b.log_path.read_text()
