"""Bad input from raw sockets never kills the broker, loses data, or goes unlogged.

Every case runs against a fresh broker that already holds some data. After the case:
the process is alive, exactly one warning line about the case is in its log, a normal
confluent-kafka produce + fetch round trip works, and everything written before is still
readable at the same offsets.
"""

from __future__ import annotations

import datetime
import io
import random
import socket
import struct
import time
import uuid

import crc32c
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

pytestmark = pytest.mark.slow

TOPIC = "bad-input-data"


# ---------------------------------------------------------------------------- raw wire helpers


def connect(broker) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def header_v1(api_key: int, version: int, corr: int, client_id: bytes = b"bad-input") -> bytes:
    return struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id


def header_v2(api_key: int, version: int, corr: int, client_id: bytes = b"bad-input") -> bytes:
    return header_v1(api_key, version, corr, client_id) + b"\x00"  # no tagged fields


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def recv_frame(s: socket.socket) -> bytes:
    size = struct.unpack(">i", recv_exact(s, 4))[0]
    return recv_exact(s, size)


def assert_closed_by_broker(s: socket.socket, timeout: float = 5.0) -> None:
    """The broker closed the connection: EOF (or reset) without any response bytes."""
    s.settimeout(timeout)
    try:
        data = s.recv(65536)
    except ConnectionResetError:
        return
    except TimeoutError:
        raise AssertionError("broker kept the connection open") from None
    assert data == b"", f"expected the connection to be closed, got {data[:64]!r}"


def varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def record_batch(values: list[bytes], timestamp: int) -> bytes:
    """A plain (uncompressed, non-idempotent) magic-2 batch, written independently of kaas."""
    body = bytearray()
    for i, v in enumerate(values):
        rec = b"\x00" + varint(0) + varint(i) + varint(-1) + varint(len(v)) + v + varint(0)
        body += varint(len(rec)) + rec
    n = len(values)
    tail = struct.pack(">hiqqqhii", 0, n - 1, timestamp, timestamp, -1, -1, -1, n) + bytes(body)
    crc = crc32c.crc32c(tail)
    return struct.pack(">qiibI", 0, 4 + 1 + 4 + len(tail), -1, 2, crc) + tail


def produce_v9_frame(corr: int, topic: str, partition: int, records: bytes) -> bytes:
    """A framed Produce v9 request (flexible, request header v2) built with kio."""
    from kio.schema.produce.v9 import request as preq

    req = preq.ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
        topic_data=(preq.TopicProduceData(name=topic, partition_data=(
            preq.PartitionProduceData(index=partition, records=records),)),),
    )
    hdr_cls = preq.ProduceRequest.__header_schema__
    buf = io.BytesIO()
    entity_writer(hdr_cls)(buf, hdr_cls(request_api_key=0, request_api_version=9, correlation_id=corr,
                                        client_id="bad-input"))
    entity_writer(preq.ProduceRequest)(buf, req)
    return framed(buf.getvalue())


def produce_v9(s: socket.socket, corr: int, topic: str, partition: int, records: bytes):
    """Send Produce v9 and return the single partition response."""
    from kio.schema.produce.v9 import response as presp

    s.sendall(produce_v9_frame(corr, topic, partition, records))
    frame = recv_frame(s)
    rhdr, off = entity_reader(presp.ProduceResponse.__header_schema__)(frame, 0)
    assert rhdr.correlation_id == corr
    resp, _ = entity_reader(presp.ProduceResponse)(frame, off)
    (topic_resp,) = resp.responses
    assert topic_resp.name == topic
    (part_resp,) = topic_resp.partition_responses
    return part_resp


# ---------------------------------------------------------------------------- client helpers


def warnings(broker) -> list[str]:
    return [line for line in broker.log_text().splitlines() if "warning" in line.lower()]


def wait_new_warnings(broker, before: int, expect: int = 1, timeout: float = 5.0) -> list[str]:
    """Wait until at least ``expect`` new warning lines exist, then give stragglers a moment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(warnings(broker)) - before < expect:
        time.sleep(0.05)
    time.sleep(0.3)
    return warnings(broker)[before:]


def produce(broker, values: list[bytes]) -> list[tuple[int, bytes]]:
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 1})
    out: list[tuple[int, bytes]] = []

    def cb(err, msg):
        assert err is None, err
        out.append((msg.offset(), msg.value()))

    for v in values:
        p.produce(TOPIC, value=v, partition=0, on_delivery=cb)
    assert p.flush(15) == 0
    assert len(out) == len(values)
    return out


def read_all(broker, topic: str = TOPIC, timeout: float = 15.0) -> list[tuple[int, bytes]]:
    """Every record of partition 0 from offset 0 to the high watermark."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bad-input-{uuid.uuid4()}",
                  "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
    try:
        _lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        while (not out or out[-1][0] < hi - 1) and time.monotonic() < deadline:
            for m in c.consume(1000, 0.2):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.value()))
        assert hi == 0 or (out and out[-1][0] == hi - 1), f"read {len(out)} records, high watermark {hi}"
        return out
    finally:
        c.close()


@pytest.fixture
def seeded(broker):
    """The broker with a few records already written; returns (broker, written records)."""
    written = produce(broker, [f"before-{i}".encode() for i in range(20)])
    assert [o for o, _ in written] == list(range(20))
    assert warnings(broker) == []
    return broker, written


def check_after(broker, written, before_warnings: int, expect_in_warning: str) -> None:
    """The common post-conditions of every case."""
    assert broker.alive(), broker.log_text()[-3000:]
    new = wait_new_warnings(broker, before_warnings)
    assert len(new) == 1, f"expected exactly one warning, got {new}"
    assert expect_in_warning in new[0], new[0]
    assert "peer=127.0.0.1:" in new[0], new[0]
    after = produce(broker, [b"after-" + uuid.uuid4().bytes])
    got = read_all(broker)
    offsets = [o for o, _ in got]
    assert offsets == list(range(len(got))), "offsets are not dense"
    assert [r for r in got if r[0] < len(written)] == written  # nothing lost or changed
    assert after[0] in got
    assert broker.alive()
    # the round trip itself added no warning
    assert len(warnings(broker)) == before_warnings + 1, warnings(broker)[before_warnings:]


# ---------------------------------------------------------------------------- cases


def test_random_bytes(seeded):
    broker, written = seeded
    rng = random.Random(20240601)
    before = len(warnings(broker))
    s = connect(broker)
    # A size prefix far outside the accepted range, followed by noise.
    payload = b"\xa7\x13" + rng.randbytes(4094)
    s.sendall(payload)
    assert_closed_by_broker(s)
    s.close()
    check_after(broker, written, before, "connection_closed_bad_frame")


def test_many_random_payloads_one_warning_per_connection(seeded):
    """Seeded noise of random lengths, one connection each, the write side then shut."""
    broker, written = seeded
    rng = random.Random(1234)
    n = 40
    before = len(warnings(broker))
    for _ in range(n):
        s = connect(broker)
        s.sendall(rng.randbytes(rng.randint(1, 3000)))
        s.shutdown(socket.SHUT_WR)
        s.settimeout(5)
        try:
            while s.recv(65536):
                pass
        except ConnectionResetError:
            pass
        s.close()
    new = wait_new_warnings(broker, before, expect=n)
    assert len(new) == n, "\n".join(new)
    assert broker.alive()
    check_after(broker, written, before + n - 1, "")


def test_random_bytes_after_a_valid_size(seeded):
    """A plausible size followed by noise: the noise decodes to an unknown api key."""
    broker, written = seeded
    rng = random.Random(7)
    before = len(warnings(broker))
    s = connect(broker)
    body = struct.pack(">hhi", 0x7A5C, 3, 1) + rng.randbytes(500)
    s.sendall(framed(body))
    assert_closed_by_broker(s)
    s.close()
    check_after(broker, written, before, "unsupported api_key")


def test_oversized_length_prefix(seeded):
    broker, written = seeded
    before = len(warnings(broker))
    s = connect(broker)
    s.sendall(struct.pack(">i", 2**31 - 1) + b"\x00" * 64)
    assert_closed_by_broker(s)
    s.close()
    check_after(broker, written, before, "connection_closed_bad_frame")


def test_negative_length_prefix(seeded):
    broker, written = seeded
    before = len(warnings(broker))
    s = connect(broker)
    s.sendall(struct.pack(">i", -5) + header_v1(18, 0, 1))
    assert_closed_by_broker(s)
    s.close()
    check_after(broker, written, before, "connection_closed_bad_frame")


def test_truncated_frame_then_close(seeded):
    broker, written = seeded
    before = len(warnings(broker))
    s = connect(broker)
    hdr = header_v1(18, 0, 1)
    s.sendall(struct.pack(">i", len(hdr) + 100) + hdr)  # promises 100 more bytes than it sends
    time.sleep(0.2)
    s.close()
    check_after(broker, written, before, "connection_closed_truncated_frame")


def test_large_frame_truncated_then_close(seeded):
    """A Produce frame above the large-frame size (received into its own buffer) whose
    sender stops halfway: one warning, nothing appended."""
    broker, written = seeded
    before = len(warnings(broker))
    wire = produce_v9_frame(7, TOPIC, 0, record_batch([b"t" * 1000] * 200, int(time.time() * 1000)))
    assert len(wire) > 128 * 1024
    s = connect(broker)
    s.sendall(wire[: len(wire) // 2])
    time.sleep(0.2)
    s.close()
    check_after(broker, written, before, "connection_closed_truncated_frame")


def test_large_frame_in_small_pieces_is_appended_once(seeded):
    """A Produce frame above the large-frame size sent in 1,000-byte pieces (the broker
    receives the rest of it straight into the frame's buffer), with a small request
    pipelined right behind it: both are answered, in order, and the records are read back."""
    broker, _written = seeded
    values = [f"piece-{i}-".encode() + b"p" * 1000 for i in range(150)]
    wire = produce_v9_frame(11, TOPIC, 0, record_batch(values, int(time.time() * 1000)))
    assert len(wire) > 128 * 1024
    wire += framed(header_v1(18, 0, 12))  # ApiVersions v0 right behind it
    s = connect(broker)
    for i in range(0, len(wire), 1000):
        s.sendall(wire[i : i + 1000])
        if i % 50_000 == 0:
            time.sleep(0.01)
    from kio.schema.produce.v9 import response as presp

    frame = recv_frame(s)
    rhdr, off = entity_reader(presp.ProduceResponse.__header_schema__)(frame, 0)
    assert rhdr.correlation_id == 11
    resp, _ = entity_reader(presp.ProduceResponse)(frame, off)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.none
    second = recv_frame(s)
    assert struct.unpack_from(">i", second)[0] == 12
    s.close()
    got = read_all(broker)
    assert [v for o, v in got if o >= part.base_offset] == values
    assert broker.alive() and warnings(broker) == []


def test_unknown_api_key(seeded):
    broker, written = seeded
    before = len(warnings(broker))
    s = connect(broker)
    s.sendall(framed(header_v1(9999, 0, 42) + b"\x00" * 16))
    assert_closed_by_broker(s)
    s.close()
    check_after(broker, written, before, "unsupported api_key 9999")


def test_unsupported_version_of_known_api(seeded):
    broker, written = seeded
    before = len(warnings(broker))
    s = connect(broker)
    s.sendall(framed(header_v2(0, 99, 43) + b"\x00" * 32))
    assert_closed_by_broker(s)
    s.close()
    check_after(broker, written, before, "unsupported api_key 0 version 99")


def test_api_versions_too_new_gets_v0_error_35(seeded):
    broker, written = seeded
    before = len(warnings(broker))
    s = connect(broker)
    # v3+ requests use header v2; the body is never parsed, so garbage is fine.
    s.sendall(framed(header_v2(18, 99, 0x01020304) + b"\x07garbage\x00"))
    frame = recv_frame(s)
    # v0 layout: correlation id, error_code, api_keys[{key, min, max}] with int32 count, no throttle,
    # response header v0 (no tagged fields).
    assert len(frame) == 4 + 2 + 4 + 6, frame.hex()
    corr, err, n, key, lo, hi = struct.unpack(">ihihhh", frame)
    assert corr == 0x01020304
    assert err == ErrorCode.unsupported_version == 35
    assert n == 1
    assert (key, lo, hi) == (18, 0, 4)
    # The connection stays usable: ApiVersions v0 now succeeds.
    s.sendall(framed(header_v1(18, 0, 5)))
    frame = recv_frame(s)
    corr, err = struct.unpack_from(">ih", frame)
    assert (corr, err) == (5, 0)
    s.close()
    check_after(broker, written, before, "api_versions")


def test_malformed_produce_body(seeded):
    broker, written = seeded
    before = len(warnings(broker))
    s = connect(broker)
    # Produce v9 header, then a compact transactional_id length far beyond the frame.
    s.sendall(framed(header_v2(0, 9, 44) + b"\xff\xff\xff\xff\x0f" + b"\xee" * 40))
    s.settimeout(5)
    try:
        data = s.recv(65536)
    except ConnectionResetError:
        data = b""
    if data:  # an error answer is acceptable too, but then it must be an error
        size = struct.unpack_from(">i", data)[0]
        while len(data) < size + 4:
            data += recv_exact(s, size + 4 - len(data))
        assert struct.unpack_from(">i", data, 4)[0] == 44
        assert ErrorCode.corrupt_message.to_bytes(2, "big") in data[8:] or \
            ErrorCode.invalid_request.to_bytes(2, "big") in data[8:]
    s.close()
    check_after(broker, written, before, "malformed request")


def test_produce_with_bad_crc_is_corrupt_message_and_appends_nothing(seeded):
    broker, written = seeded
    before = len(warnings(broker))
    s = connect(broker)
    ts = int(time.time() * 1000)
    good = record_batch([b"raw-good-1", b"raw-good-2"], ts)
    ok = produce_v9(s, 1, TOPIC, 0, good)
    assert ok.error_code == ErrorCode.none, ok
    assert ok.base_offset == len(written)
    written = written + [(len(written), b"raw-good-1"), (len(written) + 1, b"raw-good-2")]
    assert warnings(broker)[before:] == []

    bad = bytearray(record_batch([b"raw-bad-1", b"raw-bad-2", b"raw-bad-3"], ts))
    bad[-3] ^= 0x5A  # inside the last record's value: covered by the CRC
    res = produce_v9(s, 2, TOPIC, 0, bytes(bad))
    assert res.error_code == ErrorCode.corrupt_message, res
    assert res.base_offset == -1
    s.close()

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm"})
    try:
        assert c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=5) == (0, len(written))
    finally:
        c.close()
    check_after(broker, written, before, "produce_batch_rejected")
    assert not any(b"raw-bad" in v for _, v in read_all(broker))


def test_requests_pipelined_after_a_protocol_error_are_not_executed(seeded):
    """Like Apache: the request before the bad frame is answered, nothing after it runs."""
    broker, written = seeded
    before = len(warnings(broker))
    s = connect(broker)
    s.sendall(framed(header_v1(18, 0, 1))  # ApiVersions v0: answered
              + framed(header_v1(9999, 0, 2) + b"\x00" * 8)  # unknown key: close here
              + produce_v9_frame(3, TOPIC, 0, record_batch([b"must-not-be-written"], int(time.time() * 1000))))
    frame = recv_frame(s)
    assert struct.unpack_from(">ih", frame) == (1, 0)
    assert_closed_by_broker(s)
    s.close()
    check_after(broker, written, before, "unsupported api_key 9999")
    assert not any(v == b"must-not-be-written" for _, v in read_all(broker))


def test_pipelined_responses_keep_request_order_around_a_long_poll(broker):
    """A quick request (answered in the reader task when nothing is in flight) pipelined
    behind a long-poll Fetch is answered after it, and a quick one before it at once."""
    from kio.schema.fetch.v4 import request as freq
    from kio.schema.types import BrokerId, TopicName

    produce(broker, [b"x"])
    hdr_cls = freq.FetchRequest.__header_schema__
    req = freq.FetchRequest(
        replica_id=BrokerId(-1), max_wait=datetime.timedelta(milliseconds=800), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0,
        topics=(freq.FetchTopic(topic=TopicName(TOPIC), partitions=(
            freq.FetchPartition(partition=0, fetch_offset=1, partition_max_bytes=1 << 20),)),))
    buf = io.BytesIO()
    entity_writer(hdr_cls)(buf, hdr_cls(request_api_key=1, request_api_version=4, correlation_id=2,
                                        client_id="order"))
    entity_writer(freq.FetchRequest)(buf, req)
    s = connect(broker)
    t0 = time.monotonic()
    s.sendall(framed(header_v1(18, 0, 1)) + framed(buf.getvalue()) + framed(header_v1(18, 0, 3)))
    got = []
    for _ in range(3):
        frame = recv_frame(s)
        got.append((struct.unpack_from(">i", frame)[0], round(time.monotonic() - t0, 2)))
    s.close()
    assert [corr for corr, _ in got] == [1, 2, 3], got
    assert got[2][1] >= 0.6, got  # the ApiVersions behind the long poll waited for it
    assert broker.alive()


def test_fetch_with_min_bytes_zero_answers_at_once(broker):
    """An edge value rather than bad input: min_bytes=0 means "do not wait" (Apache)."""
    from kio.schema.fetch.v4 import request as freq
    from kio.schema.types import BrokerId, TopicName

    produce(broker, [b"x"])
    s = connect(broker)
    hdr_cls = freq.FetchRequest.__header_schema__
    for corr, min_bytes, offset, max_s in ((1, 0, 1, 0.5), (2, 1, 0, 0.5), (3, 1, 1, None)):
        req = freq.FetchRequest(
            replica_id=BrokerId(-1), max_wait=datetime.timedelta(milliseconds=1500), min_bytes=min_bytes,
            max_bytes=1 << 20, isolation_level=0,
            topics=(freq.FetchTopic(topic=TopicName(TOPIC), partitions=(
                freq.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),)),))
        buf = io.BytesIO()
        entity_writer(hdr_cls)(buf, hdr_cls(request_api_key=1, request_api_version=4, correlation_id=corr,
                                            client_id="bad-input"))
        entity_writer(freq.FetchRequest)(buf, req)
        t0 = time.monotonic()
        s.sendall(framed(buf.getvalue()))
        frame = recv_frame(s)
        took = time.monotonic() - t0
        assert struct.unpack_from(">i", frame)[0] == corr
        if max_s is not None:
            assert took < max_s, (min_bytes, offset, took)
        else:  # nothing new and min_bytes=1: a long-poll up to max_wait
            assert took > 1.2, took
    s.close()
    assert broker.alive()
    assert warnings(broker) == []
