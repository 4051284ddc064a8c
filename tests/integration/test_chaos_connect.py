"""Kafka Connect 4.4's exactly-once source on kaas under broker kills: the ``connect`` chaos
scenario (``scripts/chaos/connect.py``, docs/transactions.rst) run small, through its CLI.

Two distributed workers (``compat/connect``, resolved and compiled by Maven on the first run)
copy 4,000 counted numbers into a topic while a broker is SIGKILLed every 4 s and one worker
is SIGKILLed and restarted; the scenario's verdicts must all hold: every number once
read_committed, the sink group's offsets consistent with its files, the compacted internal
topics readable with the connectors and the final offsets, each resume right after the last
committed number.

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

REPO = Path(__file__).resolve().parents[2]
MESSAGES = 4000
SEED = 11


def test_connect_exactly_once_source_under_broker_and_worker_kills(tmp_path):
    require_tool("java", package="openjdk-17-jdk-headless", why="the connect scenario's workers")
    require_tool("mvn", package="maven", why="compat/connect (connect-runtime 4.4.0)")
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "chaos"), "run", "--scenario", "connect",
                           "--messages", str(MESSAGES), "--seed", str(SEED), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=1200, cwd=REPO)
    report = tmp_path / f"connect-kaas-seed{SEED}.json"
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    r = json.loads(report.read_text())
    summary = {k: r[k] for k in ("source", "sink", "internal", "resumes", "cleanup_policies", "connector_status")}
    assert done.returncode == 0 and r["ok"], json.dumps(summary, indent=1)[-6000:]
    assert (r["source"]["input"], r["source"]["output"], r["source"]["duplicates"], r["source"]["lost"]) == (
        MESSAGES, MESSAGES, 0, 0)
    assert r["sink"]["distinct_given"] == MESSAGES and r["sink"]["samples"] > 0
    assert r["worker_killed"] and r["kills"] >= 1 and r["internal"]["rounds"] >= 2
    assert set(r["cleanup_policies"].values()) == {"compact"}
