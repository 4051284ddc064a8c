"""Unit tests for kaas.domain.producer_state: the idempotence window and open transactions.

Example tests pin each rule of the idempotence window (docs/transactions.rst); hypothesis checks exactly-once under
retries/reordering, snapshot round-trips and fencing.
"""

from __future__ import annotations

import json

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode

from kaas.domain.producer_state import (
    INT32_MAX,
    WINDOW,
    Append,
    BatchMeta,
    Duplicate,
    ProducerStateTable,
    Reject,
    last_sequence,
    next_sequence,
)

OUT_OF_ORDER = 45
FENCED = 47
INVALID_TXN_STATE = 48
INVALID_RECORD = 87

PID = 1 << 40


def code(decision: object) -> int | None:
    return decision.code if isinstance(decision, Reject) else None


def produce(
    table: ProducerStateTable,
    pid: int,
    epoch: int,
    seq: int,
    count: int,
    offset: int,
    ts: int = 0,
    txn: bool = False,
    now: int | None = None,
) -> None:
    """check + record, asserting the check accepted. The broker's clock ``now`` is ``ts``
    unless given (most examples need only one time)."""
    assert table.check(pid, epoch, seq, count, txn) == Append()
    table.record(pid, epoch, seq, count, offset, ts, txn, now_ms=ts if now is None else now)


def seeded(count: int = 1, seqs: int = 3) -> ProducerStateTable:
    """PID at epoch 0 with batches of `count` records at seq 0.., offsets 0.."""
    t = ProducerStateTable()
    for i in range(seqs):
        produce(t, PID, 0, i * count, count, i * count, ts=100 + i)
    return t


# --- sequence arithmetic -----------------------------------------------------------------


def test_sequence_arithmetic_wraps_at_int32_max() -> None:
    assert last_sequence(0, 1) == 0
    assert last_sequence(10, 5) == 14
    assert last_sequence(INT32_MAX, 1) == INT32_MAX
    assert last_sequence(INT32_MAX, 2) == 0
    assert last_sequence(INT32_MAX - 2, 5) == 1
    assert next_sequence(-1) == 0
    assert next_sequence(INT32_MAX) == 0
    assert next_sequence(41) == 42


# --- check: the rules --------------------------------------------------------------------


def test_non_idempotent_batches_always_append() -> None:
    t = seeded()
    assert t.check(-1, -1, -1, 10, False) == Append()
    assert t.check(-1, 0, 12345, 1, True) == Append()
    t.record(-1, -1, -1, 10, 99, 0, False, now_ms=0)  # ignored
    assert -1 not in t


def test_negative_base_sequence_with_pid_is_invalid_record() -> None:
    t = ProducerStateTable()
    assert code(t.check(PID, 0, -1, 1, False)) == INVALID_RECORD
    assert code(seeded().check(PID, 0, -1, 1, False)) == INVALID_RECORD
    assert code(t.check(PID, 0, 0, 0, False)) == INVALID_RECORD  # empty batch


def test_reject_codes_are_kio_error_codes() -> None:
    d = seeded().check(PID, 0, 7, 1, False)
    assert isinstance(d, Reject)
    assert d.code == ErrorCode.out_of_order_sequence_number == OUT_OF_ORDER
    assert "expected sequence 3" in d.reason


def test_unknown_pid_accepts_any_sequence() -> None:
    t = ProducerStateTable()
    assert t.check(PID, 0, 0, 1, False) == Append()
    assert t.check(PID, 3, 987_654, 4, False) == Append()
    assert t.check(PID, 0, INT32_MAX, 1, True) == Append()
    t.record(PID, 3, 987_654, 4, 0, 1, False, now_ms=1)
    assert t.check(PID, 3, 987_658, 1, False) == Append()
    assert code(t.check(PID, 3, 987_659, 1, False)) == OUT_OF_ORDER


def test_in_order_batches_append() -> None:
    t = ProducerStateTable()
    offset = 0
    seq = 0
    for count in (1, 3, 7, 2):
        produce(t, PID, 0, seq, count, offset)
        seq += count
        offset += count
    assert t.get(PID).last_seq == seq - 1
    assert t.check(PID, 0, seq, 1, False) == Append()


def test_duplicate_of_cached_batch_echoes_offset_and_timestamp() -> None:
    t = ProducerStateTable()
    produce(t, PID, 0, 0, 5, 100, ts=1111)
    produce(t, PID, 0, 5, 5, 200, ts=2222)
    assert t.check(PID, 0, 0, 5, False) == Duplicate(base_offset=100, timestamp=1111)
    assert t.check(PID, 0, 5, 5, False) == Duplicate(base_offset=200, timestamp=2222)
    # a duplicate is a duplicate whatever the txn bit says
    assert t.check(PID, 0, 5, 5, True) == Duplicate(200, 2222)


def test_partial_overlap_is_out_of_order() -> None:
    t = seeded(count=5)  # batches 0-4, 5-9, 10-14
    assert code(t.check(PID, 0, 5, 3, False)) == OUT_OF_ORDER
    assert code(t.check(PID, 0, 5, 6, False)) == OUT_OF_ORDER
    assert code(t.check(PID, 0, 6, 4, False)) == OUT_OF_ORDER


def test_gap_and_rewind_are_out_of_order() -> None:
    t = seeded()  # seqs 0, 1, 2
    assert code(t.check(PID, 0, 4, 1, False)) == OUT_OF_ORDER
    assert code(t.check(PID, 0, 1, 2, False)) == OUT_OF_ORDER
    assert code(t.check(PID, 0, 0, 1, True)) is None  # exact duplicate, not a rewind


def test_duplicate_older_than_window_is_out_of_order() -> None:
    t = seeded(seqs=WINDOW + 1)  # seqs 0..5, ring holds 1..5
    assert len(t.get(PID).batches) == WINDOW
    assert code(t.check(PID, 0, 0, 1, False)) == OUT_OF_ORDER
    for s in range(1, WINDOW + 1):
        assert t.check(PID, 0, s, 1, False) == Duplicate(s, 100 + s)


def test_lower_epoch_is_invalid_producer_epoch() -> None:
    t = ProducerStateTable()
    produce(t, PID, 3, 0, 1, 0)
    assert code(t.check(PID, 2, 1, 1, False)) == FENCED
    assert code(t.check(PID, 2, 0, 1, False)) == FENCED  # even with a cached range
    assert code(t.check(PID, 0, 0, 1, True)) == FENCED


def test_higher_epoch_must_start_at_zero() -> None:
    t = seeded()
    assert code(t.check(PID, 1, 3, 1, False)) == OUT_OF_ORDER
    assert code(t.check(PID, 1, 1, 1, False)) == OUT_OF_ORDER
    assert t.check(PID, 1, 0, 1, False) == Append()
    assert t.check(PID, 5, 0, 4, True) == Append()


def test_new_epoch_clears_the_ring() -> None:
    t = seeded()  # epoch 0, seqs 0..2
    produce(t, PID, 1, 0, 2, 10)
    entry = t.get(PID)
    assert entry.epoch == 1
    assert list(entry.batches) == [BatchMeta(0, 1, 10, 11, 0)]
    assert t.check(PID, 1, 0, 2, False) == Duplicate(10, 0)
    assert code(t.check(PID, 1, 1, 1, False)) == OUT_OF_ORDER  # epoch-0 range forgotten
    assert code(t.check(PID, 0, 3, 1, False)) == FENCED


def test_non_transactional_batch_during_open_txn_is_invalid_txn_state() -> None:
    t = ProducerStateTable()
    produce(t, PID, 0, 0, 1, 0, txn=True)
    assert code(t.check(PID, 0, 1, 1, False)) == INVALID_TXN_STATE
    assert t.check(PID, 0, 1, 1, True) == Append()


# --- wrap-around -------------------------------------------------------------------------


def test_sequence_wraps_from_int32_max_to_zero() -> None:
    t = ProducerStateTable()
    produce(t, PID, 0, INT32_MAX - 2, 3, 0)  # INT32_MAX-2 .. INT32_MAX
    assert t.get(PID).last_seq == INT32_MAX
    assert code(t.check(PID, 0, INT32_MAX + 1, 1, False)) == OUT_OF_ORDER
    assert code(t.check(PID, 0, 1, 1, False)) == OUT_OF_ORDER
    produce(t, PID, 0, 0, 2, 3)
    assert t.check(PID, 0, 2, 1, False) == Append()
    assert t.check(PID, 0, INT32_MAX - 2, 3, False) == Duplicate(0, 0)
    assert t.check(PID, 0, 0, 2, False) == Duplicate(3, 0)


def test_batch_spanning_the_wrap() -> None:
    t = ProducerStateTable()
    produce(t, PID, 0, INT32_MAX - 1, 4, 0)  # INT32_MAX-1, INT32_MAX, 0, 1
    entry = t.get(PID)
    assert entry.last_seq == 1
    assert entry.batches[-1] == BatchMeta(INT32_MAX - 1, 1, 0, 3, 0)
    assert t.check(PID, 0, INT32_MAX - 1, 4, False) == Duplicate(0, 0)
    assert t.check(PID, 0, 2, 1, False) == Append()
    assert code(t.check(PID, 0, 0, 1, False)) == OUT_OF_ORDER


def test_single_record_at_int32_max_then_zero() -> None:
    t = ProducerStateTable()
    produce(t, PID, 0, INT32_MAX - 1, 1, 0)
    produce(t, PID, 0, INT32_MAX, 1, 1)
    produce(t, PID, 0, 0, 1, 2)
    assert t.get(PID).last_seq == 0


# --- transactions and the LSO ------------------------------------------------------------


def test_txn_first_offset_set_once_and_cleared_by_marker() -> None:
    t = ProducerStateTable()
    assert t.first_unstable_offset() is None
    produce(t, PID, 0, 0, 3, 10, txn=True)
    produce(t, PID, 0, 3, 2, 13, txn=True)
    assert t.get(PID).txn_first_offset == 10
    assert t.first_unstable_offset() == 10
    assert t.check_marker(PID, 0) == Append()
    assert t.end_txn(PID, 0, coordinator_epoch=4) == 10
    assert t.get(PID).txn_first_offset is None
    assert t.get(PID).coordinator_epoch == 4
    assert t.first_unstable_offset() is None
    # the next transaction starts fresh, same epoch, sequences continue
    produce(t, PID, 0, 5, 1, 16, txn=True)
    assert t.first_unstable_offset() == 16
    assert t.end_txn(PID, 0) == 16
    assert t.end_txn(PID, 0) is None  # nothing open


def test_non_transactional_batches_do_not_open_txn() -> None:
    t = seeded()
    assert t.get(PID).txn_first_offset is None
    assert t.first_unstable_offset() is None


def test_first_unstable_offset_is_min_over_producers() -> None:
    t = ProducerStateTable()
    a, b, c = PID, PID + 1, PID + 2
    produce(t, b, 0, 0, 1, 5, txn=True)
    produce(t, a, 0, 0, 1, 6, txn=True)
    produce(t, c, 0, 0, 1, 7, txn=False)
    produce(t, a, 0, 1, 1, 8, txn=True)
    assert t.first_unstable_offset() == 5
    assert t.open_transactions() == {a: 6, b: 5}
    assert t.end_txn(b, 0) == 5
    assert t.first_unstable_offset() == 6
    assert t.end_txn(a, 0) == 6
    assert t.first_unstable_offset() is None


def test_first_unstable_offset_heap_stays_bounded_under_a_long_txn() -> None:
    t = ProducerStateTable()
    long_pid = PID
    produce(t, long_pid, 0, 0, 1, 0, txn=True)
    offset = 1
    for i in range(2000):
        pid = PID + 1 + (i % 10)
        seq = i // 10
        produce(t, pid, 0, seq, 1, offset, txn=True)
        assert t.end_txn(pid, 0) == offset
        offset += 2
        assert t.first_unstable_offset() == 0
    assert len(t._txn_heap) <= 2 * len(t) + 33
    t.end_txn(long_pid, 0)
    assert t.first_unstable_offset() is None


def test_marker_with_higher_epoch_bumps_and_clears_ring() -> None:
    """Timeout abort: the coordinator bumps the epoch and writes ABORT at the new epoch."""
    t = ProducerStateTable()
    produce(t, PID, 0, 0, 2, 0, txn=True)
    assert t.check_marker(PID, 1) == Append()
    assert t.end_txn(PID, 1) == 0
    assert t.get(PID).epoch == 1
    assert len(t.get(PID).batches) == 0
    assert code(t.check(PID, 0, 2, 1, True)) == FENCED  # the zombie
    assert code(t.check(PID, 1, 2, 1, True)) == OUT_OF_ORDER
    assert t.check(PID, 1, 0, 1, True) == Append()


def test_stale_marker_rejected_when_nothing_open() -> None:
    t = ProducerStateTable()
    produce(t, PID, 2, 0, 1, 0, txn=False)
    assert code(t.check_marker(PID, 1)) == FENCED
    assert t.end_txn(PID, 1) is None
    assert t.get(PID).epoch == 2


def test_marker_overtaken_by_fence_still_closes_open_txn() -> None:
    # A rejoin's fence (epoch 3) reaches the partition before the queued marker of the
    # epoch-2 transaction: the marker must still end that transaction, or the LSO sticks.
    t = ProducerStateTable()
    produce(t, PID, 2, 0, 1, 0, txn=True)
    t.fence(PID, 3)
    assert t.check_marker(PID, 2) == Append()
    assert t.end_txn(PID, 2) == 0
    assert t.first_unstable_offset() is None
    assert t.get(PID).epoch == 3


def test_marker_coordinator_epoch_fencing_and_bad_pid() -> None:
    t = ProducerStateTable()
    produce(t, PID, 0, 0, 1, 0, txn=True)
    t.end_txn(PID, 0, coordinator_epoch=5)
    assert code(t.check_marker(PID, 0, coordinator_epoch=4)) == 52
    assert t.check_marker(PID, 0, coordinator_epoch=5) == Append()
    assert t.check_marker(PID, 0) == Append()
    assert code(t.check_marker(-1, 0)) == INVALID_RECORD
    assert t.check_marker(PID + 9, 0) == Append()  # unknown pid


def test_marker_for_unknown_pid_creates_entry_and_fixes_epoch() -> None:
    t = ProducerStateTable()
    assert t.end_txn(PID, 4, now_ms=50) is None
    assert t.get(PID).epoch == 4
    assert t.get(PID).last_append_ms == 50
    assert code(t.check(PID, 3, 0, 1, True)) == FENCED


def test_record_with_epoch_lowered_by_racing_fence_keeps_epoch() -> None:
    t = ProducerStateTable()
    produce(t, PID, 0, 0, 1, 0)
    assert t.check(PID, 0, 1, 1, True) == Append()
    t.fence(PID, 1)  # lands between check and record
    t.record(PID, 0, 1, 1, 1, 5, True, now_ms=5)
    entry = t.get(PID)
    assert entry.epoch == 1
    assert len(entry.batches) == 0
    assert entry.txn_first_offset == 1  # held until the coordinator's abort marker
    assert t.first_unstable_offset() == 1


# --- fence -------------------------------------------------------------------------------


def test_fence_makes_old_epoch_invalid_and_new_epoch_start_at_zero() -> None:
    t = seeded()  # epoch 0 seqs 0..2
    assert t.fence(PID, 1) is True
    entry = t.get(PID)
    assert entry.epoch == 1 and len(entry.batches) == 0
    assert code(t.check(PID, 0, 3, 1, False)) == FENCED
    assert code(t.check(PID, 0, 2, 1, False)) == FENCED  # former duplicate, now fenced
    # the transactional new session: same (now known) epoch, seq 0 required
    assert code(t.check(PID, 1, 3, 1, True)) == OUT_OF_ORDER
    assert t.check(PID, 1, 0, 1, True) == Append()


def test_fence_is_idempotent_and_never_lowers() -> None:
    t = ProducerStateTable()
    t.fence(PID, 2)
    produce(t, PID, 2, 0, 1, 0, txn=True)
    assert t.fence(PID, 2) is False  # re-applied broadcast: ring kept
    assert t.fence(PID, 1) is False
    assert t.get(PID).epoch == 2
    assert t.check(PID, 2, 0, 1, True) == Duplicate(0, 0)
    assert t.check(PID, 2, 1, 1, True) == Append()


def test_fence_creates_missing_entry() -> None:
    t = ProducerStateTable()
    assert t.fence(PID, 3, now_ms=1000) is True
    assert t.get(PID).epoch == 3
    assert t.get(PID).last_append_ms == 1000
    assert code(t.check(PID, 2, 0, 1, True)) == FENCED
    assert code(t.check(PID, 3, 4, 1, True)) == OUT_OF_ORDER
    assert t.check(PID, 3, 0, 1, True) == Append()


def test_fence_without_time_uses_latest_seen_time() -> None:
    t = ProducerStateTable()
    produce(t, PID, 0, 0, 1, 0, ts=5_000)
    t.fence(PID + 1, 1)
    assert t.get(PID + 1).last_append_ms == 5_000
    assert t.expire(5_500, 1_000) == []


def test_fence_keeps_open_txn() -> None:
    t = ProducerStateTable()
    produce(t, PID, 0, 0, 1, 7, txn=True)
    t.fence(PID, 1)
    assert t.first_unstable_offset() == 7
    assert t.end_txn(PID, 1) == 7


# --- expiry ------------------------------------------------------------------------------


def test_expire_drops_idle_entries_only() -> None:
    t = ProducerStateTable()
    produce(t, PID, 0, 0, 1, 0, ts=1_000)
    produce(t, PID + 2, 0, 0, 1, 1, ts=1_000)
    produce(t, PID + 1, 0, 0, 1, 2, ts=5_000)
    assert t.expire(2_000, 1_000) == []  # idle exactly max_idle: kept
    assert [e.producer_id for e in t.expire(2_001, 1_000)] == [PID, PID + 2]
    assert PID not in t and PID + 1 in t
    # an expired pid is unknown again: any sequence goes
    assert t.check(PID, 0, 77, 1, False) == Append()


def test_expire_keeps_entries_with_open_txn() -> None:
    t = ProducerStateTable()
    produce(t, PID, 0, 0, 1, 3, ts=0, txn=True)
    assert t.expire(10**9, 1) == []
    assert t.first_unstable_offset() == 3
    t.end_txn(PID, 0)
    assert [e.producer_id for e in t.expire(10**9, 1)] == [PID]
    assert t.first_unstable_offset() is None


def test_marker_refreshes_last_timestamp() -> None:
    t = ProducerStateTable()
    produce(t, PID, 0, 0, 1, 0, ts=0, txn=True)
    t.end_txn(PID, 0, now_ms=9_000)
    assert t.expire(9_500, 1_000) == []


def test_client_timestamp_minus_one_never_expires_state() -> None:
    # Sarama 1.22 sends MaxTimestamp -1: the entry is idle from the broker's clock at the
    # append (10_000), not from -1, so a check 32 s later keeps it and a retry is a
    # duplicate echoing the batch's own timestamp.
    t = ProducerStateTable()
    produce(t, PID, 0, 0, 5, 0, ts=-1, now=10_000)
    assert t.expire(42_000, 86_400_000) == []
    assert t.check(PID, 0, 0, 5, False) == Duplicate(0, -1)
    assert t.get(PID).last_append_ms == 10_000


def test_expired_entry_reports_its_last_append() -> None:
    t = ProducerStateTable()
    produce(t, PID, 3, 0, 1, 0, ts=123, now=1_000)
    (e,) = t.expire(5_000, 3_000)
    assert (e.producer_id, e.epoch, e.last_append_ms) == (PID, 3, 1_000)
    assert t.expire(5_000, 3_000) == []  # reported once: the entry is gone


_TS = st.one_of(
    st.just(-1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 10**6),
)


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 5_000), _TS, st.booleans(), st.booleans()),
        min_size=1,
        max_size=30,
    ),
    checks=st.lists(st.tuples(st.integers(0, 20_000), st.integers(0, 10_000)), max_size=5),
)
def test_expiry_depends_on_broker_time_only(
    steps: list[tuple[int, int, int, bool, bool]], checks: list[tuple[int, int]]
) -> None:
    """Two tables fed the same appends at the same broker times, one with the batches'
    client timestamps (-1, far past, far future), one with 0: they expire the same
    producers at the same checks; an entry goes exactly when it is idle past the limit
    by the broker's clock with no transaction open, and an open one never goes."""
    with_ts, without = ProducerStateTable(), ProducerStateTable()
    now = 0
    seqs: dict[int, int] = {}
    last: dict[int, int] = {}
    open_txn: set[int] = set()
    offset = 0
    for pid_i, dt, ts, txn, end in steps:
        pid = PID + pid_i
        now += dt
        if end and pid in open_txn:
            for t in (with_ts, without):
                t.end_txn(pid, 0, now_ms=now)
            open_txn.discard(pid)
            last[pid] = now
            offset += 1
            continue
        txn = txn or pid in open_txn
        seq = seqs.get(pid, 0)
        for t, stamp in ((with_ts, ts), (without, 0)):
            if pid not in t:
                seq = 0
            assert t.check(pid, 0, seq, 1, txn) == Append()
            t.record(pid, 0, seq, 1, offset, stamp, txn, now_ms=now)
        seqs[pid] = seq + 1
        last[pid] = now
        if txn:
            open_txn.add(pid)
        offset += 1
    for dt, limit in checks:
        now += dt
        live = {e.producer_id for e in with_ts}
        want = sorted(p for p in live if p not in open_txn and now - last[p] > limit)
        a = [e.producer_id for e in with_ts.expire(now, limit)]
        b = [e.producer_id for e in without.expire(now, limit)]
        assert a == b == want
        for p in want:
            seqs.pop(p, None)
        assert open_txn <= {e.producer_id for e in with_ts}


def test_snapshot_before_broker_clock_counts_entries_active_at_load() -> None:
    # A snapshot written before expiry went by the broker's clock holds batch timestamps
    # (a client's -1): loading it must not expire the entries at the next check.
    old = {
        "format": 1,
        "clock_ms": -1,
        "entries": [
            {
                "producer_id": PID,
                "epoch": 0,
                "last_timestamp": -1,
                "coordinator_epoch": -1,
                "txn_first_offset": None,
                "batches": [[0, 4, 0, 4, -1]],
            }
        ],
    }
    t = ProducerStateTable.from_snapshot(old, now_ms=50_000)
    assert t.get(PID).last_append_ms == 50_000
    assert t.expire(60_000, 30_000) == []
    assert t.check(PID, 0, 0, 5, False) == Duplicate(0, -1)
    assert [e.producer_id for e in t.expire(80_001, 30_000)] == [PID]


def test_snapshot_caps_a_future_last_append_at_load_time() -> None:
    t = ProducerStateTable()
    produce(t, PID, 0, 0, 1, 0, now=10**12)  # written by a broker whose clock ran ahead
    snap = t.to_snapshot()
    assert snap["clock"] == "broker"
    back = ProducerStateTable.from_snapshot(snap, now_ms=1_000)
    assert back.get(PID).last_append_ms == 1_000
    assert [e.producer_id for e in back.expire(2_001, 1_000)] == [PID]


# --- snapshot and describe ---------------------------------------------------------------


def _busy_table() -> ProducerStateTable:
    t = seeded(count=2, seqs=WINDOW + 2)
    produce(t, PID + 1, 4, INT32_MAX, 3, 100, ts=77, txn=True)
    t.end_txn(PID + 1, 4, coordinator_epoch=9, now_ms=80)
    produce(t, PID + 1, 4, 2, 1, 104, ts=81, txn=True)
    t.fence(PID + 2, 6, now_ms=90)
    return t


def test_snapshot_shape_and_roundtrip_through_msgpack_and_json() -> None:
    t = _busy_table()
    snap = t.to_snapshot()
    assert snap["format"] == 1
    assert [e["producer_id"] for e in snap["entries"]] == [PID, PID + 1, PID + 2]
    assert snap["entries"][1]["txn_first_offset"] == 104
    assert snap["entries"][1]["coordinator_epoch"] == 9
    assert len(snap["entries"][0]["batches"]) == WINDOW
    for codec in (
        lambda d: msgpack.unpackb(msgpack.packb(d)),
        lambda d: json.loads(json.dumps(d)),
    ):
        back = ProducerStateTable.from_snapshot(codec(snap), now_ms=snap["clock_ms"])
        assert back.to_snapshot() == snap
        assert back.describe() == t.describe()
        assert back.first_unstable_offset() == 104
        assert back.check(PID, 0, 2 * (WINDOW + 1), 2, False) == Duplicate(12, 106)
        assert code(back.check(PID, 0, 0, 2, False)) == OUT_OF_ORDER
        assert code(back.check(PID + 2, 5, 0, 1, True)) == FENCED


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"format": 2, "entries": []},
        [],
        {"format": 1},
        {"format": 1, "entries": [{"producer_id": 1}]},
        {
            "format": 1,
            "entries": [
                {
                    "producer_id": 1,
                    "epoch": "0",
                    "last_timestamp": 0,
                    "coordinator_epoch": -1,
                    "txn_first_offset": None,
                    "batches": [],
                }
            ],
        },
        {
            "format": 1,
            "entries": [
                {
                    "producer_id": 1,
                    "epoch": 0,
                    "last_timestamp": 0,
                    "coordinator_epoch": -1,
                    "txn_first_offset": None,
                    "batches": [[0, 0, 0, 0]],
                }
            ],
        },
    ],
)
def test_from_snapshot_rejects_malformed(bad: object) -> None:
    with pytest.raises(ValueError):
        ProducerStateTable.from_snapshot(bad, now_ms=0)  # type: ignore[arg-type]


def test_describe_rows() -> None:
    t = _busy_table()
    rows = t.describe()
    assert rows == [
        {
            "producer_id": PID,
            "producer_epoch": 0,
            "last_sequence": 2 * (WINDOW + 2) - 1,
            "last_timestamp": 100 + WINDOW + 1,
            "coordinator_epoch": -1,
            "current_txn_start_offset": -1,
        },
        {
            "producer_id": PID + 1,
            "producer_epoch": 4,
            "last_sequence": 2,
            "last_timestamp": 81,
            "coordinator_epoch": 9,
            "current_txn_start_offset": 104,
        },
        {
            "producer_id": PID + 2,
            "producer_epoch": 6,
            "last_sequence": -1,
            "last_timestamp": 90,
            "coordinator_epoch": -1,
            "current_txn_start_offset": -1,
        },
    ]


# --- property: exactly-once under retries, duplicates and reordering ---------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    counts=st.lists(st.integers(1, 5), min_size=1, max_size=14),
    start=st.sampled_from([0, 1, 1000, INT32_MAX - 6, INT32_MAX - 1, INT32_MAX]),
    txn=st.booleans(),
)
def test_retries_and_reordering_append_each_batch_once_in_order(
    data: st.DataObject, counts: list[int], start: int, txn: bool
) -> None:
    """A client with <= 5 batches in flight over a network that drops, duplicates and
    reorders requests and responses. The client resends any batch it has no ack for
    (after a timeout, a lost response, or a 45 because an earlier batch had not yet
    arrived). Every batch lands exactly once, in sequence order; duplicates echo the
    original offset; an unacked batch is never refused as out of window.
    """
    n = len(counts)
    pid, epoch = PID, 0
    bases = []
    seq = start
    for c in counts:
        bases.append(seq)
        seq = (seq + c) % 2**31

    table = ProducerStateTable()
    # The session already had one batch accepted (the pid is known; its first batch
    # travelled alone), ending right before `start` (wrapping when start == 0).
    table.record(pid, epoch, (start - 1) % 2**31, 1, 0, 0, txn, now_ms=0)
    next_offset = 1

    appended_at: dict[int, int] = {}  # batch index -> base offset
    log: list[int] = []  # batch indices in append order
    acked: dict[int, int] = {}  # what the client has learned
    network: list[int] = []  # requests in flight, by batch index
    sent = 0

    def lowest_unacked() -> int:
        return next((i for i in range(n) if i not in acked), n)

    def deliver(i: int, lose_response: bool) -> None:
        nonlocal next_offset
        decision = table.check(pid, epoch, bases[i], counts[i], txn)
        if isinstance(decision, Append):
            assert i == len(log), f"batch {i} appended after {log}"
            appended_at[i] = next_offset
            log.append(i)
            table.record(pid, epoch, bases[i], counts[i], next_offset, 10 + i, txn, now_ms=10 + i)
            next_offset += counts[i]
            if not lose_response:
                acked[i] = appended_at[i]
        elif isinstance(decision, Duplicate):
            assert i in appended_at
            assert decision.base_offset == appended_at[i]
            assert decision.timestamp == 10 + i
            if not lose_response:
                acked[i] = decision.base_offset
        else:
            assert decision.code == OUT_OF_ORDER, decision
            # Refused: either an earlier batch has not landed yet, or this is a stale
            # copy of a batch the client already has an ack for (it ignores the answer).
            assert i not in appended_at and i > len(log) or i in acked

    for _ in range(data.draw(st.integers(0, 120), label="steps")):
        actions = []
        if sent < n and sent - lowest_unacked() < WINDOW:
            actions.append("send")
        if network:
            actions += ["deliver", "deliver", "duplicate", "drop"]
        if any(i not in acked for i in range(sent)):
            actions.append("retry")
        if not actions:
            break
        action = data.draw(st.sampled_from(actions), label="action")
        if action == "send":
            network.append(sent)
            sent += 1
        elif action == "retry":
            unacked = [i for i in range(sent) if i not in acked]
            network.append(data.draw(st.sampled_from(unacked), label="retry"))
        else:
            k = data.draw(st.integers(0, len(network) - 1), label="packet")
            if action == "duplicate":
                network.append(network[k])
            elif action == "drop":
                network.pop(k)
            else:
                deliver(network.pop(k), data.draw(st.booleans(), label="lose_response"))

    # Eventually the network behaves: the client resends what it lacks, in order,
    # never more than 5 ahead of its oldest unacked batch; stale copies still arrive.
    while len(acked) < n:
        low = lowest_unacked()
        for i in range(low, min(n, low + WINDOW)):
            if i not in acked:
                deliver(i, lose_response=False)
        for i in network:
            deliver(i, lose_response=False)
        network.clear()

    assert log == list(range(n))
    assert acked == appended_at
    expected = 1
    for i in range(n):
        assert appended_at[i] == expected
        expected += counts[i]
    assert table.get(pid).last_seq == (bases[-1] + counts[-1] - 1) % 2**31


# --- stateful: snapshots preserve decisions, fences fence, epochs never fall -------------

PIDS = [PID, PID + 1, PID + 2, PID + 3]


def _probes(table: ProducerStateTable, extra_seq: int) -> list[tuple[int, int, int, int, bool]]:
    out = []
    for pid in PIDS:
        entry = table.get(pid)
        epoch = entry.epoch if entry else 0
        seqs = {0, 1, extra_seq}
        ranges = []
        if entry:
            seqs.add(next_sequence(entry.last_seq))
            for b in entry.batches:
                ranges.append((b.first_seq, (b.last_seq - b.first_seq) % 2**31 + 1))
        for e in (epoch - 1, epoch, epoch + 1):
            for s in seqs:
                for txn in (False, True):
                    out.append((pid, e, s, 1, txn))
                    out.append((pid, e, s, 3, txn))
            for s, c in ranges:
                out.append((pid, e, s, c, False))
    return out


class ProducerStateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.table = ProducerStateTable()
        self.offset = 0
        self.now = 0
        self.epochs: dict[int, int] = {}

    @rule(
        pid=st.sampled_from(PIDS),
        epoch_delta=st.sampled_from([-1, 0, 0, 0, 0, 1]),
        seq_kind=st.sampled_from(["next", "next", "next", "zero", "dup", "random"]),
        count=st.integers(1, 4),
        txn=st.booleans(),
        rnd=st.integers(0, INT32_MAX),
        dt=st.integers(0, 100),
    )
    def produce(
        self, pid: int, epoch_delta: int, seq_kind: str, count: int, txn: bool, rnd: int, dt: int
    ) -> None:
        entry = self.table.get(pid)
        epoch = max(0, (entry.epoch if entry else 0) + epoch_delta)
        if seq_kind == "next":
            seq = next_sequence(entry.last_seq) if entry else rnd % 3
        elif seq_kind == "zero":
            seq = 0
        elif seq_kind == "dup" and entry and entry.batches:
            b = entry.batches[rnd % len(entry.batches)]
            seq, count = b.first_seq, (b.last_seq - b.first_seq) % 2**31 + 1
        else:
            seq = rnd
        self.now += dt
        decision = self.table.check(pid, epoch, seq, count, txn)
        if isinstance(decision, Append):
            self.table.record(pid, epoch, seq, count, self.offset, self.now, txn, now_ms=self.now)
            self.offset += count
        elif isinstance(decision, Duplicate):
            assert entry is not None and epoch == entry.epoch
            assert decision.base_offset < self.offset
        else:
            assert decision.code in (OUT_OF_ORDER, FENCED, INVALID_TXN_STATE)
            if decision.code == FENCED:
                assert entry is not None and epoch < entry.epoch

    @rule(pid=st.sampled_from(PIDS), epoch_delta=st.sampled_from([-1, 0, 0, 1]))
    def marker(self, pid: int, epoch_delta: int) -> None:
        entry = self.table.get(pid)
        epoch = max(0, (entry.epoch if entry else 0) + epoch_delta)
        open_at = entry.txn_first_offset if entry else None
        decision = self.table.check_marker(pid, epoch)
        if isinstance(decision, Reject):
            assert entry is not None and epoch < entry.epoch and open_at is None
            return
        assert self.table.end_txn(pid, epoch, now_ms=self.now) == open_at
        self.offset += 1
        assert self.table.get(pid).txn_first_offset is None

    @rule(pid=st.sampled_from(PIDS), bump=st.integers(1, 2), txn=st.booleans())
    def fence(self, pid: int, bump: int, txn: bool) -> None:
        entry = self.table.get(pid)
        old = entry.epoch if entry else None
        old_next = next_sequence(entry.last_seq) if entry else 0
        new = (old if old is not None else 0) + bump
        assert self.table.fence(pid, new, now_ms=self.now) is True
        entry = self.table.get(pid)
        assert entry.epoch == new and len(entry.batches) == 0
        if old is not None:
            # the zombie's next batch, and its retries, are fenced
            assert code(self.table.check(pid, old, old_next, 1, txn)) == FENCED
            assert code(self.table.check(pid, old, 0, 1, txn)) == FENCED
        assert code(self.table.check(pid, new, 3, 1, txn)) == OUT_OF_ORDER
        expect_txn_state = entry.txn_first_offset is not None and not txn
        assert code(self.table.check(pid, new, 0, 1, txn)) == (
            INVALID_TXN_STATE if expect_txn_state else None
        )

    @rule(dt=st.integers(0, 400), max_idle=st.integers(0, 300))
    def expire(self, dt: int, max_idle: int) -> None:
        self.now += dt
        before = {e.producer_id: e.txn_first_offset for e in self.table}
        dropped = [e.producer_id for e in self.table.expire(self.now, max_idle)]
        for pid in dropped:
            assert before[pid] is None
            assert pid not in self.table
            self.epochs.pop(pid, None)

    @rule(extra_seq=st.integers(0, INT32_MAX))
    def snapshot_roundtrip(self, extra_seq: int) -> None:
        snap = self.table.to_snapshot()
        restored = ProducerStateTable.from_snapshot(
            msgpack.unpackb(msgpack.packb(snap)), now_ms=self.now
        )
        # the table's clock is the load time; every entry's idle time is kept
        assert restored.to_snapshot() == {**snap, "clock_ms": self.now}
        assert restored.describe() == self.table.describe()
        assert restored.first_unstable_offset() == self.table.first_unstable_offset()
        for probe in _probes(self.table, extra_seq):
            assert restored.check(*probe) == self.table.check(*probe), probe
        self.table = restored

    @invariant()
    def epochs_never_fall(self) -> None:
        for entry in self.table:
            assert entry.epoch >= self.epochs.get(entry.producer_id, entry.epoch)
            self.epochs[entry.producer_id] = entry.epoch

    @invariant()
    def lso_matches_brute_force(self) -> None:
        open_starts = [e.txn_first_offset for e in self.table if e.txn_first_offset is not None]
        assert self.table.first_unstable_offset() == (min(open_starts) if open_starts else None)

    @invariant()
    def ring_is_bounded_and_ordered(self) -> None:
        for entry in self.table:
            assert len(entry.batches) <= WINDOW
            offsets = [b.base_offset for b in entry.batches]
            assert offsets == sorted(offsets)


ProducerStateMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
test_producer_state_machine = ProducerStateMachine.TestCase
