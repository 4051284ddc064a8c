"""transaction.version 2 on a real 3-broker cluster, the partition leader's and the group
coordinator's side (KIP-890 part 2), driven with raw kio requests so that every step is
placed: the transaction coordinator, the partition leaders and the group coordinator are
different brokers, so the adds go over the peer connections.

1. Produce v12 without AddPartitionsToTxn and TxnOffsetCommit v5 without AddOffsetsToTxn,
   each to a broker that does not coordinate the transaction: both join it, and EndTxn
   commits the records and the offsets.
2. The hanging transaction KIP-890 was written for: a Produce of transaction 1 held on
   its way to the leader (failpoint ``produce.before_txn_check``) until transaction 1
   committed and transaction 2 began. Under TV2 (Produce v12, EndTxn v5, whose commit
   bumps the epoch) it is refused when it arrives and is never read, committed or not.
   Under TV1 (AddPartitionsToTxn, Produce v11, EndTxn v4, no bump) the same late batch is
   accepted into transaction 2, whose partitions hold its partition: KIP-890 part 1 only
   keeps it out of a partition the transaction does not hold.

The TV2 hanging test needs EndTxn v5 (the coordinator's side of TV2).
"""

from __future__ import annotations

import datetime
import threading
import time

import pytest
from kio.schema.errors import ErrorCode as E

from kaas import failpoints
from kaas.client import WireClient
from kaas.testing import ClusterProcess, wait_for
from kaas.wire.batch import ATTR_TRANSACTIONAL, build_batch
from tests.fixtures import cluster_fixture
from tests.integration.test_txn_cluster import create_topic, pick_group, pick_txn_id, wait_healthy
from tests.kafka import SWEEP_ENV, read_to_end, values

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

cluster = cluster_fixture(3, scope="module", name="txn-v2-cluster", env=SWEEP_ENV,
                          doc="One 3-broker cluster for the module (distinct ids and topics per test).")

HOLD_MS = 6000  # how long the late Produce is held on the leader
ms = datetime.timedelta(milliseconds=1)


def batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    return build_batch(attributes=ATTR_TRANSACTIONAL, base_timestamp=int(time.time() * 1000), producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, records=[(None, value)])


def produce(port: int, version: int, txn_id: str, topic: str, partition: int, records: bytes) -> E:
    with WireClient("127.0.0.1", port, timeout=30) as wc:
        r = wc.call(0, version, {"transactional_id": txn_id, "acks": -1, "timeout": 10_000 * ms, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    [t] = r.responses
    [p] = t.partition_responses
    return p.error_code


def init(port: int, txn_id: str) -> tuple[int, int]:
    with WireClient("127.0.0.1", port) as wc:
        r = wc.call(22, 5, {"transactional_id": txn_id, "transaction_timeout": 60_000 * ms,
                            "producer_id": -1, "producer_epoch": -1})
    assert r.error_code == E.none
    return r.producer_id, r.producer_epoch


def end(port: int, version: int, txn_id: str, pid: int, epoch: int, commit: bool):
    with WireClient("127.0.0.1", port) as wc:
        return wc.call(26, version, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                     "committed": commit})


def place(c: ClusterProcess, prefix: str) -> tuple[str, int, str, dict[int, int]]:
    """A topic led by every broker, a transactional id coordinated by broker 0, and the
    topic's name and {leader: partition}."""
    wait_healthy(c)
    topic = f"{prefix}-{time.monotonic_ns() % 10**9}"
    leaders = create_topic(c.bootstrap, topic)
    return pick_txn_id(c.data, prefix, 0), 0, topic, leaders


def test_tv2_adds_through_peer_coordinators(cluster):
    txn_id, coord, topic, leaders = place(cluster, "tv2-add")
    port = cluster.ports
    pid, epoch = init(port[coord], txn_id)
    # partitions led by the two other brokers: the add goes to broker 0 over a peer connection
    assert produce(port[1], 12, txn_id, topic, leaders[1], batch(pid, epoch, 0, b"on-1")) == E.none
    assert produce(port[2], 12, txn_id, topic, leaders[2], batch(pid, epoch, 0, b"on-2")) == E.none
    group = pick_group("tv2-group", 1)
    with WireClient("127.0.0.1", port[1]) as wc:
        r = wc.call(28, 5, {"transactional_id": txn_id, "group_id": group, "producer_id": pid,
                            "producer_epoch": epoch, "generation_id": -1, "member_id": "", "group_instance_id": None,
                            "topics": [{"name": topic, "partitions": [{"partition_index": leaders[1],
                                                                       "committed_offset": 1,
                                                                       "committed_leader_epoch": -1,
                                                                       "committed_metadata": None}]}]})
    assert r.topics[0].partitions[0].error_code == E.none
    with WireClient("127.0.0.1", port[coord]) as wc:
        d = wc.call(65, 0, {"transactional_ids": [txn_id]})
    [state] = d.transaction_states
    assert state.transaction_state == "Ongoing"
    assert {(t.topic, p) for t in state.topics for p in t.partitions} == {(topic, leaders[1]), (topic, leaders[2])}
    assert end(port[coord], 4, txn_id, pid, epoch, True).error_code == E.none
    got = read_to_end(cluster.bootstrap, topic, [leaders[1], leaders[2]], "read_committed")
    assert sorted(values(got)) == [b"on-1", b"on-2"]

    def offsets_committed() -> bool:
        with WireClient("127.0.0.1", port[1]) as wc:
            f = wc.call(9, 8, {"groups": [{"group_id": group, "topics": [
                {"name": topic, "partition_indexes": [leaders[1]]}]}], "require_stable": True})
        p = f.groups[0].topics[0].partitions[0]
        return p.error_code == E.none and p.committed_offset == 1

    wait_for(offsets_committed, 15, "the transaction's offsets committed", interval=0.1)


class Held(threading.Thread):
    """One Produce sent now, held on the leader by the armed failpoint; ``code`` once answered."""

    def __init__(self, port: int, version: int, txn_id: str, topic: str, partition: int, records: bytes) -> None:
        super().__init__(daemon=True)
        self.args_ = (port, version, txn_id, topic, partition, records)
        self.code: E | None = None
        self.answered_at = 0.0

    def run(self) -> None:
        self.code = produce(*self.args_)
        self.answered_at = time.monotonic()


def hold_late_produce(c: ClusterProcess, leader: int, topic: str, partition: int, version: int, txn_id: str,
                      records: bytes) -> Held:
    """Arm the leader's failpoint, send the Produce, and return once the leader holds it."""
    log = c.broker_log(leader)
    hits = log.count("produce.before_txn_check")
    armed = log.count("failpoints_armed")
    failpoints.arm(c.data / "run", leader, {"produce.before_txn_check": {
        "action": "pause", "ms": HOLD_MS, "count": 1, "match": {"topic": topic, "partition": partition}}})
    wait_for(lambda: c.broker_log(leader).count("failpoints_armed") > armed, 10, "the failpoint armed")
    held = Held(c.ports[leader], version, txn_id, topic, partition, records)
    held.start()
    wait_for(lambda: c.broker_log(leader).count("produce.before_txn_check") > hits, 10, "the Produce held")
    return held


def finish(c: ClusterProcess, held: Held, leader: int, began_next: float) -> E:
    held.join(HOLD_MS / 1000 + 30)
    failpoints.disarm(c.data / "run", leader)
    assert held.code is not None, "the held Produce was never answered"
    assert held.answered_at > began_next, "the held Produce was answered before the next transaction began"
    return held.code


def test_hanging_transaction_refused_under_tv2(cluster):
    """The late batch of transaction 1 reaches its leader after transaction 1 committed
    (epoch bumped) and transaction 2 wrote the same partition: refused, and never read."""
    txn_id, coord, topic, leaders = place(cluster, "tv2-hang")
    port = cluster.ports
    p0, p1 = leaders[1], leaders[2]  # partitions led by brokers 1 and 2; the coordinator is 0
    pid, epoch = init(port[coord], txn_id)
    assert produce(port[1], 12, txn_id, topic, p0, batch(pid, epoch, 0, b"t1-a")) == E.none
    held = hold_late_produce(cluster, 2, topic, p1, 12, txn_id, batch(pid, epoch, 0, b"t1-late"))
    r = end(port[coord], 5, txn_id, pid, epoch, True)
    assert r.error_code == E.none
    assert (r.producer_id, r.producer_epoch) == (pid, epoch + 1)  # TV2: the commit bumped the epoch
    epoch2 = r.producer_epoch
    assert produce(port[1], 12, txn_id, topic, p0, batch(pid, epoch2, 0, b"t2-a")) == E.none
    assert produce(port[2], 12, txn_id, topic, p1, batch(pid, epoch2, 0, b"t2-b")) == E.none
    began_next = time.monotonic()
    assert finish(cluster, held, 2, began_next) == E.invalid_producer_epoch
    assert end(port[coord], 5, txn_id, pid, epoch2, True).error_code == E.none
    for isolation in ("read_committed", "read_uncommitted"):
        assert values(read_to_end(cluster.bootstrap, topic, [p1], isolation)) == [b"t2-b"], isolation
        assert values(read_to_end(cluster.bootstrap, topic, [p0], isolation)) == [b"t1-a", b"t2-a"], isolation


def test_hanging_transaction_under_tv1_lands_in_the_next(cluster):
    """What TV1 allows: without the epoch bump, the late batch of transaction 1 is taken
    into transaction 2 when transaction 2 holds its partition (KIP-890 part 1 verifies
    only that the partition is in *a* transaction of that epoch), and it shares that
    transaction's fate: here transaction 2 aborts, and takes it along."""
    txn_id, coord, topic, leaders = place(cluster, "tv1-hang")
    port = cluster.ports
    p0, p1 = leaders[1], leaders[2]
    pid, epoch = init(port[coord], txn_id)

    def add_both() -> None:
        with WireClient("127.0.0.1", port[coord]) as wc:
            r = wc.call(24, 3, {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                                "v3_and_below_producer_epoch": epoch,
                                "v3_and_below_topics": [{"name": topic, "partitions": [p0, p1]}]})
        assert {p.partition_error_code for t in r.results_by_topic_v3_and_below
                for p in t.results_by_partition} == {E.none}

    add_both()
    assert produce(port[1], 11, txn_id, topic, p0, batch(pid, epoch, 0, b"t1-a")) == E.none
    held = hold_late_produce(cluster, 2, topic, p1, 11, txn_id, batch(pid, epoch, 0, b"t1-late"))
    r = end(port[coord], 4, txn_id, pid, epoch, True)
    assert r.error_code == E.none  # no new epoch under TV1
    add_both()
    assert produce(port[1], 11, txn_id, topic, p0, batch(pid, epoch, 1, b"t2-a")) == E.none
    began_next = time.monotonic()
    assert finish(cluster, held, 2, began_next) == E.none  # taken into transaction 2
    assert end(port[coord], 4, txn_id, pid, epoch, False).error_code == E.none
    assert values(read_to_end(cluster.bootstrap, topic, [p1], "read_uncommitted")) == [b"t1-late"]
    assert values(read_to_end(cluster.bootstrap, topic, [p1], "read_committed")) == []
    assert values(read_to_end(cluster.bootstrap, topic, [p0], "read_committed")) == [b"t1-a"]
