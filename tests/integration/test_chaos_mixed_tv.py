"""The mixed-tv chaos scenario end to end (issue 45): librdkafka producers on
transaction.version 1 and Apache's Java 4.4 copiers on version 2 writing the same partitions,
Java copiers copying that topic, while the coordinator crashes at each EndTxn step.
scripts/chaos exits 0 only if nothing was lost, duplicated, read aborted or torn; the report
must also show both versions in the slot files, a crash at every point and aborted records
in the log. Needs java and mvn (Apache's kafka-tools from Maven Central)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools import require_tool

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[2]


def test_mixed_transaction_versions_keep_exactly_once_under_endtxn_crashes(tmp_path):
    require_tool("java", package="openjdk-17-jdk", why="Apache's Java 4.4 client")
    require_tool("mvn", package="maven", why="resolves Apache Kafka 4.4's jars")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "chaos"), "run", "--scenario", "mixed-tv", "--seed", "4545",
         "--messages", "3000", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=900, cwd=ROOT)
    tail = "\n".join(line for line in proc.stdout.splitlines() if not line.startswith("%"))[-3000:]
    assert proc.returncode == 0, tail + proc.stderr[-2000:]
    r = json.loads((tmp_path / "mixed-tv-seed4545.json").read_text())
    assert r["ok"] and r["shared"]["records"] == r["output"]["records"] > 3000
    for where in ("shared", "output"):
        assert {k: r[where][k] for k in ("lost", "duplicates", "aborted_reads", "torn")} == dict.fromkeys(
            ("lost", "duplicates", "aborted_reads", "torn"), 0)
    assert all(p["crashes"] >= 1 for p in r["kills_by_point"].values()), r["kills_by_point"]
    versions = {tid: e["transaction_version"] for tid, e in r["slot_entries"].items()}
    assert {v for tid, v in versions.items() if tid.startswith("mixed-tv1-")} == {1}
    assert {v for tid, v in versions.items() if tid.startswith("mixed-tv2-")} == {2}
    assert r["tv1_aborted_in_log"] > 0
    assert all(c["committed"] > 0 for c in r["tv1_transactions"].values())
    assert r["tv2_commits"]["writers"] > 0 and r["tv2_commits"]["copiers"] > 0
