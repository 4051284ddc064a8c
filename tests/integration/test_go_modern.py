"""Go clients from the module proxy against a 3-broker kaas cluster: ``tests/go/modern``
(its ``go.mod`` pins franz-go 1.22 with kadm, IBM/sarama 1.61 and segmentio/kafka-go 0.4.51;
docs/compatibility.rst, "Go clients").

pytest starts the cluster and runs ``go test -count=1 -v ./...`` there with
``KAAS_BOOTSTRAP``; the Go toolchain fetches the pinned modules through its module proxy on
the first run (``go env GOMODCACHE``). Every Go test must pass: idempotent and
transactional produce, a GroupTransactSession exactly-once copy, classic and KIP-848
consumer groups, kadm admin calls (franz-go); idempotent and transactional produce with a
read_committed group (sarama); a writer and a group reader (kafka-go).

Skipped, with the reason, when ``go`` is missing or older than the modules need (1.26),
unless ``KAAS_REQUIRE_ALL=1`` (then it fails).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from kaas.testing.procs import ClusterProcess
from tests.tools import missing, require_tool

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

MODERN = Path(__file__).resolve().parent.parent / "go" / "modern"
NEEDS = (1, 26)  # the go directive of the pinned modules
EXPECTED = {"TestFranzIdempotentProduceKeepsOrder", "TestFranzTransactionsCommitAndAbort",
            "TestFranzGroupTransactSessionCopiesExactlyOnce", "TestFranzClassicConsumerGroup",
            "TestFranzConsumerProtocolGroup", "TestKadmTopicsConfigsOffsetsGroupsTransactions",
            "TestSaramaIdempotentTransactionalProduceAndGroup", "TestKafkaGoWriterAndGroupReader"}


def unavailable(why: str) -> None:
    missing(why)


def go_tool() -> str:
    go = require_tool("go", package="golang-go", why="go 1.26+ for tests/go/modern")
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60).stdout.strip()
    m = re.match(r"go(\d+)\.(\d+)", out)
    if m is None or (int(m.group(1)), int(m.group(2))) < NEEDS:
        unavailable(f"tests/go/modern needs go {NEEDS[0]}.{NEEDS[1]}+, found {out or 'none'}")
    return go


def test_go_modules_clients(tmp_path):
    go = go_tool()  # first: a skip starts no cluster
    cluster = ClusterProcess(tmp_path / "data", 3, extra=["--group-initial-rebalance-delay-ms", "0"],
                             env={"KAAS_TXN_SWEEP_MS": "500"}).start()
    try:
        env = {**os.environ, "KAAS_BOOTSTRAP": cluster.bootstrap, "GOFLAGS": "-mod=readonly"}
        try:
            r = subprocess.run([go, "test", "-count=1", "-v", "./..."], cwd=MODERN, env=env, capture_output=True,
                               text=True, timeout=900)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"go test timed out after 900 s\n{e.stdout}")
    finally:
        cluster.stop()
    verdicts = dict((name, verdict) for verdict, name in re.findall(r"^--- (PASS|FAIL|SKIP): (\w+)", r.stdout, re.M))
    print("\n".join(f"{v:5} {n}" for n, v in sorted(verdicts.items())))
    assert r.returncode == 0, f"go test exited {r.returncode}\n{r.stdout[-20000:]}\n{r.stderr[-5000:]}"
    assert verdicts == dict.fromkeys(EXPECTED, "PASS"), verdicts
