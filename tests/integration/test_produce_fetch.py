"""Real clients against a real broker process: produce, fetch, offsets."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

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
