"""Transactions on a real 3-broker cluster started through the supervisor (issue 6,
seed "Transactions & idempotence", design sections 4, 7 and 9).

Everything is placed on purpose: the transaction coordinator of a transactional id is the
owner of its slot in ``__cluster/assignment.json`` ("txn_slots"), the group coordinator is
``routing.coordinator_for(group, [0, 1, 2], [0, 1, 2])``, partition leaders come from
Metadata. Ids are picked by searching names whose owner is the broker wanted, partitions by
their leader, so the marker queue, the offset-hook queue and the cross-broker fence
broadcast are all on the path being tested.

1. KIP-447 consume-process-produce-commit with the input partition, the output partitions,
   the group coordinator and the transaction coordinator spread over the brokers.
2. Zombie fencing across brokers, including a partition led by a broker the new producer
   never touched.
3. The transaction coordinator SIGKILLed (a ``crash`` failpoint) at each step of EndTxn,
   commit and abort: the transaction ends in the direction asked, exactly once, on every
   partition, with its staged offsets. Variants: the restarted coordinator is held
   stopped until its slot (and group) moved to a survivor; the application dies with the
   coordinator and a new producer instance takes over.
4. A dead broker's marker queue is claimed by a survivor and forwarded to the partition's
   new leader and the group's new coordinator (made deterministic with SIGSTOP: the
   entries are on the volume before the broker is declared dead).

One cluster serves the module: the crash tests kill only through failpoints, the
supervisor restarts the broker, and every test waits for a healthy cluster first.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import struct
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from kaas import failpoints
from kaas.domain import routing
from kaas.testing import ClusterProcess, wait_for
from tests import kafka
from tests.fixtures import cluster_fixture
from tests.kafka import SWEEP_ENV, read_to_end, values

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

BROKERS = [0, 1, 2]
PARTS = 6  # per topic: the balancer spreads them, two per broker

CRASH_POINTS = [
    "endtxn.after_prepare",
    "endtxn.after_local_markers",
    "endtxn.after_enqueue",
    "endtxn.before_complete",
]


# ----------------------------------------------------------------------------- fixtures


def _disarm_all(c: ClusterProcess) -> None:
    for bid in BROKERS:
        failpoints.disarm(c.data / "run", bid)


cluster = cluster_fixture(3, scope="module", name="txn-cluster", env=SWEEP_ENV,
                          extra=["--group-initial-rebalance-delay-ms", "0"],
                          ready=lambda c: wait_healthy(c), before_stop=_disarm_all)


# ----------------------------------------------------------------------------- placement




def assignment(data: Path) -> dict:
    try:
        return json.loads((data / "__cluster" / "assignment.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def expected_slots() -> dict[int, int]:
    return routing.slot_owners(BROKERS, BROKERS)


def wait_healthy(c: ClusterProcess, timeout: float = 30.0) -> None:
    """All three brokers in Metadata and the all-alive placement of the txn slots written.
    (A group coordinator restarted less than a session ago still answers the retriable
    COORDINATOR_LOAD_IN_PROGRESS; the clients retry it.)"""
    admin = AdminClient({"bootstrap.servers": c.bootstrap})

    def ok() -> bool:
        try:
            if sorted(admin.list_topics(timeout=5).brokers) != BROKERS:
                return False
        except KafkaException:
            return False
        slots = assignment(c.data).get("txn_slots", {})
        return {int(s): o for s, o in slots.items()} == expected_slots()

    wait_for(ok, timeout, "a healthy 3-broker cluster", interval=0.2)


def txn_owner(data: Path, txn_id: str) -> int:
    return int(assignment(data)["txn_slots"][str(routing.txn_slot(txn_id))])


def pick_txn_id(data: Path, prefix: str, owner: int) -> str:
    """A fresh transactional id whose slot the broker ``owner`` coordinates."""
    slots = {int(s): o for s, o in assignment(data)["txn_slots"].items()}
    tag = uuid.uuid4().hex[:6]
    for i in range(10_000):
        name = f"{prefix}-{tag}-{i}"
        if slots[routing.txn_slot(name)] == owner:
            return name
    raise AssertionError(f"no transactional id for broker {owner}")


def group_owner(group: str) -> int:
    return routing.coordinator_for(group, BROKERS, BROKERS)


def pick_group(prefix: str, owner: int) -> str:
    tag = uuid.uuid4().hex[:6]
    for i in range(10_000):
        name = f"{prefix}-{tag}-{i}"
        if group_owner(name) == owner:
            return name
    raise AssertionError(f"no group id for broker {owner}")


def create_topic(bootstrap: str, name: str, partitions: int = PARTS) -> dict[int, int]:
    """Create a topic; returns {leader broker: a partition it leads} once every broker leads one."""
    kafka.create_topic(bootstrap, name, partitions, timeout=15)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def led() -> dict[int, int] | None:
        md = admin.list_topics(name, timeout=5).topics[name]
        if len(md.partitions) != partitions or any(pm.leader < 0 for pm in md.partitions.values()):
            return None
        by_leader: dict[int, int] = {}
        for p in sorted(md.partitions):
            by_leader.setdefault(md.partitions[p].leader, p)
        return by_leader if sorted(by_leader) == BROKERS else None

    return wait_for(led, 20, f"leaders of {name} on every broker", interval=0.2)


# ----------------------------------------------------------------------------- clients


def txn_producer(bootstrap: str, txn_id: str, **conf) -> Producer:
    return kafka.txn_producer(bootstrap, txn_id, **{"transaction.timeout.ms": 60000, **conf})


def by_partition(msgs) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for m in msgs:
        out.setdefault(m.partition(), []).append(m.value())
    return out


def committed(bootstrap: str, group: str, topic: str, partitions: list[int],
              isolation: str = "read_committed") -> dict[int, int]:
    """OffsetFetch. With require_stable (librdkafka sends it under read_committed) staged
    offsets of an open transaction make the client retry until they are committed or
    discarded; under read_uncommitted it answers the committed offsets at once.

    librdkafka hands NOT_COORDINATOR to the caller of ``committed()`` instead of finding the
    coordinator again: the answer of a broker that has just seen a resumed or restarted
    peer come back and given the group up to it. Like an application, this asks again."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": isolation,
                  "enable.auto.commit": False})
    deadline = time.monotonic() + 20
    try:
        while True:
            try:
                return {tp.partition: tp.offset
                        for tp in c.committed([TopicPartition(topic, p) for p in partitions], timeout=20)}
            except KafkaException as exc:
                if exc.args[0].code() not in _COORDINATOR_MOVING or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


_COORDINATOR_MOVING = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       KafkaError.COORDINATOR_NOT_AVAILABLE}


def group_metadata(bootstrap: str, group: str):
    """A group's ConsumerGroupMetadata (no member: generation -1), for
    send_offsets_to_transaction from a producer that is not itself consuming."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.consumer_group_metadata()
    finally:
        c.close()


def slot_entry(data: Path, txn_id: str) -> dict | None:
    path = data / "__cluster" / "txn_state" / f"slot-{routing.txn_slot(txn_id)}.json"
    try:
        return json.loads(path.read_text())["transactions"].get(txn_id)
    except FileNotFoundError:
        return None


def queued_for_pid(data: Path, producer_id: int) -> list[Path]:
    root = data / "__cluster" / "marker_queue"
    return [f for f in root.glob("to-*/*.json") if f.name.startswith(f"{producer_id}-")] if root.exists() else []


# ----------------------------------------------------------------------------- 1. KIP-447


def test_consume_process_produce_across_brokers(cluster):
    """Input partition on broker I, output partitions on every broker, group coordinator G,
    transaction coordinator T, with T, G and I three different brokers: the output holds
    every input exactly once under read_committed, committed offsets advance only with
    committed transactions, and the aborted round is visible to read_uncommitted only."""
    bs, data = cluster.bootstrap, cluster.data
    T, G, I = 0, 1, 2
    tag = uuid.uuid4().hex[:6]
    src, dst = f"eos-in-{tag}", f"eos-out-{tag}"
    src_led = create_topic(bs, src)
    dst_led = create_topic(bs, dst)
    in_part = src_led[I]
    out_parts = [dst_led[b] for b in BROKERS]  # one led by T itself, two by peers
    txn_id = pick_txn_id(data, "eos", T)
    group = pick_group("eos-group", G)
    assert txn_owner(data, txn_id) == T and group_owner(group) == G

    n = 60
    plain = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
    for i in range(n):
        plain.produce(src, value=f"m{i}".encode(), partition=in_part)
    assert plain.flush(15) == 0

    consumer = Consumer({"bootstrap.servers": bs, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([src])
    producer = txn_producer(bs, txn_id)
    producer.init_transactions(30)
    done, rounds, aborted_rounds = 0, 0, 0
    deadline = time.monotonic() + 60
    try:
        while done < n and time.monotonic() < deadline:
            msgs = [m for m in consumer.consume(10, 0.5) if not m.error()]
            if not msgs:
                continue
            assert {m.partition() for m in msgs} == {in_part}
            rounds += 1
            before = committed(bs, group, src, [in_part])[in_part]
            producer.begin_transaction()
            for m in msgs:
                seq = int(m.value()[1:])
                producer.produce(dst, value=b"out-" + m.value(), partition=out_parts[seq % 3])
            next_offset = msgs[-1].offset() + 1
            producer.send_offsets_to_transaction([TopicPartition(src, in_part, next_offset)],
                                                 consumer.consumer_group_metadata(), 20)
            if rounds == 2:
                aborted_vals = [b"out-" + m.value() for m in msgs]
                producer.flush(15)  # the records reach the logs before the abort
                producer.abort_transaction(30)
                aborted_rounds += 1
                assert committed(bs, group, src, [in_part])[in_part] == before
                # rewind to the committed position, as an EOS application must
                consumer.seek(TopicPartition(src, in_part, before if before >= 0 else OFFSET_BEGINNING))
                continue
            # staged, not committed: OffsetFetch still answers the previous offset
            assert committed(bs, group, src, [in_part], "read_uncommitted")[in_part] == before
            producer.commit_transaction(30)
            assert committed(bs, group, src, [in_part])[in_part] == next_offset
            done = next_offset
    finally:
        consumer.close()
    assert aborted_rounds == 1 and done == n, (aborted_rounds, done)
    assert committed(bs, group, src, [in_part]) == {in_part: n}
    out = read_to_end(bs, dst, out_parts, "read_committed")
    assert sorted(values(out)) == sorted(f"out-m{i}".encode() for i in range(n))
    # each output went to its partition: markers landed on the coordinator's own partition
    # and, through the marker queue, on both peers'
    for m in out:
        assert m.partition() == out_parts[int(m.value()[5:]) % 3]
    # the aborted round's records are in the logs (read_uncommitted sees them, and their
    # reprocessed copies): each output twice if it was in the aborted round, else once
    uncommitted = collections.Counter(values(read_to_end(bs, dst, out_parts, "read_uncommitted")))
    assert uncommitted == collections.Counter(values(out) + aborted_vals)


# ----------------------------------------------------------------------------- 2. fencing


def _raw_txn_produce(port: int, topic: str, partition: int, txn_id: str, producer_id: int,
                     producer_epoch: int, sequence: int) -> int:
    """A transactional Produce v9 straight to a partition leader (no AddPartitionsToTxn
    first): the broker's own fence, not the client's, must refuse a zombie."""
    import datetime

    from kaas.client import WireClient
    from kaas.wire.batch import ATTR_TRANSACTIONAL, build_batch

    batch = build_batch(attributes=ATTR_TRANSACTIONAL, base_timestamp=int(time.time() * 1000),
                        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=sequence,
                        records=[(None, b"zombie-raw")])
    with WireClient("127.0.0.1", port) as wc:
        r = wc.call(0, 9, {"transactional_id": txn_id, "acks": -1, "timeout": datetime.timedelta(seconds=10),
                           "topic_data": [{"name": topic, "partition_data": [{"index": partition,
                                                                             "records": batch}]}]})
    (t,) = r.responses
    (p,) = t.partition_responses
    return p.error_code


def test_zombie_fenced_across_brokers(cluster):
    """Producer A of id X (coordinator T) writes to partitions led by T and by a peer; B
    with the same X calls init_transactions. A is fenced everywhere, including on a
    partition led by the third broker that B never touched; B's transactions work."""
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient

    bs, data = cluster.bootstrap, cluster.data
    T, peer, third = 0, 1, 2
    topic = f"fence-{uuid.uuid4().hex[:6]}"
    led = create_topic(bs, topic)
    p_t, p_peer, p_third = led[T], led[peer], led[third]
    parts = [p_t, p_peer, p_third]
    txn_id = pick_txn_id(data, "fence", T)
    assert txn_owner(data, txn_id) == T

    zombie = txn_producer(bs, txn_id)
    zombie.init_transactions(30)
    zombie.begin_transaction()  # a committed transaction on all three: every leader knows A's pid
    for p in parts:
        zombie.produce(topic, value=b"first", partition=p)
    zombie.commit_transaction(30)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"open", partition=p_t)
    zombie.produce(topic, value=b"open", partition=p_peer)
    assert zombie.flush(15) == 0  # an ongoing transaction on two brokers' partitions
    entry = slot_entry(data, txn_id)
    assert entry["state"] == "Ongoing"
    a_pid, a_epoch = entry["producer_id"], entry["producer_epoch"]

    successor = txn_producer(bs, txn_id)
    successor.init_transactions(30)  # aborts A's transaction (epoch + 1), then epoch + 2
    entry = slot_entry(data, txn_id)
    assert entry["producer_id"] == a_pid and entry["producer_epoch"] == a_epoch + 2

    # the cross-broker fence broadcast: every leader, the third one included, has A's pid
    # at the successor's epoch although the successor never wrote there
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        def epochs():
            states = admin.describe_producers([KTopicPartition(topic, p) for p in parts])
            got = {tp.partition: {s.producer_epoch for s in st.active_producers
                                  if s.producer_id == a_pid} for tp, st in states.items()}
            return got if all(e == {a_epoch + 2} for e in got.values()) else None

        wait_for(epochs, 10, "the fence on every partition leader", interval=0.3)
    finally:
        admin.close()

    # every leader refuses A's epoch by itself (a raw Produce continuing A's sequences, no
    # AddPartitionsToTxn first): its two partitions and the third broker's
    for broker, part, seq in ((T, p_t, 2), (peer, p_peer, 2), (third, p_third, 1)):
        code = _raw_txn_produce(cluster.ports[broker], topic, part, txn_id, a_pid, a_epoch, seq)
        assert code in (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced), (broker, code)

    # A through librdkafka: producing to the third broker's partition is fatal (fenced),
    # and so is everything after
    zombie.produce(topic, value=b"zombie-third", partition=p_third)
    with pytest.raises(KafkaException) as exc:
        zombie.flush(15)
    err = exc.value.args[0]
    assert err.fatal() and err.code() == KafkaError._FENCED, err
    with pytest.raises(KafkaException):
        zombie.produce(topic, value=b"zombie-own", partition=p_t)
        zombie.flush(15)
    with pytest.raises(KafkaException) as exc:
        zombie.commit_transaction(15)
    err = exc.value.args[0]
    assert err.fatal() or err.code() == KafkaError._FENCED, err

    for round_ in range(2):
        successor.begin_transaction()
        for p in parts:
            successor.produce(topic, value=f"successor-{round_}".encode(), partition=p)
        successor.commit_transaction(30)
    got = by_partition(read_to_end(bs, topic, parts, "read_committed"))
    for p in parts:
        assert got[p] == [b"first", b"successor-0", b"successor-1"], (p, got[p])
    everything = values(read_to_end(bs, topic, parts, "read_uncommitted"))
    assert not [v for v in everything if v.startswith(b"zombie")], "a zombie record reached a log"
    assert everything.count(b"open") == 2  # A's aborted records: in the log, never committed


# ----------------------------------------------------------------------------- 3. crashes


def _armed_count(c: ClusterProcess, broker_id: int) -> int:
    return c.broker_log(broker_id).count("failpoints_armed")


def _arm(c: ClusterProcess, broker_id: int, spec: dict) -> None:
    """Arm failpoints on a broker and wait until it has loaded them."""
    armed = _armed_count(c, broker_id)
    failpoints.arm(c.data / "run", broker_id, spec)
    wait_for(lambda: _armed_count(c, broker_id) > armed, 10, f"{sorted(spec)} armed")


def _txn_case(c: ClusterProcess, prefix: str, coordinator: int) -> tuple[str, Path, str, dict[int, int], str]:
    """(bootstrap, data, topic, leader -> partition, transactional id): a fresh topic with
    a partition led by each broker and an id whose slot ``coordinator`` owns."""
    wait_healthy(c)
    topic = f"{prefix}-{uuid.uuid4().hex[:4]}"
    led = create_topic(c.bootstrap, topic)
    return c.bootstrap, c.data, topic, led, pick_txn_id(c.data, prefix, coordinator)


def _end(p: Producer, commit: bool, timeout: float = 60.0) -> tuple[str, list[str]]:
    """commit_transaction / abort_transaction the way confluent documents it: retry a
    retriable error, abort after an abortable one; a fatal error ends the producer.
    Returns the outcome ("committed", "aborted" or "fatal") and the errors seen."""
    errors: list[str] = []
    deadline = time.monotonic() + timeout
    op = p.commit_transaction if commit else p.abort_transaction
    while True:
        try:
            op(30)
            return ("committed" if op == p.commit_transaction else "aborted"), errors
        except KafkaException as exc:
            err = exc.args[0]
            errors.append(f"{err.name()}: {err.str()}")
            if err.fatal():
                return "fatal", errors
            if time.monotonic() > deadline:
                raise
            if err.retriable():
                continue
            if err.txn_requires_abort() and op == p.commit_transaction:
                op = p.abort_transaction
                continue
            raise


class CrashCase:
    """A transaction of id X (coordinator T) over a partition led by T and one led by O,
    committing offsets of a group coordinated by G; a committed baseline transaction
    (records "base", offset 5) precedes the one that the crash interrupts (records x-0..9,
    offset 10)."""

    def __init__(self, c: ClusterProcess, name: str, T: int, O: int, G: int) -> None:
        self.c, self.T = c, T
        bs, data = c.bootstrap, c.data
        self.topic = f"{name}-{uuid.uuid4().hex[:4]}"
        led = create_topic(bs, self.topic)
        self.p_t, self.p_o = led[T], led[O]
        self.txn_id = pick_txn_id(data, name, T)
        self.group = pick_group(name, G)
        assert txn_owner(data, self.txn_id) == T and group_owner(self.group) == G
        self.gmd = group_metadata(bs, self.group)
        self.vals = [f"x-{i}".encode() for i in range(10)]
        self.p = txn_producer(bs, self.txn_id)
        self.p.init_transactions(30)
        self._txn([b"base", b"base"], 5)
        self.p.commit_transaction(30)
        assert committed(bs, self.group, self.topic, [self.p_t]) == {self.p_t: 5}
        self._txn(self.vals, 10)
        assert self.p.flush(15) == 0

    def _txn(self, vals: list[bytes], offset: int) -> None:
        self.p.begin_transaction()
        for i, v in enumerate(vals):
            self.p.produce(self.topic, value=v, partition=self.p_t if i % 2 == 0 else self.p_o)
        self.p.send_offsets_to_transaction([TopicPartition(self.topic, self.p_t, offset)], self.gmd, 20)

    def arm(self, point: str) -> None:
        armed = _armed_count(self.c, self.T)
        failpoints.arm(self.c.data / "run", self.T, {point: {"action": "crash", "count": 1}})
        wait_for(lambda: _armed_count(self.c, self.T) > armed, 10, f"{point} armed on broker {self.T}")

    def check(self, point: str, commit: bool, outcome: str, errors: list[str], replaced: bool = False) -> None:
        """The transaction ended in the direction asked, exactly once, on both partitions,
        with its offsets; nothing is left prepared or queued; the id works on (with
        ``replaced``, ``self.p`` is a new instance that already completed the init)."""
        c, bs, data = self.c, self.c.bootstrap, self.c.data
        log_text = c.broker_log(self.T)
        assert f"name={point}" in log_text or f'"name": "{point}"' in log_text, f"{point} never fired"
        # Every crash point lies after the Prepare* state was persisted: the direction is
        # decided, and a client told "aborted" after asking to commit (or the reverse)
        # would be lied to.
        assert outcome in ("committed" if commit else "aborted", "fatal"), (outcome, errors)
        want_state = "Empty" if replaced else "CompleteCommit" if commit else "CompleteAbort"
        wait_for(lambda: (slot_entry(data, self.txn_id) or {}).get("state") == want_state,
                 30, f"{self.txn_id} to reach {want_state}")
        p = self.p
        if outcome == "fatal":
            p = txn_producer(bs, self.txn_id)
            p.init_transactions(30)
        p.begin_transaction()  # the same transactional id goes on
        p.produce(self.topic, value=b"after", partition=self.p_t)
        p.produce(self.topic, value=b"after", partition=self.p_o)
        p.commit_transaction(30)

        got = by_partition(read_to_end(bs, self.topic, [self.p_t, self.p_o], "read_committed"))
        mid_t, mid_o = (self.vals[0::2], self.vals[1::2]) if commit else ([], [])
        assert got.get(self.p_t) == [b"base", *mid_t, b"after"], ("coordinator-led", outcome, errors)
        assert got.get(self.p_o) == [b"base", *mid_o, b"after"], ("peer-led", outcome, errors)
        assert committed(bs, self.group, self.topic, [self.p_t]) == {self.p_t: 10 if commit else 5}
        # read_uncommitted: every record once in the log (a retried EndTxn duplicated nothing)
        raw = values(read_to_end(bs, self.topic, [self.p_t, self.p_o], "read_uncommitted"))
        assert sorted(raw) == sorted([b"base"] * 2 + self.vals + [b"after"] * 2)
        entry = slot_entry(data, self.txn_id)
        assert entry["state"] == "CompleteCommit"
        wait_for(lambda: not queued_for_pid(data, entry["producer_id"]), 15, "the marker queue to drain")


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_coordinator_crash_mid_endtxn(cluster, point, commit):
    """The coordinator dies at ``point`` (SIGKILL-equivalent), the supervisor restarts it,
    librdkafka retries EndTxn against it (or its startup reconcile finishes first)."""
    wait_healthy(cluster)
    case = CRASH_POINTS.index(point) * 2 + (0 if commit else 1)
    T = case % 3  # every broker takes a turn as the coordinator
    short = point.split(".")[1].replace("_", "-")
    tc = CrashCase(cluster, f"crash-{short}-{'c' if commit else 'a'}", T, (T + 1) % 3, (T + 2) % 3)
    old_pid = cluster.pid(T)
    try:
        tc.arm(point)
        outcome, errors = _end(tc.p, commit)
        cluster.wait_restarted(T, old_pid)
    finally:
        failpoints.disarm(cluster.data / "run", T)
    assert cluster.pid(T) != old_pid
    tc.check(point, commit, outcome, errors)


def _new_pid(c: ClusterProcess, broker_id: int, old_pid: int) -> int | None:
    try:
        pid = c.pid(broker_id)
    except (FileNotFoundError, ValueError):
        return None
    return pid if pid != old_pid else None


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_coordinator_crash_slot_moves(cluster, commit):
    """The coordinator of the transaction and of the group dies after its local markers
    and its restarted process is held stopped past the session timeout: the slot and the
    group move to a survivor, which finishes the prepared transaction (client retry or
    reconcile) from the slot and offsets files alone; then the broker comes back."""
    wait_healthy(cluster)
    T, O = (2, 0) if commit else (1, 2)
    tc = CrashCase(cluster, f"moved-{'c' if commit else 'a'}", T, O, T)
    old_pid = cluster.pid(T)
    stopped = None
    try:
        tc.arm("endtxn.after_local_markers")
        result: dict = {}

        def end() -> None:
            result["r"] = _end(tc.p, commit)

        t = threading.Thread(target=end, daemon=True)
        t.start()
        # hold the restarted process stopped (before it heartbeats) until the slot moved
        stopped = wait_for(lambda: _new_pid(cluster, T, old_pid), 20, "the restart", interval=0.01)
        os.kill(stopped, signal.SIGSTOP)
        slot = routing.txn_slot(tc.txn_id)
        wait_for(lambda: assignment(cluster.data).get("txn_slots", {}).get(str(slot), T) != T,
                 20, "the slot to move", interval=0.1)
        t.join(60)
        assert "r" in result, "commit/abort did not return while the coordinator was away"
        outcome, errors = result["r"]
        mover = txn_owner(cluster.data, tc.txn_id)
        wait_for(lambda: (slot_entry(cluster.data, tc.txn_id) or {}).get("state", "").startswith("Complete"),
                 20, "the new coordinator to complete the transaction")
    finally:
        failpoints.disarm(cluster.data / "run", T)
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
    assert mover not in (T, -1)
    wait_healthy(cluster)
    tc.check("endtxn.after_local_markers", commit, outcome, errors)


def test_coordinator_crash_then_producer_replaced(cluster):
    """The application dies together with the coordinator: EndTxn(commit) (sent raw, so
    no client retries it) crashes T right after PrepareCommit. A new producer instance's
    init_transactions must not abort the prepared commit: it waits (CONCURRENT_TRANSACTIONS)
    until the restarted coordinator's reconcile completed it, then bumps the epoch. The
    old instance is a zombie."""
    from kaas.client import WireClient

    wait_healthy(cluster)
    T = 1
    tc = CrashCase(cluster, "replaced", T, 2, 0)
    entry = slot_entry(cluster.data, tc.txn_id)
    assert entry["state"] == "Ongoing"
    old_pid = cluster.pid(T)
    try:
        tc.arm("endtxn.after_prepare")
        with pytest.raises(OSError), WireClient("127.0.0.1", cluster.ports[T]) as wc:
            wc.call(26, 3, {"transactional_id": tc.txn_id, "producer_id": entry["producer_id"],
                            "producer_epoch": entry["producer_epoch"], "committed": True})
        cluster.wait_restarted(T, old_pid)
    finally:
        failpoints.disarm(cluster.data / "run", T)
    zombie, tc.p = tc.p, txn_producer(cluster.bootstrap, tc.txn_id)
    tc.p.init_transactions(30)
    after = slot_entry(cluster.data, tc.txn_id)  # completed, then bumped: a new session
    assert after["state"] == "Empty", after
    assert (after["producer_id"], after["producer_epoch"]) == (entry["producer_id"], entry["producer_epoch"] + 1)
    with pytest.raises(KafkaException) as exc:
        zombie.commit_transaction(15)
    assert exc.value.args[0].fatal(), exc.value
    tc.check("endtxn.after_prepare", True, "committed", [], replaced=True)


# ----------------------------------------------------------------------------- 4. claims


def test_dead_brokers_marker_queue_is_claimed(cluster):
    """Broker O is stopped right before a commit whose markers (a partition O leads) and
    offset hook (a group O coordinates) the coordinator T queues for O (its WriteTxnMarkers
    link is turned off by a failpoint: a stopped peer is otherwise waited for until it is
    declared dead, and the markers go to the partition's next leader). O is declared
    dead; a survivor claims O's queue by rename and forwards each part to the partition's
    new leader and the group's new coordinator: the commit becomes visible, the offsets
    commit, and O rejoins with nothing owed."""
    bs, data = cluster.bootstrap, cluster.data
    wait_healthy(cluster)
    T, O = 0, 1
    topic = f"claim-{uuid.uuid4().hex[:4]}"
    led = create_topic(bs, topic)
    p_t, p_o = led[T], led[O]
    txn_id = pick_txn_id(data, "claim", T)
    group = pick_group("claim", O)
    p = txn_producer(bs, txn_id)
    p.init_transactions(30)
    p.begin_transaction()
    vals = [f"c-{i}".encode() for i in range(6)]
    for i, v in enumerate(vals):
        p.produce(topic, value=v, partition=p_t if i % 2 == 0 else p_o)
    p.send_offsets_to_transaction([TopicPartition(topic, p_o, 3)], group_metadata(bs, group), 20)
    assert p.flush(15) == 0
    _arm(cluster, T, {"marker.before_send": {"action": "drop"}})
    pid = cluster.signal(O, signal.SIGSTOP)
    try:
        p.commit_transaction(30)  # well within the session timeout: O still counts as alive
        producer_id = slot_entry(data, txn_id)["producer_id"]
        # markers and hook wait in the stopped broker's queue (queued by EndTxn's background half)
        wait_for(lambda: {f.parent.name for f in queued_for_pid(data, producer_id)} == {f"to-{O}"}, 5,
                 "the entries in the stopped broker's queue")
        wait_for(lambda: not queued_for_pid(data, producer_id), 30, "the claim and the forwarded markers")
        got = by_partition(read_to_end(bs, topic, [p_t, p_o], "read_committed"))
        assert got.get(p_t) == vals[0::2] and got.get(p_o) == vals[1::2], got
        assert committed(bs, group, topic, [p_o]) == {p_o: 3}
    finally:
        os.kill(pid, signal.SIGCONT)
        failpoints.disarm(data / "run", T)
    logs = "".join(cluster.broker_log(b) for b in BROKERS if b != O)
    assert "txn_markers_claimed" in logs
    wait_healthy(cluster)
    # O coordinates the group again and reads the committed offsets from the volume
    assert committed(bs, group, topic, [p_o]) == {p_o: 3}
    p.begin_transaction()
    p.produce(topic, value=b"after", partition=p_o)
    p.commit_transaction(30)
    got = by_partition(read_to_end(bs, topic, [p_t, p_o], "read_committed"))
    assert got.get(p_o) == vals[1::2] + [b"after"]


# ----------------------------------------------------------------------------- 5. WriteTxnMarkers


def _write_markers(wc, producer_id: int, producer_epoch: int, commit: bool,
                   parts: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
    topics: dict[str, list[int]] = {}
    for topic, index in parts:
        topics.setdefault(topic, []).append(index)
    r = wc.call(27, 1, {"markers": [{
        "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
        "coordinator_epoch": 0,
        "topics": [{"name": t, "partition_indexes": ix} for t, ix in topics.items()]}]})
    (m,) = r.markers
    assert m.producer_id == producer_id
    return {(t.name, p.partition_index): p.error_code for t in m.topics for p in t.partitions}


def test_write_txn_markers_from_a_peer(cluster):
    """WriteTxnMarkers, the request a coordinator sends a peer leader: the leader appends the
    marker on the partitions it leads (a COMMIT makes an open transaction's records visible
    to read_committed at once) and answers NOT_LEADER_OR_FOLLOWER for a partition it does
    not lead, UNKNOWN_TOPIC_OR_PARTITION for one that does not exist. A commit through the
    coordinator then finds the partitions' transactions already closed and completes."""
    from kaas.client import WireClient

    T, O = 0, 1
    bs, data, topic, led, txn_id = _txn_case(cluster, "wtm", T)
    p = txn_producer(bs, txn_id)
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"early", partition=led[O])
    assert p.flush(15) == 0
    entry = slot_entry(data, txn_id)
    assert entry["state"] == "Ongoing"
    assert read_to_end(bs, topic, [led[O]], "read_committed", timeout=2) == []
    with WireClient("127.0.0.1", cluster.ports[O]) as wc:
        codes = _write_markers(wc, entry["producer_id"], entry["producer_epoch"], True,
                               [(topic, led[O]), (topic, led[T]), ("no-such-topic", 0)])
    assert codes == {(topic, led[O]): ErrorCode.none, (topic, led[T]): ErrorCode.not_leader_or_follower,
                     ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition}
    assert values(read_to_end(bs, topic, [led[O]], "read_committed")) == [b"early"]
    p.commit_transaction(30)
    wait_for(lambda: slot_entry(data, txn_id)["state"] == "CompleteCommit", 10, "CompleteCommit on file")
    p.begin_transaction()
    p.produce(topic, value=b"next", partition=led[O])
    p.commit_transaction(30)
    assert values(read_to_end(bs, topic, [led[O]], "read_committed")) == [b"early", b"next"]
    assert not queued_for_pid(data, entry["producer_id"])  # the peer link carried the markers


def test_offset_hook_goes_over_the_peer_link(cluster):
    """The offset hook of a transaction whose group another broker G coordinates reaches G
    over the coordinator's peer link, like the markers: with G's marker queue stopped
    (failpoint), the commit still commits the offsets at once and leaves nothing queued.
    Before, the hook always went through G's queue on the volume, and the producer's next
    transaction waited in the begin guard until G had applied it."""
    T, G = 2, 0
    bs, data, topic, led, txn_id = _txn_case(cluster, "hook", T)
    group = pick_group("hook", G)
    assert txn_owner(data, txn_id) == T and group_owner(group) == G
    _arm(cluster, G, {"marker.before_apply": {"action": "drop"}})
    try:
        p = txn_producer(bs, txn_id)
        p.init_transactions(30)
        meta = group_metadata(bs, group)
        for offset in (2, 5):
            p.begin_transaction()
            p.produce(topic, value=f"v{offset}".encode(), partition=led[G])
            p.send_offsets_to_transaction([TopicPartition(topic, led[G], offset)], meta, 20)
            p.commit_transaction(30)
            assert committed(bs, group, topic, [led[G]]) == {led[G]: offset}
        producer_id = slot_entry(data, txn_id)["producer_id"]
        assert not queued_for_pid(data, producer_id)
        # an aborted transaction discards its staged offsets the same way
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, led[G], 9)], meta, 20)
        p.abort_transaction(30)
        assert committed(bs, group, topic, [led[G]]) == {led[G]: 5}
        assert not queued_for_pid(data, producer_id)
    finally:
        failpoints.disarm(data / "run", G)


def test_write_txn_markers_refused_after_a_lease_lapse(cluster):
    """A broker paused past its write lease closes a WriteTxnMarkers connection accepted
    before the pause instead of serving it (its sender may have given up on it and queued
    the same markers), and serves a connection opened afterwards."""
    from kaas.client import WireClient

    wait_healthy(cluster)
    bs = cluster.bootstrap
    O = 2
    topic = f"lapse-{uuid.uuid4().hex[:4]}"
    led = create_topic(bs, topic)
    lapses = cluster.broker_log(O).count("lease_lapsed")
    old = WireClient("127.0.0.1", cluster.ports[O])
    try:
        _write_markers(old, 4242, 0, False, [(topic, led[O])])  # served before the pause
        pid = cluster.signal(O, signal.SIGSTOP)
        time.sleep(2.5)  # past the lease (half the 3 s session timeout)
        os.kill(pid, signal.SIGCONT)
        wait_for(lambda: cluster.broker_log(O).count("lease_lapsed") > lapses, 15, "the lease lapse")
        with pytest.raises((OSError, ConnectionError)):
            _write_markers(old, 4242, 0, False, [(topic, led[O])])
    finally:
        old.close()
    with WireClient("127.0.0.1", cluster.ports[O]) as wc:
        codes = _write_markers(wc, 4242, 0, False, [(topic, led[O])])
    assert set(codes) == {(topic, led[O])}
    wait_healthy(cluster)


# ----------------------------------------------------------------------------- 6. A paused coordinator


class CommitLoop(threading.Thread):
    """One transactional producer committing about ``rate`` transactions a second, each
    with one record per partition (values "<n>"), the way confluent documents it: a
    retriable error is retried, an abortable one aborts (the loop goes on), a fatal one
    ends the loop. The producer is never recreated."""

    def __init__(self, bootstrap: str, txn_id: str, topic: str, partitions: list[int], rate: float = 10.0,
                 **conf) -> None:
        super().__init__(daemon=True)
        self.p = txn_producer(bootstrap, txn_id, **conf)
        self.p.init_transactions(30)
        self.topic, self.partitions, self.period = topic, partitions, 1 / rate
        self.commits: list[float] = []  # monotonic time of each successful commit
        self.committed: list[bytes] = []  # values of the committed transactions
        self.aborted = 0
        self.errors: list[str] = []
        self.fatal: str | None = None
        self.stop = threading.Event()

    def _end(self, commit: bool) -> bool:
        op = self.p.commit_transaction if commit else self.p.abort_transaction
        while True:
            try:
                op(30)
                return commit
            except KafkaException as exc:
                err = exc.args[0]
                self.errors.append(f"{err.name()}: {err.str()}")
                if err.fatal():
                    raise
                if err.retriable():
                    continue
                if commit and err.txn_requires_abort():
                    op, commit = self.p.abort_transaction, False
                    continue
                raise

    def run(self) -> None:
        n = 0
        try:
            while not self.stop.is_set():
                n += 1
                value = str(n).encode()
                self.p.begin_transaction()
                for part in self.partitions:
                    self.p.produce(self.topic, value=value, partition=part)
                if self._end(True):
                    self.commits.append(time.monotonic())
                    self.committed.append(value)
                else:
                    self.aborted += 1
                self.stop.wait(self.period)
        except KafkaException as exc:
            self.fatal = f"{exc.args[0].name()}: {exc.args[0].str()}"

    def commits_after(self, t: float) -> int:
        return sum(1 for c in self.commits if c > t)

    def finish(self) -> None:
        self.stop.set()
        self.join(60)
        assert not self.is_alive(), "the commit loop did not stop"


def test_paused_coordinator_answers_what_it_held_and_commits_resume(cluster):
    """Issue 19: the transaction coordinator SIGSTOPped past the session timeout, under a
    producer committing in a loop. A request that reached it while it was stopped is
    answered NOT_COORDINATOR as soon as it runs again (never left unanswered), and the
    producer commits again without a fatal error and without being recreated; every
    committed transaction is read back exactly once."""
    from kaas.client import WireClient, recv_exact
    from kaas.wire import codec
    from kaas.wire.build import build

    T = 1
    bs, data, topic, led, txn_id = _txn_case(cluster, "paused", T)
    parts = [led[b] for b in BROKERS if b != T]
    loop = CommitLoop(bs, txn_id, topic, parts)
    loop.start()
    held = WireClient("127.0.0.1", cluster.ports[T], timeout=30)
    pid = None
    try:
        wait_for(lambda: len(loop.commits) >= 5 or loop.fatal, 30, "commits before the pause")
        pid = cluster.signal(T, signal.SIGSTOP)
        # A request the stopped broker holds (in its socket): AddPartitionsToTxn for an id
        # it coordinated, from a pid it never gave out.
        body = build(codec.request_class(24, 3), {
            "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": 4242,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": topic, "partitions": [parts[0]]}]})
        held.sock.sendall(codec.encode_request(24, 3, 1, "held", body))
        time.sleep(5.0)  # past the 3 s session timeout: the survivors take the slot over
        os.kill(pid, signal.SIGCONT)
        resumed = time.monotonic()
        pid = None
        size = struct.unpack(">i", recv_exact(held.sock, 4))[0]
        answered = time.monotonic() - resumed
        payload = recv_exact(held.sock, size)
        corr, off = codec.response_header(24, 3, payload)
        resp = entity_reader(load_response_schema(24, 3))(payload[off:], 0)[0]
        codes = {p.partition_index: p.partition_error_code
                 for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition}
        assert corr == 1 and codes == {parts[0]: ErrorCode.not_coordinator}, codes
        assert answered < 10, f"the held request was answered {answered:.1f} s after SIGCONT"
        wait_for(lambda: loop.commits_after(resumed) >= 5 or loop.fatal, 60, "commits after SIGCONT")
        first = min(c for c in loop.commits if c > resumed) - resumed if loop.commits_after(resumed) else None
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        held.close()
        loop.finish()
    assert loop.fatal is None, (loop.fatal, loop.errors)
    assert first is not None and first < 30, f"first commit {first} s after SIGCONT; errors {loop.errors}"
    wait_healthy(cluster)
    got = by_partition(read_to_end(bs, topic, parts, "read_committed"))
    for part in parts:
        assert got.get(part, []) == loop.committed, (part, loop.errors)


def test_coordinator_paused_past_the_request_timeout_abort_is_not_fatal(cluster):
    """Issue 19: the coordinator stays stopped longer than the client's request timeout.
    librdkafka times out the AddPartitionsToTxn it holds, then the messages waiting for
    it ("requires epoch bump"), and aborts: EndTxn(abort) then InitProducerId with its
    pid/epoch (KIP-360), both to the new coordinator, whose entry never saw that
    transaction (still CompleteCommit). The abort is answered, the epoch bumped, and the
    producer commits again while the old coordinator is still stopped: no fatal
    INVALID_TXN_STATE, no new producer."""
    T = 2
    bs, data, topic, led, txn_id = _txn_case(cluster, "pausedlong", T)
    parts = [led[b] for b in BROKERS if b != T]
    loop = CommitLoop(bs, txn_id, topic, parts, **{
        "socket.timeout.ms": 4000, "message.timeout.ms": 3000, "transaction.timeout.ms": 10000})
    loop.start()
    pid = None
    try:
        wait_for(lambda: len(loop.commits) >= 5 or loop.fatal, 30, "commits before the pause")
        epoch_before = slot_entry(data, txn_id)["producer_epoch"]
        pid = cluster.signal(T, signal.SIGSTOP)
        stopped = time.monotonic()
        wait_for(lambda: (loop.aborted and loop.commits_after(stopped) >= 3) or loop.fatal, 60,
                 "an abort, then commits, with the coordinator stopped")
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        loop.finish()
    assert loop.fatal is None, (loop.fatal, loop.errors)
    assert slot_entry(data, txn_id)["producer_epoch"] > epoch_before  # the KIP-360 bump
    wait_healthy(cluster)
    got = by_partition(read_to_end(bs, topic, parts, "read_committed"))
    for part in parts:
        assert got.get(part, []) == loop.committed, (part, loop.errors)
