"""A full or failing disk under the state files, with a real broker process and real
clients (issue 17, points 3 and 6): the ``state.*`` failpoints make a slot file, a group's
offsets file, the PID block file, the fence log, a topic file or the heartbeat fail with
ENOSPC, EIO or a short write. Each request touching the file gets a retriable error (the
connection stays up, the broker keeps running), the previous state is what clients read
meanwhile, and once the disk works again the clients carry on with nothing lost or
duplicated. A broker whose heartbeat cannot be written fences itself and comes back.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from kaas import failpoints
from kaas.client import WireClient
from kaas.testing import BrokerProcess, wait_for
from tests.fixtures import broker_fixture
from tests.kafka import SWEEP_ENV, create_topic, read_to_end, txn_producer, uniq, values

pytestmark = pytest.mark.slow


disk_broker = broker_fixture(scope="module", name="disk", env=SWEEP_ENV,
                             extra=["--group-initial-rebalance-delay-ms", "0"],
                             doc="One broker for the module (distinct topics, groups and transactional ids).")


def _count(b: BrokerProcess, event: str) -> int:
    return b.log_text().count(event)




def arm(b: BrokerProcess, point: str, **spec) -> None:
    """Arm one failpoint on the broker and wait until it has loaded it (200 ms poll)."""
    seen = _count(b, "failpoints_armed")
    failpoints.arm(b.data / "run", b.broker_id, {point: spec})
    wait_for(lambda: _count(b, "failpoints_armed") > seen, 10, f"{point} armed")


def disarm(b: BrokerProcess) -> None:
    seen = _count(b, "failpoints_cleared")
    failpoints.disarm(b.data / "run", b.broker_id)
    wait_for(lambda: _count(b, "failpoints_cleared") > seen, 10, "failpoints cleared")


# ----------------------------------------------------------------------------- slot file


def test_commit_on_a_full_disk_is_retriable_and_commits_once_it_has_room(disk_broker):
    b = disk_broker
    bs, topic = b.bootstrap, uniq("slot-full")
    create_topic(bs, topic, 2)
    p = txn_producer(bs, uniq("slot-full"))
    p.init_transactions(10)
    p.begin_transaction()
    sent = [f"v{i}".encode() for i in range(20)]
    for i, v in enumerate(sent):
        p.produce(topic, value=v, partition=i % 2)
    assert p.flush(10) == 0

    arm(b, "state.write", action="error", errno="ENOSPC", path="slot-")
    with pytest.raises(KafkaException) as exc:
        p.commit_transaction(2)  # every EndTxn gets COORDINATOR_NOT_AVAILABLE
    err = exc.value.args[0]
    assert err.retriable() and not err.txn_requires_abort() and not err.fatal(), err
    assert values(read_to_end(bs, topic, 2, "read_committed")) == []  # nothing decided yet
    assert _count(b, "txn_slot_write_failed") > 0

    disarm(b)
    p.commit_transaction(10)  # the same commit, resumed
    assert sorted(values(read_to_end(bs, topic, 2, "read_committed"))) == sorted(sent)
    assert len(read_to_end(bs, topic, 2, "read_uncommitted")) == len(sent)
    assert b.alive()


# ----------------------------------------------------------------------------- group offsets


def _offset_commit(wc: WireClient, group: str, topic: str, offset: int) -> ErrorCode:
    r = wc.call(8, 2, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                       "retention_time": -1,
                       "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                                  "committed_metadata": ""}]}]})
    [t] = r.topics
    [part] = t.partitions
    return part.error_code


def _offset_fetch(wc: WireClient, group: str, topic: str) -> int:
    r = wc.call(9, 1, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]})
    [t] = r.topics
    [part] = t.partitions
    assert part.error_code == ErrorCode.none
    return part.committed_offset


def test_offset_commit_on_a_full_disk_keeps_the_previous_offset(disk_broker):
    b = disk_broker
    bs, topic, group = b.bootstrap, uniq("offsets-full"), uniq("g")
    create_topic(bs, topic, 1)
    with WireClient("127.0.0.1", b.port) as wc:
        assert _offset_commit(wc, group, topic, 5) == ErrorCode.none
        arm(b, "state.write", action="error", errno="ENOSPC", path="consumer_offsets/")
        assert _offset_commit(wc, group, topic, 9) == ErrorCode.coordinator_not_available
        assert _offset_fetch(wc, group, topic) == 5  # same connection: it stayed up
    # a real client reads the previous offset meanwhile
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        assert c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 5
        disarm(b)
        c.commit(offsets=[TopicPartition(topic, 0, 9)], asynchronous=False)
        assert c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 9
    finally:
        c.close()
    assert _count(b, "group_offsets_write_failed") > 0


# ----------------------------------------------------------------------------- PID blocks


def test_init_producer_id_when_the_pid_block_cannot_be_written(broker):
    """A fresh broker has no PID block yet: the first InitProducerId must write one."""
    b = broker
    bs, topic = b.bootstrap, uniq("pids")
    create_topic(bs, topic, 1)
    arm(b, "state.write", action="error", errno="EIO", path="producer_ids/")
    with WireClient("127.0.0.1", b.port) as wc:
        r = wc.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000})
        assert (r.error_code, r.producer_id) == (ErrorCode.coordinator_load_in_progress, -1)
        r = wc.call(22, 4, {"transactional_id": uniq("pids"), "transaction_timeout": 60000,
                            "producer_id": -1, "producer_epoch": -1})
        assert (r.error_code, r.producer_id) == (ErrorCode.coordinator_load_in_progress, -1)
    # an idempotent producer keeps asking for a PID, its message waiting meanwhile
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 0})
    p.produce(topic, value=b"after-eio")
    assert p.flush(1.5) == 1
    disarm(b)
    assert p.flush(10) == 0
    assert values(read_to_end(bs, topic, 1, "read_uncommitted")) == [b"after-eio"]
    assert not (b.data / "__cluster" / "producer_ids" / "kaas-0.json.tmp").exists()
    assert _count(b, "pid_block_write_failed") > 0


# ----------------------------------------------------------------------------- fence log


def test_a_short_fence_log_write_is_retried_and_fences_the_zombie(disk_broker):
    b = disk_broker
    bs, topic, txn_id = b.bootstrap, uniq("fence-short"), uniq("fence-short")
    create_topic(bs, topic, 1)
    zombie = txn_producer(bs, txn_id)
    zombie.init_transactions(10)  # epoch 0: no fence
    fences = b.data / "__cluster" / "producer_fences" / "kaas-0.log"
    before = fences.read_bytes() if fences.exists() else b""

    arm(b, "state.write", action="short", path="producer_fences/")
    successor = txn_producer(bs, txn_id)
    with pytest.raises(KafkaException) as exc:
        successor.init_transactions(2)  # the epoch bump's fence cannot be written
    assert exc.value.args[0].retriable(), exc.value.args[0]
    assert fences.read_bytes() == before  # the short write was cut back
    disarm(b)
    successor.init_transactions(10)
    lines = fences.read_bytes()[len(before):].splitlines()
    assert lines and all(line.startswith(b'{"pid":') and line.endswith(b"}") for line in lines)

    successor.begin_transaction()
    successor.produce(topic, value=b"successor")
    successor.commit_transaction(10)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)
    assert values(read_to_end(bs, topic, 1, "read_committed")) == [b"successor"]


# ----------------------------------------------------------------------------- topic files


def test_topic_admin_on_a_failing_disk_answers_storage_error(disk_broker):
    b = disk_broker
    name, existing = uniq("topic-short"), uniq("topic-kept")
    create_topic(b.bootstrap, existing, 1)
    topic_file = b.data / "__cluster" / "topics" / f"{existing}.json"
    before = topic_file.read_bytes()

    def create(wc: WireClient) -> ErrorCode:
        r = wc.call(19, 2, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}],
                            "timeout": 5000, "validate_only": False})
        return r.topics[0].error_code

    arm(b, "state.write", action="short", path="topics/")
    with WireClient("127.0.0.1", b.port) as wc:
        assert create(wc) == ErrorCode.kafka_storage_error
        md = wc.call(3, 12, {"topics": [{"name": uniq("auto-short")}], "allow_auto_topic_creation": True,
                             "include_topic_authorized_operations": False})
        assert md.topics[0].error_code == ErrorCode.leader_not_available  # retriable: asked again
        from kaas.wire.batch import build_batch

        pr = wc.call(0, 9, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
            {"name": uniq("auto-produce"), "partition_data": [
                {"index": 0, "records": build_batch(records=[(None, b"v")])}]}]})
        # only Metadata creates topics (as Apache): a Produce to a missing one writes no file
        assert pr.responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
        r = wc.call(37, 0, {"topics": [{"name": existing, "count": 3, "assignments": None}],
                            "timeout": 5000, "validate_only": False})
        assert r.results[0].error_code == ErrorCode.kafka_storage_error
        r = wc.call(33, 0, {"resources": [{"resource_type": 2, "resource_name": existing,
                                           "configs": [{"name": "retention.ms", "value": "60000"}]}],
                            "validate_only": False})
        assert r.responses[0].error_code == ErrorCode.kafka_storage_error
        assert topic_file.read_bytes() == before
        assert not [n for n in topic_file.parent.iterdir() if n.name.startswith(".")]
        disarm(b)
        assert create(wc) == ErrorCode.none
        r = wc.call(37, 0, {"topics": [{"name": existing, "count": 3, "assignments": None}],
                            "timeout": 5000, "validate_only": False})
        assert r.results[0].error_code == ErrorCode.none
    assert _count(b, "topic_write_failed") >= 4  # CreateTopics, Metadata, CreatePartitions, AlterConfigs


# ----------------------------------------------------------------------------- heartbeat


def test_a_broker_that_cannot_write_its_heartbeat_fences_itself_and_recovers(disk_broker):
    b = disk_broker
    bs, topic = b.bootstrap, uniq("heartbeat")
    create_topic(bs, topic, 1)
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 0})
    p.produce(topic, value=b"before")
    assert p.flush(10) == 0

    lapsed = _count(b, "lease_lapsed")
    arm(b, "state.write", action="error", errno="ENOSPC", path="brokers/kaas-0")
    wait_for(lambda: _count(b, "heartbeat_write_failed") > 0, 5, "a failed heartbeat")
    time.sleep(1.6)  # session_timeout/2 without a heartbeat: self-fenced
    p.produce(topic, value=b"during")
    assert p.flush(1.0) == 1  # refused (NOT_LEADER_OR_FOLLOWER) and retried, not acknowledged
    disarm(b)
    assert p.flush(10) == 0
    wait_for(lambda: _count(b, "lease_lapsed") > lapsed, 5, "the lease renewed after the lapse")
    assert values(read_to_end(bs, topic, 1, "read_uncommitted")) == [b"before", b"during"]
    assert b.alive()
