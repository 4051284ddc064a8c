"""``batch.stamp_log_append_time``: the one header rewrite inside the CRC, checked against
a real client's builder and readers (aiokafka, kafka-python) and byte by byte."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kaas.wire import batch as wb

NOW = st.integers(min_value=0, max_value=2**62)
records_st = st.lists(
    st.tuples(st.none() | st.binary(max_size=20), st.binary(max_size=60),
              st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=8)), max_size=2)),
    min_size=1, max_size=6,
)
# bytes the stamp may change: the CRC (17-20), attributes (21-22), maxTimestamp (35-42)
CHANGED = set(range(17, 23)) | set(range(35, 43))


def _readers():
    out = []
    try:
        from aiokafka.record.default_records import DefaultRecordBatch as A

        out.append(A)
    except ImportError:  # pragma: no cover
        pass
    try:
        from kafka.record.default_records import DefaultRecordBatch as K

        out.append(K)
    except ImportError:  # pragma: no cover
        pass
    return out


def _client_batch(records, codec: int, txn: bool, pid: int, base_ts: int) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(2, codec, txn, pid, 0 if pid >= 0 else -1, 0 if pid >= 0 else -1, 1 << 20)
    for i, (key, value, headers) in enumerate(records):
        assert b.append(i, base_ts + 7 * i, key, value, headers) is not None
    return bytes(b.build())


@settings(deadline=None)
@given(records=records_st, codec=st.sampled_from([0, 1]), txn=st.booleans(), now=NOW,
       base_ts=st.integers(min_value=0, max_value=2**40))
def test_stamp_matches_what_client_readers_expect(records, codec, txn, now, base_ts):
    raw = _client_batch(records, codec, txn, 5 if txn else -1, base_ts)
    before = wb.validate_produce(raw, 1 << 20)
    stamped = wb.stamp_log_append_time(raw, now)

    # the broker's own view: still a valid produce batch, the two fields changed, nothing else
    h = wb.validate_produce(stamped, 1 << 20)
    assert h.attributes == before.attributes | wb.ATTR_LOG_APPEND_TIME
    assert h.max_timestamp == now
    assert h.base_timestamp == before.base_timestamp  # Apache's in-place path leaves it
    assert (h.codec, h.is_transactional, h.records_count, h.producer_id, h.base_sequence) == (
        before.codec, before.is_transactional, before.records_count, before.producer_id, before.base_sequence)
    assert len(stamped) == len(raw)
    assert {i for i, (a, b) in enumerate(zip(raw, stamped, strict=True)) if a != b} <= CHANGED

    # the clients' view: CRC good, LogAppendTime, every record at the append time, data intact
    for reader in _readers():
        batch = reader(bytearray(stamped))
        assert batch.validate_crc()
        assert batch.timestamp_type == 1
        got = list(batch)
        assert [r.timestamp for r in got] == [now] * len(records)
        assert [r.offset for r in got] == list(range(len(records)))
        assert [(None if r.key is None else bytes(r.key), bytes(r.value)) for r in got] == [
            (k, v) for k, v, _h in records]


@settings(deadline=None)
@given(now=NOW, attributes=st.sampled_from([0, wb.ATTR_TRANSACTIONAL, 1]),
       base_ts=st.integers(min_value=0, max_value=2**40), extra=st.integers(min_value=0, max_value=10**6))
def test_stamp_equals_building_it_as_log_append_time(now, attributes, base_ts, extra):
    """Stamping a CreateTime batch gives exactly the bytes of the same batch built with the
    LogAppendTime bit and maxTimestamp = now; stamping is idempotent."""
    recs = [(b"k", b"v"), (None, b"w")]
    kw = dict(base_offset=3, leader_epoch=2, base_timestamp=base_ts, producer_id=-1, records=recs)
    raw = wb.build_batch(attributes=attributes, max_timestamp=base_ts + extra, **kw)
    want = wb.build_batch(attributes=attributes | wb.ATTR_LOG_APPEND_TIME, max_timestamp=now, **kw)
    assert wb.stamp_log_append_time(raw, now) == want
    assert wb.stamp_log_append_time(want, now) == want
    assert wb.stamp_log_append_time(memoryview(bytearray(raw)), now) == want
