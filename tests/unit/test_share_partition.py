"""The share-partition machine (``kaas.domain.share_partition``): acquisition, acknowledgement,
locks, the delivery-count limit, the start offset, and replay of its deltas; each bad input
answered with Apache's error. The property test is at the end."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from kio.schema.errors import ErrorCode

from kaas.domain.groups.configs import settings_problem
from kaas.domain.share_partition import (
    AckBatch,
    AutoOffsetReset,
    Delta,
    Persisted,
    RecordState,
    ShareError,
    ShareLimits,
    SharePartition,
    Span,
    check_ack_batches,
    spans_of,
)
from kaas.settings import Settings

A, Q, K, X = RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
ACCEPT, RELEASE, REJECT, GAP, RENEW = 1, 2, 3, 0, 4
LOCK = 1_000


def limits(delivery: int = 5, locks: int = 100) -> ShareLimits:
    return ShareLimits(delivery_count_limit=delivery, record_lock_duration_ms=LOCK, max_record_locks=locks)


def states(sp: SharePartition) -> list[tuple[int, int, RecordState, int, str]]:
    return [(f, la, s, c, m) for f, la, s, c, m, _ in sp.runs()]


def ack(sp: SharePartition, member: str, first: int, last: int, *types: int, now: int = 0):
    return sp.acknowledge(member, [AckBatch(first, last, types)], now)


def refused(code: ErrorCode, sp: SharePartition, member: str, batches: list[AckBatch]) -> None:
    before = sp.snapshot(), sp.runs()
    with pytest.raises(ShareError) as exc:
        sp.acknowledge(member, batches, 0)
    assert exc.value.code == code
    assert (sp.snapshot(), sp.runs()) == before  # all or nothing


# ---------------------------------------------------------------- acquisition


def test_acquire_takes_whole_batches_and_archives_what_is_not_a_record():
    sp = SharePartition(limits(), 0)
    # 0-4 data, 5 a control batch, 6-7 absent (compacted away), 8-9 data
    got = sp.acquire("m", 0, [Span(0, 4, True), Span(5, 5, False), Span(8, 9, True)], max_records=100, now_ms=0)
    assert got.acquired == [(0, 4, 1), (8, 9, 1)]
    assert states(sp) == [(0, 4, Q, 1, "m"), (5, 7, X, 0, ""), (8, 9, Q, 1, "m")]
    assert got.delta == Delta(0, 10, ((0, 4, 1, 1), (5, 5, 4, 0), (6, 7, 4, 0), (8, 9, 1, 1)))
    assert sp.next_fetch_offset() == 10
    assert sp.next_deadline() == LOCK


def test_max_records_is_soft_by_batch_and_exact_in_record_limit_mode():
    spans = [Span(0, 9, True), Span(10, 19, True)]
    sp = SharePartition(limits(), 0)
    assert sp.acquire("m", 0, spans, max_records=3, now_ms=0).acquired == [(0, 9, 1)]
    sp = SharePartition(limits(), 0)
    assert sp.acquire("m", 0, spans, max_records=3, now_ms=0, record_limit=True).acquired == [(0, 2, 1)]
    # the rest of the batch is read again from the end of the window, mid-batch
    assert sp.next_fetch_offset() == 3
    assert sp.acquire("n", 3, spans, max_records=12, now_ms=0, record_limit=True).acquired == [(3, 14, 1)]


def test_the_in_flight_cap_stops_new_records_but_not_redelivery():
    sp = SharePartition(limits(locks=100), 0)
    spans = [Span(i * 60, i * 60 + 59, True) for i in range(4)]
    assert sp.acquire("m", 0, spans, max_records=1000, now_ms=0).acquired == [(0, 119, 1)]  # 60 < 100: one more batch
    assert not sp.can_acquire()
    assert sp.acquire("m", sp.next_fetch_offset(), spans, max_records=1000, now_ms=0).acquired == []
    ack(sp, "m", 10, 19, RELEASE)
    assert sp.can_acquire() and sp.next_fetch_offset() == 10
    assert sp.acquire("n", 10, spans, max_records=1000, now_ms=0).acquired == [(10, 19, 2)]


def test_a_record_on_its_last_delivery_goes_out_alone():
    sp = SharePartition(limits(delivery=3), 0)
    spans = [Span(0, 9, True)]
    sp.acquire("m", 0, spans, max_records=10, now_ms=0)
    ack(sp, "m", 0, 9, RELEASE)
    sp.acquire("m", 0, spans, max_records=10, now_ms=0)
    ack(sp, "m", 0, 9, *([ACCEPT] * 4 + [RELEASE] + [ACCEPT] * 5))  # offset 4: delivered twice so far
    assert sp.start == 4
    got = sp.acquire("m", 4, spans, max_records=10, now_ms=0)
    assert got.acquired == [(4, 4, 3)]  # alone, on its third and last delivery
    ack(sp, "m", 4, 4, RELEASE)
    assert sp.start == 10 and sp.end == 10  # archived at the limit, the start moves past it
    assert sp.acquire("m", 10, spans, max_records=10, now_ms=0).acquired == []


def test_spans_of_read_committed_hides_aborted_data_and_markers():
    # pid 7: 0-1 aborted (marker 2); pid 8: 3-4 committed (marker 5); pid 7 again 6 (open, below the LSO
    # callers never read, here treated as data); plain data 7
    batches = [(0, 1, 7, True, False), (2, 2, 7, True, True), (3, 4, 8, True, False), (5, 5, 8, True, True),
               (6, 6, 7, True, False), (7, 7, -1, False, False)]
    aborted = [(2, 7, 0)]
    assert [s.deliverable for s in spans_of(batches, aborted, True)] == [False, False, True, False, True, True]
    assert [s.deliverable for s in spans_of(batches, aborted, False)] == [True, False, True, False, True, True]


# ---------------------------------------------------------------- acknowledgement


def acquired_0_9(member: str = "m", delivery: int = 5) -> SharePartition:
    sp = SharePartition(limits(delivery=delivery), 0)
    sp.acquire(member, 0, [Span(0, 9, True)], max_records=10, now_ms=0)
    return sp


def test_accept_release_reject_gap_and_the_start_offset():
    sp = acquired_0_9()
    out = sp.acknowledge("m", [AckBatch(0, 1, (ACCEPT,)), AckBatch(2, 5, (REJECT, GAP, RELEASE, ACCEPT))], 0)
    assert out.acknowledged == {1: 3, 3: 1, 0: 1, 2: 1}
    assert sp.start == 4  # 0-3 done; 4 released
    assert states(sp) == [(4, 4, A, 1, ""), (5, 5, K, 1, ""), (6, 9, Q, 1, "m")]
    assert sp.next_fetch_offset() == 4
    assert out.delta is not None and out.delta.start == 4


def test_acknowledging_records_never_acquired_is_invalid_record_state():
    sp = acquired_0_9()
    ack(sp, "m", 0, 4, RELEASE)
    refused(ErrorCode.invalid_record_state, sp, "m", [AckBatch(2, 3, (ACCEPT,))])  # released: available
    ack(sp, "m", 5, 5, ACCEPT)
    refused(ErrorCode.invalid_record_state, sp, "m", [AckBatch(5, 5, (ACCEPT,))])  # acknowledged already


def test_acknowledging_another_members_records_is_invalid_record_state():
    sp = acquired_0_9("m")
    refused(ErrorCode.invalid_record_state, sp, "intruder", [AckBatch(3, 3, (ACCEPT,))])


def test_acknowledgements_past_the_acquired_records_are_invalid_request():
    sp = acquired_0_9()
    refused(ErrorCode.invalid_request, sp, "m", [AckBatch(10, 12, (ACCEPT,))])
    refused(ErrorCode.invalid_request, sp, "m", [AckBatch(8, 12, (ACCEPT,))])
    empty = SharePartition(limits(), 5)
    refused(ErrorCode.invalid_record_state, empty, "m", [AckBatch(5, 6, (ACCEPT,))])


def test_one_bad_batch_refuses_the_whole_partition():
    sp = acquired_0_9()
    ack(sp, "m", 6, 6, RELEASE)
    refused(ErrorCode.invalid_record_state, sp, "m", [AckBatch(0, 4, (ACCEPT,)), AckBatch(6, 6, (ACCEPT,))])
    refused(ErrorCode.invalid_request, sp, "m", [AckBatch(0, 4, (ACCEPT,)), AckBatch(8, 12, (ACCEPT,))])
    assert sp.start == 0


def test_offsets_below_the_start_are_skipped():
    sp = acquired_0_9()
    ack(sp, "m", 0, 4, ACCEPT)
    assert sp.start == 5
    out = sp.acknowledge("m", [AckBatch(3, 6, (ACCEPT,) * 4)], 0)
    assert out.acknowledged == {1: 2} and sp.start == 7


@pytest.mark.parametrize(("batches", "renew", "max_type", "why"), [
    ([AckBatch(5, 4, (1,))], False, 3, "reversed"),
    ([AckBatch(0, 4, (1,)), AckBatch(3, 6, (1,))], False, 3, "overlaps"),
    ([AckBatch(5, 6, (1,)), AckBatch(0, 1, (1,))], False, 3, "overlaps or precedes"),
    ([AckBatch(0, 4, ())], False, 3, "no acknowledge type"),
    ([AckBatch(0, 4, (1, 1))], False, 3, "2 types for 5 offsets"),
    ([AckBatch(0, 0, (5,))], False, 4, "unknown acknowledge type 5"),
    ([AckBatch(0, 0, (-1,))], False, 3, "unknown acknowledge type -1"),
    ([AckBatch(0, 0, (4,))], True, 3, "unknown acknowledge type 4"),  # v1 knows no renew
    ([AckBatch(0, 0, (4,))], False, 4, "without is_renew_ack"),
])
def test_malformed_acknowledgement_batches_are_invalid_request(batches, renew, max_type, why):
    problem = check_ack_batches(batches, renew=renew, max_type=max_type)
    assert problem is not None and why in problem


def test_well_formed_acknowledgement_batches_pass():
    assert check_ack_batches([AckBatch(0, 2, (1, 0, 2)), AckBatch(3, 3, (4,))], renew=True, max_type=4) is None
    # one shared offset passes Apache's request check (first < the last before refuses);
    # the partition refuses it (below)
    assert check_ack_batches([AckBatch(0, 4, (1,)), AckBatch(4, 6, (1,))], renew=False, max_type=3) is None


def test_an_offset_acknowledged_by_two_batches_is_invalid_record_state():
    """Apache applies the batches in order: the second finds the shared offset no longer
    ACQUIRED (INVALID_RECORD_STATE) and everything rolls back; after a RENEW it is still
    ACQUIRED and the second batch settles it."""
    sp = acquired_0_9()
    for first_type in (ACCEPT, RELEASE, REJECT, GAP):
        refused(ErrorCode.invalid_record_state, sp, "m",
                [AckBatch(0, 4, (first_type,)), AckBatch(4, 6, (RELEASE,))])
    refused(ErrorCode.invalid_record_state, sp, "m",
            [AckBatch(0, 2, (ACCEPT, ACCEPT, REJECT)), AckBatch(2, 2, (ACCEPT,))])
    out = sp.acknowledge("m", [AckBatch(0, 4, (RENEW,)), AckBatch(4, 6, (ACCEPT,))], 500)
    assert out.acknowledged == {RENEW: 5, ACCEPT: 3}
    assert [(f, la, s) for f, la, s, _c, _m in states(sp)] == [(0, 3, Q), (4, 6, K), (7, 9, Q)]
    # a batch that reaches the start skips the offsets below it
    sp = acquired_0_9()
    ack(sp, "m", 0, 4, ACCEPT)
    sp.acknowledge("m", [AckBatch(2, 5, (ACCEPT,)), AckBatch(6, 6, (ACCEPT,))], 0)
    assert sp.start == 7


def test_a_batch_wholly_below_the_start_is_invalid_record_state():
    """Apache finds none of its offsets in its in-flight cache: INVALID_RECORD_STATE, and
    the request's other batches roll back with it (a late acknowledgement of records
    another member already settled)."""
    sp = acquired_0_9()
    ack(sp, "m", 0, 4, ACCEPT)
    refused(ErrorCode.invalid_record_state, sp, "m", [AckBatch(2, 4, (RELEASE,))])
    refused(ErrorCode.invalid_record_state, sp, "m", [AckBatch(0, 1, (ACCEPT,)), AckBatch(5, 6, (ACCEPT,))])
    assert sp.start == 5 and [s for _f, _l, s, _c, _m in states(sp)] == [Q]


def test_renew_is_invalid_record_state_where_the_group_does_not_take_it():
    sp = SharePartition(dataclasses.replace(limits(), renew_enabled=False), 0)
    sp.acquire("m", 0, [Span(0, 9, True)], max_records=10, now_ms=0)
    refused(ErrorCode.invalid_record_state, sp, "m", [AckBatch(0, 4, (RENEW,))])
    refused(ErrorCode.invalid_record_state, sp, "m", [AckBatch(0, 1, (ACCEPT,)), AckBatch(2, 4, (RENEW,))])
    assert sp.start == 0
    assert sp.acknowledge("m", [AckBatch(0, 4, (ACCEPT,))], 0).acknowledged == {ACCEPT: 5}


# ---------------------------------------------------------------- locks and the delivery-count limit


def test_an_expired_lock_makes_records_available_again_with_their_count():
    sp = acquired_0_9()
    assert sp.expire(LOCK - 1).delta is None
    out = sp.expire(LOCK)
    assert out.expired == 10 and out.archived == 0
    assert states(sp) == [(0, 9, A, 1, "")]
    refused(ErrorCode.invalid_record_state, sp, "m", [AckBatch(0, 9, (ACCEPT,))])  # the lock is gone
    assert sp.acquire("n", 0, [Span(0, 9, True)], max_records=10, now_ms=LOCK).acquired == [(0, 9, 2)]


def test_renew_extends_the_lock_and_persists_nothing():
    sp = acquired_0_9()
    out = sp.acknowledge("m", [AckBatch(0, 4, (RENEW,))], LOCK - 1)
    assert out.delta is None and out.acknowledged == {4: 5}
    sp.expire(LOCK)
    assert states(sp) == [(0, 4, Q, 1, "m"), (5, 9, A, 1, "")]
    assert sp.next_deadline() == 2 * LOCK - 1


def test_the_delivery_count_limit_archives_a_poison_record():
    sp = SharePartition(limits(delivery=2), 0)
    spans = [Span(0, 0, True)]
    for delivery in (1, 2):
        assert sp.acquire("m", sp.next_fetch_offset(), spans, max_records=1, now_ms=0).acquired == [(0, 0, delivery)]
        out = sp.expire(LOCK)
    assert out.archived == 1 and sp.start == 1
    assert sp.acquire("m", sp.next_fetch_offset(), spans, max_records=1, now_ms=0).acquired == []


def test_releasing_a_member_keeps_the_delivery_count():
    # Apache 4.4's releaseAcquiredRecords: AVAILABLE with DeliveryCountOps.NO_OP, so the
    # next delivery of a record the member may have handed to its application counts as 2
    sp = acquired_0_9("m")
    sp.acquire("n", 10, [Span(10, 12, True)], max_records=10, now_ms=0)
    out = sp.release_member("m")
    assert states(sp) == [(0, 9, A, 1, ""), (10, 12, Q, 1, "n")]
    assert out.delta is not None and out.expired == 0 and out.archived == 0
    assert sp.acquire("n", 0, [Span(0, 9, True)], max_records=10, now_ms=0).acquired == [(0, 9, 2)]


def test_releasing_a_member_at_the_delivery_limit_archives():
    sp = acquired_0_9("m", delivery=2)
    sp.release_member("m")
    assert sp.acquire("m", 0, [Span(0, 9, True)], max_records=10, now_ms=0).acquired == [(0, 9, 2)]
    out = sp.release_member("m")
    assert out.archived == 10 and sp.start == 10 and states(sp) == []


def test_the_log_start_moving_past_the_window():
    sp = acquired_0_9()
    out = sp.advance_log_start(4)
    assert out.archived == 4 and sp.start == 4 and states(sp) == [(4, 9, Q, 1, "m")]
    ack(sp, "m", 0, 5, ACCEPT)  # below the start: skipped
    assert sp.start == 6
    sp.advance_log_start(50)
    assert (sp.start, sp.end, sp.runs()) == (50, 50, [])
    assert sp.advance_log_start(40).delta is None


def test_limits_refuse_what_no_configuration_reaches():
    for bad in (0, 1, 26, 1000):
        with pytest.raises(ValueError, match="delivery-count limit"):
            ShareLimits(delivery_count_limit=bad)
    with pytest.raises(ValueError, match="lock duration"):
        ShareLimits(record_lock_duration_ms=10)
    with pytest.raises(ValueError, match="max record locks"):
        ShareLimits(max_record_locks=0)
    ShareLimits(delivery_count_limit=2)


def test_a_delivery_count_limit_of_0_or_1000_is_refused_at_config_level():
    base = Settings()
    for bad, why in ((0, "at least 2"), (1000, "no more than 10")):
        problem = settings_problem(dataclasses.replace(base, group_share_delivery_count_limit=bad))
        assert problem is not None and problem[0] == "group.share.delivery.count.limit" and why in problem[1]
    assert settings_problem(dataclasses.replace(base, group_share_delivery_count_limit=10)) is None


def test_auto_offset_reset_values():
    assert AutoOffsetReset.parse("earliest").kind == "earliest"
    assert AutoOffsetReset.parse("by_duration:PT1H30M") == AutoOffsetReset("by_duration", 5_400_000)
    assert AutoOffsetReset.parse("by_duration:P1DT0.5S").duration_ms == 86_400_500
    for bad in ("", "first", "by_duration:", "by_duration:-PT1H", "by_duration:1h", "by_duration:P"):
        with pytest.raises(ValueError):
            AutoOffsetReset.parse(bad)


# ---------------------------------------------------------------- persistence


def test_replayed_deltas_rebuild_the_window_and_restore_releases_the_locks():
    sp = acquired_0_9()
    base = Persisted(0, 0)
    journal = [d for d in (ack(sp, "m", 0, 2, ACCEPT).delta, ack(sp, "m", 3, 3, RELEASE).delta) if d]
    again = SharePartition.replayed(limits(), base, [Delta(0, 10, ((0, 9, 1, 1),)), *journal])
    assert again.snapshot() == sp.snapshot()
    out = again.restore()
    assert out.delta is not None
    assert states(again) == [(3, 9, A, 1, "")]


@pytest.mark.parametrize("bad", [
    (Persisted(0, 5, ((0, 3, 0, 1),)), []),  # offset 4 has no state
    (Persisted(0, 5, ((0, 2, 0, 1), (2, 4, 0, 1))), []),  # overlap
    (Persisted(0, 5, ((0, 4, 3, 1),)), []),  # no state 3
    (Persisted(0, 5, ((0, 4, 0, -1),)), []),
    (Persisted(0, 5, ((0, 4, 0, 1),)), [Delta(0, 9, ((6, 8, 1, 1),))]),  # 5 undescribed
    (Persisted(4, 5, ((4, 4, 0, 1),)), [Delta(2, 5)]),  # the start moves back
    (Persisted(0, 5, ((0, 4, 0, 1),)), [Delta(0, 3)]),  # the end moves back
])
def test_replay_refuses_what_no_machine_wrote(bad):
    snap, deltas = bad
    with pytest.raises(ValueError):
        SharePartition.replayed(limits(), snap, deltas)


# ---------------------------------------------------------------- the property


@st.composite
def logs(draw) -> list[Span]:
    """A partition's log: batches of data, control batches, aborted data, and holes."""
    out, at = [], 0
    for _ in range(draw(st.integers(1, 12))):
        at += draw(st.sampled_from([0, 0, 0, 1, 3]))  # a hole: compacted away
        n = draw(st.integers(1, 6))
        out.append(Span(at, at + n - 1, draw(st.sampled_from([True, True, True, False]))))
        at += n
    return out


MEMBERS = ("m1", "m2", "m3")


class SharePartitionModel(RuleBasedStateMachine):
    """Any sequence of fetches, acknowledgements (good or bad), lock expiries, member
    releases, log-start moves and crashes with restarts from the persisted state."""

    @initialize(log=logs(), delivery=st.integers(2, 4), locks=st.integers(100, 120))
    def setup(self, log, delivery, locks):
        self.log = log
        self.log_end = log[-1].last + 1
        self.limits = limits(delivery=delivery, locks=locks)
        self.sp = SharePartition(self.limits, 0)
        self.snapshot = self.sp.snapshot()  # the durable state: snapshot + journal
        self.journal: list[Delta] = []
        self.now = 0
        self.accepted: set[int] = set()  # answered accepts
        self.start_seen = 0

    def _persist(self, delta: Delta | None) -> None:
        if delta is not None:
            self.journal.append(delta)

    def _read(self, fetch_offset: int, batches: int) -> list[Span]:
        spans = [s for s in self.log if s.last >= fetch_offset]
        return spans[:batches]

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 30), batches=st.integers(1, 4),
          record_limit=st.booleans())
    def fetch(self, member, max_records, batches, record_limit):
        self._persist(self.sp.expire(self.now).delta)
        fo = self.sp.next_fetch_offset()
        got = self.sp.acquire(member, fo, self._read(fo, batches), max_records=max_records, now_ms=self.now,
                              record_limit=record_limit)
        self._persist(got.delta)
        for first, last, count in got.acquired:
            assert not self.accepted & set(range(first, last + 1)), "an accepted record was acquired again"
            assert 1 <= count <= self.limits.delivery_count_limit
            assert all(any(s.first <= o <= s.last and s.deliverable for s in self.log) for o in (first, last))

    @rule(member=st.sampled_from(MEMBERS), data=st.data())
    def acknowledge(self, member, data):
        self._persist(self.sp.expire(self.now).delta)
        mine = [(f, la) for f, la, s, _, m, _ in self.sp.runs() if s == Q and m == member]
        if mine and data.draw(st.booleans()):
            f, la = data.draw(st.sampled_from(mine))
            lo = data.draw(st.integers(f, la))
            hi = data.draw(st.integers(lo, la))
        else:  # anything: offsets never acquired, another member's, outside the window
            lo = data.draw(st.integers(max(0, self.sp.start - 3), max(self.log_end, self.sp.end) + 3))
            hi = data.draw(st.integers(lo, lo + 5))
        types = tuple(data.draw(st.lists(st.sampled_from([0, 1, 2, 3, 4]), min_size=1, max_size=1)))
        if data.draw(st.booleans()):
            types = tuple(data.draw(st.lists(st.sampled_from([0, 1, 2, 3]), min_size=hi - lo + 1,
                                             max_size=hi - lo + 1)))
        batches = [AckBatch(lo, hi, types)]
        if data.draw(st.booleans()):  # a second batch from the first one's last offset on
            hi2 = data.draw(st.integers(hi, hi + 3))
            batches.append(AckBatch(hi, hi2, (data.draw(st.sampled_from([0, 1, 2, 3, 4])),)))
        if check_ack_batches(batches, renew=True, max_type=4) is not None:
            return
        before = self.sp.snapshot()
        try:
            out = self.sp.acknowledge(member, batches, self.now)
        except ShareError as exc:
            assert exc.code in (ErrorCode.invalid_record_state, ErrorCode.invalid_request)
            assert self.sp.snapshot() == before
            return
        self._persist(out.delta)
        done = {}  # offset -> the type that settled it (a RENEW settles nothing)
        for b in batches:
            for off in range(max(b.first, before.start), b.last + 1):
                t = b.types[0] if len(b.types) == 1 else b.types[off - b.first]
                assert off not in done, "an offset was acknowledged twice"
                if t != RENEW:
                    done[off] = t
        self.accepted |= {off for off, t in done.items() if t == ACCEPT}

    @rule(ms=st.integers(0, 2 * LOCK))
    def time_passes(self, ms):
        self.now += ms
        self._persist(self.sp.expire(self.now).delta)

    @rule(member=st.sampled_from(MEMBERS))
    def member_leaves(self, member):
        self._persist(self.sp.release_member(member).delta)

    @rule(data=st.data())
    def log_start_moves(self, data):
        self._persist(self.sp.advance_log_start(data.draw(st.integers(0, self.sp.end + 2))).delta)

    @rule()
    def crash_and_restart(self):
        """A new leader loads the files: everything answered is there."""
        self.sp = SharePartition.replayed(self.limits, self.snapshot, self.journal)
        self._persist(self.sp.restore().delta)
        if self.journal and len(self.journal) > 20:  # a snapshot folds the journal
            self.snapshot, self.journal = self.sp.snapshot(), []

    @invariant()
    def window_is_whole_and_files_agree(self):
        if not hasattr(self, "sp"):
            return
        sp = self.sp
        at = sp.start
        for f, la, s, c, m, d in sp.runs():
            assert f == at and la >= f
            assert (m != "") == (s == Q) and (d > 0) == (s == Q)
            assert 0 <= c <= self.limits.delivery_count_limit
            at = la + 1
        assert at == sp.end
        assert sp.start >= self.start_seen, "the start offset moved back"
        self.start_seen = sp.start
        assert SharePartition.replayed(self.limits, self.snapshot, self.journal).snapshot() == sp.snapshot()

    def teardown(self):
        """Liveness: consumers that keep accepting finish the log."""
        if not hasattr(self, "sp"):
            return
        sp = SharePartition.replayed(self.limits, self.snapshot, self.journal)
        sp.restore()
        now = self.now
        for _ in range(4 * len(self.log) + 10):
            now += 2 * LOCK
            sp.expire(now)
            fo = sp.next_fetch_offset()
            got = sp.acquire("drain", fo, self._read(fo, 3), max_records=50, now_ms=now)
            for first, last, _ in got.acquired:
                sp.acknowledge("drain", [AckBatch(first, last, (ACCEPT,))], now)
        assert sp.start == max(self.log_end, sp.start) and sp.end == sp.start
        assert sp.counts()[Q] == sp.counts()[A] == 0


TestSharePartitionModel = SharePartitionModel.TestCase
TestSharePartitionModel.settings = settings(settings.default, stateful_step_count=30)
