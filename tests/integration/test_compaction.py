"""Log compaction on a real broker: a compacted topic written by transactional and
idempotent librdkafka producers, cleaned in the background, read back under
read_committed; an idempotent retry of an old batch after cleaning; a SIGKILL at each
step of a cleaning pass; keyless records refused on a compacted topic."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from kaas import failpoints
from kaas.client import WireClient
from kaas.testing import BrokerProcess, ClusterProcess
from kaas.wire.batch import build_batch
from tests.fixtures import broker_fixture
from tests.kafka import create_topic

pytestmark = pytest.mark.slow

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
           "delete.retention.ms": "600000"}


cbroker = broker_fixture(extra=["--log-cleaner-backoff-ms", "200"])


def create(bootstrap: str, configs: dict | None = None) -> str:
    name = f"changelog-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, name, 1, config=configs or COMPACT)
    return name


def read_committed(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "check.crcs": True})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        out = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                if c.position([TopicPartition(topic, 0)])[0].offset >= high:
                    break
                continue
            if m.error():
                continue
            out.append((m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()


def wait_cleaned(b: BrokerProcess, passes: int = 1, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while b.log_text().count("log_cleaned") < passes:
        assert time.monotonic() < deadline, "the cleaner did not run"
        time.sleep(0.2)


def write_history(bootstrap: str, topic: str) -> dict[bytes, bytes | None]:
    """Transactions committed and aborted, and an idempotent producer, over 12 keys;
    returns the latest committed value per key."""
    expect: dict[bytes, bytes | None] = {}
    tp = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}",
                   "linger.ms": 1})
    tp.init_transactions(10)
    for t in range(40):
        tp.begin_transaction()
        batch = {}
        for k in range(t % 4, 12, 3):
            key = f"k{k}".encode()
            value = None if (t + k) % 11 == 0 else f"t{t}-k{k}-".encode() + b"x" * 100
            tp.produce(topic, key=key, value=value, partition=0)
            batch[key] = value
        if t % 5 == 3:
            tp.abort_transaction(10)
        else:
            tp.commit_transaction(10)
            expect.update(batch)
    ip = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 1})
    for i in range(60):
        key = f"k{i % 12}".encode()
        value = f"idem{i}-".encode() + b"y" * 80
        ip.produce(topic, key=key, value=value, partition=0)
        expect[key] = value
    assert ip.flush(10) == 0
    return expect


def check(bootstrap: str, topic: str, expect: dict[bytes, bytes | None], written: int) -> list:
    got = read_committed(bootstrap, topic)
    latest: dict[bytes, bytes | None] = {}
    for _off, k, v in got:
        latest[k] = v
    assert latest == expect
    assert len(got) < written, "nothing was compacted"
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets))
    return got


def test_compacted_topic_keeps_latest_committed_values(cbroker):
    topic = create(cbroker.bootstrap)
    expect = write_history(cbroker.bootstrap, topic)
    # a few more records so the segments holding the history close and become cleanable
    p = Producer({"bootstrap.servers": cbroker.bootstrap})
    for i in range(40):
        p.produce(topic, key=b"filler", value=b"f" * 200, partition=0)
    p.flush(10)
    expect[b"filler"] = b"f" * 200
    wait_cleaned(cbroker)
    check(cbroker.bootstrap, topic, expect, written=40 * 4 + 60 + 40)
    # SIGKILL and restart: recovery reads the cleaned segments (with their offset gaps) as
    # they are (the restarted leader may clean further: the latest values stay)
    cbroker.kill()
    cbroker.start()
    check(cbroker.bootstrap, topic, expect, written=260)
    assert "recovery_truncated" not in cbroker.log_text()


def test_keyless_records_are_refused_on_a_compacted_topic(cbroker):
    topic = create(cbroker.bootstrap)
    with WireClient("127.0.0.1", cbroker.port) as wc:
        def produce(records):
            r = wc.call(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": build_batch(records=records)}]}]})
            return r.responses[0].partition_responses[0].error_code

        assert produce([(None, b"no key")]) == ErrorCode.invalid_record
        assert produce([(b"k", b"v"), (None, b"no key")]) == ErrorCode.invalid_record
        assert produce([(b"k", b"v")]) == ErrorCode.none


def test_idempotent_retry_of_an_old_batch_after_cleaning_is_a_duplicate(cbroker):
    topic = create(cbroker.bootstrap)
    with WireClient("127.0.0.1", cbroker.port) as wc:
        init = wc.call(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                               "producer_id": -1, "producer_epoch": -1})
        pid, epoch = init.producer_id, init.producer_epoch

        def produce(seq, key, value):
            batch = build_batch(producer_id=pid, producer_epoch=epoch, base_sequence=seq, records=[(key, value)])
            r = wc.call(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
            pr = r.responses[0].partition_responses[0]
            return pr.error_code, pr.base_offset

        offsets = [produce(i, b"same-key", b"v%d" % i * 200) for i in range(30)]
        assert all(code == ErrorCode.none for code, _ in offsets)
        wait_cleaned(cbroker)
        last = offsets[-1][1]
        assert produce(29, b"same-key", b"v29" * 200) == (ErrorCode.none, last)  # the duplicate's offset
        # an older batch still in the producer's window of five: a duplicate too, at its
        # original offset, though the cleaner removed its record
        assert produce(27, b"same-key", b"v27" * 200) == (ErrorCode.none, offsets[27][1])
    cbroker.kill()
    cbroker.start()
    got = read_committed(cbroker.bootstrap, topic)
    assert got[-1][2] == b"v29" * 200 and len(got) < 30


@pytest.mark.parametrize("point", ["cleaner.before_copy", "cleaner.after_commit_file", "cleaner.after_swap"])
def test_sigkill_at_each_cleaner_step_keeps_the_log_readable(cbroker, point):
    # written while the cleaner leaves it alone (nothing is older than the minimum lag)
    topic = create(cbroker.bootstrap, {**COMPACT, "min.compaction.lag.ms": "3600000"})
    p = Producer({"bootstrap.servers": cbroker.bootstrap, "enable.idempotence": True, "linger.ms": 1})
    expect = {}
    for i in range(120):
        key, value = f"k{i % 7}".encode(), f"v{i}-".encode() + b"z" * 150
        p.produce(topic, key=key, value=value, partition=0)
        expect[key] = value
        if i % 4 == 3:
            assert p.flush(10) == 0  # many batches, several segments
    failpoints.arm(cbroker.data / "run", cbroker.broker_id, {point: {"action": "crash"}})
    time.sleep(0.5)  # the broker reads its failpoint file every 200 ms
    from confluent_kafka.admin import ConfigResource

    admin = AdminClient({"bootstrap.servers": cbroker.bootstrap})
    assert "log_cleaned" not in cbroker.log_text()
    res = ConfigResource("topic", topic, set_config={**COMPACT, "min.compaction.lag.ms": "0"})
    admin.alter_configs([res])[res].result(10)  # now dirty enough: the next pass crashes
    deadline = time.monotonic() + 20
    while cbroker.proc.poll() is None:
        assert time.monotonic() < deadline, f"{point} was not reached"
        time.sleep(0.1)
    cbroker.proc = None
    cbroker.start()
    got = read_committed(cbroker.bootstrap, topic)
    assert {k: v for _, k, v in got} == expect
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets))
    assert "recovery_truncated" not in cbroker.log_text()


@pytest.mark.cluster
def test_cleaning_on_a_cluster_survives_the_leader_being_killed(tmp_path):
    """On three brokers, a compacted topic's leader cleans, is SIGKILLed, and the broker
    that takes the partition over (recovery first) goes on cleaning it: read_committed
    gives the latest committed values throughout."""
    import signal

    with ClusterProcess(tmp_path / "data", 3, extra=["--log-cleaner-backoff-ms", "200"]).running() as c:
        topic = create(c.bootstrap)
        expect = write_history(c.bootstrap, topic)
        deadline = time.monotonic() + 20
        while not any("log_cleaned" in c.broker_log(i) for i in range(3)):
            assert time.monotonic() < deadline, "no broker cleaned"
            time.sleep(0.2)
        check(c.bootstrap, topic, expect, written=220)
        leader = next(i for i in range(3) if "log_cleaned" in c.broker_log(i))
        passes = sum(c.broker_log(i).count("log_cleaned") for i in range(3))
        c.signal(leader, signal.SIGKILL)
        p = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True, "linger.ms": 1})
        for i in range(60):  # more updates after the takeover: cleaned by the new leader
            key, value = f"k{i % 12}".encode(), f"after{i}-".encode() + b"w" * 120
            p.produce(topic, key=key, value=value, partition=0)
            expect[key] = value
            if i % 6 == 5:
                assert p.flush(30) == 0
        deadline = time.monotonic() + 30
        # cleaned again by whoever leads it now (another broker, or the killed one once the
        # supervisor restarted it and the balancer gave the partition back)
        while sum(c.broker_log(i).count("log_cleaned") for i in range(3)) <= passes:
            assert time.monotonic() < deadline, "nobody cleaned after the takeover"
            time.sleep(0.2)
        check(c.bootstrap, topic, expect, written=280)
        assert not any("recovery_truncated" in c.broker_log(i) for i in range(3))


def test_a_restarted_broker_cleans_at_once_not_a_backoff_later(tmp_path):
    """As Apache's cleaner starts on the logs as the broker starts, a partition a broker
    takes over (here: after a SIGKILL and restart) is looked at within a second, not a
    whole ``log.cleaner.backoff.ms`` later: a broker restarted more often than the backoff
    (the connect chaos scenario's kills every 4 s) still compacts."""
    from confluent_kafka.admin import ConfigResource

    with BrokerProcess(tmp_path / "data", extra=["--log-cleaner-backoff-ms", "60000"]).running() as b:
        topic = create(b.bootstrap, {**COMPACT, "min.compaction.lag.ms": "3600000"})  # nothing cleanable yet
        expect = write_history(b.bootstrap, topic)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        res = ConfigResource("topic", topic, set_config={**COMPACT, "min.compaction.lag.ms": "0"})
        admin.alter_configs([res])[res].result(10)
        assert "log_cleaned" not in b.log_text()
        b.kill()
        b.start()
        wait_cleaned(b, timeout=10)
        check(b.bootstrap, topic, expect, written=220)
