"""Real clients against a real broker process: produce, fetch, offsets."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.fixtures import broker_fixture
from tests.kafka import create_topic

pytestmark = pytest.mark.slow


def consume_all(bootstrap: str, topic: str, partitions: int, expect: int, timeout: float = 30.0, **conf):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                  "enable.auto.commit": False, "enable.partition.eof": False, **conf})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expect and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error():
                    raise AssertionError(m.error())
                out.append(m)
    finally:
        c.close()
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_round_trip_all_codecs(shared_broker, codec):
    topic = f"rt-{codec}"
    create_topic(shared_broker.bootstrap, topic, 3)
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": "all",
                  "compression.type": codec, "linger.ms": 5})
    n = 10_000 if codec == "none" else 2_000
    delivered = []

    def cb(err, msg):
        assert err is None, err
        delivered.append((msg.partition(), msg.offset()))

    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=f"value-{i}".encode() * 3,
                  headers=[("h", f"{i}".encode()), ("empty", b"")], partition=i % 3, on_delivery=cb)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert len(delivered) == n
    msgs = consume_all(shared_broker.bootstrap, topic, 3, n)
    assert len(msgs) == n
    seen = {}
    for m in msgs:
        i = int(m.key()[1:])
        assert m.value() == f"value-{i}".encode() * 3
        assert dict(m.headers()) == {"h": f"{i}".encode(), "empty": b""}
        assert m.partition() == i % 3
        seen[i] = (m.partition(), m.offset())
    assert len(seen) == n
    # offsets are dense per partition and match what the producer was told
    assert sorted(seen.values()) == sorted(delivered)
    for part in range(3):
        offs = sorted(o for pp, o in seen.values() if pp == part)
        assert offs == list(range(len(offs)))


def test_list_offsets_and_timestamps(shared_broker):
    topic = "offsets-ts"
    create_topic(shared_broker.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": "all", "linger.ms": 0})
    base = int(time.time() * 1000) - 100_000
    for i in range(10):
        p.produce(topic, value=b"x", timestamp=base + i * 1000)
        p.flush(5)
    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "lo"})
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
    assert (lo, hi) == (0, 10)
    found = c.offsets_for_times([TopicPartition(topic, 0, base + 4500)], timeout=5)
    assert found[0].offset == 5
    future = c.offsets_for_times([TopicPartition(topic, 0, base + 10**9)], timeout=5)
    assert future[0].offset == -1
    c.close()


def test_auto_created_topic_appears_in_metadata(shared_broker):
    p = Producer({"bootstrap.servers": shared_broker.bootstrap})
    p.produce("auto-created-topic", value=b"hello")
    assert p.flush(10) == 0
    md = AdminClient({"bootstrap.servers": shared_broker.bootstrap}).list_topics(timeout=5)
    assert "auto-created-topic" in md.topics
    assert len(md.topics["auto-created-topic"].partitions) == 1


def test_aiokafka_round_trip(shared_broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    topic = "aiokafka-rt"
    create_topic(shared_broker.bootstrap, topic, 2)

    async def main():
        prod = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap, acks="all")
        await prod.start()
        try:
            for i in range(200):
                await prod.send(topic, key=b"%d" % i, value=b"a%d" % i, partition=i % 2)
            await prod.flush()
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(bootstrap_servers=shared_broker.bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
        await cons.start()
        got = []
        try:
            cons.assign([ATP(topic, 0), ATP(topic, 1)])
            await cons.seek_to_beginning()
            deadline = time.monotonic() + 20
            while len(got) < 200 and time.monotonic() < deadline:
                batch = await cons.getmany(timeout_ms=500)
                for msgs in batch.values():
                    got.extend(msgs)
        finally:
            await cons.stop()
        return got

    got = asyncio.run(main())
    assert sorted(int(m.key) for m in got) == list(range(200))
    assert all(m.value == b"a" + m.key for m in got)


def test_kafka_python_round_trip(shared_broker):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition as KTP

    topic = "kafka-python-rt"
    create_topic(shared_broker.bootstrap, topic, 1)
    prod = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, acks="all")
    futs = [prod.send(topic, key=b"%d" % i, value=b"kp%d" % i) for i in range(100)]
    offsets = [f.get(timeout=10).offset for f in futs]
    prod.close()
    assert sorted(offsets) == list(range(100))
    cons = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, enable_auto_commit=False,
                         consumer_timeout_ms=5000, auto_offset_reset="earliest")
    cons.assign([KTP(topic, 0)])
    cons.seek_to_beginning()
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 100 and time.monotonic() < deadline:
        for recs in cons.poll(timeout_ms=500).values():
            got.extend(recs)
    cons.close()
    assert [r.value for r in got] == [b"kp%d" % i for i in range(100)]


def test_fetch_long_poll_wakes_on_append(shared_broker):
    topic = "long-poll"
    create_topic(shared_broker.bootstrap, topic, 1)
    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "lp",
                  "fetch.wait.max.ms": 5000, "enable.partition.eof": False})
    c.assign([TopicPartition(topic, 0, 0)])
    c.poll(0.5)  # the consumer is now parked in a long-poll
    p = Producer({"bootstrap.servers": shared_broker.bootstrap})
    t0 = time.monotonic()
    p.produce(topic, value=b"wake")
    p.flush(5)
    m = None
    while time.monotonic() - t0 < 4:
        m = c.poll(0.1)
        if m is not None:
            break
    elapsed = time.monotonic() - t0
    c.close()
    assert m is not None and m.value() == b"wake"
    assert elapsed < 4.0


def test_unknown_partition_error(shared_broker):
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "message.timeout.ms": 3000})
    errors = []
    create_topic(shared_broker.bootstrap, "one-part", 1)
    p.produce("one-part", value=b"x", partition=5, on_delivery=lambda e, m: errors.append(e))
    p.flush(10)
    assert errors and errors[0] is not None
    assert errors[0].code() in (KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART,
                                KafkaError._MSG_TIMED_OUT)


# ---------------------------------------------------------------------------- timestamps record by record


def _stamped_batch(stamps: list[int], *, pid: int = -1, epoch: int = -1, seq: int = -1,
                   header_max: int | None = None) -> bytes:
    """One v2 batch of records stamped ``stamps`` (aiokafka's builder); with
    ``header_max`` the header's MaxTimestamp is overwritten and the CRC recomputed, as
    Sarama 1.22 sends its batches (MaxTimestamp -1, valid record timestamps)."""
    import struct

    import crc32c
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    from kaas.wire import batch as wb

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
    for i, ts in enumerate(stamps):
        b.append(i, timestamp=ts, key=None, value=b"Message", headers=[])
    buf = bytearray(b.build())
    if header_max is not None:
        struct.pack_into(">q", buf, 35, header_max)
        struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[wb.CRC_START:])))
    return bytes(buf)


def _wire_produce(wc, topic: str, batch: bytes) -> tuple[int, int]:
    r = wc.call(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    pr = r.responses[0].partition_responses[0]
    return pr.error_code, pr.base_offset


def _wire_list_offsets(wc, topic: str, ts: int, isolation: int = 0) -> tuple[int, int]:
    r = wc.call(2, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}]}]})
    p = r.topics[0].partitions[0]
    assert p.error_code == 0
    return p.offset, p.timestamp


def test_list_offsets_answer_records_inside_a_batch(shared_broker):
    """librdkafka 0081's ListOffsets subtest as Apache 3.8+ answers it: three records
    stamped b+100, b+400, b+250 in one batch; MAX_TIMESTAMP is offset 1 (the record that
    carries it, not the batch's last), and a lookup by time finds the first record at or
    past the target inside the batch. Read through kaas's wire and through librdkafka's
    admin ListOffsets (read_committed, as 0081 asks)."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    from kaas.client import WireClient

    topic = "ts-records-0081"
    create_topic(shared_broker.bootstrap, topic, 1)
    b = 10_000_000
    with WireClient("127.0.0.1", shared_broker.port) as wc:
        assert _wire_produce(wc, topic, _stamped_batch([b + 100, b + 400, b + 250])) == (0, 0)
        for iso in (0, 1):
            assert _wire_list_offsets(wc, topic, -3, iso) == (1, b + 400)
            assert _wire_list_offsets(wc, topic, b + 50, iso) == (0, b + 100)
            assert _wire_list_offsets(wc, topic, b + 300, iso) == (1, b + 400)
            assert _wire_list_offsets(wc, topic, b + 150, iso) == (1, b + 400)
            assert _wire_list_offsets(wc, topic, b + 401, iso) == (-1, -1)
        # a Sarama-shaped batch (header MaxTimestamp -1) is found by its records too
        assert _wire_produce(wc, topic, _stamped_batch([b + 500, b + 700, b + 600], header_max=-1)) == (0, 3)
        assert _wire_list_offsets(wc, topic, b + 650) == (4, b + 700)
        assert _wire_list_offsets(wc, topic, -3) == (4, b + 700)
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    tp = TopicPartition(topic, 0)
    for spec, want in ((OffsetSpec.max_timestamp(), 4), (OffsetSpec.for_timestamp(b + 150), 1),
                       (OffsetSpec.for_timestamp(b + 550), 4), (OffsetSpec.earliest(), 0),
                       (OffsetSpec.latest(), 6)):
        res = admin.list_offsets({tp: spec}, isolation_level=IsolationLevel.READ_COMMITTED)[tp].result(10)
        assert res.offset == want, (spec, res)


expiry_broker = broker_fixture(scope="module", name="expiry", doc="Producer-state expiry checked every 100 ms.",
                               extra=["--num-partitions", "1", "--retention-check-ms", "100",
                                      "--producer-id-expiration-ms", "5000"])


def _expiry_lines(broker) -> dict[int, list[str]]:
    """The broker's producer_state_expired lines by producer id (console or JSON logs)."""
    import re

    out: dict[int, list[str]] = {}
    for line in broker.log_text().splitlines():
        if "producer_state_expired" in line:
            m = re.search(r'\bproducer_id"?[=:] ?(\d+)', line)
            if m:
                out.setdefault(int(m.group(1)), []).append(line)
    return out


def test_idempotent_retry_after_the_expiry_check_is_a_duplicate(expiry_broker):
    """The issue's Sarama case: an idempotent batch whose header says MaxTimestamp -1
    (records stamped validly), then expiry checks run, then an identical retry: it is
    answered as a duplicate with the original offset, not appended a second time. Expiry
    counts from the broker's clock at the append, so the -1 never expires the state.

    That the checks ran in between is shown, not assumed: a sentinel producer that went
    idle earlier is reported expired (by broker time, after 5 s) before the retry."""
    from kaas.client import WireClient

    topic = "ts-idem-retry"
    create_topic(expiry_broker.bootstrap, topic, 1)
    now = int(time.time() * 1000)
    with WireClient("127.0.0.1", expiry_broker.port) as wc:
        def init() -> tuple[int, int]:
            r = wc.call(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                "producer_id": -1, "producer_epoch": -1})
            assert r.error_code == 0
            return r.producer_id, r.producer_epoch

        sentinel, s_epoch = init()
        assert _wire_produce(wc, topic, _stamped_batch([now], pid=sentinel, epoch=s_epoch, seq=0))[0] == 0
        time.sleep(2.5)  # the sentinel is idle 2.5 s longer than the producer under test
        pid, epoch = init()
        batch = _stamped_batch([now + i for i in range(5)], pid=pid, epoch=epoch, seq=0, header_max=-1)
        code, first = _wire_produce(wc, topic, batch)
        assert code == 0
        deadline = time.monotonic() + 20
        while sentinel not in _expiry_lines(expiry_broker):
            assert time.monotonic() < deadline, "the expiry check never reported the sentinel"
            time.sleep(0.1)
        assert pid not in _expiry_lines(expiry_broker)
        assert _wire_produce(wc, topic, batch) == (0, first)  # a duplicate: the original offset
        r = wc.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        assert r.topics[0].partitions[0].offset == first + 5  # written once
        # the producer expires too once idle past the limit by the broker's clock, logged once
        deadline = time.monotonic() + 20
        while pid not in _expiry_lines(expiry_broker):
            assert time.monotonic() < deadline, "the producer under test never expired"
            time.sleep(0.1)
    (line,) = _expiry_lines(expiry_broker)[pid]  # once, with the reason
    assert "idle_ms" in line and "last_append_ms" in line
