"""Two brokers that are both PID 1, each in its own PID namespace (``unshare --pid``, as
two containers), on one data directory: a SIGKILL of one moves its partitions to the
other, and its restart (PID 1 again) rejoins and leads again, exactly as with two brokers
of different pids. The same scenario runs both ways and the outcomes are compared."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kaas.testing import BrokerProcess, free_ports, wait_for
from tests.integration.test_control_plane import metadata
from tests.tools import require, require_tool

UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
PARTITIONS = 4
SESSION_MS = 1500  # a short lease: the takeover without a death notice waits it out


def require_unshare() -> None:
    """``unshare --pid`` works here (util-linux, as root); else ``missing``."""
    require_tool("unshare", package="util-linux")
    r = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True, timeout=30)
    require(r.returncode == 0, f"unshare --pid failed ({r.stderr.strip()}): run as root (or with CAP_SYS_ADMIN)")


def _beat(data: Path, broker_id: int) -> dict:
    return json.loads((data / "__cluster" / "brokers" / f"kaas-{broker_id}.json").read_text())


def _produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 20000})
    for i in range(start, start + n):
        p.produce(topic, str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0


def _consume_all(bootstrap: str, topic: str, expect: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: list[int] = []
    try:
        wait_for(lambda: (got.extend(int(m.value()) for m in c.consume(100, 0.5) if m.error() is None)
                          or len(got) >= expect), 30, "every record consumed")
    finally:
        c.close()
    return sorted(got)


def _scenario(data: Path, prefix: list[str]) -> dict:
    base = free_ports(2)
    extra = ["--session-timeout-ms", str(SESSION_MS)]
    brokers = [BrokerProcess(data, i, port=base + i, extra=extra, prefix=prefix) for i in range(2)]
    try:
        for b in brokers:
            b.start()
        bootstrap = ",".join(b.bootstrap for b in brokers)
        topic = "pidns"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=10)[topic].result()
        wait_for(lambda: {leader for _e, leader in metadata(base, topic).values()} == {0, 1}, 20,
                 "both brokers lead partitions")
        _produce(bootstrap, topic, 0, 40)
        first = _beat(data, 1)
        brokers[1].kill()  # SIGKILL, no death notice: the others wait out its lease
        wait_for(lambda: all(leader == 0 for _e, leader in metadata(base, topic).values()), 20,
                 "broker 0 leads every partition")
        _produce(brokers[0].bootstrap, topic, 40, 40)
        brokers[1].start()  # the restart
        second = wait_for(lambda: (lambda b: b if b["counter"] > first["counter"] else None)(_beat(data, 1)), 10,
                          "the restarted broker heartbeats")
        wait_for(lambda: 1 in {leader for _e, leader in metadata(base, topic).values()}, 20,
                 "the restarted broker leads partitions again")
        _produce(bootstrap, topic, 80, 40)
        got = _consume_all(bootstrap, topic, 120)
        log0 = brokers[0].log_text()
        return {
            "pids": (first["pid"], second["pid"]),
            "same_incarnation": first["incarnation"] == second["incarnation"],
            "records": got == list(range(120)),
            "took_over": "partition_takeover" in log0,
            "taken_for_dead_after_restart": log0.count("peer_death_noticed"),
        }
    finally:
        for b in brokers:
            b.kill()


def test_two_pid_1_brokers_take_over_and_rejoin_as_brokers_with_their_own_pids(tmp_path):
    require_unshare()
    with ThreadPoolExecutor(2) as pool:  # side by side: two independent 2-broker clusters
        ns_run = pool.submit(_scenario, tmp_path / "pidns", UNSHARE)
        plain_run = pool.submit(_scenario, tmp_path / "plain", [])
        in_namespaces, plain = ns_run.result(), plain_run.result()
    assert in_namespaces["pids"] == (1, 1)  # both incarnations of broker 1 were PID 1
    assert plain["pids"][0] != 1
    for key in ("same_incarnation", "records", "took_over", "taken_for_dead_after_restart"):
        assert in_namespaces[key] == plain[key], key
    assert not in_namespaces["same_incarnation"] and in_namespaces["records"] and in_namespaces["took_over"]
    assert in_namespaces["taken_for_dead_after_restart"] == 0
