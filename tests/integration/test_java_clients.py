"""Apache Kafka's Java clients (kafka-clients 4.4.0) against a 3-broker kaas cluster: the
JUnit 5 suite of ``tests/java`` (docs/compatibility.rst, "Java clients").

pytest starts the cluster (``kaas cluster``, the brokers' options of
``tests/java/broker-args.txt``, which the suite also uses when it starts one itself) and
runs ``mvn -B -T1 test`` there with ``KAAS_BOOTSTRAP`` and ``KAAS_DATA`` (the tests that
SIGKILL a leader find its pid file there). Maven resolves kafka-clients and JUnit from
Maven Central on the first run (``~/.m2``). The test then reads Surefire's reports: every
test passed or is one of the ``@Disabled`` ones, each with its cause in the report.

Skipped, with the reason, when ``java`` or ``mvn`` is missing, unless ``KAAS_REQUIRE_ALL=1``
(then it fails).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kaas.testing.procs import ClusterProcess
from tests.tools import require_tool

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

JAVA_DIR = Path(__file__).resolve().parent.parent / "java"
BROKER_ARGS = JAVA_DIR / "broker-args.txt"
TIMEOUT_S = 1200


def broker_args() -> list[str]:
    """``tests/java/broker-args.txt``: one option or value a line, ``#`` comments."""
    lines = (line.strip() for line in BROKER_ARGS.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def tools() -> tuple[str, str]:
    """``java`` and ``mvn``, or a skip (a failure under KAAS_REQUIRE_ALL=1) naming what is missing."""
    java = require_tool("java", package="openjdk-17-jdk-headless", why="tests/java")
    mvn = require_tool("mvn", package="maven", why="tests/java")
    return java, mvn


def surefire_results(reports: Path) -> dict[str, str]:
    """Each test case of Surefire's XML reports: ``Class.method[params]`` -> passed /
    failed / error / skipped (with the skip's message)."""
    out: dict[str, str] = {}
    for xml in sorted(reports.glob("TEST-*.xml")):
        for case in ET.parse(xml).getroot().iter("testcase"):
            name = f"{case.get('classname', '').rsplit('.', 1)[-1]}.{case.get('name')}"
            verdict = "passed"
            for kind in ("failure", "error", "skipped"):
                el = case.find(kind)
                if el is not None:
                    verdict = kind if kind != "skipped" else f"skipped: {el.get('message', '')}"
            out[name] = verdict
    return out


def test_java_client_suite(tmp_path):
    _, mvn = tools()  # first: a skip starts no cluster
    cluster = ClusterProcess(tmp_path / "data", 3, extra=broker_args(), env={"KAAS_TXN_SWEEP_MS": "500"}).start()
    try:
        env = {**os.environ, "KAAS_BOOTSTRAP": cluster.bootstrap, "KAAS_DATA": str(cluster.data)}
        reports = JAVA_DIR / "target" / "surefire-reports"
        shutil.rmtree(reports, ignore_errors=True)  # a previous run's
        cmd = [mvn, "-B", "-q", "-T1", "test", "-DtrimStackTrace=false"]  # a failure names the call
        try:
            r = subprocess.run(cmd, cwd=JAVA_DIR, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"mvn test timed out after {TIMEOUT_S} s\n{e.stdout}")
    finally:
        cluster.stop()
    results = surefire_results(reports)
    print("\n".join(f"{verdict:8} {name}" for name, verdict in sorted(results.items())))
    bad = {n: v for n, v in results.items() if v in ("failure", "error")}
    if r.returncode or bad:  # the brokers' side of a failure, for whoever reads the CI log
        for b in range(3):
            notable = [ln for ln in cluster.broker_log(b).splitlines() if "[warning" in ln or "[error" in ln]
            print(f"broker {b}: {len(notable)} warnings and errors, the last 40:", *notable[-40:], sep="\n")
    assert r.returncode == 0 and not bad, f"mvn test exited {r.returncode}; failed: {sorted(bad)}\n{r.stdout[-20000:]}"
    assert len(results) >= 50, f"only {len(results)} Java tests ran"
    skipped = {n: v for n, v in results.items() if v.startswith("skipped")}
    # every skip is an @Disabled naming its cause (none is an assumption left unmet)
    assert all(v.startswith("skipped: kaas:") for v in skipped.values()), skipped
