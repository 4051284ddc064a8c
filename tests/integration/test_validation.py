"""Every produced batch validated and normalised as Apache's LogValidator (issue 31), against
a real broker process over the raw wire and with real clients.

- Sarama 1.22's batch (maxTimestamp -1, good record timestamps, idempotent): stored with
  the true max timestamp and a valid CRC, found by ListOffsets, and an identical retry after
  the retention checks have run is a duplicate at the original offset, not a second append;
- one test per refusal rule (and its compressed variants): Apache's error, the record
  errors and error message where Apache fills them, the log end offset unchanged, one
  warning line, the broker still serving;
- offset deltas out of order: renumbered, read back dense by librdkafka;
- compression.type: each producer codec to each topic codec, read back by librdkafka,
  stored in the topic's codec; idempotent and transactional batches keep their producer
  fields.
"""

from __future__ import annotations

import struct
import time
import uuid

import crc32c
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from kaas.client import WireClient
from kaas.wire import batch as wb
from kaas.wire.compress import CODECS, compress
from tests.fixtures import broker_fixture
from tests.kafka import create_topic, txn_producer, uniq, watermarks

pytestmark = pytest.mark.slow

HOUR = 3_600_000
vbroker = broker_fixture(scope="module", name="validation", extra=["--retention-check-ms", "200"],
                         doc="One broker whose retention (and producer expiry) check runs every 200 ms.")


def now_ms() -> int:
    return int(time.time() * 1000)


def zz(n: int) -> bytes:
    return wb._varint(n)


def record(i: int, key: bytes | None, value: bytes | None, ts_delta: int, offset_delta: int | None = None) -> bytes:
    body = b"\x00" + zz(ts_delta) + zz(i if offset_delta is None else offset_delta)
    for part in (key, value):
        body += zz(-1) if part is None else zz(len(part)) + part
    body += zz(0)
    return zz(len(body)) + body


def batch(values: list[tuple[bytes | None, bytes | None, int]], *, base_ts: int, max_ts: int | None = None,
          codec: int = 0, count: int | None = None, last_delta: int | None = None, pid: int = -1, epoch: int = -1,
          seq: int = -1, attrs: int = 0, base_offset: int = 0, offsets: list[int] | None = None,
          tail: bytes = b"") -> bytes:
    """A v2 batch of (key, value, timestamp delta), built as a client would; the keyword
    arguments make it wrong in one way each."""
    plain = b"".join(record(i, k, v, d, None if offsets is None else offsets[i])
                     for i, (k, v, d) in enumerate(values)) + tail
    n = len(values) if count is None else count
    if max_ts is None:
        max_ts = base_ts + max(d for *_kv, d in values)
    body = compress(codec, plain)
    rest = struct.pack(">hiqqqhii", attrs | codec, n - 1 if last_delta is None else last_delta, base_ts, max_ts,
                       pid, epoch, seq, n) + body
    return struct.pack(">qiibI", base_offset, 9 + len(rest), -1, 2, crc32c.crc32c(rest)) + rest


def produce(wc: WireClient, topic: str, records: bytes, *, version: int = 9, txn_id: str | None = None,
            partition: int = 0):
    r = wc.call(0, version, {"transactional_id": txn_id, "acks": -1, "timeout": 10_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return r.responses[0].partition_responses[0]


def fetch_batches(wc: WireClient, topic: str, partition: int = 0) -> list[tuple[wb.BatchHeader, bytes]]:
    r = wc.call(1, 11, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 16 << 20,
                        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
                        "forgotten_topics_data": [], "topics": [{"topic": topic, "partitions": [
                            {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 16 << 20,
                             "current_leader_epoch": -1, "log_start_offset": -1}]}]})
    part = r.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none
    data = part.records or b""
    return [(h, data[pos:pos + h.size]) for pos, h in wb.iter_headers(data)]


def offset_for_time(wc: WireClient, topic: str, ts: int) -> int:
    r = wc.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}]}]})
    p = r.topics[0].partitions[0]
    assert p.error_code == ErrorCode.none
    return p.offset


def init_producer_id(wc: WireClient, txn_id: str | None = None) -> tuple[int, int]:
    r = wc.call(22, 4, {"transactional_id": txn_id, "transaction_timeout": 60_000,
                        "producer_id": -1, "producer_epoch": -1})
    assert r.error_code == ErrorCode.none
    return r.producer_id, r.producer_epoch


def rejected_lines(broker) -> int:
    return broker.log_text().count("produce_batch_rejected")


def consume(bootstrap: str, topic: str, expect: int, isolation: str = "read_uncommitted", timeout: float = 20.0):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"v-{uuid.uuid4()}", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expect and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                assert not m.error(), m.error()
                out.append(m)
    finally:
        c.close()
    return out


# ---------------------------------------------------------------------------------- Sarama 1.22

def test_sarama_batch_is_stored_with_its_true_max_timestamp_and_deduplicated_after_expiry_checks(vbroker):
    """Sarama 1.22 sends maxTimestamp -1 with good record timestamps (issue 31). Apache
    recomputes it; so does kaas now. With the true maximum the idempotent producer's state
    survives the retention (expiry) checks, so an identical retry is a duplicate."""
    topic = uniq("sarama")
    create_topic(vbroker.bootstrap, topic, 1)
    base = now_ms() - 5_000
    with WireClient("127.0.0.1", vbroker.port) as wc:
        pid, epoch = init_producer_id(wc)
        values = [(None, b"sarama-%d" % i, 10 * i) for i in range(5)]
        raw = batch(values, base_ts=base, max_ts=-1, pid=pid, epoch=epoch, seq=0)
        first = produce(wc, topic, raw, version=7)
        assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)

        [(h, stored)] = fetch_batches(wc, topic)
        assert h.max_timestamp == base + 40 and wb.crc_ok(stored, 0, h)
        assert (h.base_timestamp, h.producer_id, h.base_sequence, h.records_count) == (base, pid, 0, 5)

        assert 0 <= offset_for_time(wc, topic, base + 40) <= 4  # the batch holding the newest record
        assert offset_for_time(wc, topic, base + 41) == -1  # nothing newer: the max is the true one

        # the retry after the expiry checks have run (every 200 ms here; Apache's default
        # interval is 10 min and the issue saw 30 s): still a duplicate
        time.sleep(1.5)
        retry = produce(wc, topic, raw, version=7)
        assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 0)
    assert watermarks(vbroker.bootstrap, topic) == (0, 5)
    assert not [line for line in vbroker.log_text().splitlines() if "producer_state_expired" in line and topic in line]


# ---------------------------------------------------------------------------------- refusals

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # librdkafka's compression.type names


def _case(name: str, codec: int, now: int) -> tuple[bytes, int, list[int] | None]:
    """(records, Apache's error code, the record indexes Apache lists or None)."""
    vals = [(b"k%d" % i, b"v%d" % i, i) for i in range(4)]
    if name == "count_above_records":
        return batch(vals, base_ts=now, codec=codec, count=5, last_delta=4), ErrorCode.invalid_record, None
    if name == "count_below_records":
        return batch(vals, base_ts=now, codec=codec, count=3, last_delta=2), ErrorCode.invalid_record, None
    if name == "count_against_last_offset_delta":
        return batch(vals, base_ts=now, codec=codec, last_delta=7), ErrorCode.invalid_record, None
    if name == "bytes_after_the_last_record":
        return batch(vals, base_ts=now, codec=codec, tail=b"\x00\x00"), ErrorCode.invalid_record, None
    if name == "timestamp_after_bound":
        vals[2] = (b"k2", b"v2", 2 * HOUR)
        return batch(vals, base_ts=now, codec=codec), ErrorCode.invalid_timestamp, [2]
    if name == "timestamp_before_bound":  # the topic sets message.timestamp.before.max.ms=60000
        vals = [(b"k%d" % i, b"v%d" % i, 0 if i in (0, 3) else 10 * 60_000) for i in range(4)]
        return batch(vals, base_ts=now - 10 * 60_000, codec=codec), ErrorCode.invalid_timestamp, [0, 3]
    if name == "keyless_on_compacted_topic":
        vals[1] = (None, b"v1", 1)
        return batch(vals, base_ts=now, codec=codec), ErrorCode.invalid_record, [1]
    if name == "control_batch":
        return (batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", 0)], base_ts=now, codec=codec,
                      attrs=wb.ATTR_CONTROL), ErrorCode.invalid_record, None)
    if name == "base_offset_not_zero":
        return batch(vals, base_ts=now, codec=codec, base_offset=7), ErrorCode.invalid_record, None
    if name == "producer_log_append_time_flag_on_log_append_time_topic":
        return (batch(vals, base_ts=now, codec=codec, attrs=wb.ATTR_LOG_APPEND_TIME), ErrorCode.invalid_timestamp,
                [0, 1, 2, 3])
    raise AssertionError(name)


TOPIC_CONFIG = {"timestamp_before_bound": {"message.timestamp.before.max.ms": "60000"},
                "keyless_on_compacted_topic": {"cleanup.policy": "compact"},
                "producer_log_append_time_flag_on_log_append_time_topic": {"message.timestamp.type": "LogAppendTime"}}
CASES = ["count_above_records", "count_below_records", "count_against_last_offset_delta", "bytes_after_the_last_record",
         "timestamp_after_bound", "timestamp_before_bound", "keyless_on_compacted_topic", "control_batch",
         "base_offset_not_zero", "producer_log_append_time_flag_on_log_append_time_topic"]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("case", CASES)
def test_each_rule_is_answered_as_apache_and_appends_nothing(vbroker, case, codec):
    topic = uniq(f"rule-{case[:20]}")
    create_topic(vbroker.bootstrap, topic, 1, config=TOPIC_CONFIG.get(case, {}))
    with WireClient("127.0.0.1", vbroker.port) as wc:
        good = batch([(b"k", b"before", 0)], base_ts=now_ms())
        assert produce(wc, topic, good).error_code == ErrorCode.none
        before_lines = rejected_lines(vbroker)
        records, code, indexes = _case(case, CODEC_IDS[codec], now_ms())
        res = produce(wc, topic, records)
        assert res.error_code == code, (res.error_code, res.error_message)
        assert res.base_offset == -1 and res.error_message
        if indexes is not None:
            assert [e.batch_index for e in res.record_errors] == indexes
            assert all(e.batch_index_error_message for e in res.record_errors)
        else:
            assert res.record_errors == ()
        assert watermarks(vbroker.bootstrap, topic) == (0, 1)  # the log end offset did not move
        assert produce(wc, topic, batch([(b"k", b"after", 0)], base_ts=now_ms())).base_offset == 1
    deadline = time.monotonic() + 5
    while rejected_lines(vbroker) == before_lines and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rejected_lines(vbroker) == before_lines + 1  # one warning per refusal


def test_transactional_batch_without_transactional_id_refuses_the_whole_request(vbroker):
    """Apache refuses a Produce carrying a transactional batch and no transactional id
    before any partition: TRANSACTIONAL_ID_AUTHORIZATION_FAILED everywhere, nothing written."""
    topic = uniq("txn-no-id")
    create_topic(vbroker.bootstrap, topic, 2)
    now = now_ms()
    with WireClient("127.0.0.1", vbroker.port) as wc:
        pid, epoch = init_producer_id(wc)
        txn = batch([(b"k", b"t", 0)], base_ts=now, pid=pid, epoch=epoch, seq=0, attrs=wb.ATTR_TRANSACTIONAL)
        plain = batch([(b"k", b"p", 0)], base_ts=now)
        r = wc.call(0, 9, {"transactional_id": None, "acks": -1, "timeout": 10_000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": plain}, {"index": 1, "records": txn}]}]})
        codes = [p.error_code for p in r.responses[0].partition_responses]
        assert codes == [ErrorCode.transactional_id_authorization_failed] * 2
    assert watermarks(vbroker.bootstrap, topic, 0) == (0, 0)
    assert watermarks(vbroker.bootstrap, topic, 1) == (0, 0)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_transactional_batch_outside_a_transaction_is_invalid_txn_state(vbroker, codec):
    """KIP-890 part 1, as Apache (Produce v9): the partition is not in an ongoing
    transaction of this producer."""
    topic = uniq("txn-outside")
    create_topic(vbroker.bootstrap, topic, 1)
    txn_id = uniq("tid")
    with WireClient("127.0.0.1", vbroker.port) as wc:
        pid, epoch = init_producer_id(wc, txn_id)
        txn = batch([(b"k", b"t", 0)], base_ts=now_ms(), codec=CODEC_IDS[codec], pid=pid, epoch=epoch, seq=0,
                    attrs=wb.ATTR_TRANSACTIONAL)
        res = produce(wc, topic, txn, txn_id=txn_id)
        assert res.error_code == ErrorCode.invalid_txn_state
    assert watermarks(vbroker.bootstrap, topic) == (0, 0)


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4"])
def test_offset_deltas_out_of_order_are_renumbered_and_read_dense(vbroker, codec):
    """Apache rebuilds a batch whose inner offsets are not 0..n-1 (it does not refuse it);
    the stored batch reads back with dense offsets."""
    topic = uniq("offsets")
    create_topic(vbroker.bootstrap, topic, 1)
    vals = [(b"k%d" % i, b"v%d" % i, i) for i in range(5)]
    with WireClient("127.0.0.1", vbroker.port) as wc:
        res = produce(wc, topic, batch(vals, base_ts=now_ms(), codec=CODEC_IDS[codec], offsets=[0, 0, 0, 9, 1]))
        assert (res.error_code, res.base_offset) == (ErrorCode.none, 0)
    msgs = consume(vbroker.bootstrap, topic, 5)
    assert [(m.offset(), m.value()) for m in msgs] == [(i, b"v%d" % i) for i in range(5)]


# ---------------------------------------------------------------------------------- compression.type

TARGETS = ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]
SOURCES = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("target", TARGETS)
def test_compression_type_recompresses_every_producer_codec(vbroker, target):
    """For one topic codec, librdkafka producers in every codec (idempotent) write; a
    librdkafka consumer reads every record back; every stored batch is in the topic's codec
    (the producer's for ``producer``) and kept its producer id and sequence."""
    for source in SOURCES:
        topic = uniq(f"ct-{target}-{source}")
        create_topic(vbroker.bootstrap, topic, 1, config={"compression.type": target})
        p = Producer({"bootstrap.servers": vbroker.bootstrap, "compression.type": source, "linger.ms": 20,
                      "enable.idempotence": True, "batch.num.messages": 50})
        n = 200
        for i in range(n):
            p.produce(topic, key=b"k%d" % i, value=(b"value-%d-" % i) * 20, headers=[("i", b"%d" % i)], partition=0)
        assert p.flush(20) == 0
        msgs = consume(vbroker.bootstrap, topic, n)
        assert [(m.offset(), m.key(), m.value(), m.headers()) for m in msgs] == \
               [(i, b"k%d" % i, (b"value-%d-" % i) * 20, [("i", b"%d" % i)]) for i in range(n)]
        want = CODEC_IDS[source] if target == "producer" else CODECS[target]
        with WireClient("127.0.0.1", vbroker.port) as wc:
            stored = fetch_batches(wc, topic)
        assert len(stored) > 1
        seq = 0
        for h, raw in stored:
            assert h.codec == want and wb.crc_ok(raw, 0, h), (target, source, h)
            assert h.producer_id >= 0 and h.base_sequence == seq
            seq += h.records_count


@pytest.mark.parametrize("target", ["gzip", "zstd", "uncompressed"])
def test_compression_type_keeps_transactions(vbroker, target):
    """A transactional producer (lz4) to a recompressing topic: read_committed sees the
    committed records only; the stored data batches keep the transactional flag, producer id
    and epoch; the markers stay uncompressed control batches."""
    topic = uniq(f"ct-txn-{target}")
    create_topic(vbroker.bootstrap, topic, 1, config={"compression.type": target})
    p = txn_producer(vbroker.bootstrap, uniq("ct-tid"), **{"compression.type": "lz4", "linger.ms": 5})
    p.init_transactions(10)
    for commit in (True, False, True):
        p.begin_transaction()
        for i in range(30):
            p.produce(topic, value=b"%s-%d" % (b"c" if commit else b"a", i), partition=0)
        p.flush(10)
        (p.commit_transaction if commit else p.abort_transaction)(10)
    got = consume(vbroker.bootstrap, topic, 60, isolation="read_committed")
    assert [m.value() for m in got] == [b"c-%d" % i for i in range(30)] * 2
    with WireClient("127.0.0.1", vbroker.port) as wc:
        stored = fetch_batches(wc, topic)
    data = [h for h, _raw in stored if not h.is_control]
    markers = [h for h, _raw in stored if h.is_control]
    assert len(markers) == 3 and all(h.codec == 0 for h in markers)
    assert {(h.producer_id, h.producer_epoch, h.is_transactional, h.codec) for h in data} == \
           {(markers[0].producer_id, markers[0].producer_epoch, True, CODECS[target])}
