"""The control plane reacts in milliseconds (issue 19): admin operations answer when the
whole cluster serves the change, Metadata never names a leader that has not opened its
partition, and a death its supervisor recorded moves the dead broker's keys before the
liveness timeout.

Real 3-broker clusters through the supervisor, driven by confluent-kafka.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from kaas import failpoints
from kaas.client import WireClient
from kaas.testing import ClusterProcess, wait_for
from tests.fixtures import cluster_fixture
from tests.kafka import uniq


def metadata(port: int, topic: str) -> dict[int, tuple[int, int]]:
    """{partition: (error code, leader)} of ``topic`` as the broker on ``port`` answers."""
    with WireClient("127.0.0.1", port, timeout=5.0) as wc:
        md = wc.call(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                             "include_topic_authorized_operations": False})
    (t,) = md.topics
    return {p.partition_index: (int(p.error_code), p.leader_id) for p in t.partitions}


def produce_all(bootstrap: str, topic: str, partitions: int) -> list:
    """Produce one record to every partition through a client bootstrapped at
    ``bootstrap``; the delivery errors (none expected)."""
    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 10000})
    for i in range(partitions):
        p.produce(topic, b"v", partition=i, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(15) == 0
    return errors


cluster = cluster_fixture(3, params=["inotify", "polling"],
                          extra=lambda mode: [] if mode == "inotify" else ["--no-inotify"],
                          doc="With the doorbell, and with polling only (the rules an NFS volume leaves).")


def test_create_then_produce_through_every_broker(cluster):
    """Once CreateTopics (and CreatePartitions) answered, every broker names a leader for
    every partition, and a producer bootstrapped at any one broker delivers to each
    partition at its first attempt."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for _ in range(3):
        topic = uniq("ready")
        admin.create_topics([NewTopic(topic, 6, 1)], operation_timeout=10)[topic].result()
        for port in cluster.ports:
            # each broker reads the leaders' heartbeats on its own doorbell: milliseconds
            wait_for(lambda port=port, topic=topic: all(err == 0 and leader >= 0 for err, leader
                                                        in metadata(port, topic).values()),
                     5, f"broker {port} serves {topic}")
        for port in cluster.ports:
            assert produce_all(f"127.0.0.1:{port}", topic, 6) == []
        admin.create_partitions([NewPartitions(topic, 9)], operation_timeout=10)[topic].result()
        for port in cluster.ports:
            wait_for(lambda port=port, topic=topic: len(metadata(port, topic)) == 9 and all(
                err == 0 and leader >= 0 for err, leader in metadata(port, topic).values()),
                5, f"broker {port} serves 9 partitions of {topic}")
        assert produce_all(cluster.bootstrap, topic, 9) == []
    # a topic edit received by a broker that is not the controller is forwarded to it
    topic = uniq("fwd")
    admin.create_topics([NewTopic(topic, 2, 1)], operation_timeout=10)[topic].result()
    controller = json.loads((cluster.data / "__cluster" / "assignment.json").read_text())["controller_epoch"]
    assert controller >= 1
    for i, port in enumerate(cluster.ports):
        one = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        n = len(metadata(port, topic)) + 1
        one.create_partitions([NewPartitions(topic, n)], operation_timeout=10)[topic].result()
        assert len(metadata(port, topic)) == n
        res = ConfigResource("topic", topic, set_config={"retention.ms": str(100_000 + i)})
        for fut in one.alter_configs([res]).values():
            fut.result()
        other = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.ports[(i + 1) % 3]}"})
        (desc,) = other.describe_configs([ConfigResource("topic", topic)]).values()
        assert desc.result()["retention.ms"].value == str(100_000 + i)
    admin.delete_topics([topic], operation_timeout=10)[topic].result()
    for port in cluster.ports:
        with WireClient("127.0.0.1", port, timeout=5.0) as wc:
            md = wc.call(3, 12, {"topics": [{"name": topic, "topic_id": None}],
                                 "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False})
        assert md.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION: gone everywhere


def test_metadata_never_names_a_leader_that_has_not_opened(cluster):
    """A leader that cannot open its partitions (its manifest writes fail) is never named:
    every broker answers LEADER_NOT_AVAILABLE for them, CreateTopics times out with
    REQUEST_TIMED_OUT, and once the leader opens them they are served."""
    victim = 1
    topic = uniq("unopened")
    seen = cluster.broker_log(victim).count("failpoints_armed")
    failpoints.arm(cluster.data / "run", victim,
                   {"state.write": {"action": "error", "errno": "EIO", "path": f"/data/{topic}/"}})
    wait_for(lambda: cluster.broker_log(victim).count("failpoints_armed") > seen, 10, "failpoint armed")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic(topic, 6, 1)], operation_timeout=2)[topic].result()
    assert info.value.args[0].name() == "REQUEST_TIMED_OUT"
    assignment = json.loads((cluster.data / "__cluster" / "assignment.json").read_text())
    leaders = [row["leader"] for row in assignment["partitions"][topic]]
    assert victim in leaders and any(b != victim for b in leaders)
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        for port in cluster.ports:
            md = metadata(port, topic)
            for p, (err, leader) in md.items():
                if leaders[p] == victim:
                    assert (err, leader) == (5, -1), (port, p, err, leader)  # LEADER_NOT_AVAILABLE
                else:
                    assert err == 0 and leader == leaders[p], (port, p, err, leader)
        time.sleep(0.1)
    failpoints.disarm(cluster.data / "run", victim)
    for port in cluster.ports:
        wait_for(lambda port=port: all(err == 0 and leader >= 0 for err, leader in metadata(port, topic).values()),
                 15, f"broker {port} serves {topic} after the disarm")
    assert produce_all(cluster.bootstrap, topic, 6) == []


def test_death_notice_moves_keys_before_the_liveness_timeout(tmp_path):
    """With a 20 s liveness timeout and a 15 s restart delay, a SIGKILLed leader's
    partitions are led by another broker within seconds: its supervisor reaped it and
    wrote a death notice, which every broker believes at once. The restarted incarnation
    is not taken for dead by that old notice."""
    with ClusterProcess(tmp_path / "data", 3, extra=["--session-timeout-ms", "20000"],
                        supervisor_args=["--restart-delay", "15"]).running() as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        topic = uniq("notice")
        admin.create_topics([NewTopic(topic, 6, 1)], operation_timeout=10)[topic].result()
        assignment = json.loads((c.data / "__cluster" / "assignment.json").read_text())
        leaders = [row["leader"] for row in assignment["partitions"][topic]]
        victim = next(b for b in leaders if b != 0)  # keep the bootstrap broker 0 up
        victims = [p for p, b in enumerate(leaders) if b == victim]
        beat = json.loads((c.data / "__cluster" / "brokers" / f"kaas-{victim}.json").read_text())
        old_pid = c.kill(victim)
        killed = time.monotonic()
        wait_for(lambda: all(metadata(c.ports[0], topic)[p][1] not in (-1, victim) for p in victims),
                 10, "the dead broker's partitions led elsewhere")
        took = time.monotonic() - killed
        assert took < 10, took  # well before the 20 s liveness timeout
        notice = json.loads((c.data / "__cluster" / "deaths" / f"kaas-{victim}.json").read_text())
        assert notice["broker_id"] == victim and notice["pid"] == old_pid
        assert notice["incarnation"] == beat["incarnation"] and not notice["graceful"]
        assert "peer_death_noticed" in c.broker_log(0)
        bootstrap0 = f"127.0.0.1:{c.ports[0]}"
        assert produce_all(bootstrap0, topic, 6) == []
        # the restarted incarnation (new pid) is alive despite the old notice: it gets
        # partitions again once it is back
        c.wait_restarted(victim, old_pid, timeout=30)
        wait_for(lambda: victim in {leader for _e, leader in metadata(c.ports[0], topic).values()},
                 15, "the restarted broker leads partitions again")
        assert produce_all(bootstrap0, topic, 6) == []
