"""``wire.validate``: every LogValidator rule kaas applies to a produced batch, its
normalisation (maxTimestamp, offset deltas, recompression), and a property over batches
whose header fields are mutated, checked against a plain reference reading of the rules.

Client-built batches come from aiokafka's builder (its reader reads them back too)."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from kaas.wire import batch as wb
from kaas.wire import validate as wv
from kaas.wire.compress import compress
from kaas.wire.records import decompress

NOW = 1_700_000_000_000
HOUR = 3_600_000
POLICY = wv.Policy(max_size=1 << 20)
CODECS = [0, 1, 2, 3, 4]
INVALID_RECORD, CORRUPT = wb.INVALID_RECORD, wb.CORRUPT_MESSAGE
INVALID_TIMESTAMP = 32

Rec = tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]  # key, value, headers, ts delta


def _zz(n: int) -> bytes:
    return wb._varint(n)


def record_bytes(i: int, key, value, headers, ts_delta: int, offset_delta: int | None = None) -> bytes:
    body = bytearray(b"\x00") + _zz(ts_delta) + _zz(i if offset_delta is None else offset_delta)
    for part in (key, value):
        body += _zz(-1) if part is None else _zz(len(part)) + part
    body += _zz(len(headers))
    for hk, hv in headers:
        k = hk.encode()
        body += _zz(len(k)) + k + _zz(len(hv)) + hv
    return _zz(len(body)) + bytes(body)


def assemble(body: bytes, *, codec: int = 0, count: int, last_delta: int | None = None, base_ts: int = NOW,
             max_ts: int = NOW, pid: int = -1, epoch: int = -1, seq: int = -1, attrs: int = 0,
             base_offset: int = 0, fix_crc: bool = True) -> bytes:
    """A v2 batch around an already built (and compressed) records section."""
    tail = struct.pack(">hiqqqhii", attrs | codec, count - 1 if last_delta is None else last_delta, base_ts, max_ts,
                       pid, epoch, seq, count) + body
    crc = crc32c.crc32c(tail) if fix_crc else 0
    return struct.pack(">qiibI", base_offset, 9 + len(tail), -1, 2, crc) + tail


def batch(recs: list[Rec], *, codec: int = 0, offsets: list[int] | None = None, **kw) -> bytes:
    plain = b"".join(record_bytes(i, k, v, h, d, None if offsets is None else offsets[i])
                     for i, (k, v, h, d) in enumerate(recs))
    kw.setdefault("max_ts", kw.get("base_ts", NOW) + max(d for *_x, d in recs))
    return assemble(compress(codec, plain), codec=codec, count=len(recs), **kw)


def recrc(buf: bytes | bytearray) -> bytes:
    out = bytearray(buf)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def read_back(raw: bytes, create_time: bool = False) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    """(offset delta, timestamp, key, value, headers) per record: a plain reader
    (``create_time``: as if the LogAppendTime flag were clear)."""
    h = wb.parse_header(raw)
    assert wb.crc_ok(raw, 0, h)
    data = decompress(h.codec, raw[wb.HEADER_SIZE:h.size])
    out, p = [], 0
    for _ in range(h.records_count):
        length, q = wb.read_varint(data, p)
        r = q + 1
        d, r = wb.read_varint(data, r)
        off, r = wb.read_varint(data, r)
        fields = []
        for _x in range(2):
            n, r = wb.read_varint(data, r)
            fields.append(None if n < 0 else data[r:r + n])
            r += max(n, 0)
        nh, r = wb.read_varint(data, r)
        headers = []
        for _x in range(nh):
            n, r = wb.read_varint(data, r)
            hk = data[r:r + n].decode()
            r += n
            n, r = wb.read_varint(data, r)
            headers.append((hk, None if n < 0 else data[r:r + n]))
            r += max(n, 0)
        assert r == q + length
        ts = h.max_timestamp if h.attributes & wb.ATTR_LOG_APPEND_TIME and not create_time else h.base_timestamp + d
        out.append((off, ts, fields[0], fields[1], headers))
        p = q + length
    assert p == len(data)
    return out


def refused(raw: bytes, policy: wv.Policy = POLICY, now: int = NOW) -> wb.BatchError:
    with pytest.raises(wb.BatchError) as ei:
        wv.validate(raw, policy, now)
    return ei.value


RECS: list[Rec] = [(b"k0", b"v0", [], 0), (b"k1", b"v1" * 40, [("h", b"x")], 5), (None, b"v2", [], 3)]


# ------------------------------------------------------------------------------ accepted

@pytest.mark.parametrize("codec", CODECS)
def test_a_correct_batch_comes_back_untouched(codec):
    raw = batch(RECS, codec=codec)
    out, h = wv.validate(raw, POLICY, NOW)
    assert out is raw and h == wb.parse_header(raw)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("wrong", [-1, 0, NOW - 1, NOW + 10**9])
def test_max_timestamp_is_recomputed_and_the_crc_rewritten(codec, wrong):
    """Sarama 1.22 sends maxTimestamp -1: the stored header carries the records' maximum."""
    raw = batch(RECS, codec=codec, max_ts=wrong)
    out, h = wv.validate(raw, POLICY, NOW)
    assert h.max_timestamp == NOW + 5 and wb.crc_ok(out, 0, h)
    assert out[:17] == raw[:17] and out[21:35] == raw[21:35] and out[43:] == raw[43:]  # only max + CRC
    assert read_back(out) == read_back(raw)


def test_no_record_timestamp_gives_max_timestamp_minus_one():
    raw = batch([(b"k", b"v", [], 0)] * 3, base_ts=-1, max_ts=77)
    out, h = wv.validate(raw, wv.Policy(max_size=1 << 20, before_max_ms=0, after_max_ms=0), NOW)
    assert h.max_timestamp == -1  # -1 records are exempt from the bounds


@pytest.mark.parametrize("codec", CODECS)
def test_offset_deltas_out_of_order_are_renumbered(codec):
    """Apache rebuilds a batch whose inner offsets are not 0..n-1 rather than refusing it."""
    raw = batch(RECS, codec=codec, offsets=[0, 0, 7])
    out, h = wv.validate(raw, POLICY, NOW)
    assert h.codec == codec and h.records_count == 3 and wb.crc_ok(out, 0, h)
    got = read_back(out)
    assert [r[0] for r in got] == [0, 1, 2]
    assert [r[1:] for r in got] == [r[1:] for r in read_back(raw)]


def test_producer_log_append_time_flag_is_cleared_on_a_create_time_topic():
    """As Apache: the records' timestamps were the header's maxTimestamp; the flag goes."""
    raw = batch(RECS, attrs=wb.ATTR_LOG_APPEND_TIME, max_ts=NOW - 10)
    out, h = wv.validate(raw, POLICY, NOW)
    assert not h.attributes & wb.ATTR_LOG_APPEND_TIME and h.max_timestamp == NOW - 10 and wb.crc_ok(out, 0, h)


# ------------------------------------------------------------------------------ refused

@pytest.mark.parametrize("codec", CODECS)
def test_fewer_records_than_the_count_is_invalid_record(codec):
    plain = b"".join(record_bytes(i, b"k", b"v", [], 0) for i in range(2))
    raw = assemble(compress(codec, plain), codec=codec, count=3)
    assert refused(raw).code == INVALID_RECORD


@pytest.mark.parametrize("codec", CODECS)
def test_more_records_than_the_count_is_invalid_record(codec):
    plain = b"".join(record_bytes(i, b"k", b"v", [], 0) for i in range(3))
    raw = assemble(compress(codec, plain), codec=codec, count=2)
    assert refused(raw).code == INVALID_RECORD


def test_count_against_last_offset_delta_is_invalid_record():
    raw = batch(RECS, last_delta=5)
    assert refused(raw).code == INVALID_RECORD


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("delta", [-2, -1, 1, 3])
def test_a_record_length_that_disagrees_is_invalid_record(codec, delta):
    rec = bytearray(record_bytes(0, b"key", b"value", [], 0))
    rec[0] = (len(rec) - 1 + delta) << 1  # a one-byte varint length, off by delta
    plain = bytes(rec) + record_bytes(1, b"k", b"v", [], 0)
    raw = assemble(compress(codec, plain), codec=codec, count=2)
    assert refused(raw).code == INVALID_RECORD


BAD_FIELDS = [  # records whose total length is right but whose fields do not add up to it
    b"\x00" + _zz(0) + _zz(0) + _zz(1) + b"k" + _zz(1) + b"v" + _zz(1) + _zz(-1) + _zz(0),  # header key -1
    b"\x00" + _zz(0) + _zz(0) + _zz(3) + b"k" + _zz(1) + b"v" + _zz(0),  # key longer than its record
    b"\x00" + _zz(0) + _zz(0) + _zz(1) + b"k" + _zz(1) + b"v" + _zz(0) + b"\x00",  # a byte after the headers
]


@pytest.mark.parametrize("body", BAD_FIELDS)
@pytest.mark.parametrize(("codec", "compact"), [(1, False), (2, False), (3, False), (4, False), (0, True)])
def test_fields_that_do_not_add_up_are_invalid_record_when_read(body, codec, compact):
    """Compressed batches and compacted topics read every field of every record."""
    raw = assemble(compress(codec, _zz(len(body)) + body), codec=codec, count=1)
    assert refused(raw, wv.Policy(max_size=1 << 20, compact=compact)).code == INVALID_RECORD


@pytest.mark.parametrize("body", BAD_FIELDS)
def test_the_uncompressed_hot_path_reads_record_bounds_not_fields(body):
    """The cost trade-off of docs/validation.rst: an uncompressed batch on a topic that is
    not compacted has its records' bounds, count, timestamps and offset deltas checked, not
    the key, value and header lengths inside each record (Apache reads those too)."""
    raw = assemble(_zz(len(body)) + body, count=1)
    out, _h = wv.validate(raw, POLICY, NOW)
    assert out is raw


def test_base_offset_other_than_zero_is_invalid_record():
    assert refused(batch(RECS, base_offset=5)).code == INVALID_RECORD


def test_control_batch_from_a_client_is_invalid_record():
    raw = batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [], 0)], attrs=wb.ATTR_CONTROL | 0x10,
                pid=1, epoch=0, seq=-1)
    assert refused(raw).code == INVALID_RECORD


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(("offset", "bad"), [(-HOUR - 1, False), (HOUR + 1, True), (HOUR, False), (-10**12, False)])
def test_timestamp_after_bound_default_one_hour(codec, offset, bad):
    """Kafka 4's defaults: after.max.ms one hour, before.max.ms unbounded."""
    recs = [(b"k", b"v", [], 0), (b"k", b"v", [], offset), (b"k", b"v", [], 0)]
    raw = batch(recs, codec=codec)
    if not bad:
        wv.validate(raw, POLICY, NOW)
        return
    e = refused(raw)
    assert isinstance(e, wv.Rejected) and e.code == INVALID_TIMESTAMP
    assert [i for i, _m in e.record_errors] == [1] and str(NOW + offset) in e.record_errors[0][1]


@pytest.mark.parametrize("codec", CODECS)
def test_timestamp_before_bound_lists_every_offending_record(codec):
    policy = wv.Policy(max_size=1 << 20, before_max_ms=1000, after_max_ms=1000)
    recs = [(b"k", b"v", [], -5000), (b"k", b"v", [], 0), (b"k", b"v", [], 999), (b"k", b"v", [], 1001)]
    e = refused(batch(recs, codec=codec), policy)
    assert e.code == INVALID_TIMESTAMP and [i for i, _m in e.record_errors] == [0, 3]


def test_timestamp_minus_one_is_exempt_and_log_append_time_topics_are_unbounded():
    strict = wv.Policy(max_size=1 << 20, before_max_ms=0, after_max_ms=0)
    wv.validate(batch([(b"k", b"v", [], 0)], base_ts=-1), strict, NOW)
    lat = wv.Policy(max_size=1 << 20, log_append_time=True, before_max_ms=0, after_max_ms=0)
    raw = batch([(b"k", b"v", [], 0)], base_ts=NOW + 10**9)
    out, _h = wv.validate(raw, lat, NOW)
    assert out is raw  # stamped at append, not here


def test_producer_log_append_time_flag_on_a_log_append_time_topic_is_invalid_timestamp():
    lat = wv.Policy(max_size=1 << 20, log_append_time=True)
    e = refused(batch(RECS, attrs=wb.ATTR_LOG_APPEND_TIME), lat)
    assert e.code == INVALID_TIMESTAMP and [i for i, _m in e.record_errors] == [0, 1, 2]


def test_producer_log_append_time_flag_with_max_out_of_bounds_is_invalid_timestamp():
    e = refused(batch(RECS, attrs=wb.ATTR_LOG_APPEND_TIME, max_ts=NOW + 2 * HOUR))
    assert e.code == INVALID_TIMESTAMP and len(e.record_errors) == 3


@pytest.mark.parametrize("codec", CODECS)
def test_compacted_topic_refuses_keyless_records_with_their_indexes(codec):
    compact = wv.Policy(max_size=1 << 20, compact=True)
    recs = [(None, b"v", [], 0), (b"k", b"v", [], 0), (None, None, [], 0)]
    e = refused(batch(recs, codec=codec), compact)
    assert e.code == INVALID_RECORD and [i for i, _m in e.record_errors] == [0, 2]
    wv.validate(batch([(b"k", None, [], 0)], codec=codec), compact, NOW)  # a tombstone with a key is fine


def test_key_error_wins_over_a_timestamp_error_on_the_same_record_but_invalid_timestamp_names_the_batch():
    """Apache reports one error per record (the key first) and answers INVALID_TIMESTAMP
    when any record's error is a timestamp one."""
    compact = wv.Policy(max_size=1 << 20, compact=True)
    recs = [(None, b"v", [], 2 * HOUR), (b"k", b"v", [], 2 * HOUR)]
    e = refused(batch(recs), compact)
    assert e.code == INVALID_TIMESTAMP
    assert [(i, "key" in m) for i, m in e.record_errors] == [(0, True), (1, False)]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_payload_that_does_not_decompress_is_corrupt_message(codec):
    plain = b"".join(record_bytes(i, b"k", b"v" * 100, [], 0) for i in range(3))
    body = bytearray(compress(codec, plain))
    body[len(body) // 2] ^= 0xFF
    body[-2] ^= 0x55
    raw = assemble(bytes(body), codec=codec, count=3)  # a good CRC over a broken stream
    try:
        out, _h = wv.validate(raw, POLICY, NOW)
    except wb.BatchError as exc:
        assert exc.code in (CORRUPT, INVALID_RECORD)
    else:  # a flip the codec cannot see (snappy has no checksum) must still read back whole
        assert len(read_back(out)) == 3


def test_unknown_codec_is_corrupt_message():
    raw = assemble(b"whatever", codec=5, count=1)
    assert refused(raw).code == CORRUPT


def test_snappy_raw_and_xerial_inputs_both_validate():
    import cramjam

    plain = b"".join(record_bytes(i, b"k", b"v", [], 0) for i in range(4))
    raw_snappy = bytes(cramjam.snappy.compress_raw(plain))
    for body in (raw_snappy, compress(2, plain)):
        out, h = wv.validate(assemble(body, codec=2, count=4), POLICY, NOW)
        assert h.records_count == 4


# ------------------------------------------------------------------------------ compression.type

@pytest.mark.parametrize("source", CODECS)
@pytest.mark.parametrize("target", CODECS)
def test_recompression_to_the_topic_codec_keeps_records_and_producer_fields(source, target):
    recs = [(b"k%d" % i, b"value-%d" % i * 30, [("h", b"%d" % i)], i) for i in range(50)]
    raw = batch(recs, codec=source, pid=42, epoch=3, seq=1000, attrs=wb.ATTR_TRANSACTIONAL)
    out, h = wv.validate(raw, wv.Policy(max_size=1 << 20, codec=target), NOW)
    if source == target:
        assert out is raw
    assert h.codec == target and wb.crc_ok(out, 0, h)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) == (42, 3, 1000, True)
    assert (h.records_count, h.last_offset_delta, h.max_timestamp) == (50, 49, NOW + 49)
    assert read_back(out) == read_back(raw)


@pytest.mark.parametrize(("codec", "level"), [(1, 1), (1, 9), (3, 1), (3, 12), (4, 1), (4, 19), (4, -5)])
def test_compression_levels(codec, level):
    recs = [(b"k", b"abcdefgh" * 200, [], 0)] * 20
    out, h = wv.validate(batch(recs), wv.Policy(max_size=1 << 20, codec=codec, level=level), NOW)
    assert h.codec == codec and read_back(out) == read_back(batch(recs))


def test_recompressed_batch_above_max_message_bytes_is_message_too_large():
    import os

    recs = [(b"k", os.urandom(3000), [], 0)]
    raw = batch(recs)  # random bytes: gzip's framing only adds to them
    e = refused(raw, wv.Policy(max_size=len(raw), codec=1))
    assert e.code == 10


def test_client_batches_read_back_through_aiokafka():
    """A batch from a real client's builder, recompressed to each codec, read by its reader."""
    from aiokafka.record import default_records as aio
    b = aio.DefaultRecordBatchBuilder(2, 1, False, 7, 0, 0, 1 << 20)
    for i in range(20):
        b.append(i, NOW + i, b"k%d" % i, b"v%d" % i * 10, [("h", b"x")])
    raw = bytes(b.build())
    for target in CODECS:
        out, _h = wv.validate(raw, wv.Policy(max_size=1 << 20, codec=target), NOW)
        got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in aio.DefaultRecordBatch(out)]
        assert got == [(i, NOW + i, b"k%d" % i, b"v%d" % i * 10, [("h", b"x")]) for i in range(20)]


# ------------------------------------------------------------------------------ the property

def reference(raw: bytes, policy: wv.Policy, now: int) -> int | None:
    """The error code Apache's rules give ``raw`` (None: accepted), read plainly."""
    try:
        h = wb.validate_produce(raw, policy.max_size)
    except wb.BatchError as exc:
        return exc.code
    if h.base_offset != 0:
        return INVALID_RECORD
    try:
        data = decompress(h.codec, raw[wb.HEADER_SIZE:])
    except Exception:  # noqa: BLE001
        return CORRUPT
    p, recs = 0, []
    fields = bool(h.codec or policy.compact)  # the hot path reads bounds, not fields
    try:
        for _ in range(h.records_count):
            length, q = wb.read_varint(data, p)
            end = q + length
            if length < 6 or end > len(data):
                return INVALID_RECORD
            r = q + 1
            d, r = wb.read_varint(data, r)
            _off, r = wb.read_varint(data, r)
            if not fields:
                recs.append((True, d))
                p = end
                continue
            k, r = wb.read_varint(data, r)
            r += max(k, 0)
            v, r = wb.read_varint(data, r)
            r += max(v, 0)
            nh, r = wb.read_varint(data, r)
            if nh < 0:
                return INVALID_RECORD
            for _x in range(nh):
                hk, r = wb.read_varint(data, r)
                if hk < 0:
                    return INVALID_RECORD
                r += hk
                hv, r = wb.read_varint(data, r)
                r += max(hv, 0)
            if r != end:
                return INVALID_RECORD
            recs.append((k >= 0, d))
            p = end
    except (IndexError, ValueError):
        return INVALID_RECORD
    if p != len(data):
        return INVALID_RECORD
    lat_flag = bool(h.attributes & wb.ATTR_LOG_APPEND_TIME)
    codes = []
    for has_key, d in recs:
        if policy.compact and not has_key:
            codes.append(INVALID_RECORD)
            continue
        ts = wv._wrap(h.max_timestamp if lat_flag else h.base_timestamp + d)
        if not policy.log_append_time and ts != -1:
            if wv._out_of_bounds(ts, now, policy.before_max_ms, policy.after_max_ms):
                codes.append(INVALID_TIMESTAMP)
        elif lat_flag:
            codes.append(INVALID_TIMESTAMP)
    if codes:
        return INVALID_TIMESTAMP if INVALID_TIMESTAMP in codes else INVALID_RECORD
    return None


FIELDS = {  # header field -> (struct offset, format)
    "base_offset": (0, ">q"), "batch_length": (8, ">i"), "magic": (16, ">b"), "attributes": (21, ">h"),
    "last_offset_delta": (23, ">i"), "base_timestamp": (27, ">q"), "max_timestamp": (35, ">q"),
    "producer_id": (43, ">q"), "producer_epoch": (51, ">h"), "base_sequence": (53, ">i"), "records_count": (57, ">i"),
}
_BOUND = {"q": 63, "i": 31, "h": 15, "b": 7}


@st.composite
def mutation(draw):
    name = draw(st.sampled_from(sorted(FIELDS)))
    _at, fmt = FIELDS[name]
    bits = _BOUND[fmt[-1]]
    if name == "attributes":
        value = draw(st.integers(0, 0x3F))
    elif name in ("base_timestamp", "max_timestamp"):
        value = draw(st.sampled_from([-1, 0, NOW, NOW - 2 * HOUR, NOW + 2 * HOUR, 2**62, -(2**63), 2**63 - 1])
                     | st.integers(-(2**63), 2**63 - 1))
    else:
        value = draw(st.sampled_from([-1, 0, 1, 2, 3, 100]) | st.integers(-(2**bits), 2**bits - 1))
    return name, value


records_st = st.lists(st.tuples(st.none() | st.binary(max_size=12), st.none() | st.binary(max_size=40),
                                st.lists(st.tuples(st.text(max_size=4), st.binary(max_size=6)), max_size=2),
                                st.integers(-3 * HOUR, 3 * HOUR) | st.integers(-5, 5)),
                      min_size=1, max_size=8)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recs=records_st, codec=st.sampled_from(CODECS), mutations=st.lists(mutation(), max_size=3),
       fix_crc=st.booleans(), target=st.sampled_from([-1, *CODECS]), compact=st.booleans(),
       lat=st.booleans(), offsets_scrambled=st.booleans())
@example(recs=[(None, None, [], 0), (None, None, [], 1)], codec=0, mutations=[("attributes", 8)], fix_crc=True,
         target=-1, compact=False, lat=False, offsets_scrambled=False)  # the producer's LogAppendTime flag
def test_mutated_headers_are_refused_as_the_rules_say_or_normalised(recs, codec, mutations, fix_crc, target, compact,
                                                                  lat, offsets_scrambled):
    offsets = [0] * len(recs) if offsets_scrambled else None
    buf = bytearray(batch(recs, codec=codec, offsets=offsets, pid=5, epoch=1, seq=0))
    for name, value in mutations:
        at, fmt = FIELDS[name]
        struct.pack_into(fmt, buf, at, value)
    raw = recrc(buf) if fix_crc else bytes(buf)
    assume(fix_crc or mutations)
    policy = wv.Policy(max_size=1 << 20, compact=compact, log_append_time=lat, codec=target)
    expected = reference(raw, policy, NOW)
    try:
        out, h = wv.validate(raw, policy, NOW)
    except wb.BatchError as exc:
        assert exc.code == expected, (exc.code, exc.reason, expected)
        if exc.code == INVALID_TIMESTAMP:  # per record, always with the records' indexes
            assert isinstance(exc, wv.Rejected) and exc.record_errors
        for i, _m in getattr(exc, "record_errors", []):
            assert 0 <= i < len(recs)
        return
    assert expected is None, expected
    h0 = wb.parse_header(raw)
    assert h == wb.parse_header(out) and wb.crc_ok(out, 0, h) and h.size == len(out)
    assert h.codec == (h0.codec if target < 0 else target)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count, h.last_offset_delta) == \
           (h0.producer_id, h0.producer_epoch, h0.base_sequence, h0.records_count, h0.last_offset_delta)
    got, before = read_back(out), read_back(raw)
    assert [r[0] for r in got] == list(range(h.records_count))
    assert [r[2:] for r in got] == [r[2:] for r in before]  # keys, values, headers
    if not lat:
        assert not h.attributes & wb.ATTR_LOG_APPEND_TIME
        # timestamps as the producer meant them; a LogAppendTime flag the producer set is
        # cleared on a CreateTime topic, as Apache's in-place validation clears it, and the
        # records then read as base + delta
        assert [r[1] for r in got] == [r[1] for r in read_back(raw, create_time=True)]
        assert h.max_timestamp == max(-1, *(wv._wrap(t) for t in (r[1] for r in before)))
    elif h.attributes == h0.attributes and h.codec == h0.codec and [r[0] for r in before] == [r[0] for r in got]:
        assert out == raw  # LogAppendTime topics are stamped at append, not here
