"""The Java chaos scenarios (``scripts/chaos``, docs/transactions.rst, "Apache's transactions
test and Kafka Streams, under broker kills"), small, on a fresh kaas cluster each: Apache's
TransactionalMessageCopier test in group mode with hard bounces, and the Kafka Streams
exactly_once_v2 application; brokers SIGKILLed every 4 s in both. ``make chaos`` runs them
at full size (100,000 messages, 200,000 orders), and against Apache 4.4 too.

Skipped, with the reason, when ``java`` or ``mvn`` is missing, unless ``KAAS_REQUIRE_ALL=1``
(then it fails).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools import require_tool

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

CHAOS = Path(__file__).resolve().parents[2] / "scripts" / "chaos"


def run_chaos(tmp_path: Path, *args: str) -> dict:
    require_tool("java", package="openjdk-17-jdk", why="the scenario runs Apache Kafka's Java clients")
    require_tool("mvn", package="maven", why="resolves Apache Kafka 4.4.0's jars")
    out = tmp_path / "reports"
    done = subprocess.run([sys.executable, str(CHAOS), "run", "--target", "kaas", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=1200)
    reports = list(out.glob("*.json"))
    assert done.returncode == 0 and len(reports) == 1, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(reports[0].read_text())


def test_apache_transactions_test_copies_exactly_once_under_broker_kills(tmp_path):
    r = run_chaos(tmp_path, "--scenario", "apache-eos", "--mode", "group", "--bounce", "hard",
                  "--messages", "20000", "--seed", "3")
    for read in (r["final"], r["concurrent"]):
        assert (read["input"], read["output"], read["duplicates"], read["lost"]) == (20000, 20000, 0, 0)
        assert read["partitions_not_equal_to_input"] == [] and read["ok"]
    assert r["ok"] and r["copy_completed"] and r["kills"] >= 1 and r["copier_bounces"] >= 1


def test_kafka_streams_exactly_once_v2_under_broker_kills(tmp_path):
    r = run_chaos(tmp_path, "--scenario", "streams", "--messages", "20000", "--seed", "3")
    v = r["verdict"]
    e = v["enriched"]
    assert (e["input"], e["output"], e["duplicates"], e["lost"], e["wrong_value"]) == (20000, 20000, 0, 0, 0)
    assert v["windowed_totals"]["ok"] and v["region_totals"]["ok"]
    assert v["windowed_totals"]["regressions"] == v["windowed_totals"]["split_keys"] == 0
    assert r["deleted_by_brokers"] == {}  # no input, output or changelog record trimmed by retention
    assert v["windowed_totals"]["keys"] > 1000 and v["region_totals"]["keys"] == 5
    assert r["ok"] and r["completed"] and r["kills"] >= 1
    # the restarted instance took its static members' places and restored its stores
    assert r["membership"] == "static" and r["instance_killed"] and r["restored_after_instance_kill"] > 0
