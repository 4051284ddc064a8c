"""``kaas cluster --secure`` end to end (issue 21): three brokers with one SASL_SSL listener
each, peers authenticated with SCRAM-SHA-512 as ``User:kaas-broker``, the authoriser on.
With the admin's ``DATA/run/client.properties``, confluent-kafka creates a topic, produces,
consumes and commits a transaction whose partitions are led by every broker (so the
coordinator's markers cross authenticated peer links); ``kaas users add`` and ``kaas acls
add`` with ``--command-config`` make a second user who may write one topic only; and a
broker SIGKILLed is suspected through the (authenticated) presence connections."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import NewTopic

from kaas.testing import wait_for
from tests.fixtures import secure_cluster_fixture
from tests.kafka import read_to_end, uniq

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

N = 3
FAILURES = ("peer_link_failed", "tls_handshake_failed", "peer_suspected",
            "connection_closed_before_authentication", "sasl_authentication_failed")


def _failure(line: str) -> bool:
    """A log line that says a peer connection (or anything else) failed. Two kinds are not:
    a client that closed mid-handshake (``UNEXPECTED_EOF``: librdkafka drops its bootstrap
    connections once Metadata names the brokers; a peer link failing there would log
    ``peer_link_failed`` on its own side), and a presence connection refused by a peer not
    yet listening at start. A presence connection refused by TLS or SASL counts."""
    if "presence_connect_failed" in line:
        return "LinkFailed" in line or "SSL" in line
    if "tls_handshake_failed" in line and "UNEXPECTED_EOF" in line:
        return False
    return any(f in line for f in FAILURES)


def _kaas(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kaas.cli", *args], capture_output=True, text=True, timeout=60)


def _consume(conf: dict, topic: str, partitions: int, isolation: str = "read_committed",
             timeout: float = 20.0) -> list[bytes]:
    return [m.value() for m in read_to_end(conf["bootstrap.servers"], topic, partitions, isolation, timeout, conf)]


secure_cluster = secure_cluster_fixture(N, doc="A 3-broker kaas cluster --secure, one per test.")


def _logs(data: Path) -> list[str]:
    return [(data / "run" / f"kaas-{i}.log").read_text(errors="replace") for i in range(N)]


def test_secure_cluster_authenticates_peers_and_authorises_clients(secure_cluster, tmp_path):
    data, props_path, conf, admin = secure_cluster
    run = data / "run"
    for f in ("admin.password", "broker.password", "client.properties"):
        assert (run / f).stat().st_mode & 0o077 == 0, f
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.mechanism"] == "SCRAM-SHA-512"
    # kaas health (the image's and the pods' probe): ApiVersions over TLS, before SASL
    probe = subprocess.run([sys.executable, "-m", "kaas.cli", "health", "--bootstrap", conf["bootstrap.servers"],
                            "--command-config", str(props_path)], capture_output=True, text=True, timeout=30)
    assert probe.returncode == 0, probe.stderr

    # the admin (a super user) creates a topic whose partitions every broker leads
    topic, other = uniq("secure"), uniq("other")
    for name in (topic, other):
        admin.create_topics([NewTopic(name, 6, 1)])[name].result(15)

    def leaders():
        md = admin.list_topics(topic, timeout=5).topics[topic]
        ls = {p.leader for p in md.partitions.values()}
        return len(md.partitions) == 6 and -1 not in ls and ls
    assert wait_for(leaders, 20, "leaders of the topic") == set(range(N))

    p = Producer({**conf, "linger.ms": 5})
    for i in range(12):
        p.produce(topic, f"plain{i}".encode(), partition=i % 6)
    assert p.flush(20) == 0
    assert sorted(_consume(conf, topic, 6, "read_uncommitted")) == sorted(f"plain{i}".encode() for i in range(12))

    # a transaction over all six partitions: its coordinator leads at most two of them, the
    # markers of the others go to their leaders over the authenticated peer links
    tp = Producer({**conf, "transactional.id": uniq("tx"), "linger.ms": 5})
    tp.init_transactions(30)
    tp.begin_transaction()
    for i in range(60):
        tp.produce(topic, f"t{i}".encode(), partition=i % 6)
    tp.commit_transaction(30)
    got = _consume(conf, topic, 6)
    assert sorted(got) == sorted([f"plain{i}".encode() for i in range(12)] + [f"t{i}".encode() for i in range(60)])

    # a second SCRAM user, made over the wire as the admin, may write `topic` only
    bootstrap = conf["bootstrap.servers"]
    r = _kaas("users", "add", "writer", "--password", "writer-secret", "--mechanism", "SCRAM-SHA-512",
              "--bootstrap", bootstrap, "--command-config", str(props_path))
    assert r.returncode == 0, r.stderr
    r = _kaas("acls", "add", "--topic", topic, "--operation", "WRITE", "--allow-principal", "User:writer",
              "--bootstrap", bootstrap, "--command-config", str(props_path))
    assert r.returncode == 0, r.stderr
    r = _kaas("acls", "list", "--topic", topic, "--bootstrap", bootstrap, "--command-config", str(props_path),
              "--json")
    assert r.returncode == 0 and "User:writer" in r.stdout, r.stderr
    r = _kaas("topics", "list", "--bootstrap", bootstrap, "--command-config", str(props_path))
    assert r.returncode == 0 and topic in r.stdout, r.stderr
    for tool in (["groups", "list"], ["txn", "list"]):
        r = _kaas(*tool, "--bootstrap", bootstrap, "--command-config", str(props_path))
        assert r.returncode == 0, (tool, r.stderr)

    writer = {**conf, "sasl.username": "writer", "sasl.password": "writer-secret"}
    delivered: dict[str, object] = {}

    def report(err, msg):
        delivered[msg.topic()] = err
    w = Producer({**writer, "linger.ms": 5, "acks": "all", "message.timeout.ms": 10000, "retries": 0})
    w.produce(topic, b"by-writer", partition=0, on_delivery=report)
    w.produce(other, b"not-allowed", partition=0, on_delivery=report)
    w.flush(20)
    assert delivered[topic] is None
    err = delivered[other]
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    assert b"by-writer" in _consume(conf, topic, 6, "read_uncommitted")

    # the peers reached each other as the broker principal, and nothing on the way failed
    logs = _logs(data)
    for i, text in enumerate(logs):
        assert "sasl_authenticated" in text and "User:kaas-broker" in text, f"broker {i}: no peer authenticated"
        bad = [line for line in text.splitlines() if _failure(line)]
        assert not bad, f"broker {i}: {bad[:5]}"
    r = _kaas("topics", "list", "--bootstrap", bootstrap)  # no --command-config: plaintext to TLS, refused
    assert r.returncode != 0


def test_presence_connections_authenticate(secure_cluster):
    """Presence runs over the SASL_SSL listener: a SIGKILLed broker is suspected by its peers
    through the end of an authenticated presence connection."""
    data, _props_path, _conf, _admin = secure_cluster

    def presence_up():
        # each broker accepted authenticated connections from both peers (presence at least)
        return all(t.count("User:kaas-broker") >= N - 1 for t in _logs(data))
    wait_for(presence_up, 40, "peer connections authenticated")  # the brokers start slowly on a loaded machine
    time.sleep(1.0)
    assert not any("peer_suspected" in t for t in _logs(data))  # nothing closed the idle connections
    victim = N - 1
    pid = int((data / "run" / f"kaas-{victim}.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    # peer_suspected is logged only when a presence connection ends (ClusterView.suspect),
    # never by the heartbeat rule: its presence shows the authenticated connections at work
    suspected = re.compile(rf"peer_suspected\s+broker={victim}\b")
    wait_for(lambda: all(suspected.search(t) for t in _logs(data)[:victim]), 10, "the victim suspected")
