"""KafkaJS and kcat against ``kaas cluster --secure`` (issue 21): SASL_SSL with
SCRAM-SHA-512, the CA of ``DATA/run/tls/`` and the admin of ``DATA/run/client.properties``.
One 3-broker cluster serves both tests (module scope). KafkaJS (``tests/js``, installed
with ``npm ci`` when ``node_modules`` is missing) creates a topic, produces, commits one
transaction and aborts another, and reads back with read_committed; kcat (Debian's package,
installed by ``.ci/run``) produces with ``-P`` and reads with ``-C -e``, and as a
read_committed consumer sees a committed transaction's records and not an aborted one's.
Its librdkafka 2.0.2 logs in only because the broker advertises SaslHandshake v0
(confluentinc/librdkafka#4983: it then sends v1) and accepts its doubled SCRAM nonce
(confluentinc/librdkafka#4895); see docs/security.rst."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from kaas.testing import wait_for
from tests.fixtures import secure_cluster_fixture
from tests.kafka import uniq
from tests.tools import require_tool

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

JS = Path(__file__).resolve().parent.parent / "js"

clients_cluster = secure_cluster_fixture(3, scope="module", name="clients",
                                         doc="One kaas cluster --secure for the KafkaJS and kcat tests.")


def _run(cmd: list[str], *, timeout: float, **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        pytest.fail(f"{cmd[0]} timed out after {timeout} s\nstdout: {out}\nstderr: {err}")


@pytest.fixture(scope="session")
def kafkajs() -> Path:
    """``tests/js`` with its ``node_modules`` (``npm ci`` from package-lock.json when missing)."""
    require_tool("node", package="nodejs", why="KafkaJS runs on node 20")
    require_tool("npm", package="npm")
    if not (JS / "node_modules" / "kafkajs" / "package.json").exists():
        r = _run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS, timeout=300)
        assert r.returncode == 0, f"npm ci in {JS} failed:\n{r.stdout}\n{r.stderr}"
    return JS


def test_kafkajs_produces_consumes_and_runs_transactions(clients_cluster, kafkajs):
    conf = clients_cluster.conf
    topic = uniq("kafkajs")
    r = _run(["node", str(kafkajs / "kafkajs_check.js"), conf["bootstrap.servers"], conf["ssl.ca.location"],
              conf["sasl.username"], conf["sasl.password"], topic], timeout=150)
    assert r.returncode == 0, f"kafkajs_check.js exited {r.returncode}\nstderr:\n{r.stderr}\nstdout:\n{r.stdout}"
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        pytest.fail(f"kafkajs_check.js printed no JSON result\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    assert out["topic"] == topic and out["created"] is True, out
    assert len(out["leaders"]) == 3, out
    parts = out["partitions"]
    # read_committed (readUncommitted: false): the plain records, the committed transaction's,
    # the end records written after the abort, and none of the aborted transaction's
    want = {(i % parts, f"plain{i}") for i in range(6)} | {(i % parts, f"c{i}") for i in range(6)} | \
        {(p, f"end-{p}") for p in range(parts)}
    got = [(m["partition"], m["value"]) for m in out["consumed"]]
    assert sorted(got) == sorted(want), f"read back: {got}"
    # per partition in produce order: plain, then committed, then the end record
    for p in range(parts):
        seq = [m["value"] for m in sorted(out["consumed"], key=lambda m: m["offset"]) if m["partition"] == p]
        assert seq == [f"plain{i}" for i in range(6) if i % parts == p] + \
            [f"c{i}" for i in range(6) if i % parts == p] + [f"end-{p}"], (p, seq)


def _kcat_args(conf: dict[str, str]) -> list[str]:
    return ["-b", conf["bootstrap.servers"], "-X", "security.protocol=SASL_SSL",
            "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", f"ssl.ca.location={conf['ssl.ca.location']}",
            "-X", f"sasl.username={conf['sasl.username']}", "-X", f"sasl.password={conf['sasl.password']}"]


def _kcat(args: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    r = _run(["kcat", *args], timeout=60, **kw)
    assert r.returncode == 0, f"{what} exited {r.returncode}\nstderr:\n{r.stderr}"
    return r


def _kcat_read(conf: dict[str, str], topic: str, *extra: str) -> list[str]:
    r = _kcat([*_kcat_args(conf), "-C", "-e", "-q", "-o", "beginning", "-t", topic, "-f", "%s\\n", *extra], "kcat -C")
    return r.stdout.splitlines()


@pytest.fixture(scope="session")
def kcat() -> str:
    """kcat's path (session scope: checked before the module's cluster starts)."""
    return require_tool("kcat", package="kcat")


def test_kcat_produces_consumes_and_reads_committed(kcat, clients_cluster):
    conf, admin = clients_cluster.conf, clients_cluster.admin
    topic = uniq("kcat")
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(15)
    lines = [f"kcat{i}" for i in range(10)]
    _kcat([*_kcat_args(conf), "-P", "-t", topic, "-X", "acks=all"], "kcat -P", input="\n".join(lines) + "\n")
    assert sorted(_kcat_read(conf, topic)) == sorted(lines)

    # kcat has no transactional producer: confluent-kafka commits one transaction and aborts
    # another on a one-partition topic, then writes a plain record after them; kcat, as a
    # read_committed consumer, must see the committed records and not the aborted ones
    txt = uniq("kcat-txn")
    admin.create_topics([NewTopic(txt, 1, 1)])[txt].result(15)
    tp = Producer({**conf, "transactional.id": uniq("kcat-tx"), "linger.ms": 5})
    tp.init_transactions(30)
    tp.begin_transaction()
    for i in range(5):
        tp.produce(txt, f"committed{i}".encode(), partition=0)
    tp.commit_transaction(30)
    tp.begin_transaction()
    for i in range(5):
        tp.produce(txt, f"aborted{i}".encode(), partition=0)
    assert tp.flush(20) == 0  # in the log before the abort (abort_transaction drops what is unsent)
    tp.abort_transaction(30)
    p = Producer({**conf, "acks": "all"})
    p.produce(txt, b"after", partition=0)
    assert p.flush(20) == 0

    # the end of a read_committed read is the last stable offset: once the markers are
    # written it is past "after"; until then a read may stop short of it
    seen: list[list[str]] = []

    def committed_read():
        got = _kcat_read(conf, txt, "-X", "isolation.level=read_committed")
        seen.append(got)
        return "after" in got and got
    try:
        got = wait_for(committed_read, 20, "kcat read_committed to reach the last record", interval=0.2)
    except AssertionError as e:
        raise AssertionError(f"{e}; its last reads: {seen[-3:]}") from None
    assert got == [f"committed{i}" for i in range(5)] + ["after"], got
    # and read_uncommitted shows the aborted records are there in the log, just filtered
    raw = _kcat_read(conf, txt, "-X", "isolation.level=read_uncommitted")
    assert raw == [f"committed{i}" for i in range(5)] + [f"aborted{i}" for i in range(5)] + ["after"], raw
