"""The admin APIs Apache's tools call about placement, on a 3-broker cluster with real
clients: DescribeLogDirs (35) and Alter/ListPartitionReassignments (45/46) through
kafka-python's admin client, ElectLeaders (43) through librdkafka's and as raw requests
(for every error code), each asked of a broker that is not the controller too (forwarded).
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode

from kaas.client import WireClient
from kaas.testing import wait_for
from tests.fixtures import cluster_fixture

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# the supervisor restarts a killed broker after 2 s
placement = cluster_fixture(3, scope="module", name="placement", supervisor_args=["--restart-delay", "2"])

ELECT_LEADERS = 43


def _leaders(port: int, topic: str) -> list[tuple[int, list[int]]]:
    """(leader, replicas) of each partition of ``topic`` as broker ``port`` reports them."""
    with WireClient("127.0.0.1", port, timeout=5) as wc:
        md = wc.call(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                             "include_topic_authorized_operations": False})
    return [(p.leader_id, list(p.replica_nodes)) for p in sorted(md.topics[0].partitions,
                                                                  key=lambda p: p.partition_index)]


def _elect(port: int, election_type: int, topics: list[tuple[str, list[int]]] | None) -> dict:
    with WireClient("127.0.0.1", port, timeout=20) as wc:
        r = wc.call(ELECT_LEADERS, 2, {"election_type": election_type, "timeout": 10000, "topic_partitions": None
                                       if topics is None else [{"topic": t, "partitions": ps} for t, ps in topics]})
    assert r.error_code == 0
    return {(t.topic, p.partition_id): p.error_code for t in r.replica_election_results for p in t.partition_result}


def _produce(bootstrap: str, topic: str, partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(partitions):
        p.produce(topic, value=b"x" * 1000, partition=i)
    assert p.flush(20) == 0


def test_describe_log_dirs_counts_each_partition_once(placement):
    topic = "logdirs"
    admin = AdminClient({"bootstrap.servers": placement.bootstrap})
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(15)
    _produce(placement.bootstrap, topic, 6)
    sizes: dict[int, int] = {}
    log_dirs = set()
    ka = KafkaAdminClient(bootstrap_servers=placement.bootstrap)
    try:
        per_broker = ka.describe_log_dirs()  # asked of every broker, as Apache's tool does
    finally:
        ka.close()
    assert sorted(b["broker"] for b in per_broker) == [0, 1, 2]
    for b in per_broker:
        (result,) = b["log_dirs"]
        assert result["error_code"] == 0 and result["total_bytes"] >= result["usable_bytes"] > 0
        log_dirs.add(result["log_dir"])
        for t in result["topics"]:
            if t["name"] == topic:
                for p in t["partitions"]:
                    assert p["partition_index"] not in sizes and p["offset_lag"] == 0
                    sizes[p["partition_index"]] = p["partition_size"]
    assert log_dirs == {str(placement.data.resolve())}
    assert sorted(sizes) == list(range(6)) and all(s > 1000 for s in sizes.values())


def test_reassignment_moves_the_leader_into_the_new_list(placement):
    topic = "reassign"
    admin = AdminClient({"bootstrap.servers": placement.bootstrap})
    admin.create_topics([NewTopic(topic, 2, replica_assignment=[[0], [1]])])[topic].result(15)
    wait_for(lambda: [lead for lead, _ in _leaders(placement.ports[0], topic)] == [0, 1], 15, "leaders 0, 1")
    _produce(placement.bootstrap, topic, 2)
    ka = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{placement.ports[2]}")
    try:
        tp = KafkaTopicPartition
        res = ka.alter_partition_reassignments({tp(topic, 0): [2], tp(topic, 1): [2, 0], tp("gone", 0): [1]},
                                               timeout_ms=10000)
        assert res[tp(topic, 0)] is None and res[tp(topic, 1)] is None
        assert res[tp("gone", 0)].errno == ErrorCode.unknown_topic_or_partition
        assert _leaders(placement.ports[1], topic)[0] == (2, [2])
        assert wait_for(lambda: _leaders(placement.ports[1], topic)[1] == (2, [2, 0]) or None, 10, "p1 moved")
        assert ka.list_partition_reassignments() == {}
    finally:
        ka.close()
    # the records stayed where they were: the new leaders read them
    c = Consumer({"bootstrap.servers": placement.bootstrap, "group.id": "reassign-reader",
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    got = 0
    for _ in range(100):
        m = c.poll(0.2)
        if m is not None and not m.error():
            got += 1
        if got == 2:
            break
    c.close()
    assert got == 2
    # each error as Apache answers it (raw: kafka-python raises on the first)
    with WireClient("127.0.0.1", placement.ports[0], timeout=20) as wc:
        def alter(partitions: list[dict], name: str = topic) -> list[tuple[int, int]]:
            r = wc.call(45, 1, {"timeout": 10000, "allow_replication_factor_change": False,
                                "topics": [{"name": name, "partitions": partitions}]})
            assert r.error_code == 0
            return [(p.partition_index, p.error_code) for t in r.responses for p in t.partitions]

        assert alter([{"partition_index": 0, "replicas": None}, {"partition_index": 1, "replicas": [1]}]) == [
            (0, ErrorCode.no_reassignment_in_progress), (1, ErrorCode.invalid_replication_factor)]
        assert alter([{"partition_index": 1, "replicas": [7, 1]}]) == [(1, ErrorCode.invalid_replica_assignment)]
        assert alter([{"partition_index": 0, "replicas": [1]}], "no-such-topic") == [
            (0, ErrorCode.unknown_topic_or_partition)]
        lst = wc.call(46, 0, {"timeout": 10000, "topics": None})
    assert (lst.error_code, lst.topics) == (0, ())


def test_elect_leaders_preferred_and_unclean(placement):
    topic = "elect"
    admin = AdminClient({"bootstrap.servers": placement.bootstrap})
    done = admin.create_topics([NewTopic(topic, 2, replica_assignment=[[1, 2], [2, 0]]), NewTopic("elect-ring", 2, 3)])
    for f in done.values():
        f.result(15)
    wait_for(lambda: [lead for lead, _ in _leaders(placement.ports[0], topic)] == [1, 2], 15, "preferred leaders")
    for port in placement.ports:  # whoever is asked (forwarded to the controller)
        assert _elect(port, 0, [(topic, [0, 1]), ("elect-ring", [0]), ("no-such", [0]), (topic, [9])]) == {
            (topic, 0): ErrorCode.election_not_needed, (topic, 1): ErrorCode.election_not_needed,
            ("elect-ring", 0): ErrorCode.election_not_needed, ("no-such", 0): ErrorCode.unknown_topic_or_partition,
            (topic, 9): ErrorCode.unknown_topic_or_partition}
    assert _elect(placement.ports[0], 1, [(topic, [0])]) == {(topic, 0): ErrorCode.election_not_needed}
    assert _elect(placement.ports[0], 0, None) == {}  # every partition: only those needing one are listed
    with WireClient("127.0.0.1", placement.ports[0], timeout=20) as wc:  # ... under every topic, as Apache's
        every = wc.call(ELECT_LEADERS, 2, {"election_type": 0, "timeout": 10000, "topic_partitions": None})
        bad = wc.call(ELECT_LEADERS, 2, {"election_type": 7, "timeout": 10000,
                                         "topic_partitions": [{"topic": topic, "partitions": [0]}]})
    assert {(t.topic, t.partition_result) for t in every.replica_election_results} >= {(topic, ()), ("elect-ring", ())}
    assert bad.error_code == ErrorCode.invalid_request  # an unknown election type
    # librdkafka's admin client: an election not needed is its error per partition
    from confluent_kafka import ElectionType

    fut = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)])
    res = fut.result(20)
    assert res[TopicPartition(topic, 0)].code() == ErrorCode.election_not_needed

    # broker 1 dies: partition 0 moves to 2; once 1 is back, a preferred election moves it
    # home (at once, or the controller already did after the rejoin hold)
    placement.kill(1)
    wait_for(lambda: _leaders(placement.ports[0], topic)[0][0] == 2 or None, 15, "p0 led by 2")
    assert _elect(placement.ports[0], 0, [(topic, [0])]) == {(topic, 0): ErrorCode.preferred_leader_not_available}
    wait_for(lambda: _broker_alive(placement.ports[1]), 20, "broker 1 restarted")
    wait_for(lambda: 1 in _leaders(placement.ports[0], topic)[0][1] or None, 10, "broker 1 listed")
    got = _elect(placement.ports[0], 0, [(topic, [0])])
    assert got[(topic, 0)] in (ErrorCode.none, ErrorCode.election_not_needed)
    assert wait_for(lambda: _leaders(placement.ports[2], topic)[0][0] == 1 or None, 10, "p0 back on 1")


def _broker_alive(port: int) -> bool:
    try:
        with WireClient("127.0.0.1", port, timeout=2) as wc:
            return wc.call(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0
    except OSError:
        return False


def test_fetch_from_a_broker_not_leading_names_the_leader(placement):
    """KIP-951: NOT_LEADER_OR_FOLLOWER carries the current leader (Fetch v12+) and, from
    v16, the leader's endpoint, so the client need not ask Metadata."""
    topic = "fetch-hint"
    admin = AdminClient({"bootstrap.servers": placement.bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[2]])])[topic].result(15)
    wait_for(lambda: _leaders(placement.ports[0], topic)[0][0] == 2 or None, 15, "leader 2")
    with WireClient("127.0.0.1", placement.ports[0], timeout=5) as wc:
        md = wc.call(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                             "include_topic_authorized_operations": False})
        tid = md.topics[0].topic_id
        body = {"max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                "topics": [{"topic_id": tid, "partitions": [
                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}]}
        r16 = wc.call(1, 16, body)
        r13 = wc.call(1, 13, body)
    p = r16.responses[0].partitions[0]
    assert p.error_code == ErrorCode.not_leader_or_follower
    assert p.current_leader.leader_id == 2 and p.current_leader.leader_epoch >= 1
    assert [(e.node_id, e.port) for e in r16.node_endpoints] == [(2, placement.ports[2])]
    assert r13.responses[0].partitions[0].current_leader.leader_id == 2
