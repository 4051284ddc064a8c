"""Constants, statistics and the Kafka client helpers every benchmark uses."""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import time
from pathlib import Path

import click

from kaas.client import WireClient, recv_exact

BENCH = Path(__file__).resolve().parent  # this package: ``python scripts/bench`` runs it
REPO = BENCH.parent.parent
PEERS = REPO / "scripts" / "peers"  # the reference brokers' launchers
MOCK_CLUSTER = PEERS / "mock_cluster.py"
TANSU_SH = PEERS / "tansu.sh"
GIB = 1 << 30
MIB = 1 << 20
# Every client of these benchmarks: librdkafka's default (10 s) would dominate failover gaps.
RECONNECT_BACKOFF_MAX_MS = 1000
CLIENT_COMMON: dict[str, object] = {"reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS}
# The client properties file (librdkafka ``key=value``, e.g. ``kaas cluster --secure``'s
# DATA/run/client.properties) whose security settings every client of this process takes:
# how ``security`` runs the same workloads over SASL_SSL. bootstrap.servers stays the caller's.
CLIENT_CONFIG_ENV = "KAAS_BENCH_CLIENT_CONFIG"
# A broker that stops answering a raw connection fails the run (the socket's kernel
# timeout) instead of hanging it.
IO_TIMEOUT_S = 30


def security_settings(path: Path) -> dict[str, str]:
    """The settings of a client properties file, less bootstrap.servers."""
    from kaas.testing import client_settings

    return client_settings(path)


if os.environ.get(CLIENT_CONFIG_ENV):
    CLIENT_COMMON.update(security_settings(Path(os.environ[CLIENT_CONFIG_ENV])))


# ---------------------------------------------------------------------------- helpers


def _percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _ms_pcts(values: list[float], prefix: str) -> dict:
    """p50/p99/max in ms of a list of durations in seconds."""
    v = sorted(values)
    return {f"{prefix}_p50_ms": _r((_percentile(v, 0.50) or 0) * 1000) if v else None,
            f"{prefix}_p99_ms": _r((_percentile(v, 0.99) or 0) * 1000) if v else None,
            f"{prefix}_max_ms": _r(v[-1] * 1000) if v else None}


_NO_CREATE_TOPICS: set[str] = set()
# Set by ``suite`` for runs against the librdkafka mock, which does not serve CreateTopics:
# a unix socket of the ``mock-peer`` process that creates topics through rd_kafka_mock_topic_create.
MOCK_CTL_ENV = "KAAS_BENCH_MOCK_CTL"
_MOCK_CTLS: dict[str, str] = {}  # bootstrap -> control socket, for in-process use (compare)
# Set by ``suite`` for runs against Apache Kafka: the replication factor of the topics the
# benchmarks create (min(3, nodes); kaas and the peers keep one copy on their own storage).
REPLICATION_ENV = "KAAS_BENCH_REPLICATION_FACTOR"


def _mock_create_topic(ctl: str, topic: str, partitions: int) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(ctl)
        s.sendall(f"{topic} {partitions}\n".encode())
        answer = s.makefile().readline().strip()
    if answer not in ("0", "36"):  # 36: TOPIC_ALREADY_EXISTS
        raise click.ClickException(f"mock topic create {topic}: error {answer}")


def ensure_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> None:
    """Create the topic, ignoring TOPIC_ALREADY_EXISTS, and wait until every partition has a leader.

    The librdkafka mock cluster does not serve CreateTopics: with ``$KAAS_BENCH_MOCK_CTL``
    set (``suite`` does it), the topic is created through the mock-peer process; otherwise
    it falls back to auto-creation by a producer's Metadata request, and the topic gets the
    peer's default partition count.
    """
    from concurrent.futures import TimeoutError as FutureTimeout

    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_COMMON})
    ctl = _MOCK_CTLS.get(bootstrap) or os.environ.get(MOCK_CTL_ENV)
    if ctl:
        _mock_create_topic(ctl, topic, partitions)
    elif bootstrap not in _NO_CREATE_TOPICS:
        rf = int(os.environ.get(REPLICATION_ENV, "1"))
        fut = admin.create_topics([NewTopic(topic, partitions, rf)], operation_timeout=timeout)[topic]
        try:
            fut.result(max(3.0, timeout))
        except KafkaException as exc:
            code = exc.args[0].code()
            if code == KafkaError._UNSUPPORTED_FEATURE:
                _NO_CREATE_TOPICS.add(bootstrap)
            elif code != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        except FutureTimeout:
            _NO_CREATE_TOPICS.add(bootstrap)
    probe = Producer({"bootstrap.servers": bootstrap, "allow.auto.create.topics": True, **CLIENT_COMMON}) \
        if bootstrap in _NO_CREATE_TOPICS else admin
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = probe.list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) >= 1 and \
                all(p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.1)
    raise click.ClickException(f"topic {topic} has no leaders")


def topic_partitions(bootstrap: str, topic: str, timeout: float = 15.0) -> int:
    """The topic's partition count, once the broker asked knows it (Apache's brokers learn
    a new topic from the controller's log a little after CreateTopics answered)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_COMMON})
    deadline = time.monotonic() + timeout
    while True:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        n = len(t.partitions) if t is not None and t.error is None else 0
        if n or time.monotonic() > deadline:
            return n
        time.sleep(0.1)


def topic_leaders(bootstrap: str, topic: str, timeout: float = 15.0) -> dict[int, int]:
    """Partition -> leader id, waiting (up to ``timeout``) until every partition has one."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_COMMON})
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(topic, timeout=10)
        leaders = {p: pm.leader for p, pm in sorted(md.topics[topic].partitions.items())}
        if all(v >= 0 for v in leaders.values()) or time.monotonic() > deadline:
            return leaders
        time.sleep(0.1)


def _payloads(size: int, n: int = 64) -> list[bytes]:
    """Half random, half repeated: compressible about 2x, like typical messages."""
    out = []
    for _ in range(n):
        rnd = os.urandom(max(1, size // 4)).hex()[: size // 2]
        body = (rnd + "x" * size)[:size]
        out.append(body.encode())
    return out


def producer_conf(bootstrap: str, acks: str = "all", idempotence: bool = True, linger_ms: float = 5.0,
                  compression: str = "none") -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "enable.idempotence": idempotence,
        "linger.ms": linger_ms,
        "compression.type": compression,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "batch.size": 1_000_000,
        "message.timeout.ms": 120_000,
        **CLIENT_COMMON,
    }


def txn_producer_conf(bootstrap: str, txn_id: str, linger_ms: float = 5.0) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": linger_ms,
        "transaction.timeout.ms": 60_000,
        "message.timeout.ms": 60_000,
        **CLIENT_COMMON,
    }


def consumer_conf(bootstrap: str, group: str, read_committed: bool = True, **extra) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 10_485_760,
        "queued.max.messages.kbytes": 262_144,
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 1000,
        **CLIENT_COMMON,
        **extra,
    }


def find_coordinator(bootstrap: str, key: str, key_type: int = 1, timeout: float = 10.0) -> int:
    """FindCoordinator v1 over a raw socket (key_type 0: group, 1: transaction); the node id."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        for hp in bootstrap.split(","):
            host, _, port = hp.strip().rpartition(":")
            try:
                with socket.create_connection((host, int(port)), timeout=5) as s:
                    cid = b"kaas-bench"
                    kb = key.encode()
                    body = struct.pack(">hhih", 10, 1, 1, len(cid)) + cid + struct.pack(">h", len(kb)) + kb + \
                        struct.pack(">b", key_type)
                    s.sendall(struct.pack(">i", len(body)) + body)
                    size = struct.unpack(">i", recv_exact(s, 4))[0]
                    data = recv_exact(s, size)
                # corr id, throttle, error code, error message (nullable string), node id, host, port
                off = 8
                err = struct.unpack_from(">h", data, off)[0]
                off += 2
                mlen = struct.unpack_from(">h", data, off)[0]
                off += 2 + max(0, mlen)
                node = struct.unpack_from(">i", data, off)[0]
                if err == 0:
                    return node
                last = f"error code {err}"
            except OSError as exc:
                last = exc
        time.sleep(0.2)
    raise click.ClickException(f"no coordinator for {key!r}: {last}")


def connect_nodelay(bootstrap: str) -> WireClient:
    """A connection to the first broker of ``bootstrap``: TCP_NODELAY, blocking, with the
    kernel's send and receive timeouts (IO_TIMEOUT_S; no poll() before each call, as
    Python's own timeouts add)."""
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    wc = WireClient(host, int(port), timeout=IO_TIMEOUT_S)
    sock = wc.sock
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(None)
    timeval = struct.pack("ll", IO_TIMEOUT_S, 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
    return wc


def _emit(res: dict) -> None:
    click.echo(json.dumps(res), nl=True)
    sys.stdout.flush()
