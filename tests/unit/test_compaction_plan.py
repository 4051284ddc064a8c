"""The log cleaner's planner over arbitrary histories of keyed records, tombstones,
transactions committed and aborted, idempotent and plain producers.

The model: a read_committed reader of the original log knows, per key, the latest
committed record. After cleaning, a reader of the cleaned log must see exactly that
record for every key (a tombstone older than delete.retention.ms may vanish, and then
nothing older of its key may resurface), at the same offset; no record of an aborted
transaction remains; a marker stays while any record of its transaction does; every live
producer's last batch is still there.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kaas.domain.compaction import BatchInfo, Drop, Filter, Keep, RecordInfo, plan

KEYS = [b"a", b"b", b"c", b"d", None]
RETENTION = 1000


@st.composite
def histories(draw):
    """A log: batches with offsets, transactions all completed (the range is below the LSO)."""
    n_producers = draw(st.integers(1, 4))
    kinds = {pid: draw(st.sampled_from(["plain", "idempotent", "txn"])) for pid in range(1, n_producers + 1)}
    batches: list[BatchInfo] = []
    aborted: list[tuple[int, int, int]] = []
    open_txn: dict[int, int] = {}  # pid -> first offset
    offset = 0
    ts = 0
    for _ in range(draw(st.integers(1, 25))):
        pid = draw(st.sampled_from(sorted(kinds)))
        kind = kinds[pid]
        ts += draw(st.integers(0, 400))
        if kind == "txn" and pid in open_txn and draw(st.booleans()):
            commit = draw(st.booleans())
            batches.append(BatchInfo(offset, pid, True, 1 if commit else 0, ts))
            if not commit:
                aborted.append((offset, pid, open_txn[pid]))
            del open_txn[pid]
            offset += 1
            continue
        recs = []
        for i in range(draw(st.integers(1, 4))):
            key = draw(st.sampled_from(KEYS))
            recs.append(RecordInfo(offset + i, key, key is not None and draw(st.integers(0, 4)) == 0))
        if kind == "txn":
            open_txn.setdefault(pid, offset)
        batches.append(BatchInfo(offset, pid if kind != "plain" else -1, kind == "txn", None, ts, tuple(recs)))
        offset += len(recs) + draw(st.integers(0, 2))  # gaps: an earlier cleaning removed some
    for pid, first in sorted(open_txn.items()):
        ts += 1
        commit = draw(st.booleans())
        batches.append(BatchInfo(offset, pid, True, 1 if commit else 0, ts))
        if not commit:
            aborted.append((offset, pid, first))
        offset += 1
    now = ts + draw(st.integers(0, 2 * RETENTION))
    return batches, aborted, now


def _aborted_batch(b: BatchInfo, aborted) -> bool:
    return b.transactional and b.control is None and any(
        pid == b.producer_id and first <= b.base_offset < marker for marker, pid, first in aborted)


def _latest(batches, aborted) -> dict[bytes, tuple[int, bool, int]]:
    out = {}
    for b in batches:
        if b.control is not None or _aborted_batch(b, aborted):
            continue
        for r in b.records:
            if r.key is not None:
                out[r.key] = (r.offset, r.tombstone, b.max_timestamp)
    return out


@settings(max_examples=300)
@given(h=histories())
def test_cleaned_log_reads_the_latest_committed_value_of_every_key(h):
    batches, aborted, now = h
    last_of: dict[int, int] = {}
    for b in batches:
        if b.producer_id >= 0:
            last_of[b.producer_id] = b.base_offset
    decisions = plan(batches, aborted, last_of, now, RETENTION)
    assert len(decisions) == len(batches)

    cleaned: list[BatchInfo] = []
    for b, d in zip(batches, decisions):
        if isinstance(d, Keep):
            cleaned.append(b)
        elif isinstance(d, Filter):
            assert b.control is None and set(d.offsets) <= {r.offset for r in b.records}
            cleaned.append(BatchInfo(b.base_offset, b.producer_id, b.transactional, None, b.max_timestamp,
                                     tuple(r for r in b.records if r.offset in d.offsets)))
        else:
            assert isinstance(d, Drop)

    # no record of an aborted transaction survives
    for b in cleaned:
        if _aborted_batch(b, aborted):
            assert not b.records
    # per key: exactly the latest committed record, unless it is an expired tombstone
    want = _latest(batches, aborted)
    got = _latest(cleaned, aborted)
    for key, (off, tomb, ts) in want.items():
        if tomb and now - ts > RETENTION:
            assert key not in got, f"key {key!r}: an older value resurfaced after its tombstone went"
        else:
            assert got.get(key) == (off, tomb, ts), key
    assert set(got) <= set(want)
    # every record kept has its original offset (it is one of the originals of its batch)
    originals = {b.base_offset: {r.offset for r in b.records} for b in batches}
    for b in cleaned:
        assert {r.offset for r in b.records} <= originals[b.base_offset]
    # keyless records are never removed
    for b, c in zip(batches, decisions):
        if not _aborted_batch(b, aborted) and b.control is None:
            for r in b.records:
                if r.key is None:
                    assert not isinstance(c, Drop) and (isinstance(c, Keep) or r.offset in c.offsets)
    # each live producer's last batch is there
    kept_bases = {b.base_offset for b in cleaned}
    assert set(last_of.values()) <= kept_bases
    # a marker stays while a record of its transaction does
    open_data: dict[int, bool] = {}
    for b in batches:
        if not b.transactional:
            continue
        if b.control is None:
            c = next((x for x in cleaned if x.base_offset == b.base_offset), None)
            open_data[b.producer_id] = open_data.get(b.producer_id, False) or bool(c and c.records)
        else:
            if open_data.pop(b.producer_id, False):
                assert b.base_offset in kept_bases, "a marker was removed while its data remains"


def test_markers_are_never_deduplicated_by_key():
    """Markers share one control key; two committed transactions keep both markers while
    their data stays."""
    b = [BatchInfo(0, 5, True, None, 0, (RecordInfo(0, b"x", False),)), BatchInfo(1, 5, True, 1, 0),
         BatchInfo(2, 5, True, None, 0, (RecordInfo(2, b"y", False),)), BatchInfo(3, 5, True, 1, 0)]
    assert plan(b, [], {5: 3}, 10_000, RETENTION) == [Keep(), Keep(), Keep(), Keep()]


def test_aborted_data_goes_and_its_marker_after_the_horizon():
    b = [BatchInfo(0, 5, True, None, 0, (RecordInfo(0, b"x", False),)), BatchInfo(1, 5, True, 0, 0),
         BatchInfo(2, 6, False, None, 0, (RecordInfo(2, b"x", False),))]
    aborted = [(1, 5, 0)]
    assert plan(b, aborted, {6: 2}, 500, RETENTION) == [Drop(), Keep(), Keep()]
    assert plan(b, aborted, {6: 2}, 5000, RETENTION) == [Drop(), Drop(), Keep()]
    # the producer's last batch stays (empty) even when all of it is superseded
    b2 = [BatchInfo(0, 7, False, None, 0, (RecordInfo(0, b"x", False),)),
          BatchInfo(1, -1, False, None, 0, (RecordInfo(1, b"x", False),))]
    assert plan(b2, [], {7: 0}, 5000, RETENTION) == [Filter(()), Keep()]
