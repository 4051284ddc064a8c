"""scripts/bench's Apache Kafka target for real: one node on tmpfs, its start-up figures,
its pid file, the watchdog that restarts a killed JVM (what ``failover`` relies on) and a
close that leaves no JVM and no directory. Needs java and mvn (or the resolved classpath):
skipped without them, a failure with KAAS_REQUIRE_ALL=1."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench.apache_target import _Apache, apache_available  # noqa: E402

from tests.tools import require  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def apache():
    require(apache_available(),
            "java and mvn are needed for Apache Kafka: apt-get install openjdk-17-jre-headless maven")
    target = _Apache(1)
    try:
        yield target
    finally:
        target.close()


def _pid(target: _Apache) -> int:
    return int((target.dir / "run" / "kaas-1.pid").read_text())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_start_kill_restart_close(apache):
    assert set(apache.startup) == {"format_s", "first_s", "formed_s", "rss_idle_mib"}
    assert 0 < apache.startup["first_s"] <= apache.startup["formed_s"]
    assert apache.startup["rss_idle_mib"] > 0
    assert apache.env == {"KAAS_BENCH_REPLICATION_FACTOR": "1"}
    first = _pid(apache)
    assert apache.pids().current() == [first] and _alive(first)
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _pid(apache) == first:
        assert time.monotonic() < deadline, "the watchdog did not restart the JVM"
        time.sleep(0.05)
    apache.wait_healthy(180)
    assert apache.restarts == 1
    second = _pid(apache)
    directory = apache.dir
    apache.close()
    assert not _alive(second)
    assert not directory.exists()
