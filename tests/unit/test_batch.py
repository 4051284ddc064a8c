"""Record batch v2 header view: parse vs build, validation codes, patching, control markers,
and a cross-check against a real client's record builder (aiokafka / kafka-python)."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaas.wire import batch as wb

I16 = st.integers(min_value=-(2**15), max_value=2**15 - 1)
I32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TS = st.integers(min_value=-1, max_value=2**62)
records_st = st.lists(
    st.tuples(st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=60)),
    min_size=1,
    max_size=8,
)


def _recrc(buf: bytearray) -> bytearray:
    """Recompute the CRC after a header edit (so only the edit under test is wrong)."""
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[wb.CRC_START:])))
    return buf


def _good(**kw) -> bytes:
    kw.setdefault("records", [(b"k", b"v")])
    return wb.build_batch(**kw)


def _code(records: bytes, max_size: int = 1 << 20) -> int:
    with pytest.raises(wb.BatchError) as ei:
        wb.validate_produce(records, max_size)
    return ei.value.code


# --------------------------------------------------------------------- parse vs build


@settings(deadline=None)
@given(
    base_offset=I64,
    leader_epoch=I32,
    attributes=st.sampled_from([0, wb.ATTR_TRANSACTIONAL, wb.ATTR_LOG_APPEND_TIME]),
    base_timestamp=TS,
    ts_extra=st.integers(min_value=0, max_value=10_000),
    producer_id=st.integers(min_value=-1, max_value=2**63 - 1),
    producer_epoch=I16,
    base_sequence=st.integers(min_value=-1, max_value=2**31 - 1),
    records=records_st,
)
def test_parse_header_matches_build_batch(
    base_offset, leader_epoch, attributes, base_timestamp, ts_extra, producer_id,
    producer_epoch, base_sequence, records,
):
    max_ts = base_timestamp + ts_extra
    raw = wb.build_batch(
        base_offset=base_offset, leader_epoch=leader_epoch, attributes=attributes,
        base_timestamp=base_timestamp, max_timestamp=max_ts, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, records=records,
    )
    h = wb.parse_header(raw)
    assert h.base_offset == base_offset
    assert h.leader_epoch == leader_epoch
    assert h.magic == 2
    assert h.attributes == attributes
    assert h.base_timestamp == base_timestamp
    assert h.max_timestamp == max_ts
    assert h.producer_id == producer_id
    assert h.producer_epoch == producer_epoch
    assert h.base_sequence == base_sequence
    assert h.records_count == len(records)
    assert h.last_offset_delta == len(records) - 1
    assert h.size == len(raw)
    assert h.next_offset == base_offset + len(records)
    assert h.is_transactional == bool(attributes & wb.ATTR_TRANSACTIONAL)
    assert not h.is_control
    assert h.codec == 0
    assert wb.crc_ok(raw, 0, h)
    # and the reference view agrees at a non-zero position too
    pre = b"\xee" * 7
    assert wb.parse_header(pre + raw, len(pre)) == h
    assert wb.crc_ok(pre + raw, len(pre), h)


def test_parse_header_truncated_raises_corrupt():
    raw = _good()
    with pytest.raises(wb.BatchError) as ei:
        wb.parse_header(raw[: wb.HEADER_SIZE - 1])
    assert ei.value.code == wb.CORRUPT_MESSAGE


def test_last_sequence_wraps():
    raw = _good(producer_id=1, producer_epoch=0, base_sequence=2**31 - 2,
                records=[(None, b"a")] * 4)
    assert wb.parse_header(raw).last_sequence == 1
    assert wb.parse_header(_good()).last_sequence == -1


# --------------------------------------------------------------------- validate_produce


def test_good_batch_accepted():
    raw = _good(producer_id=7, producer_epoch=1, base_sequence=0, records=[(b"k", b"v")] * 3)
    h = wb.validate_produce(raw, 1 << 20)
    assert h == wb.parse_header(raw)
    assert h.records_count == 3


def test_good_non_idempotent_batch_accepted():
    assert wb.validate_produce(_good(), 1 << 20).producer_id == -1


def test_wrong_crc_is_corrupt():
    raw = bytearray(_good())
    raw[-1] ^= 0xFF
    assert _code(bytes(raw)) == wb.CORRUPT_MESSAGE
    raw = bytearray(_good())
    raw[17] ^= 0x01  # the CRC field itself
    assert _code(bytes(raw)) == wb.CORRUPT_MESSAGE


@pytest.mark.parametrize("cut", [1, 10, 20])
def test_truncated_batch_is_invalid_record(cut):
    # Apache finds no whole batch in the records, and Produce v3+ needs one: 87, not 2.
    raw = _good(records=[(b"k", b"v" * 40)])
    assert _code(raw[:-cut]) == wb.INVALID_RECORD


@given(st.integers(min_value=0))
def test_every_strict_prefix_of_a_batch_is_refused_as_apache_does(cut):
    raw = _good(records=[(b"k", b"v" * 40)] * 2)
    n = cut % len(raw)
    assert _code(raw[:n]) == wb.INVALID_RECORD


def test_shorter_than_header_is_corrupt_only_when_whole():
    assert _code(_good()[: wb.HEADER_SIZE - 1]) == wb.INVALID_RECORD  # its length runs past the end
    assert _code(b"") == wb.INVALID_RECORD
    assert _code(_good()[:wb.MAGIC_END - 1]) == wb.INVALID_RECORD
    short = bytearray(_good()[:40])
    struct.pack_into(">i", short, 8, 40 - wb.LENGTH_END)  # a whole "batch" of 40 bytes
    assert _code(bytes(short)) == wb.CORRUPT_MESSAGE


@pytest.mark.parametrize(("delta", "code"), [(1, wb.INVALID_RECORD), (5, wb.INVALID_RECORD),
                                             (10_000, wb.INVALID_RECORD), (-1, wb.CORRUPT_MESSAGE),
                                             (-5, wb.CORRUPT_MESSAGE), (-40, wb.CORRUPT_MESSAGE)])
def test_length_mismatch(delta, code):
    # A length past the end leaves no whole batch (87); a shorter one fails the CRC (2).
    raw = bytearray(_good(records=[(b"k", b"v" * 40)]))
    (length,) = struct.unpack_from(">i", raw, 8)
    struct.pack_into(">i", raw, 8, length + delta)
    assert _code(bytes(raw)) == code


def test_batch_length_below_header_is_corrupt():
    raw = bytearray(_good())
    struct.pack_into(">i", raw, 8, 10)
    assert _code(bytes(raw)) == wb.CORRUPT_MESSAGE


def test_two_batches_in_one_is_invalid_record():
    assert _code(_good() + _good(base_offset=1)) == wb.INVALID_RECORD


def test_count_mismatch_is_invalid_record():
    raw = bytearray(_good(records=[(b"k", b"v")] * 3))
    struct.pack_into(">i", raw, 57, 2)  # records_count
    assert _code(bytes(_recrc(raw))) == wb.INVALID_RECORD
    raw = bytearray(_good(records=[(b"k", b"v")] * 3))
    struct.pack_into(">i", raw, 23, 5)  # last_offset_delta
    assert _code(bytes(_recrc(raw))) == wb.INVALID_RECORD
    raw = bytearray(_good())
    struct.pack_into(">i", raw, 23, -1)
    struct.pack_into(">i", raw, 57, 0)
    assert _code(bytes(_recrc(raw))) == wb.INVALID_RECORD


def test_control_flag_from_client_is_invalid_record():
    raw = _good(attributes=wb.ATTR_CONTROL | wb.ATTR_TRANSACTIONAL, producer_id=3,
                producer_epoch=0, base_sequence=0)
    assert _code(raw) == wb.INVALID_RECORD
    marker = wb.control_batch(producer_id=3, producer_epoch=0, commit=True,
                              coordinator_epoch=0, timestamp=5)
    assert _code(marker) == wb.INVALID_RECORD


def test_magic_1_is_invalid_record():
    raw = bytearray(_good())
    raw[16] = 1
    assert _code(bytes(raw)) == wb.INVALID_RECORD


def test_pid_with_negative_base_sequence_is_invalid_record():
    raw = _good(producer_id=9, producer_epoch=0, base_sequence=-1)
    assert _code(raw) == wb.INVALID_RECORD


def test_oversize_is_message_too_large():
    raw = _good(records=[(b"k", b"v" * 100)])
    assert _code(raw, max_size=len(raw) - 1) == 10
    assert wb.validate_produce(raw, len(raw)).size == len(raw)


# --------------------------------------------------------------------- patch


@settings(deadline=None)
@given(
    old_offset=I64, old_epoch=I32, new_offset=I64, new_epoch=I32, records=records_st,
    prefix=st.integers(min_value=0, max_value=20),
)
def test_patch_changes_only_offset_and_epoch(old_offset, old_epoch, new_offset, new_epoch,
                                             records, prefix):
    raw = wb.build_batch(base_offset=old_offset, leader_epoch=old_epoch, records=records)
    buf = bytearray(b"\xab" * prefix + raw)
    wb.patch(buf, prefix, new_offset, new_epoch)
    assert buf[:prefix] == b"\xab" * prefix
    out = bytes(buf[prefix:])
    assert len(out) == len(raw)
    changed = {i for i in range(len(raw)) if out[i] != raw[i]}
    assert changed <= set(range(0, 8)) | set(range(12, 16))
    h = wb.parse_header(out)
    assert h.base_offset == new_offset
    assert h.leader_epoch == new_epoch
    assert wb.crc_ok(out, 0, h)
    assert wb.validate_produce(out, 1 << 20) == h


def test_patch_through_memoryview():
    raw = bytearray(_good())
    wb.patch(memoryview(raw), 0, 42, 3)
    h = wb.parse_header(raw)
    assert (h.base_offset, h.leader_epoch) == (42, 3)
    assert wb.crc_ok(raw, 0, h)


@settings(deadline=None)
@given(
    producer_id=st.integers(min_value=0, max_value=2**63 - 1), producer_epoch=I16,
    old_seq=st.integers(min_value=0, max_value=2**31 - 1), new_seq=st.integers(min_value=0, max_value=2**31 - 1),
    records=records_st, prefix=st.integers(min_value=0, max_value=20), suffix=st.integers(min_value=0, max_value=4),
)
def test_set_base_sequence_is_the_batch_built_with_it(producer_id, producer_epoch, old_seq, new_seq, records,
                                                      prefix, suffix):
    def built(seq: int) -> bytes:
        return wb.build_batch(producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=seq,
                              records=records)

    buf = bytearray(b"\xab" * prefix + built(old_seq) + b"\xcd" * suffix)
    wb.set_base_sequence(buf, prefix, new_seq)
    assert buf[:prefix] == b"\xab" * prefix and buf[len(buf) - suffix:] == b"\xcd" * suffix
    out = bytes(buf[prefix:len(buf) - suffix])
    assert out == built(new_seq)
    assert wb.validate_produce(out, 1 << 20).base_sequence == new_seq


# --------------------------------------------------------------------- control batches


@pytest.mark.parametrize(("commit", "expected"), [(True, wb.CONTROL_COMMIT), (False, wb.CONTROL_ABORT)])
def test_control_batch_round_trip(commit, expected):
    raw = wb.control_batch(producer_id=123, producer_epoch=4, commit=commit,
                           coordinator_epoch=9, timestamp=1_700_000_000_000)
    h = wb.parse_header(raw)
    assert h.is_control and h.is_transactional
    assert h.producer_id == 123
    assert h.producer_epoch == 4
    assert h.base_sequence == -1
    assert h.records_count == 1
    assert h.base_timestamp == h.max_timestamp == 1_700_000_000_000
    assert wb.crc_ok(raw, 0, h)
    assert wb.control_type(raw, 0, h) == expected
    # at an offset inside a larger buffer, after patching
    buf = bytearray(_good() + raw)
    pos = len(buf) - len(raw)
    wb.patch(buf, pos, 77, 2)
    h2 = wb.parse_header(buf, pos)
    assert wb.control_type(buf, pos, h2) == expected
    assert wb.crc_ok(buf, pos, h2)


def test_control_type_of_data_batch_is_none():
    raw = _good()
    assert wb.control_type(raw, 0, wb.parse_header(raw)) is None


# --------------------------------------------------------------------- iter_headers


def test_iter_headers_walks_whole_batches_and_stops_at_torn_tail():
    batches = [_good(base_offset=i * 3, records=[(b"k", b"v" * i)] * 3) for i in range(4)]
    buf = b"".join(batches)
    got = list(wb.iter_headers(buf))
    assert [h.base_offset for _, h in got] == [0, 3, 6, 9]
    positions = [p for p, _ in got]
    assert positions == [sum(len(b) for b in batches[:i]) for i in range(4)]
    nxt = _good(base_offset=12)
    for cut in (1, 12, wb.HEADER_SIZE - 1, wb.HEADER_SIZE, len(nxt) - 1):
        torn = list(wb.iter_headers(buf + nxt[:cut]))
        assert [h.base_offset for _, h in torn] == [0, 3, 6, 9], cut
    # garbage with a nonsense length field also ends the walk
    garbage = b"\x00" * 8 + struct.pack(">i", -5) + b"\xff" * 60
    assert len(list(wb.iter_headers(buf + garbage))) == 4
    # end bounds the walk
    assert len(list(wb.iter_headers(buf, 0, len(buf) - 1))) == 3
    assert [h.base_offset for _, h in wb.iter_headers(buf, positions[2])] == [6, 9]


# --------------------------------------------------------------------- real client bytes


def _builders():
    out = []
    try:
        from aiokafka.record.default_records import DefaultRecordBatchBuilder as A

        out.append(pytest.param(A, id="aiokafka"))
    except ImportError:  # pragma: no cover
        pass
    try:
        from kafka.record.default_records import DefaultRecordBatchBuilder as K

        out.append(pytest.param(K, id="kafka-python"))
    except ImportError:  # pragma: no cover
        pass
    return out or [pytest.param(None, marks=pytest.mark.skip("no client record builder"))]


CODEC_NONE, CODEC_GZIP = 0, 1


@pytest.mark.parametrize("builder", _builders())
@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP])
@pytest.mark.parametrize(("txn", "pid", "epoch", "seq"), [(False, -1, -1, -1), (False, 42, 3, 17),
                                                          (True, 9001, 0, 0)])
def test_header_view_matches_client_builder(builder, codec, txn, pid, epoch, seq):
    b = builder(2, codec, txn, pid, epoch, seq, 1 << 20)
    n = 5
    for i in range(n):
        b.append(i, 1_700_000_000_000 + 10 * i, b"key%d" % i, b"value" * (i + 20), [])
    raw = bytes(b.build())
    h = wb.validate_produce(raw, 1 << 20)
    assert h.magic == 2
    assert h.size == len(raw)
    assert h.codec == codec
    assert h.is_transactional == txn
    assert not h.is_control
    assert h.records_count == n
    assert h.last_offset_delta == n - 1
    assert h.base_timestamp == 1_700_000_000_000
    assert h.max_timestamp == 1_700_000_000_000 + 10 * (n - 1)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (pid, epoch, seq)
    # patching keeps the client's CRC valid
    buf = bytearray(raw)
    wb.patch(buf, 0, 1000, 7)
    assert wb.validate_produce(bytes(buf), 1 << 20).base_offset == 1000


@pytest.mark.parametrize("builder", _builders())
def test_client_reader_decodes_our_batches(builder):
    """The reverse direction: a client reads build_batch / control_batch output."""
    if builder is None:  # pragma: no cover
        return
    mod = __import__(builder.__module__, fromlist=["DefaultRecordBatch"])
    reader = mod.DefaultRecordBatch
    recs = [(b"k1", b"v1"), (None, b"v2"), (b"k3", None)]
    raw = wb.build_batch(base_offset=10, base_timestamp=5, producer_id=4, producer_epoch=1,
                         base_sequence=3, records=recs)
    batch = reader(bytearray(raw))
    assert batch.validate_crc()
    assert batch.base_offset == 10
    assert batch.producer_id == 4
    assert batch.base_sequence == 3
    got = [(r.key, r.value, r.offset) for r in batch]
    assert [(None if k is None else bytes(k), None if v is None else bytes(v), o)
            for k, v, o in got] == [(k, v, 10 + i) for i, (k, v) in enumerate(recs)]
    for commit in (True, False):
        marker = wb.control_batch(producer_id=4, producer_epoch=1, commit=commit,
                                  coordinator_epoch=2, timestamp=5)
        cb = reader(bytearray(marker))
        assert cb.validate_crc()
        assert cb.is_control_batch
        assert cb.is_transactional


@given(st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), st.booleans(), st.integers(-1, 2**31 - 1),
       st.integers(0, 2**62))
def test_control_batch_is_the_built_marker(pid, epoch, commit, coordinator_epoch, timestamp):
    """The marker made from its cached record is byte for byte ``build_batch``'s."""
    key = struct.pack(">hh", 0, wb.CONTROL_COMMIT if commit else wb.CONTROL_ABORT)
    value = struct.pack(">hi", 0, coordinator_epoch)
    built = wb.build_batch(attributes=wb.ATTR_TRANSACTIONAL | wb.ATTR_CONTROL, base_timestamp=timestamp,
                           producer_id=pid, producer_epoch=epoch, base_sequence=-1, records=[(key, value)])
    assert wb.control_batch(producer_id=pid, producer_epoch=epoch, commit=commit,
                            coordinator_epoch=coordinator_epoch, timestamp=timestamp) == built
