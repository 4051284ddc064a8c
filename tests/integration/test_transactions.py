"""Transactions end to end with real clients against a real broker process (seed
"Transactions & idempotence", design section 7): read_committed isolation, KIP-447
consume-process-produce, zombie fencing, the timeout reaper, crash recovery of prepared
transactions, aiokafka, and the admin APIs.

The brokers are real ``kaas broker`` processes with
``KAAS_TXN_SWEEP_MS`` shortened so the reaper/reconcile tick fits a test.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kaas import failpoints
from kaas.testing import BrokerProcess, wait_for
from tests.fixtures import broker_fixture
from tests.kafka import SWEEP_ENV, create_topic, read_to_end, txn_producer, values

pytestmark = pytest.mark.slow

# ----------------------------------------------------------------------------- fixtures


txn_broker = broker_fixture(scope="module", name="txn", env=SWEEP_ENV,
                            extra=["--group-initial-rebalance-delay-ms", "0"],
                            doc="One broker for the module's tests (distinct topics and transactional ids).")
fresh_broker = broker_fixture(env=SWEEP_ENV, doc="A broker of its own, for tests that kill and restart it.")


# ----------------------------------------------------------------------------- helpers


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset
                for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)}
    finally:
        c.close()


# ----------------------------------------------------------------------------- tests


def test_commit_visible_abort_invisible(txn_broker):
    bs, topic = txn_broker.bootstrap, "txn-basic"
    create_topic(bs, topic, 3)
    p = txn_producer(bs, "basic-1")
    p.init_transactions(10)

    def txn(tag: str, commit: bool) -> list[bytes]:
        p.begin_transaction()
        vals = [f"{tag}-{i}".encode() for i in range(30)]
        for i, v in enumerate(vals):
            p.produce(topic, value=v, partition=i % 3)
        if commit:
            p.commit_transaction(10)
        else:
            p.flush(10)  # the records reach the log before the abort
            p.abort_transaction(10)
        return vals

    first = txn("c1", True)
    aborted = txn("a", False)
    second = txn("c2", True)
    assert sorted(values(read_to_end(bs, topic, 3, "read_committed"))) == sorted(first + second)
    assert sorted(values(read_to_end(bs, topic, 3, "read_uncommitted"))) == sorted(first + aborted + second)


def test_consume_process_produce_offsets_follow_commits(txn_broker):
    """KIP-447: output and consumer offsets commit atomically; an aborted round changes
    neither, and the committed group offsets advance only with committed transactions."""
    bs = txn_broker.bootstrap
    src, dst, group = "eos-in", "eos-out", "eos-group"
    create_topic(bs, src, 2)
    create_topic(bs, dst, 2)
    plain = Producer({"bootstrap.servers": bs})
    for i in range(40):
        plain.produce(src, value=f"m{i}".encode(), partition=i % 2)
    assert plain.flush(10) == 0

    consumer = Consumer({"bootstrap.servers": bs, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([src])
    producer = txn_producer(bs, "eos-1")
    producer.init_transactions(10)
    done, rounds, aborted_rounds = 0, 0, 0
    deadline = time.monotonic() + 40
    try:
        while done < 40 and time.monotonic() < deadline:
            msgs = [m for m in consumer.consume(8, 0.5) if not m.error()]
            if not msgs:
                continue
            rounds += 1
            # read before the offsets are staged: while they are, a require_stable fetch
            # (librdkafka's read_committed) gets UNSTABLE_OFFSET_COMMIT and retries
            before = committed_offsets(bs, group, src, 2)
            producer.begin_transaction()
            for m in msgs:
                producer.produce(dst, value=b"out-" + m.value(), partition=m.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 10)
            if rounds == 2:
                producer.flush(10)
                producer.abort_transaction(10)
                aborted_rounds += 1
                assert committed_offsets(bs, group, src, 2) == before
                # rewind to the committed position, as an EOS application must
                for tp in consumer.committed(consumer.assignment(), timeout=10):
                    consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                 tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
                continue
            producer.commit_transaction(10)
            after = committed_offsets(bs, group, src, 2)
            assert sum(max(o, 0) for o in after.values()) == sum(max(o, 0) for o in before.values()) + len(msgs)
            done += len(msgs)
    finally:
        consumer.close()
    assert aborted_rounds == 1
    assert done == 40
    out = values(read_to_end(bs, dst, 2, "read_committed"))
    assert sorted(out) == sorted(f"out-m{i}".encode() for i in range(40))
    assert committed_offsets(bs, group, src, 2) == {0: 20, 1: 20}
    # the aborted round's records are in the log, but only read_uncommitted sees them
    assert len(read_to_end(bs, dst, 2, "read_uncommitted")) > 40


def test_zombie_fenced_everywhere(txn_broker):
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient

    bs, topic = txn_broker.bootstrap, "txn-fence"
    create_topic(bs, topic, 3)
    zombie = txn_producer(bs, "fence-1")
    zombie.init_transactions(10)
    zombie.begin_transaction()
    for p in range(3):
        zombie.produce(topic, value=b"first", partition=p)
    zombie.commit_transaction(10)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"open", partition=0)
    assert zombie.flush(10) == 0  # an ongoing transaction on partition 0 only

    successor = txn_producer(bs, "fence-1")
    successor.init_transactions(20)  # aborts the zombie's transaction, then bumps the epoch

    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        states = admin.describe_producers([KTopicPartition(topic, p) for p in range(3)])
    finally:
        admin.close()
    epochs = {tp.partition: {s.producer_epoch for s in st.active_producers} for tp, st in states.items()}
    # partitions 1 and 2 were never touched by the successor nor in the aborted transaction:
    # the cross-partition fence bumped them anyway (0 -> abort at 1 -> successor at 2)
    assert epochs == {0: {2}, 1: {2}, 2: {2}}

    try:  # partition 0: its open transaction was aborted at a higher epoch; partition 1:
        # not in the zombie's transaction, needs AddPartitionsToTxn with the stale epoch
        for p in (0, 1):
            zombie.produce(topic, value=f"zombie-{p}".encode(), partition=p)
        zombie.flush(10)
    except KafkaException as exc:
        assert exc.args[0].fatal(), exc
    with pytest.raises(KafkaException) as exc:
        zombie.commit_transaction(10)
    err = exc.value.args[0]
    assert err.fatal() or err.code() == KafkaError._FENCED, err

    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=1)
    successor.commit_transaction(10)
    got = sorted(values(read_to_end(bs, topic, 3, "read_committed")))
    assert got == sorted([b"first"] * 3 + [b"successor"])
    assert not any(v.startswith(b"zombie") for v in values(read_to_end(bs, topic, 3, "read_uncommitted")))


def test_reaper_aborts_timed_out_transaction(txn_broker):
    bs, topic = txn_broker.bootstrap, "txn-reaper"
    create_topic(bs, topic, 1)
    stuck = txn_producer(bs, "reaper-stuck", **{"transaction.timeout.ms": 2000})
    stuck.init_transactions(10)
    stuck.begin_transaction()
    stuck.produce(topic, value=b"stuck", partition=0)
    assert stuck.flush(10) == 0
    opened = time.monotonic()
    other = txn_producer(bs, "reaper-other")
    other.init_transactions(10)
    other.begin_transaction()
    other.produce(topic, value=b"after", partition=0)
    other.commit_transaction(10)
    # the open transaction holds the LSO: nothing is visible yet (unless the reaper was fast)
    early = values(read_to_end(bs, topic, 1, "read_committed", timeout=5))
    if time.monotonic() - opened < 1.9:
        assert early == []
    deadline = time.monotonic() + 15
    seen: list[bytes] = []
    while time.monotonic() < deadline:
        seen = values(read_to_end(bs, topic, 1, "read_committed"))
        if seen:
            break
        time.sleep(0.3)
    assert seen == [b"after"]
    assert "txn_timed_out_aborting" in txn_broker.log_text()
    with pytest.raises(KafkaException):  # the reaper bumped the epoch: the producer is fenced
        stuck.commit_transaction(10)
    assert sorted(values(read_to_end(bs, topic, 1, "read_uncommitted"))) == [b"after", b"stuck"]


def test_admin_apis_describe_and_list(txn_broker):
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient

    bs, topic = txn_broker.bootstrap, "txn-admin"
    create_topic(bs, topic, 2)
    p = txn_producer(bs, "admin-1")
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic, value=b"x", partition=1)
    assert p.flush(10) == 0
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        listed = [t for ts in admin.list_transactions().values() for t in ts]
        mine = [t for t in listed if t.transactional_id == "admin-1"]
        assert len(mine) == 1 and mine[0].state.value == "Ongoing"
        desc = admin.describe_transactions(["admin-1"])["admin-1"]
        assert desc.state.value == "Ongoing"
        assert desc.topic_partitions == {KTopicPartition(topic, 1)}
        assert desc.transaction_start_time_ms > 0
        prod = admin.describe_producers([KTopicPartition(topic, 1)])[KTopicPartition(topic, 1)]
        assert [s.current_transaction_start_offset for s in prod.active_producers] == [0]
        p.commit_transaction(10)
        desc = admin.describe_transactions(["admin-1"])["admin-1"]
        assert desc.state.value == "CompleteCommit" and desc.topic_partitions == set()
        ongoing = [t for ts in admin.list_transactions(state_filters=["Ongoing"]).values() for t in ts]
        assert "admin-1" not in {t.transactional_id for t in ongoing}
    finally:
        admin.close()


def test_aiokafka_transactions_with_offsets(txn_broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATopicPartition

    bs = txn_broker.bootstrap
    src, dst, group = "aio-in", "aio-out", "aio-group"
    create_topic(bs, src, 1)
    create_topic(bs, dst, 1)
    tp_src = ATopicPartition(src, 0)

    async def run() -> tuple[list[bytes], int | None]:
        producer = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-1")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(dst, b"committed", partition=0)
                await producer.send_offsets_to_transaction({tp_src: 5}, group)
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send_and_wait(dst, b"aborted", partition=0)
                    await producer.send_offsets_to_transaction({tp_src: 9}, group)
                    raise RuntimeError("abort")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                                    isolation_level="read_committed", auto_offset_reset="earliest")
        await consumer.start()
        try:
            committed = await consumer.committed(tp_src)
            consumer.assign([ATopicPartition(dst, 0)])
            await consumer.seek_to_beginning()
            batch = await consumer.getmany(timeout_ms=3000)
            got = [m.value for msgs in batch.values() for m in msgs]
        finally:
            await consumer.stop()
        return got, committed

    got, committed = asyncio.run(run())
    assert got == [b"committed"]
    assert committed == 5


# ----------------------------------------------------------------------------- crash recovery


class TxnLoop:
    """Runs transactions of 4 records (2 per partition) until stopped; remembers which
    transactions the client saw commit and which ended with an unknown outcome."""

    def __init__(self, bootstrap: str, topic: str, txn_id: str) -> None:
        self.bootstrap, self.topic, self.txn_id = bootstrap, topic, txn_id
        self.stop = threading.Event()
        self.committed: list[int] = []
        self.unknown: list[int] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _producer(self) -> Producer:
        deadline = time.monotonic() + 60
        while True:
            p = txn_producer(self.bootstrap, self.txn_id, **{"transaction.timeout.ms": 20000})
            try:
                p.init_transactions(30)
                return p
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _run(self) -> None:
        try:
            p = self._producer()
            i = 0
            while not self.stop.is_set():
                outcome = self._one(p, i)
                if outcome == "committed":
                    self.committed.append(i)
                else:
                    self.unknown.append(i)
                    if outcome == "fatal":
                        p = self._producer()
                i += 1
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def _one(self, p: Producer, i: int) -> str:
        try:
            p.begin_transaction()
            for j in range(4):
                p.produce(self.topic, key=f"{i}".encode(), value=f"{i}-{j}".encode(), partition=j % 2)
        except KafkaException as exc:
            return self._recover(p, exc.args[0])
        deadline = time.monotonic() + 40
        while True:
            try:
                p.commit_transaction(10)
                return "committed"
            except KafkaException as exc:
                err = exc.args[0]
                if err.retriable() and time.monotonic() < deadline:
                    continue
                return self._recover(p, err)

    @staticmethod
    def _recover(p: Producer, err) -> str:
        if err.txn_requires_abort():
            try:
                p.abort_transaction(30)
                return "aborted"
            except KafkaException:
                return "fatal"
        return "fatal"

    def __enter__(self) -> TxnLoop:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(90)




def check_exactly_once(bootstrap: str, topic: str, loop: TxnLoop) -> None:
    assert loop.error is None, loop.error
    msgs = read_to_end(bootstrap, topic, 2, "read_committed", timeout=30)
    per_txn = collections.Counter(int(m.key()) for m in msgs)
    vals = [m.value() for m in msgs]
    assert len(vals) == len(set(vals)), "a record is visible twice"
    for i in loop.committed:
        assert per_txn[i] == 4, f"committed transaction {i} has {per_txn[i]} of 4 records"
    for i, n in per_txn.items():
        assert n == 4, f"transaction {i} is partially visible ({n} of 4)"
    assert set(per_txn) <= set(loop.committed) | set(loop.unknown)


def test_sigkill_during_commit_loop(fresh_broker):
    b = fresh_broker
    topic = "txn-crash"
    create_topic(b.bootstrap, topic, 2)
    with TxnLoop(b.bootstrap, topic, "crash-1") as loop:
        wait_for(lambda: len(loop.committed) >= 10, 30, "10 commits")
        b.kill()  # somewhere in the loop: between transactions, or mid-EndTxn
        time.sleep(0.3)
        b.start()
        n = len(loop.committed)
        wait_for(lambda: len(loop.committed) >= n + 10 or loop.error is not None, 60, "commits after restart")
    check_exactly_once(b.bootstrap, topic, loop)
    assert len(loop.committed) >= 20


def test_crash_with_prepared_commit(fresh_broker):
    """SIGKILL-equivalent crash right after PrepareCommit is persisted: after the restart
    the transaction completes (client retry or reconcile) and is visible exactly once."""
    b = fresh_broker
    topic = "txn-prepared"
    create_topic(b.bootstrap, topic, 2)
    with TxnLoop(b.bootstrap, topic, "prepared-1") as loop:
        wait_for(lambda: len(loop.committed) >= 3, 30, "3 commits")
        failpoints.arm(b.data / "run", b.broker_id, {"endtxn.after_prepare": {"action": "crash", "count": 1}})
        wait_for(lambda: b.proc.poll() is not None, 20, "the crash at endtxn.after_prepare")
        b.proc = None
        n = len(loop.committed)
        b.start()
        wait_for(lambda: len(loop.committed) >= n + 5 or loop.error is not None, 60, "commits after restart")
    assert "failpoint_hit" in b.log_text()
    check_exactly_once(b.bootstrap, topic, loop)
    # nothing is left prepared
    slot_files = list((b.data / "__cluster" / "txn_state").glob("slot-*.json"))
    assert slot_files and all("Prepare" not in f.read_text() for f in slot_files)


@pytest.mark.cluster
def test_three_brokers_sigkill_a_partition_leader(tmp_path):
    """Peer-led markers go through the marker queue; when the leader of one partition is
    SIGKILLed, its queue is claimed by a survivor and forwarded to the new leader: the
    committed transactions stay exactly-once."""
    from kaas.domain import routing
    from kaas.testing import free_ports

    base = free_ports(3)
    brokers = [BrokerProcess(tmp_path / "data", i, base + i, env=SWEEP_ENV) for i in range(3)]
    try:
        for b in brokers:
            b.start()
        boot = ",".join(b.bootstrap for b in brokers)
        topic, txn_id = "txn-cluster", "cluster-1"
        admin = AdminClient({"bootstrap.servers": boot})
        wait_for(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 20, "three brokers in Metadata")
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(10)
        coordinator = routing.coordinator_for(routing.txn_slot_key(routing.txn_slot(txn_id)), [0, 1, 2], [0, 1, 2])

        def leaders() -> dict[int, int]:
            md = admin.list_topics(topic, timeout=5)
            return {p: md.topics[topic].partitions[p].leader for p in range(2)}

        wait_for(lambda: all(v >= 0 for v in leaders().values()), 20, "partition leaders")
        with TxnLoop(boot, topic, txn_id) as loop:
            wait_for(lambda: len(loop.committed) >= 10, 30, "10 commits")
            victim = next((v for v in leaders().values() if v != coordinator), (coordinator + 1) % 3)
            brokers[victim].kill()
            n = len(loop.committed)
            wait_for(lambda: len(loop.committed) >= n + 10 or loop.error is not None, 60, "commits after the kill")
        survivors = ",".join(b.bootstrap for b in brokers if b.alive())
        check_exactly_once(survivors, topic, loop)
    finally:
        for b in brokers:
            b.kill()
