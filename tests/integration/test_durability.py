"""Acknowledged writes survive SIGTERM and SIGKILL of the broker; idempotence survives a crash.

Verification reads use kafka-python without a group (group_id=None) and with CRC checks
on, so every record of every batch is parsed and verified.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import KafkaException, Producer

from tests.kafka import create_topic

pytestmark = pytest.mark.slow


def read_partitions(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0):
    """{partition: [(offset, key, value), ...]} for every record from 0 to the high watermark.

    Asserts the log starts at 0 and that offsets are consecutive (no gap, no repeat).
    """
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KTP

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      check_crcs=True, auto_offset_reset="earliest", max_partition_fetch_bytes=4 * 1024 * 1024,
                      fetch_max_bytes=16 * 1024 * 1024)
    try:
        tps = [KTP(topic, p) for p in range(partitions)]
        c.assign(tps)
        ends = c.end_offsets(tps)
        starts = c.beginning_offsets(tps)
        for tp in tps:
            assert starts[tp] == 0, (tp, starts[tp])
            c.seek(tp, 0)
        out: dict[int, list[tuple[int, bytes | None, bytes]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(c.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, {tp.partition: (c.position(tp), ends[tp]) for tp in tps}
            for tp, msgs in c.poll(timeout_ms=500, max_records=100_000).items():
                out[tp.partition].extend((m.offset, m.key, m.value) for m in msgs)
        for p, recs in out.items():
            offsets = [o for o, _, _ in recs]
            assert offsets == list(range(ends[KTP(topic, p)])), f"partition {p}: offsets not dense"
        return out
    finally:
        c.close()


def test_sigterm_restart_keeps_every_message(broker):
    topic = "durable-sigterm"
    n = 5000
    create_topic(broker.bootstrap, topic, 3)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    acked: dict[tuple[int, int], tuple[bytes, bytes]] = {}

    def cb(err, msg):
        assert err is None, err
        acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    for i in range(n):
        key = f"key-{i % 97}".encode()
        p.produce(topic, key=key, value=f"value-{i}-".encode() * 4, on_delivery=cb)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert len(acked) == n
    assert len({pp for pp, _ in acked}) == 3  # the keys spread over all partitions

    assert broker.stop() == 0  # SIGTERM: a clean drain
    assert "broker_stopped" in broker.log_text()
    broker.start()

    got = read_partitions(broker.bootstrap, topic, 3)
    found = {(part, off): (k, v) for part, recs in got.items() for off, k, v in recs}
    assert found == acked


class LoadProducer:
    """A confluent producer producing continuously in a thread; records what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, **conf):
        self.topic = topic
        self.partitions = partitions
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 300,
            "retry.backoff.ms": 50, "retry.backoff.max.ms": 300,
            "message.timeout.ms": 60_000, "socket.timeout.ms": 10_000, **conf,
        })
        self.acked: dict[bytes, tuple[int, int]] = {}  # value -> (partition, offset)
        self.failed: list[tuple[bytes, str]] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.lock = threading.Lock()

    def _cb(self, err, msg):
        with self.lock:
            if err is not None:
                self.failed.append((msg.value(), str(err)))
            else:
                self.acked[msg.value()] = (msg.partition(), msg.offset())

    def _run(self):
        seq = defaultdict(int)
        i = 0
        while not self._stop.is_set():
            part = i % self.partitions
            value = f"p{part}-{seq[part]:08d}".encode()
            try:
                self.producer.produce(self.topic, value=value, partition=part, on_delivery=self._cb)
            except BufferError:
                self.producer.poll(0.05)
                continue
            seq[part] += 1
            i += 1
            self.sent += 1
            if i % 50 == 0:
                self.producer.poll(0)
                time.sleep(0.004)  # about 10k msgs/s: enough load, bounded verification
        self.producer.poll(0)

    def start(self):
        self._thread.start()
        return self

    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)

    def wait_acked(self, at_least: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.acked_count() < at_least:
            assert time.monotonic() < deadline, (self.acked_count(), at_least, self.failed[:5])
            time.sleep(0.05)

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(timeout) == 0


def test_sigkill_during_load_loses_no_acknowledged_write(broker):
    topic = "durable-sigkill"
    partitions = 3
    create_topic(broker.bootstrap, topic, partitions)
    load = LoadProducer(broker.bootstrap, topic, partitions).start()
    try:
        load.wait_acked(3000)
        time.sleep(0.3)  # mid-load: batches in flight
        broker.kill()  # SIGKILL
        at_kill = load.acked_count()
        time.sleep(0.5)
        broker.start()
        load.wait_acked(at_kill + 3000)  # keep producing a bit after the restart
    finally:
        load.stop()
    assert load.failed == []
    got = read_partitions(broker.bootstrap, topic, partitions)
    by_offset = {(part, off): v for part, recs in got.items() for off, _k, v in recs}
    # every acknowledged message is at its acknowledged offset
    missing = [(v, po) for v, po in load.acked.items() if by_offset.get(po) != v]
    assert not missing, f"{len(missing)} acknowledged messages lost or moved, e.g. {missing[:5]}"
    # nothing that was not produced appears (retries may duplicate: plain producer)
    produced_values = set(load.acked)
    assert set(by_offset.values()) <= produced_values
    assert "partition_takeover" in broker.log_text()


def test_idempotent_producer_survives_sigkill_without_duplicates_or_gaps(broker):
    topic = "durable-idempotent"
    partitions = 2
    create_topic(broker.bootstrap, topic, partitions)
    load = LoadProducer(broker.bootstrap, topic, partitions, **{"enable.idempotence": True}).start()
    try:
        load.wait_acked(3000)
        time.sleep(0.3)
        broker.kill()
        at_kill = load.acked_count()
        time.sleep(0.5)
        broker.start()
        load.wait_acked(at_kill + 3000)
    finally:
        try:
            load.stop()
        except KafkaException:
            pass
    assert load.failed == [], load.failed[:5]
    got = read_partitions(broker.bootstrap, topic, partitions)
    for part, recs in got.items():
        values = [v for _o, _k, v in recs]
        assert len(values) == len(set(values)), f"partition {part}: duplicates"
        # in log order, the producer's per-partition sequence numbers are 0, 1, 2, ... (no gap)
        seqs = [int(v.split(b"-")[1]) for v in values]
        assert seqs == list(range(len(seqs))), f"partition {part}: gap or reordering"
        for off, _k, v in recs:
            assert load.acked.get(v) == (part, off), (part, off, v, load.acked.get(v))
    assert sum(len(r) for r in got.values()) == len(load.acked) == load.sent
