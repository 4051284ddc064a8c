"""The record view of a v2 batch against an independent builder and reader (aiokafka's),
for every codec: keys, tombstones and offsets read right, and a rebuilt batch with a subset
of the records reads back those records at the same offsets and timestamps."""

from __future__ import annotations

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import given
from hypothesis import strategies as st

from kaas.wire import batch as wb
from kaas.wire import records as wr

_blob = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=60, max_size=9000))
_record = st.tuples(_blob, _blob, st.integers(0, 5000))


def _build(recs, codec: int, txn: bool = False) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=txn, producer_id=7 if txn else -1,
                                  producer_epoch=0 if txn else -1, base_sequence=0 if txn else -1,
                                  batch_size=1 << 22)
    for i, (key, value, dts) in enumerate(recs):
        b.append(i, timestamp=1_000_000 + dts, key=key, value=value, headers=[])
    buf = bytearray(b.build())
    wb.patch(buf, 0, 500, 3)  # base offset and leader epoch as the log stamps them
    return bytes(buf)


def _read(buf: bytes):
    batch = DefaultRecordBatch(buf)
    assert batch.validate_crc()
    return batch, [(r.offset, r.key, r.value, r.timestamp) for r in batch]


@given(recs=st.lists(_record, min_size=1, max_size=12), codec=st.sampled_from([0, 1, 2, 3, 4]),
       keep=st.lists(st.booleans(), min_size=12, max_size=12), txn=st.booleans())
def test_records_and_rebuild_match_an_independent_reader(recs, codec, keep, txn):
    buf = _build(recs, codec, txn)
    h = wb.parse_header(buf)
    parsed = wr.records(buf, h)
    assert [(r.offset_delta, r.key, r.tombstone) for r in parsed] == \
        [(i, k, v is None) for i, (k, v, _) in enumerate(recs)]
    assert wr.has_null_key(buf, h) == any(k is None for k, _, _ in recs)
    _, original = _read(buf)
    kept = [r for r, k in zip(parsed, keep) if k]
    out = wr.rebuild(buf, h, kept)
    nh = wb.parse_header(out)
    assert wb.crc_ok(out, 0, nh) and nh.size == len(out)
    assert (nh.base_offset, nh.last_offset_delta, nh.base_timestamp, nh.max_timestamp, nh.producer_id,
            nh.is_transactional, nh.codec, nh.records_count) == \
        (500, h.last_offset_delta, h.base_timestamp, h.max_timestamp, h.producer_id, txn, 0, len(kept))
    if kept:
        batch, got = _read(out)
        assert got == [o for o, k in zip(original, keep) if k]
        assert batch.base_offset == 500


def test_xerial_framed_snappy_is_read():
    import cramjam

    inner = _build([(b"k", b"v", 0), (b"k2", None, 1)], 0)
    h = wb.parse_header(inner)
    body = inner[wb.HEADER_SIZE:]
    block = bytes(cramjam.snappy.compress_raw(body))
    framed = b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01\x00\x00\x00\x01" + len(block).to_bytes(4, "big") + block
    tail = bytearray(inner[wb.CRC_START:wb.HEADER_SIZE]) + framed
    tail[0:2] = (h.attributes | 2).to_bytes(2, "big")
    import struct

    import crc32c

    buf = struct.pack(">qiibI", 0, 9 + len(tail), -1, 2, crc32c.crc32c(bytes(tail))) + bytes(tail)
    got = wr.records(buf)
    assert [(r.key, r.tombstone) for r in got] == [(b"k", False), (b"k2", True)]


def test_corrupt_records_raise():
    buf = bytearray(_build([(b"k", b"v", 0)], 0))
    h = wb.parse_header(buf)
    buf[wb.HEADER_SIZE] = 0x7F  # a record length far past the batch
    try:
        wr.records(bytes(buf), h)
    except wr.RecordsError:
        pass
    else:
        raise AssertionError("corrupt record length accepted")


def _build_ts(stamps: list[int], codec: int, offsets: list[int] | None = None) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 22)
    for i, ts in enumerate(stamps):
        b.append(offsets[i] if offsets else i, timestamp=ts, key=b"k%d" % i, value=b"v" * (i * 37 % 200),
                 headers=[])
    buf = bytearray(b.build())
    wb.patch(buf, 0, 900, 1)
    return bytes(buf)


_stamp = st.one_of(st.integers(1_700_000_000_000 - 10**7, 1_700_000_000_000 + 10**7),
                   st.integers(0, 2**40), st.integers(1_700_000_000_000, 1_700_000_000_300))


@given(stamps=st.lists(_stamp, min_size=1, max_size=20), codec=st.sampled_from([0, 1, 2, 3, 4]),
       gaps=st.lists(st.integers(1, 300), min_size=20, max_size=20))
def test_timestamps_match_an_independent_reader(stamps, codec, gaps):
    """Per-record (offset delta, timestamp) for every codec, with deltas of every varint
    width (negative ones too: a batch's records need not be in time order) and offset
    gaps (a cleaned batch), against aiokafka's reader; the true max is their max."""
    offsets = [sum(gaps[:i]) for i in range(len(stamps))]
    buf = _build_ts(stamps, codec, offsets)
    h = wb.parse_header(buf)
    _, recs = _read(buf)
    want = [(off - 900, ts) for off, _, _, ts in recs]
    assert wr.timestamps(buf, h) == want == [(o, t) for o, t in zip(offsets, stamps)]
    assert wr.max_timestamp(buf) == max(stamps)


@given(stamps=st.lists(_stamp, min_size=1, max_size=8), codec=st.sampled_from([0, 3]), dense=st.booleans())
def test_timestamps_of_a_log_append_time_batch_are_its_max(stamps, codec, dense):
    offsets = list(range(len(stamps))) if dense else [2 * i for i in range(len(stamps))]
    buf = wb.stamp_log_append_time(_build_ts(stamps, codec, offsets), 123_456)
    h = wb.parse_header(buf)
    assert wr.timestamps(buf, h) == [(o, 123_456) for o in offsets]
    assert wr.max_timestamp(buf, h) == 123_456


def test_timestamps_of_a_corrupt_batch_raise():
    buf = bytearray(_build_ts([5, 6], 0))
    buf[wb.HEADER_SIZE] = 0x7F
    try:
        wr.timestamps(bytes(buf))
    except wr.RecordsError:
        pass
    else:
        raise AssertionError("corrupt record length accepted")
