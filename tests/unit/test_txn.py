"""Transaction coordinator state machine (kaas.domain.txn): event scripts + a stateful model."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from kio.schema.errors import ErrorCode

from kaas.domain.txn import (
    EPOCH_EXHAUSTED,
    I16_MAX,
    Fence,
    OffsetHook,
    Persist,
    Reply,
    SlotState,
    TxnMetadata,
    TxnResult,
    TxnState,
    WriteMarkers,
    add_offsets,
    add_partitions,
    complete_end_txn,
    describe,
    expired,
    init_producer_id,
    offset_hook_of,
    pending_dispatches,
    prepare_end_txn,
    reaper_abort,
    timed_out,
)

TID = "tx-1"
MAX_TIMEOUT = 900_000
TIMEOUT = 60_000
P0 = ("t", 0)
P1 = ("t", 1)
Q0 = ("u", 0)


class Alloc:
    """A pid allocator that counts its calls."""

    def __init__(self, start: int = 1000) -> None:
        self._next = itertools.count(start)
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return next(self._next)


def kinds(result: TxnResult) -> list[type]:
    return [type(e) for e in result.effects]


def init(
    meta: TxnMetadata | None,
    *,
    alloc: Alloc | None = None,
    pid: int = -1,
    epoch: int = -1,
    version: int = 4,
    now: int = 1_000,
    timeout: int = TIMEOUT,
    txn_id: str | None = TID,
) -> TxnResult:
    return init_producer_id(
        meta, txn_id, timeout, MAX_TIMEOUT, pid, epoch, now, alloc or Alloc(), version
    )


def fresh(alloc: Alloc | None = None) -> TxnMetadata:
    result = init(None, alloc=alloc)
    assert result.meta is not None
    return result.meta


def ongoing(partitions=(P0,), groups=(), now: int = 2_000) -> TxnMetadata:
    meta = fresh()
    if partitions:
        meta = add_partitions(meta, meta.producer_id, 0, partitions, now, 0).meta or meta
    for group in groups:
        meta = add_offsets(meta, meta.producer_id, 0, group, now, 0).meta or meta
    assert meta.state is TxnState.Ongoing
    return meta


def prepared(commit: bool, partitions=(P0, P1), groups=("g",)) -> TxnMetadata:
    meta = ongoing(partitions, groups)
    result = prepare_end_txn(meta, meta.producer_id, meta.producer_epoch, commit, 3_000, 1)
    assert result.meta is not None
    return result.meta


def completed(commit: bool) -> TxnMetadata:
    meta = prepared(commit)
    result = complete_end_txn(meta, 4_000, dispatched=result_markers(meta))
    assert result.meta is not None
    return result.meta


def result_markers(meta: TxnMetadata) -> WriteMarkers:
    (markers,) = pending_dispatches(SlotState({meta.transactional_id: meta}))
    return markers


# --- transitions of the seed's diagram -------------------------------------------------


def test_first_allocation_is_empty_at_epoch_0() -> None:
    alloc = Alloc(7)
    result = init(None, alloc=alloc, now=123)
    assert result.error_code == ErrorCode.none
    meta = result.meta
    assert meta is not None
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (7, 0, TxnState.Empty)
    assert meta.timeout_ms == TIMEOUT and meta.last_update_ms == 123
    assert result.effects == (Persist(meta), Reply(ErrorCode.none, 7, 0))
    assert alloc.calls == 1


@pytest.mark.parametrize("start", [TxnState.Empty, TxnState.CompleteCommit, TxnState.CompleteAbort])
def test_add_partitions_begins_a_transaction(start: TxnState) -> None:
    meta = {
        TxnState.Empty: fresh,
        TxnState.CompleteCommit: lambda: completed(True),
        TxnState.CompleteAbort: lambda: completed(False),
    }[start]()
    assert meta.state is start
    result = add_partitions(meta, meta.producer_id, meta.producer_epoch, [P0, Q0], 5_000, 0)
    new = result.meta
    assert result.error_code == ErrorCode.none and new is not None
    assert new.state is TxnState.Ongoing
    assert new.partitions == {P0, Q0} and new.groups == frozenset()
    assert new.ongoing_since_ms == 5_000 and new.txn_seq == meta.txn_seq + 1
    assert result.effects == (Persist(new), Reply(ErrorCode.none))


@pytest.mark.parametrize("start", [TxnState.Empty, TxnState.CompleteCommit, TxnState.CompleteAbort])
def test_add_offsets_begins_a_transaction(start: TxnState) -> None:
    meta = {
        TxnState.Empty: fresh,
        TxnState.CompleteCommit: lambda: completed(True),
        TxnState.CompleteAbort: lambda: completed(False),
    }[start]()
    result = add_offsets(meta, meta.producer_id, meta.producer_epoch, "g1", 5_000, 0)
    new = result.meta
    assert new is not None and new.state is TxnState.Ongoing
    assert new.groups == {"g1"} and new.partitions == frozenset()
    assert new.ongoing_since_ms == 5_000
    assert kinds(result) == [Persist, Reply]


def test_ongoing_accumulates_partitions_and_keeps_its_start() -> None:
    meta = ongoing([P0], now=2_000)
    result = add_partitions(meta, meta.producer_id, 0, [P1], 2_500, 0)
    assert result.meta is not None
    assert result.meta.partitions == {P0, P1}
    assert result.meta.ongoing_since_ms == 2_000 and result.meta.txn_seq == meta.txn_seq
    assert kinds(result) == [Persist, Reply]


def test_ongoing_with_known_partitions_answers_without_persist() -> None:
    meta = ongoing([P0, P1], groups=["g"])
    result = add_partitions(meta, meta.producer_id, 0, [P1], 9_000, 0)
    assert result == TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none),))
    again = add_offsets(meta, meta.producer_id, 0, "g", 9_000, 0)
    assert again == TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none),))


def test_stamp_is_positive_even_at_time_zero() -> None:
    meta = fresh()
    result = add_partitions(meta, meta.producer_id, 0, [P0], 0, 0)
    assert result.meta is not None and result.meta.ongoing_since_ms > 0


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_prepares_and_keeps_the_dispatch_set(commit: bool) -> None:
    meta = ongoing([P0, Q0], groups=["g"])
    result = prepare_end_txn(meta, meta.producer_id, 0, commit, 3_000, 1)
    new = result.meta
    assert result.error_code == ErrorCode.none and new is not None
    assert new.state is (TxnState.PrepareCommit if commit else TxnState.PrepareAbort)
    assert new.partitions == {P0, Q0} and new.groups == {"g"}
    assert new.ongoing_since_ms == meta.ongoing_since_ms and new.producer_epoch == 0
    # Persist before markers; no reply until the markers are durable.
    assert result.effects == (
        Persist(new),
        WriteMarkers(new.producer_id, 0, commit, frozenset({P0, Q0}), frozenset({"g"}), TID, 1),
    )
    assert result.reply is None


@pytest.mark.parametrize("commit", [True, False])
def test_complete_clears_and_fires_the_offset_hook(commit: bool) -> None:
    meta = prepared(commit, partitions=[P0], groups=["g1", "g2"])
    markers = result_markers(meta)
    result = complete_end_txn(meta, 4_000, dispatched=markers)
    new = result.meta
    assert new is not None
    assert new.state is (TxnState.CompleteCommit if commit else TxnState.CompleteAbort)
    assert new.partitions == frozenset() and new.groups == frozenset()
    assert new.ongoing_since_ms == 0 and new.last_update_ms == 4_000
    assert result.effects == (
        OffsetHook(meta.producer_id, frozenset({"g1", "g2"}), commit),
        Persist(new),
        Reply(ErrorCode.none, meta.producer_id, meta.producer_epoch),
    )


@pytest.mark.parametrize("commit", [True, False])
def test_the_early_offset_hook_is_the_completions(commit: bool) -> None:
    """``offset_hook_of`` (the hook a coordinator runs beside the peer-led markers) is the
    one ``complete_end_txn`` gives for the same prepared entry; none without groups."""
    meta = prepared(commit, partitions=[P0], groups=["g1", "g2"])
    markers = result_markers(meta)
    [hook] = [e for e in complete_end_txn(meta, 4_000, dispatched=markers).effects if isinstance(e, OffsetHook)]
    assert offset_hook_of(markers) == hook
    assert offset_hook_of(result_markers(prepared(commit, partitions=[P0], groups=()))) is None


def test_complete_without_groups_has_no_offset_hook() -> None:
    meta = prepared(True, partitions=[P0], groups=())
    result = complete_end_txn(meta, 4_000)
    assert kinds(result) == [Persist, Reply]


@pytest.mark.parametrize("start", [TxnState.Empty, TxnState.CompleteCommit, TxnState.CompleteAbort])
def test_rejoin_bumps_the_epoch_and_fences(start: TxnState) -> None:
    meta = {
        TxnState.Empty: fresh,
        TxnState.CompleteCommit: lambda: completed(True),
        TxnState.CompleteAbort: lambda: completed(False),
    }[start]()
    alloc = Alloc()
    result = init(meta, alloc=alloc, timeout=30_000, now=7_000)
    new = result.meta
    assert result.error_code == ErrorCode.none and new is not None
    assert alloc.calls == 0
    assert (new.producer_id, new.producer_epoch) == (meta.producer_id, meta.producer_epoch + 1)
    assert new.state is TxnState.Empty and new.timeout_ms == 30_000
    assert new.last_producer_id == meta.producer_id and new.last_producer_epoch == -1
    assert new.txn_seq == meta.txn_seq
    assert result.effects == (
        Persist(new),
        Fence(new.producer_id, new.producer_epoch),
        Reply(ErrorCode.none, new.producer_id, new.producer_epoch),
    )


# --- InitProducerId errors and KIP-360 -------------------------------------------------


def test_init_null_txn_id_allocates_and_ignores_the_pair() -> None:
    alloc = Alloc(55)
    result = init(None, alloc=alloc, txn_id=None, pid=3, epoch=4, timeout=10**9)
    assert result == TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none, 55, 0),))


def test_init_empty_txn_id_is_invalid_request() -> None:
    result = init(None, txn_id="")
    assert result.error_code == ErrorCode.invalid_request and result.meta is None
    assert result.effects == (Reply(ErrorCode.invalid_request),)


@pytest.mark.parametrize("timeout", [0, -1, MAX_TIMEOUT + 1])
def test_init_bad_timeout(timeout: int) -> None:
    alloc = Alloc()
    result = init(None, alloc=alloc, timeout=timeout)
    assert result.error_code == ErrorCode.invalid_transaction_timeout == 50
    assert result.meta is None and alloc.calls == 0
    assert init(fresh(), timeout=timeout).error_code == ErrorCode.invalid_transaction_timeout


@pytest.mark.parametrize(("pid", "epoch"), [(5, -1), (-1, 5)])
def test_init_half_pair_is_invalid_request_from_v3(pid: int, epoch: int) -> None:
    assert init(fresh(), pid=pid, epoch=epoch, version=3).error_code == ErrorCode.invalid_request
    # v2 has no such fields: ignored.
    assert init(fresh(), pid=pid, epoch=epoch, version=2).error_code == ErrorCode.none


@pytest.mark.parametrize(
    ("version", "code"),
    [(3, ErrorCode.invalid_producer_epoch), (4, ErrorCode.producer_fenced)],
)
@pytest.mark.parametrize("wrong", ["pid", "epoch"])
def test_init_unknown_pair_is_fenced_per_version(
    version: int, code: ErrorCode, wrong: str
) -> None:
    meta = init(fresh()).meta  # epoch 1, previous pair cleared
    assert meta is not None
    pid = meta.producer_id + 1 if wrong == "pid" else meta.producer_id
    epoch = meta.producer_epoch + 5 if wrong == "epoch" else meta.producer_epoch
    result = init(meta, pid=pid, epoch=epoch, version=version)
    assert result.error_code == code and result.meta is None
    assert result.effects == (Reply(code),)


def test_init_pair_below_v3_is_ignored() -> None:
    meta = fresh()
    result = init(meta, pid=999, epoch=77, version=2)
    assert result.error_code == ErrorCode.none
    assert result.meta is not None and result.meta.producer_epoch == 1


def test_kip360_bump_and_retry_of_a_lost_reply() -> None:
    meta = fresh()
    pid = meta.producer_id
    bumped = init(meta, pid=pid, epoch=0, version=4)
    new = bumped.meta
    assert new is not None and new.producer_epoch == 1
    assert (new.last_producer_id, new.last_producer_epoch) == (pid, 0)
    # The reply was lost; the client retries with the same pair: same answer, no change.
    retry = init(new, pid=pid, epoch=0, version=4)
    assert retry.error_code == ErrorCode.none and retry.meta is None
    assert retry.reply == Reply(ErrorCode.none, pid, 1)
    assert Fence(pid, 1) in retry.effects
    # With the current pair it bumps again; the previous pair becomes (pid, 1).
    again = init(new, pid=pid, epoch=1, version=4)
    assert again.meta is not None and again.meta.producer_epoch == 2
    assert init(again.meta, pid=pid, epoch=0, version=4).error_code == ErrorCode.producer_fenced


def test_new_instance_clears_the_previous_pair() -> None:
    meta = init(fresh(), pid=1000, epoch=0).meta  # KIP-360 bump: previous = (1000, 0)
    assert meta is not None
    new_instance = init(meta).meta  # no pair: a new producer instance
    assert new_instance is not None and new_instance.last_producer_epoch == -1
    assert init(new_instance, pid=1000, epoch=0).error_code == ErrorCode.producer_fenced


@pytest.mark.parametrize("state", [TxnState.PrepareCommit, TxnState.PrepareAbort])
def test_init_during_prepare_is_concurrent_transactions(state: TxnState) -> None:
    meta = prepared(state is TxnState.PrepareCommit)
    result = init(meta)
    assert result.error_code == ErrorCode.concurrent_transactions == 51
    assert result.meta is None and result.effects == (Reply(ErrorCode.concurrent_transactions),)


def test_init_while_ongoing_aborts_then_51_then_next_epoch() -> None:
    meta = ongoing([P0, P1], groups=["g"])
    pid = meta.producer_id
    first = init(meta, now=5_000)
    aborting = first.meta
    assert first.error_code == ErrorCode.concurrent_transactions
    assert aborting is not None and aborting.state is TxnState.PrepareAbort
    assert aborting.producer_epoch == 1 and aborting.last_producer_epoch == -1
    assert aborting.partitions == {P0, P1} and aborting.groups == {"g"}
    assert first.effects == (
        Persist(aborting),
        WriteMarkers(pid, 1, False, frozenset({P0, P1}), frozenset({"g"}), TID, 1),
        Reply(ErrorCode.concurrent_transactions),
    )
    # The client retries while the abort is in flight.
    assert init(aborting).error_code == ErrorCode.concurrent_transactions
    done = complete_end_txn(aborting, 6_000, dispatched=first.write_markers)
    assert done.meta is not None and done.meta.state is TxnState.CompleteAbort
    assert OffsetHook(pid, frozenset({"g"}), False) in done.effects
    final = init(done.meta)
    assert final.error_code == ErrorCode.none
    assert final.reply == Reply(ErrorCode.none, pid, 2)
    # The old session is fenced everywhere.
    assert Fence(pid, 2) in final.effects
    assert prepare_end_txn(final.meta, pid, 0, True, 7_000, 3).error_code == ErrorCode.producer_fenced


def test_kip360_bump_while_ongoing_aborts_then_answers_the_session() -> None:
    # A client asking for a KIP-360 bump with its current pair while its transaction is
    # Ongoing (it did not abort first): abort at epoch + 1, 51, and its retry gets that
    # epoch instead of PRODUCER_FENCED (fatal to every client).
    meta = ongoing([P0, P1], groups=["g"])
    pid = meta.producer_id
    first = init(meta, pid=pid, epoch=0, version=4, now=5_000)
    aborting = first.meta
    assert first.error_code == ErrorCode.concurrent_transactions
    assert aborting is not None and aborting.state is TxnState.PrepareAbort
    assert (aborting.producer_epoch, aborting.last_producer_id, aborting.last_producer_epoch) == (1, pid, 0)
    assert first.write_markers == WriteMarkers(pid, 1, False, frozenset({P0, P1}), frozenset({"g"}), TID, 1)
    retry = init(aborting, pid=pid, epoch=0, version=4)
    assert retry.error_code == ErrorCode.concurrent_transactions and retry.meta is None
    done = complete_end_txn(aborting, 6_000, dispatched=first.write_markers).meta
    assert done is not None and done.state is TxnState.CompleteAbort
    answered = init(done, pid=pid, epoch=0, version=4)
    assert answered.reply == Reply(ErrorCode.none, pid, 1) and answered.meta is None
    assert Fence(pid, 1) in answered.effects
    # The session goes on at epoch 1; the old epoch is fenced for everything else.
    assert add_partitions(done, pid, 1, [P0], 7_000, 3).error_code == ErrorCode.none
    assert add_partitions(done, pid, 0, [P0], 7_000, 3).error_code == ErrorCode.producer_fenced
    # A new producer instance (no pair) still fences the session.
    new_instance = init(done).meta
    assert new_instance is not None and new_instance.producer_epoch == 2
    assert init(new_instance, pid=pid, epoch=0, version=4).error_code == ErrorCode.producer_fenced


def test_kip360_bump_while_ongoing_at_the_last_bumpable_epoch_rotates() -> None:
    meta = TxnMetadata(TID, 10, EPOCH_EXHAUSTED)
    meta = add_partitions(meta, 10, EPOCH_EXHAUSTED, [P0], 2_000, 3).meta
    assert meta is not None
    aborting = init(meta, pid=10, epoch=EPOCH_EXHAUSTED, version=4).meta
    assert aborting is not None and aborting.producer_epoch == I16_MAX
    done = complete_end_txn(aborting, 3_000).meta
    assert done is not None
    # The fence epoch 32767 is never handed out: the retry gets a fresh pid.
    rotated = init(done, alloc=Alloc(77), pid=10, epoch=EPOCH_EXHAUSTED, version=4)
    assert rotated.reply == Reply(ErrorCode.none, 77, 0)
    assert Fence(10, I16_MAX) in rotated.effects
    new = rotated.meta
    assert new is not None and (new.last_producer_id, new.last_producer_epoch) == (10, EPOCH_EXHAUSTED)
    # ... and a retry of that lost reply gets the same answer.
    alloc = Alloc(900)
    again = init(new, alloc=alloc, pid=10, epoch=EPOCH_EXHAUSTED, version=4)
    assert again.reply == Reply(ErrorCode.none, 77, 0) and again.meta is None and alloc.calls == 0


def test_zombie_init_cannot_abort_the_live_transaction() -> None:
    meta = init(fresh()).meta  # epoch 1
    assert meta is not None
    meta = add_partitions(meta, meta.producer_id, 1, [P0], 2_000, 0).meta
    assert meta is not None
    result = init(meta, pid=meta.producer_id, epoch=0, version=4)
    assert result.error_code == ErrorCode.producer_fenced and result.meta is None


# --- epoch exhaustion ------------------------------------------------------------------


def test_epoch_exhaustion_rotates_the_pid() -> None:
    meta = TxnMetadata(TID, 10, EPOCH_EXHAUSTED, 10, EPOCH_EXHAUSTED - 1, TIMEOUT)
    alloc = Alloc(500)
    result = init(meta, alloc=alloc)
    new = result.meta
    assert result.error_code == ErrorCode.none and new is not None
    assert (new.producer_id, new.producer_epoch, new.state) == (500, 0, TxnState.Empty)
    assert (new.last_producer_id, new.last_producer_epoch) == (10, -1)
    assert alloc.calls == 1
    assert result.effects == (Persist(new), Fence(10, I16_MAX), Reply(ErrorCode.none, 500, 0))


def test_epoch_just_below_exhaustion_still_bumps() -> None:
    meta = TxnMetadata(TID, 10, EPOCH_EXHAUSTED - 1)
    alloc = Alloc()
    result = init(meta, alloc=alloc)
    assert result.reply == Reply(ErrorCode.none, 10, EPOCH_EXHAUSTED)
    assert alloc.calls == 0
    assert EPOCH_EXHAUSTED == 32766 == I16_MAX - 1


def test_epoch_exhaustion_with_kip360_pair_and_retry() -> None:
    meta = TxnMetadata(TID, 10, EPOCH_EXHAUSTED, state=TxnState.CompleteAbort)
    result = init(meta, alloc=Alloc(500), pid=10, epoch=EPOCH_EXHAUSTED, version=4)
    new = result.meta
    assert new is not None and (new.producer_id, new.producer_epoch) == (500, 0)
    assert (new.last_producer_id, new.last_producer_epoch) == (10, EPOCH_EXHAUSTED)
    alloc = Alloc(900)
    retry = init(new, alloc=alloc, pid=10, epoch=EPOCH_EXHAUSTED, version=4)
    assert retry.meta is None and alloc.calls == 0
    assert retry.reply == Reply(ErrorCode.none, 500, 0)
    assert Fence(10, I16_MAX) in retry.effects


def test_fence_at_the_last_bumpable_epoch_then_rotation() -> None:
    meta = TxnMetadata(TID, 10, EPOCH_EXHAUSTED)
    meta = add_partitions(meta, 10, EPOCH_EXHAUSTED, [P0], 2_000, 3).meta
    assert meta is not None
    aborting = init(meta).meta
    assert aborting is not None and aborting.producer_epoch == I16_MAX
    done = complete_end_txn(aborting, 3_000).meta
    result = init(done, alloc=Alloc(77))
    assert result.reply == Reply(ErrorCode.none, 77, 0)


# --- AddPartitions / AddOffsets errors -------------------------------------------------


def _add_parts(meta, pid, epoch, version):
    return add_partitions(meta, pid, epoch, [P1], 9_000, version)


def _add_offs(meta, pid, epoch, version):
    return add_offsets(meta, pid, epoch, "g9", 9_000, version)


@pytest.mark.parametrize("op", [_add_parts, _add_offs])
def test_add_without_entry_or_with_wrong_pid_is_49(op) -> None:
    meta = ongoing()
    assert op(None, 1000, 0, 0).error_code == ErrorCode.invalid_producer_id_mapping == 49
    result = op(meta, meta.producer_id + 1, 0, 0)
    assert result.error_code == ErrorCode.invalid_producer_id_mapping and result.meta is None


@pytest.mark.parametrize("op", [_add_parts, _add_offs])
@pytest.mark.parametrize(
    ("version", "code"),
    [
        (0, ErrorCode.invalid_producer_epoch),
        (1, ErrorCode.invalid_producer_epoch),
        (2, ErrorCode.producer_fenced),
        (3, ErrorCode.producer_fenced),
    ],
)
def test_add_with_wrong_epoch_is_fenced_per_version(op, version, code) -> None:
    meta = init(ongoing()).meta  # fence-abort bumped to epoch 1
    meta = complete_end_txn(meta, 5_000).meta
    for epoch in (0, 2):
        result = op(meta, meta.producer_id, epoch, version)
        assert result.error_code == code and result.meta is None
        assert result.effects == (Reply(code),)


@pytest.mark.parametrize("op", [_add_parts, _add_offs])
@pytest.mark.parametrize("commit", [True, False])
def test_add_during_prepare_is_51(op, commit) -> None:
    meta = prepared(commit)
    result = op(meta, meta.producer_id, meta.producer_epoch, 3)
    assert result.error_code == ErrorCode.concurrent_transactions and result.meta is None


# --- EndTxn errors and retries ---------------------------------------------------------


def test_end_txn_without_entry_or_with_wrong_pid_is_49() -> None:
    meta = ongoing()
    assert prepare_end_txn(None, 1, 0, True, 1, 1).error_code == ErrorCode.invalid_producer_id_mapping
    result = prepare_end_txn(meta, meta.producer_id + 1, 0, True, 1, 1)
    assert result.error_code == ErrorCode.invalid_producer_id_mapping and result.meta is None


@pytest.mark.parametrize(
    ("version", "code"),
    [
        (0, ErrorCode.invalid_producer_epoch),
        (1, ErrorCode.invalid_producer_epoch),
        (2, ErrorCode.producer_fenced),
        (3, ErrorCode.producer_fenced),
    ],
)
def test_end_txn_with_wrong_epoch_is_fenced_per_version(version, code) -> None:
    meta = ongoing()
    result = prepare_end_txn(meta, meta.producer_id, 1, True, 1, version)
    assert result.error_code == code and result.meta is None


def test_commit_on_empty_is_48() -> None:
    meta = fresh()
    result = prepare_end_txn(meta, meta.producer_id, 0, True, 1, 1)
    assert result.error_code == ErrorCode.invalid_txn_state == 48 and result.meta is None


@pytest.mark.parametrize("start", ["empty", "committed", "bumped"])
def test_abort_with_nothing_open_is_none(start: str) -> None:
    # An abort whose AddPartitionsToTxn never reached this coordinator: nothing of the
    # pid and epoch is open, so it is aborted already (librdkafka treats 48 as fatal).
    if start == "empty":
        meta = fresh()
    elif start == "committed":
        meta = completed(True)
    else:
        bumped = init(completed(True), pid=1000, epoch=0).meta
        assert bumped is not None
        meta = bumped
    result = prepare_end_txn(meta, meta.producer_id, meta.producer_epoch, False, 9_000, 1)
    assert result == TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none),))
    # Still fenced for another epoch, and still 49 for another pid.
    stale = prepare_end_txn(meta, meta.producer_id, meta.producer_epoch + 1, False, 9_000, 3)
    assert stale.error_code == ErrorCode.producer_fenced
    assert prepare_end_txn(meta, 1, meta.producer_epoch, False, 9_000, 3).error_code == \
        ErrorCode.invalid_producer_id_mapping


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_retry_after_completion_is_none(commit: bool) -> None:
    meta = completed(commit)
    result = prepare_end_txn(meta, meta.producer_id, meta.producer_epoch, commit, 9_000, 1)
    assert result == TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none),))
    opposite = prepare_end_txn(meta, meta.producer_id, meta.producer_epoch, not commit, 9_000, 1)
    if commit:
        # An abort after a commit: a new transaction whose registration was lost (clients
        # never abort a commit they sent without an answer); nothing of it exists.
        assert opposite == TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none),))
        # Unless this coordinator decided the commit and owned the entry since (nothing
        # can have been lost): then the abort names the committed transaction (Apache).
        own = prepare_end_txn(meta, meta.producer_id, meta.producer_epoch, False, 9_000, 1, committed_here=True)
        assert own == TxnResult(ErrorCode.invalid_txn_state, None, (Reply(ErrorCode.invalid_txn_state),))
        again = prepare_end_txn(meta, meta.producer_id, meta.producer_epoch, True, 9_000, 1, committed_here=True)
        assert again == TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none),))
    else:
        # A commit of an aborted transaction must never pass for committed.
        assert opposite.error_code == ErrorCode.invalid_txn_state and opposite.meta is None


def test_abort_after_a_lost_add_partitions_then_kip360_bump_script() -> None:
    # librdkafka after "message timed out (requires epoch bump)": EndTxn(abort) with the
    # current pair, then InitProducerId with it. The coordinator moved while the
    # AddPartitionsToTxn of the new transaction was held, so it still shows the last one
    # committed.
    meta = completed(True)
    pid, epoch = meta.producer_id, meta.producer_epoch
    abort = prepare_end_txn(meta, pid, epoch, False, 9_000, 1)
    assert abort.error_code == ErrorCode.none and abort.meta is None
    bump = init(meta, pid=pid, epoch=epoch, version=4)
    assert bump.reply == Reply(ErrorCode.none, pid, epoch + 1)
    assert bump.meta is not None and bump.meta.state is TxnState.Empty
    begun = add_partitions(bump.meta, pid, epoch + 1, [P0], 9_100, 3)
    assert begun.error_code == ErrorCode.none
    assert begun.meta is not None and begun.meta.state is TxnState.Ongoing


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_retry_during_prepare_redrives_the_dispatch(commit: bool) -> None:
    meta = prepared(commit)
    result = prepare_end_txn(meta, meta.producer_id, meta.producer_epoch, commit, 9_000, 1)
    assert result.error_code == ErrorCode.none and result.meta is None
    assert result.effects == (result_markers(meta),)  # no Persist, reply after completion
    opposite = prepare_end_txn(meta, meta.producer_id, meta.producer_epoch, not commit, 9_000, 1)
    assert opposite.error_code == ErrorCode.invalid_txn_state and opposite.meta is None
    # Finishing the re-driven dispatch answers NONE.
    done = complete_end_txn(meta, 9_100, dispatched=result.write_markers)
    assert done.reply == Reply(ErrorCode.none, meta.producer_id, meta.producer_epoch)


def test_end_txn_lost_reply_full_script() -> None:
    meta = ongoing([P0], groups=["g"])
    pid = meta.producer_id
    first = prepare_end_txn(meta, pid, 0, True, 3_000, 1)
    done = complete_end_txn(first.meta, 3_100, dispatched=first.write_markers)
    assert done.reply == Reply(ErrorCode.none, pid, 0)
    # The reply was lost: the retry must get NONE (librdkafka treats 48 as fatal).
    retry = prepare_end_txn(done.meta, pid, 0, True, 3_200, 1)
    assert retry.error_code == ErrorCode.none and retry.meta is None
    assert retry.reply == Reply(ErrorCode.none)


# --- complete_end_txn guards -----------------------------------------------------------


def test_complete_twice_is_idempotent_without_a_second_hook() -> None:
    meta = prepared(True)
    markers = result_markers(meta)
    done = complete_end_txn(meta, 4_000, dispatched=markers)
    assert done.meta is not None
    again = complete_end_txn(done.meta, 4_100, dispatched=markers)
    assert again == TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none),))
    assert complete_end_txn(done.meta, 4_100) == again


def test_stale_dispatch_cannot_complete_a_later_transaction() -> None:
    meta = prepared(True, partitions=[P0], groups=())
    pid = meta.producer_id
    stale = result_markers(meta)  # the reconcile picks this up ...
    meta = complete_end_txn(meta, 4_000, dispatched=stale).meta  # ... the handler wins
    meta = add_partitions(meta, pid, 0, [P0], 4_100, 0).meta
    meta = prepare_end_txn(meta, pid, 0, True, 4_200, 1).meta
    assert meta is not None and meta.state is TxnState.PrepareCommit
    result = complete_end_txn(meta, 4_300, dispatched=stale)
    assert result.error_code == ErrorCode.invalid_txn_state and result.meta is None
    assert not any(isinstance(e, Persist) for e in result.effects)


def test_complete_rejects_a_dispatch_missing_partitions() -> None:
    meta = prepared(True, partitions=[P0, P1])
    markers = result_markers(meta)
    short = WriteMarkers(
        markers.producer_id,
        markers.producer_epoch,
        True,
        frozenset({P0}),
        markers.groups,
        TID,
        markers.txn_seq,
    )
    assert complete_end_txn(meta, 1, dispatched=short).error_code == ErrorCode.invalid_txn_state


@pytest.mark.parametrize("state", [TxnState.Empty, TxnState.Ongoing])
def test_complete_outside_prepare_is_48(state: TxnState) -> None:
    meta = fresh() if state is TxnState.Empty else ongoing()
    result = complete_end_txn(meta, 1)
    assert result.error_code == ErrorCode.invalid_txn_state and result.meta is None
    assert complete_end_txn(None, 1).error_code == ErrorCode.invalid_txn_state


# --- reaper and reconcile --------------------------------------------------------------


def test_timed_out_boundary() -> None:
    meta = ongoing(now=10_000)
    assert not timed_out(meta, 10_000 + TIMEOUT)
    assert timed_out(meta, 10_000 + TIMEOUT + 1)
    assert not timed_out(fresh(), 10**12)
    assert not timed_out(prepared(True), 10**12)


def test_reaper_aborts_with_bumped_epoch_and_retains_the_dispatch_set() -> None:
    meta = ongoing([P0, Q0], groups=["g"], now=10_000)
    pid = meta.producer_id
    assert reaper_abort(meta, 10_000 + TIMEOUT) == TxnResult(ErrorCode.none)
    result = reaper_abort(meta, 10_000 + TIMEOUT + 1)
    new = result.meta
    assert new is not None and new.state is TxnState.PrepareAbort
    assert new.producer_epoch == 1 and new.partitions == {P0, Q0} and new.groups == {"g"}
    assert result.effects == (
        Persist(new),
        WriteMarkers(pid, 1, False, frozenset({P0, Q0}), frozenset({"g"}), TID, 1),
    )
    # The zombie is fenced; a reaper pass on a prepared entry does nothing.
    assert prepare_end_txn(new, pid, 0, True, 80_000, 3).error_code == ErrorCode.producer_fenced
    assert add_partitions(new, pid, 0, [P1], 80_000, 0).error_code == ErrorCode.invalid_producer_epoch
    assert reaper_abort(new, 10**9).meta is None
    # The reconcile finishes it; the offsets are discarded.
    (markers,) = pending_dispatches(SlotState({TID: new}))
    assert markers == result.write_markers
    done = complete_end_txn(new, 80_000, dispatched=markers)
    assert done.meta is not None and done.meta.state is TxnState.CompleteAbort
    assert OffsetHook(pid, frozenset({"g"}), False) in done.effects
    # The old producer's rejoin gets a further epoch.
    assert init(done.meta).reply == Reply(ErrorCode.none, pid, 2)


def test_pending_dispatches_lists_prepared_entries_only() -> None:
    slot = SlotState()
    for txn_id, meta in [
        ("e", prepared(False)),
        ("b", fresh()),
        ("a", prepared(True)),
        ("c", ongoing()),
        ("d", completed(False)),
    ]:
        slot = slot.with_entry(meta._replace(transactional_id=txn_id))
    dispatches = pending_dispatches(slot)
    assert [(m.transactional_id, m.commit) for m in dispatches] == [("a", True), ("e", False)]
    assert dispatches[0].partitions == {P0, P1} and dispatches[0].groups == {"g"}


# --- describe and JSON -----------------------------------------------------------------


def test_describe() -> None:
    meta = ongoing([Q0, P1, P0], groups=["g"], now=2_000)
    d = describe(meta)
    assert d.state == "Ongoing" and d.start_time_ms == 2_000
    assert d.topics == (("t", (0, 1)), ("u", (0,))) and d.groups == ("g",)
    assert (d.producer_id, d.producer_epoch, d.timeout_ms) == (meta.producer_id, 0, TIMEOUT)
    assert describe(fresh()).start_time_ms == -1
    assert [s.value for s in TxnState] == [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
    ]


_ids = st.text(min_size=1, max_size=8)
_metas = st.builds(
    TxnMetadata,
    transactional_id=_ids,
    producer_id=st.integers(-1, 2**62),
    producer_epoch=st.integers(-1, I16_MAX),
    last_producer_id=st.integers(-1, 2**62),
    last_producer_epoch=st.integers(-1, I16_MAX),
    timeout_ms=st.integers(1, 2**31 - 1),
    state=st.sampled_from(TxnState),
    partitions=st.frozensets(st.tuples(st.text(max_size=5), st.integers(0, 1000)), max_size=5),
    groups=st.frozensets(st.text(max_size=5), max_size=3),
    ongoing_since_ms=st.integers(0, 2**50),
    last_update_ms=st.integers(0, 2**50),
    txn_seq=st.integers(0, 2**31),
    txn_version=st.sampled_from([1, 2]),
    next_producer_id=st.integers(-1, 2**62),
)


@given(_metas)
def test_metadata_json_round_trip(meta: TxnMetadata) -> None:
    assert TxnMetadata.from_json(json.loads(json.dumps(meta.to_json()))) == meta


@given(st.lists(_metas, max_size=5))
def test_slot_json_round_trip(metas: list[TxnMetadata]) -> None:
    slot = SlotState()
    for meta in metas:
        slot = slot.with_entry(meta)
    raw = json.loads(json.dumps(slot.to_json()))
    assert raw["format"] == 1
    assert SlotState.from_json(raw) == slot


@pytest.mark.parametrize(
    "raw",
    [
        {"format": 2, "transactions": {}},
        {"transactions": {}},
        {"format": 1},
        [],
        {"format": 1, "transactions": {"x": {**TxnMetadata("y", 1, 0).to_json()}}},
        {"format": 1, "transactions": {"y": {**TxnMetadata("y", 1, 0).to_json(), "state": "Dead"}}},
        {"format": 1, "transactions": {"y": {**TxnMetadata("y", 1, 0).to_json(), "producer_id": "1"}}},
        {"format": 1, "transactions": {"y": {"transactional_id": "y"}}},
        {"format": 1, "transactions": {"y": "an entry"}},
        {"format": 1, "transactions": {"y": {**TxnMetadata("y", 1, 0).to_json(), "partitions": 3}}},
        {"format": 1, "transactions": {"y": {**TxnMetadata("y", 1, 0).to_json(), "groups": 3}}},
        {"format": 1, "transactions": {"y": {**TxnMetadata("y", 1, 0).to_json(), "state": ["Ongoing"]}}},
        {"format": 1, "transactions": {"y": {**TxnMetadata("y", 1, 0).to_json(), "transaction_version": True}}},
    ],
)
def test_slot_from_json_rejects_bad_input(raw) -> None:
    with pytest.raises(ValueError):
        SlotState.from_json(raw)


# --- stateful model --------------------------------------------------------------------


class TxnMachine(RuleBasedStateMachine):
    """Random client/coordinator interleavings on one transactional id.

    ``durable`` records the markers carried out; ``complete_end_txn`` must never reach
    Complete* for a transaction whose markers were not all written.
    """

    def __init__(self) -> None:
        super().__init__()
        self.alloc = Alloc(1_000)
        self.meta: TxnMetadata | None = None
        self.now = 1
        self.max_epoch: dict[int, int] = {}
        self.retired: set[int] = set()
        self.pairs: list[tuple[int, int]] = []  # every (pid, epoch) ever handed out
        self.durable: set[tuple[int, int, bool, int]] = set()  # (pid, epoch, commit, seq)
        self.dispatched: list[WriteMarkers] = []
        self.prepared_set: tuple[frozenset, frozenset] | None = None
        self.persisted: TxnMetadata | None = None

    @initialize(start=st.sampled_from([None, 0, 5, EPOCH_EXHAUSTED - 2]))
    def start(self, start: int | None) -> None:
        if start is not None:
            self.meta = TxnMetadata(TID, self.alloc(), start, timeout_ms=TIMEOUT)
            self.persisted = self.meta
            self._seen(self.meta)
            self.pairs.append((self.meta.producer_id, start))

    # helpers

    def _seen(self, meta: TxnMetadata) -> None:
        self.max_epoch[meta.producer_id] = max(
            self.max_epoch.get(meta.producer_id, -1), meta.producer_epoch
        )

    def _pair(self, data: st.DataObject) -> tuple[int, int]:
        choices = ["garbage"]
        if self.meta is not None:
            choices += ["live", "live"]
        if self.pairs:
            choices.append("old")
        kind = data.draw(st.sampled_from(choices))
        if kind == "live":
            assert self.meta is not None
            return self.meta.producer_id, self.meta.producer_epoch
        if kind == "old":
            return data.draw(st.sampled_from(self.pairs))
        return data.draw(st.integers(0, 1_100)), data.draw(st.integers(0, 10))

    def _apply(self, result: TxnResult) -> None:
        old = self.meta
        new = result.meta
        persists = [e for e in result.effects if isinstance(e, Persist)]
        if new is None:
            assert not persists
            return
        # Every change is persisted first, before markers and the reply.
        assert persists == [Persist(new)]
        first_io = next(
            i for i, e in enumerate(result.effects) if isinstance(e, (Persist, WriteMarkers, Reply))
        )
        assert isinstance(result.effects[first_io], Persist)
        if old is not None:
            assert new.transactional_id == old.transactional_id
            assert new.txn_seq >= old.txn_seq
            if new.producer_id == old.producer_id:
                assert new.producer_epoch >= old.producer_epoch
            else:
                # A rotation: only from an exhausted epoch, to a never-seen pid.
                assert old.producer_epoch >= EPOCH_EXHAUSTED
                assert new.producer_id not in self.max_epoch
                self.retired.add(old.producer_id)
            if old.state.is_prepared:
                # Nothing but the completion leaves Prepare*, and only with durable markers.
                assert new.state.is_complete
                commit = old.state is TxnState.PrepareCommit
                assert (old.producer_id, old.producer_epoch, commit, old.txn_seq) in self.durable
        assert new.producer_id not in self.retired
        if new.state.is_prepared and (old is None or not old.state.is_prepared):
            self.prepared_set = (new.partitions, new.groups)
        self.meta = new
        self.persisted = new
        self._seen(new)

    # client rules

    @rule(data=st.data(), version=st.integers(0, 4), timeout=st.sampled_from([TIMEOUT, 1_000]))
    def init(self, data: st.DataObject, version: int, timeout: int) -> None:
        pid, epoch = (-1, -1)
        if version >= 3 and data.draw(st.booleans()):
            pid, epoch = self._pair(data)
        before = self.alloc.calls
        result = init_producer_id(
            self.meta, TID, timeout, MAX_TIMEOUT, pid, epoch, self.now, self.alloc, version
        )
        old = self.meta
        self._apply(result)
        reply = result.reply
        assert reply is not None
        if old is not None and old.state.is_prepared:
            assert reply.error_code in (
                ErrorCode.concurrent_transactions,
                ErrorCode.producer_fenced,
                ErrorCode.invalid_producer_epoch,
            )
        if old is not None and (pid, epoch) == (old.producer_id, old.producer_epoch):
            # the live session is never fenced by its own KIP-360 request
            assert reply.error_code not in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch)
        if reply.error_code == ErrorCode.none:
            assert reply.producer_epoch < I16_MAX  # a fence epoch is never handed out
            assert self.meta is not None
            assert (reply.producer_id, reply.producer_epoch) == (
                self.meta.producer_id,
                self.meta.producer_epoch,
            )
            # Empty after a bump; a retried bump (the previous pair) is answered as is
            assert self.meta.state is TxnState.Empty or self.meta.state.is_complete
            if self.alloc.calls > before:
                assert reply.producer_epoch == 0
            if reply.producer_epoch > 0:
                assert Fence(reply.producer_id, reply.producer_epoch) in result.effects
            self.pairs.append((reply.producer_id, reply.producer_epoch))
        elif reply.error_code == ErrorCode.concurrent_transactions and result.meta is not None:
            assert old is not None and old.state is TxnState.Ongoing
            assert self.meta is not None and self.meta.state is TxnState.PrepareAbort

    @rule(
        data=st.data(),
        parts=st.sets(st.sampled_from([P0, P1, Q0]), max_size=2),
        version=st.integers(0, 3),
    )
    def add_partitions(self, data: st.DataObject, parts: set, version: int) -> None:
        pid, epoch = self._pair(data)
        old = self.meta
        result = add_partitions(old, pid, epoch, parts, self.now, version)
        self._check_common(old, pid, epoch, version, result)
        self._apply(result)
        if result.error_code == ErrorCode.none:
            assert self.meta is not None and self.meta.state is TxnState.Ongoing
            assert parts <= self.meta.partitions

    @rule(data=st.data(), group=st.sampled_from(["g1", "g2"]), version=st.integers(0, 3))
    def add_offsets(self, data: st.DataObject, group: str, version: int) -> None:
        pid, epoch = self._pair(data)
        old = self.meta
        result = add_offsets(old, pid, epoch, group, self.now, version)
        self._check_common(old, pid, epoch, version, result)
        self._apply(result)
        if result.error_code == ErrorCode.none:
            assert self.meta is not None and group in self.meta.groups

    def _check_common(self, old, pid, epoch, version, result: TxnResult) -> None:
        if old is None or old.producer_id != pid:
            assert result.error_code == ErrorCode.invalid_producer_id_mapping
        elif old.producer_epoch != epoch:
            assert result.error_code == (
                ErrorCode.producer_fenced if version >= 2 else ErrorCode.invalid_producer_epoch
            )
        elif old.state.is_prepared:
            assert result.error_code == ErrorCode.concurrent_transactions
        else:
            assert result.error_code == ErrorCode.none
        if result.error_code != ErrorCode.none:
            assert result.meta is None

    @rule(data=st.data(), commit=st.booleans(), version=st.integers(0, 3))
    def end_txn(self, data: st.DataObject, commit: bool, version: int) -> None:
        pid, epoch = self._pair(data)
        old = self.meta
        result = prepare_end_txn(old, pid, epoch, commit, self.now, version)
        self._apply(result)
        if old is None or (old.producer_id, old.producer_epoch) != (pid, epoch):
            assert result.error_code != ErrorCode.none
            return
        done = TxnState.CompleteCommit if commit else TxnState.CompleteAbort
        prep = TxnState.PrepareCommit if commit else TxnState.PrepareAbort
        if old.state is done:
            # The retried EndTxn after a lost reply: NONE, never 48.
            assert result == TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none),))
        elif old.state in (TxnState.Ongoing, prep):
            assert result.error_code == ErrorCode.none and result.reply is None
            assert result.write_markers is not None
            self.dispatched.append(result.write_markers)
        elif not commit and old.state in (TxnState.Empty, TxnState.CompleteCommit):
            # nothing of this epoch is open: aborted already
            assert result == TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none),))
        else:
            assert result.error_code == ErrorCode.invalid_txn_state and result.meta is None

    # coordinator rules

    @rule(ms=st.integers(1, 2 * TIMEOUT))
    def tick_and_reap(self, ms: int) -> None:
        self.now += ms
        if self.meta is None:
            return
        was_due = timed_out(self.meta, self.now)
        old = self.meta
        result = reaper_abort(self.meta, self.now)
        self._apply(result)
        if was_due:
            assert self.meta.state is TxnState.PrepareAbort
            assert self.meta.producer_epoch == min(old.producer_epoch + 1, I16_MAX)
            assert result.write_markers is not None
            assert result.write_markers.producer_epoch == self.meta.producer_epoch
            self.dispatched.append(result.write_markers)
        else:
            assert result.meta is None and result.effects == ()

    @rule(data=st.data(), fail=st.booleans())
    def reconcile(self, data: st.DataObject, fail: bool) -> None:
        slot = SlotState({TID: self.meta}) if self.meta is not None else SlotState()
        for markers in pending_dispatches(slot):
            self.dispatched.append(markers)
            if fail:
                continue  # dispatch failed: stays prepared
            self.durable.add(
                (markers.producer_id, markers.producer_epoch, markers.commit, markers.txn_seq)
            )
            self._apply(complete_end_txn(self.meta, self.now, dispatched=markers))

    @precondition(lambda self: self.dispatched)
    @rule(data=st.data())
    def late_dispatcher(self, data: st.DataObject) -> None:
        """A slow dispatcher finishes some earlier dispatch and tries to complete."""
        markers = data.draw(st.sampled_from(self.dispatched))
        self.durable.add(
            (markers.producer_id, markers.producer_epoch, markers.commit, markers.txn_seq)
        )
        old = self.meta
        result = complete_end_txn(old, self.now, dispatched=markers)
        self._apply(result)
        if result.meta is not None:
            assert old is not None and old.txn_seq == markers.txn_seq

    @rule()
    def coordinator_failover(self) -> None:
        """A new coordinator reads the slot file: the persisted entry is the state."""
        if self.persisted is None:
            return
        raw = json.loads(json.dumps(SlotState({TID: self.persisted}).to_json()))
        reloaded = SlotState.from_json(raw).get(TID)
        assert reloaded == self.meta
        self.meta = reloaded

    # invariants

    @invariant()
    def shape(self) -> None:
        meta = self.meta
        if meta is None:
            return
        assert 0 <= meta.producer_epoch <= I16_MAX
        assert self.max_epoch[meta.producer_id] == meta.producer_epoch  # never fell
        if meta.state in (TxnState.Empty, TxnState.CompleteCommit, TxnState.CompleteAbort):
            assert meta.partitions == frozenset() and meta.groups == frozenset()
            assert meta.ongoing_since_ms == 0
        else:
            assert meta.ongoing_since_ms > 0
        if meta.state.is_prepared:
            assert (meta.partitions, meta.groups) == self.prepared_set
            (markers,) = pending_dispatches(SlotState({TID: meta}))
            assert markers.partitions == meta.partitions and markers.groups == meta.groups
        assert describe(meta).state == meta.state.value


TxnMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None
)
TestTxnMachine = TxnMachine.TestCase


# --- transactional.id.expiration.ms ------------------------------------------------------


@given(state=st.sampled_from(list(TxnState)), last=st.integers(0, 10**13), idle=st.integers(-(10**6), 10**9),
       limit=st.integers(0, 7 * 24 * 3600 * 1000))
def test_expired_only_without_an_open_transaction_and_by_coordinator_time(state, last, idle, limit):
    """An id expires exactly when it is Empty or Complete* and the coordinator's clock is
    more than the limit past its last transition; Ongoing and Prepare* never expire (the
    reaper or the reconcile handles them), and nothing but the two coordinator times
    takes part."""
    meta = TxnMetadata(TID, 10, 0, state=state, last_update_ms=last,
                       ongoing_since_ms=last if state is TxnState.Ongoing or state.is_prepared else 0)
    want = state in (TxnState.Empty, TxnState.CompleteCommit, TxnState.CompleteAbort) and idle > limit
    assert expired(meta, last + idle, limit) is want


def test_slot_without_drops_one_entry():
    a, b = TxnMetadata("a", 1, 0), TxnMetadata("b", 2, 0)
    state = SlotState({"a": a, "b": b})
    assert state.without("a").entries == {"b": b}
    assert state.without("zz").entries == state.entries
    assert state.entries == {"a": a, "b": b}  # unchanged
