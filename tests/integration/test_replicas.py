"""Replication factor, ISR, min.insync.replicas and DescribeTopicPartitions with real
clients (one 3-broker cluster for the replica checks, the shared broker for the rest), and
message.timestamp.type=LogAppendTime end to end."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from kaas.client import WireClient
from kaas.testing import ClusterProcess, wait_for

pytestmark = pytest.mark.slow




def partitions(port: int, topic: str) -> list:
    """Metadata v12 partitions of ``topic`` as broker ``port`` reports them (sorted)."""
    with WireClient("127.0.0.1", port, timeout=5) as wc:
        md = wc.call(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                             "include_topic_authorized_operations": False})
    return sorted(md.topics[0].partitions, key=lambda p: p.partition_index)


def produce_codes(bootstrap: str, topic: str, n_partitions: int, **conf) -> list[int]:
    """Produce one message to each partition; the delivery error code of each (0: ok)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.timeout.ms": 10000, **conf})
    codes: dict[int, int] = {}

    def cb(err, msg):
        codes[msg.partition()] = 0 if err is None else err.code()

    for i in range(n_partitions):
        p.produce(topic, value=b"v%d" % i, partition=i, on_delivery=cb)
    assert p.flush(20) == 0
    return [codes[i] for i in range(n_partitions)]


# ---------------------------------------------------------------------------- 3 brokers


@pytest.mark.cluster
def test_replication_factor_isr_and_min_insync_replicas_on_three_brokers(tmp_path):
    # the supervisor restarts a killed broker after 10 s: long enough to see it dead
    with ClusterProcess(tmp_path / "data", 3, supervisor_args=["--restart-delay", "10"]).running() as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        topic, parts = "rf3", 3
        admin.create_topics([NewTopic(topic, parts, 3, config={"min.insync.replicas": "3"})])[topic].result(15)
        with pytest.raises(KafkaException) as ei:
            admin.create_topics([NewTopic("rf4", 1, 4)])["rf4"].result(15)
        err = ei.value.args[0]
        assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR
        assert "only 3 broker(s) are registered" in err.str()

        # every partition: 3 replicas, the leader first, all in sync
        ps = wait_for(lambda: (lambda ps: ps if all(p.leader_id >= 0 for p in ps) else None)(
            partitions(c.ports[0], topic)), 15, "leaders")
        for p in ps:
            assert p.replica_nodes[0] == p.leader_id and sorted(p.replica_nodes) == [0, 1, 2]
            assert sorted(p.isr_nodes) == [0, 1, 2] and list(p.offline_replicas) == []
        desc = admin.describe_topics(TopicCollection([topic]))[topic].result(10)
        assert all(len(p.replicas) == 3 and p.replicas[0].id == p.leader.id for p in desc.partitions)
        assert produce_codes(c.bootstrap, topic, parts, acks="all") == [0] * parts

        # a dead broker leaves the ISR for the offline replicas
        victim = 2
        c.kill(victim)

        def shrunk():
            ps = partitions(c.ports[0], topic)
            ok = all(p.leader_id >= 0 and p.leader_id != victim and victim not in p.isr_nodes
                     and list(p.offline_replicas) == [victim] for p in ps)
            return ps if ok else None

        ps = wait_for(shrunk, 10, "ISR without the killed broker")
        for p in ps:
            assert p.replica_nodes[0] == p.leader_id and sorted(p.replica_nodes) == [0, 1, 2]
            assert sorted(p.isr_nodes) == sorted({0, 1} | {p.leader_id})

        # DescribeTopicPartitions (API 75) says the same (asked of a live broker: kafka-python's
        # admin client may pick the dead one, still listed; it is used on one broker below)
        with WireClient("127.0.0.1", c.ports[0], timeout=5) as wc:
            res = wc.call(75, 0, {"topics": [{"name": topic}], "response_partition_limit": 2000, "cursor": None})
        (t,) = res.topics
        assert t.error_code == 0 and res.next_cursor is None
        assert [(list(p.replica_nodes), list(p.isr_nodes), list(p.offline_replicas)) for p in t.partitions] == [
            (list(p.replica_nodes), list(p.isr_nodes), [victim]) for p in ps]

        # acks=all needs 3 in sync: NOT_ENOUGH_REPLICAS; acks=1 does not
        live = ",".join(f"127.0.0.1:{port}" for port in c.ports[:2])
        assert produce_codes(live, topic, parts, acks="all", retries=0) == [KafkaError.NOT_ENOUGH_REPLICAS] * parts
        assert produce_codes(live, topic, parts, acks="1") == [0] * parts

        # back after the restart: the ISR is whole again and acks=all succeeds
        wait_for(lambda: all(sorted(p.isr_nodes) == [0, 1, 2] for p in partitions(c.ports[0], topic)),
                 25, "the restarted broker back in the ISR")
        assert produce_codes(c.bootstrap, topic, parts, acks="all") == [0] * parts


# ---------------------------------------------------------------------------- one broker


def test_describe_topic_partitions_pages_with_a_cursor(shared_broker):
    from kafka import KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic("dtp-a", 3, 1), NewTopic("dtp-b", 2, -1)])["dtp-b"].result(10)
    wait_for(lambda: all(p.leader_id == 0 for t in ("dtp-a", "dtp-b") for p in partitions(shared_broker.port, t)),
             10, "leaders")
    ka = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        first = ka.describe_topic_partitions(["dtp-b", "dtp-a", "dtp-none"], response_partition_limit=2)
        assert [t["name"] for t in first["topics"]] == ["dtp-a"]
        assert [p["partition_index"] for p in first["topics"][0]["partitions"]] == [0, 1]
        assert first["next_cursor"] == {"topic_name": "dtp-a", "partition_index": 2}
        p0 = first["topics"][0]["partitions"][0]
        assert (p0["leader_id"], p0["replica_nodes"], p0["isr_nodes"], p0["offline_replicas"]) == (0, [0], [0], [])

        rest = ka.describe_topic_partitions(["dtp-b", "dtp-a", "dtp-none"], response_partition_limit=10,
                                            cursor=first["next_cursor"])
        assert [(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]])
                for t in rest["topics"]] == [("dtp-a", 0, [2]), ("dtp-b", 0, [0, 1]), ("dtp-none", 3, [])]
        assert rest["next_cursor"] is None
        everything = ka.describe_topic_partitions([])
        names = [t["name"] for t in everything["topics"]]
        assert names == sorted(names) and {"dtp-a", "dtp-b"} <= set(names)
    finally:
        ka.close()


def test_min_insync_replicas_validation_and_single_broker_acks_all(shared_broker):
    """Apache refuses min.insync.replicas below 1 and, since 3.7, needs only
    min(min.insync.replicas, replicas) in sync: RF 1 with min.insync.replicas=2 still takes
    acks=all."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    with pytest.raises(KafkaException) as ei:
        admin.create_topics([NewTopic("misr-zero", 1, 1, config={"min.insync.replicas": "0"})])["misr-zero"].result(10)
    assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG
    admin.create_topics([NewTopic("misr-two", 1, 1, config={"min.insync.replicas": "2"})])["misr-two"].result(10)
    res = ConfigResource(ConfigResource.Type.TOPIC, "misr-two", incremental_configs=[
        ConfigEntry("min.insync.replicas", "0", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as ei:
        admin.incremental_alter_configs([res])[res].result(10)
    assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert produce_codes(shared_broker.bootstrap, "misr-two", 1, acks="all", retries=0) == [0]


def test_log_append_time_topic_with_real_clients(shared_broker):
    bs = shared_broker.bootstrap
    topic = "lat-topic"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1, config={"message.timestamp.type": "LogAppendTime"})])[topic].result(10)
    create_time = 1_000_000  # 1970: the broker's stamp must replace it
    p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 0})
    delivered: list[tuple[int, tuple[int, int]]] = []

    def cb(err, msg):
        assert err is None, err
        delivered.append((msg.offset(), msg.timestamp()))

    stamps = []
    for i in range(2):
        before = int(time.time() * 1000)
        p.produce(topic, value=b"m%d" % i, timestamp=create_time, on_delivery=cb)
        assert p.flush(10) == 0
        after = int(time.time() * 1000)
        offset, (ts_type, ts) = delivered[-1]
        assert offset == i and ts_type == TIMESTAMP_LOG_APPEND_TIME  # from the Produce response
        assert before <= ts <= after
        stamps.append(ts)
        time.sleep(0.02)
    assert stamps[1] > stamps[0]

    c = Consumer({"bootstrap.servers": bs, "group.id": "lat-reader", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        msgs = [m for m in c.consume(2, 10) if m.error() is None]
        assert [(m.offset(), m.timestamp()) for m in msgs] == [
            (i, (TIMESTAMP_LOG_APPEND_TIME, stamps[i])) for i in range(2)]
        # ListOffsets by timestamp finds records by their append time
        found = c.offsets_for_times([TopicPartition(topic, 0, stamps[0])], timeout=10)
        assert found[0].offset == 0
        found = c.offsets_for_times([TopicPartition(topic, 0, stamps[0] + 1)], timeout=10)
        assert found[0].offset == 1
        found = c.offsets_for_times([TopicPartition(topic, 0, create_time)], timeout=10)
        assert found[0].offset == 0  # the create time is gone: every record is later
    finally:
        c.close()


# ---------------------------------------------------------------------------- librdkafka 0103


@pytest.mark.cluster
def test_librdkafka_transaction_scenarios_on_replication_factor_3_topics(tmp_path):
    """The scenarios of librdkafka's own transaction test (tests/0103-transactions.c), which
    creates its topics with replication factor 3 (refused by kaas before issue 18), run with
    confluent-kafka on a 3-broker cluster: basic transactions committed and aborted, a
    consume-transform-produce with send_offsets_to_transaction, an empty transaction, a
    fenced producer, and the read_committed high watermark held at the LSO while a
    transaction is open."""
    import uuid

    from confluent_kafka import Consumer, Producer, TopicPartition

    with ClusterProcess(tmp_path / "data", 3).running() as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        src, dst = "rdk-0103-in", "rdk-0103-out"
        fs = admin.create_topics([NewTopic(src, 3, 3), NewTopic(dst, 3, 3)])
        for f in fs.values():
            f.result(15)
        bs = c.bootstrap

        def txn_producer(tid: str) -> Producer:
            p = Producer({"bootstrap.servers": bs, "transactional.id": tid, "linger.ms": 5})
            p.init_transactions(30)
            return p

        def read(topic: str, isolation: str = "read_committed") -> list[bytes]:
            cons = Consumer({"bootstrap.servers": bs, "group.id": uuid.uuid4().hex, "isolation.level": isolation,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
            try:
                tps = [TopicPartition(topic, p, 0) for p in range(3)]
                cons.assign(tps)
                ends = [cons.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3)]
                out: list[bytes] = []
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    m = cons.poll(0.3)
                    if m is not None and not m.error():
                        out.append(m.value())
                    pos = cons.position([TopicPartition(topic, p) for p in range(3)])
                    if m is None and all(t.offset >= e for t, e in zip(pos, ends)):
                        break
                return out
            finally:
                cons.close()

        # do_test_basic_producer_txn: committed ones visible, aborted ones never
        p = txn_producer("rdk-basic")
        for i in range(6):
            p.begin_transaction()
            for j in range(20):
                p.produce(src, value=f"{i}-{j}".encode(), partition=j % 3)
            (p.commit_transaction if i % 2 == 0 else p.abort_transaction)(30)
        got = read(src)
        assert sorted(got) == sorted(f"{i}-{j}".encode() for i in (0, 2, 4) for j in range(20))

        # do_test_empty_txn: begin + commit with nothing in it, and with only offsets
        p.begin_transaction()
        p.commit_transaction(30)

        # do_test_consumer_producer_txn: consume src, produce dst, commit offsets in the txn
        group = "rdk-0103-group"
        cons = Consumer({"bootstrap.servers": bs, "group.id": group, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
        cons.subscribe([src])
        copier = txn_producer("rdk-copier")
        copied = 0
        deadline = time.monotonic() + 40
        while copied < 60 and time.monotonic() < deadline:
            msgs = [m for m in cons.consume(20, 1.0) if not m.error()]
            if not msgs:
                continue
            copier.begin_transaction()
            for m in msgs:
                copier.produce(dst, value=b"copy:" + m.value(), partition=m.partition())
            offsets = {}
            for m in msgs:
                offsets[m.partition()] = m.offset() + 1
            copier.send_offsets_to_transaction([TopicPartition(src, pt, o) for pt, o in offsets.items()],
                                               cons.consumer_group_metadata(), 30)
            copier.commit_transaction(30)
            copied += len(msgs)
        cons.close()
        assert copied == 60
        assert sorted(read(dst)) == sorted(b"copy:" + v for v in got)
        # the offsets committed in the transactions cover every record: the group resumes at the end
        again = Consumer({"bootstrap.servers": bs, "group.id": group, "isolation.level": "read_committed",
                          "auto.offset.reset": "earliest", "enable.auto.commit": False})
        again.subscribe([src])
        leftover = [m for m in again.consume(100, 5.0) if not m.error()]
        again.close()
        assert leftover == []

        # do_test_wmark_isolation_level: an open transaction holds read_committed at the LSO
        p.begin_transaction()
        p.produce(dst, value=b"open", partition=0)
        p.flush(10)
        rc = Consumer({"bootstrap.servers": bs, "group.id": uuid.uuid4().hex, "isolation.level": "read_committed"})
        ru = Consumer({"bootstrap.servers": bs, "group.id": uuid.uuid4().hex, "isolation.level": "read_uncommitted"})
        rc.assign([TopicPartition(dst, 0, 0)])
        ru.assign([TopicPartition(dst, 0, 0)])
        # (ListOffsets LATEST with the consumer's isolation level)
        high_rc = rc.get_watermark_offsets(TopicPartition(dst, 0), timeout=10)[1]
        high_ru = ru.get_watermark_offsets(TopicPartition(dst, 0), timeout=10)[1]
        rc.close()
        ru.close()
        assert high_rc < high_ru  # the LSO, below the open transaction's record
        p.abort_transaction(30)
        assert b"open" not in read(dst)

        # do_test_fenced_txn: a second producer with the same id fences the first
        zombie = txn_producer("rdk-fenced")
        zombie.begin_transaction()
        zombie.produce(src, value=b"zombie", partition=0)
        zombie.flush(10)
        txn_producer("rdk-fenced")  # a new instance: bumps the epoch, aborts the zombie's txn
        with pytest.raises(KafkaException) as ei:
            zombie.commit_transaction(30)
        assert ei.value.args[0].fatal() or ei.value.args[0].code() in (
            KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
        assert b"zombie" not in read(src)


@pytest.mark.cluster
def test_manual_replica_assignments_in_create_topics_and_create_partitions(tmp_path):
    """CreateTopics and CreatePartitions with ``assignments`` (librdkafka 0081 sends them):
    the lists are the partitions' replicas, their first live broker leads, every broker's
    Metadata says so; Apache's errors for the invalid ones; a dead preferred broker's
    partition is led by the next broker of its list."""
    with ClusterProcess(tmp_path / "data", 3, supervisor_args=["--restart-delay", "10"]).running() as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        topic = "manual"
        lists = [[2, 0], [1, 2], [0, 1], [2, 1]]
        admin.create_topics([NewTopic(topic, len(lists), replica_assignment=lists)])[topic].result(15)

        def served(port: int) -> list | None:
            ps = partitions(port, topic)
            return ps if len(ps) == len(lists) and all(p.leader_id >= 0 for p in ps) else None

        for port in c.ports:
            ps = wait_for(lambda port=port: served(port), 15, "leaders")
            assert [list(p.replica_nodes) for p in ps] == lists
            assert [p.leader_id for p in ps] == [r[0] for r in lists]
            assert all(sorted(p.isr_nodes) == sorted(r) for p, r in zip(ps, lists, strict=True))
        assert produce_codes(c.bootstrap, topic, len(lists), acks="all") == [0] * len(lists)

        # CreatePartitions with lists for the new partitions (validate_only first: nothing changes)
        fs = admin.create_partitions([NewPartitions(topic, 6, replica_assignment=[[1, 0], [0, 2]])],
                                     validate_only=True)
        fs[topic].result(15)
        assert len(partitions(c.ports[0], topic)) == 4
        admin.create_partitions([NewPartitions(topic, 6, replica_assignment=[[1, 0], [0, 2]])])[topic].result(15)
        ps = wait_for(lambda: (lambda ps: ps if len(ps) == 6 and all(p.leader_id >= 0 for p in ps) else None)(
            partitions(c.ports[1], topic)), 15, "new partitions")
        assert [list(p.replica_nodes) for p in ps[4:]] == [[1, 0], [0, 2]]
        assert [p.leader_id for p in ps[4:]] == [1, 0]

        def refused(fs_of, name) -> KafkaError:
            with pytest.raises(KafkaException) as ei:
                fs_of()[name].result(15)
            return ei.value.args[0]

        cases = [
            (lambda: admin.create_topics([NewTopic("bad1", 1, replica_assignment=[[0, 7]])]), "bad1",
             KafkaError.INVALID_REPLICA_ASSIGNMENT, "includes broker 7, but no such broker is registered"),
            (lambda: admin.create_topics([NewTopic("bad2", 1, replica_assignment=[[0, 0]])]), "bad2",
             KafkaError.INVALID_REPLICA_ASSIGNMENT, "includes the broker 0 more than once"),
            (lambda: admin.create_topics([NewTopic("bad3", 2, replica_assignment=[[0, 1], [2]])]), "bad3",
             KafkaError.INVALID_REPLICA_ASSIGNMENT, "not consistent with previous partitions"),
            (lambda: admin.create_partitions([NewPartitions(topic, 8, replica_assignment=[[0, 1]])]), topic,
             KafkaError.INVALID_REPLICA_ASSIGNMENT, "Attempted to add 2 additional partition(s), but only 1"),
            (lambda: admin.create_partitions([NewPartitions(topic, 7, replica_assignment=[[0]])]), topic,
             KafkaError.INVALID_REPLICA_ASSIGNMENT, "which have 2 replica(s)"),
            (lambda: admin.create_partitions([NewPartitions(topic, 5)]), topic,
             KafkaError.INVALID_PARTITIONS, "currently has 6 partition(s); 5 would not be an increase"),
        ]
        for fs_of, name, code, why in cases:
            err = refused(fs_of, name)
            assert err.code() == code and why in err.str(), (name, err)
        assert "bad1" not in admin.list_topics(timeout=10).topics

        # broker 2 dies: its preferred partitions move to the next live broker of their lists
        c.kill(2)
        want = [0, 1, 0, 1, 1, 0]
        wait_for(lambda: [p.leader_id for p in partitions(c.ports[0], topic)] == want, 20, "failover in list order")
        ps = partitions(c.ports[0], topic)
        assert [list(p.replica_nodes) for p in ps] == lists + [[1, 0], [0, 2]]
        assert list(ps[0].offline_replicas) == [2]
