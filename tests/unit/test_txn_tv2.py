"""transaction.version 2 in the transaction machine (``kaas.domain.txn_tv2``): Apache 4.4's
EndTxn v5 rules case by case, and the stateful model of ``test_txn`` run with both versions:
random requests of every version, plus a conforming client that picks its version from the
finalized level when a transaction begins and keeps it to the end while the level changes.
"""

from __future__ import annotations

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule
from kio.schema.errors import ErrorCode

from kaas.domain.txn import (
    EPOCH_EXHAUSTED,
    I16_MAX,
    TV1,
    TV2,
    Persist,
    Reply,
    SlotState,
    TxnMetadata,
    TxnResult,
    TxnState,
    WriteMarkers,
    add_partitions,
    complete_end_txn,
    continues_with,
    init_producer_id,
    pending_dispatches,
    prepare_end_txn,
    reaper_abort,
    timed_out,
)
from tests.unit.test_txn import P0, P1, Q0, TID, TIMEOUT, Alloc, TxnMachine

V5 = 5


def entry(state: TxnState, epoch: int = 7, pid: int = 10, **kw) -> TxnMetadata:
    busy = state is TxnState.Ongoing or state.is_prepared
    return TxnMetadata(TID, pid, epoch, pid, epoch - 1, TIMEOUT, state, frozenset({P0}) if busy else frozenset(),
                       frozenset(), 100 if busy else 0, 100, 3, **kw)


def end(meta, pid, epoch, commit, alloc=None):
    return prepare_end_txn(meta, pid, epoch, commit, 5_000, V5, allocate_pid=alloc or Alloc(5000))


def finish(res: TxnResult) -> TxnResult:
    assert res.meta is not None and res.write_markers is not None
    return complete_end_txn(res.meta, 6_000, dispatched=res.write_markers)


@pytest.mark.parametrize("commit", [True, False])
def test_end_of_an_ongoing_transaction_bumps_and_marks_at_the_new_epoch(commit):
    meta = entry(TxnState.Ongoing)
    res = end(meta, 10, 7, commit)
    assert res.error_code == ErrorCode.none and res.reply is None
    prepared = res.meta
    assert prepared.state is (TxnState.PrepareCommit if commit else TxnState.PrepareAbort)
    assert (prepared.producer_epoch, prepared.last_producer_id, prepared.last_producer_epoch) == (8, 10, 7)
    assert prepared.txn_version == TV2 and prepared.next_producer_id == -1
    assert prepared.partitions == meta.partitions and prepared.txn_seq == meta.txn_seq
    assert res.effects == (Persist(prepared), res.write_markers)
    assert res.write_markers.producer_epoch == 8
    assert continues_with(prepared) == (10, 8)
    done = finish(res)
    assert done.meta.producer_epoch == 8 and done.reply == Reply(ErrorCode.none, 10, 8)


@pytest.mark.parametrize(("state", "commit", "epoch", "code", "answer"), [
    # retries of a finished end at the previous epoch: the same answer
    (TxnState.CompleteCommit, True, 6, ErrorCode.none, (10, 7)),
    (TxnState.CompleteAbort, False, 6, ErrorCode.none, (10, 7)),
    # the other outcome for a finished end: 48
    (TxnState.CompleteCommit, False, 6, ErrorCode.invalid_txn_state, None),
    # a commit that crossed the coordinator's timeout abort: fenced (KAFKA-20785)
    (TxnState.CompleteAbort, True, 6, ErrorCode.producer_fenced, None),
    # at the current epoch: a commit with nothing open is 48, an abort ends an empty one
    (TxnState.CompleteCommit, True, 7, ErrorCode.invalid_txn_state, None),
    (TxnState.CompleteAbort, True, 7, ErrorCode.invalid_txn_state, None),
    (TxnState.Empty, True, 7, ErrorCode.invalid_txn_state, None),
    # stale or future epochs
    (TxnState.Empty, False, 6, ErrorCode.producer_fenced, None),
    (TxnState.Ongoing, True, 6, ErrorCode.producer_fenced, None),
    (TxnState.Ongoing, True, 8, ErrorCode.producer_fenced, None),
    (TxnState.CompleteCommit, True, 5, ErrorCode.producer_fenced, None),
    (TxnState.PrepareCommit, True, 7, ErrorCode.producer_fenced, None),
    # the other outcome while prepared: 48
    (TxnState.PrepareCommit, False, 6, ErrorCode.invalid_txn_state, None),
    (TxnState.PrepareAbort, True, 6, ErrorCode.invalid_txn_state, None),
])
def test_end_txn_v5_answers(state, commit, epoch, code, answer):
    res = end(entry(state), 10, epoch, commit)
    assert res.error_code == code and res.meta is None
    reply = res.reply
    assert reply is not None and reply.error_code == code
    if answer is not None:
        assert (reply.producer_id, reply.producer_epoch) == answer
    else:
        assert (reply.producer_id, reply.producer_epoch) == (-1, -1)


@pytest.mark.parametrize("state", [TxnState.Empty, TxnState.CompleteCommit, TxnState.CompleteAbort])
def test_abort_with_nothing_open_ends_an_empty_transaction(state):
    res = end(entry(state), 10, 7, False)
    prepared = res.meta
    assert prepared.state is TxnState.PrepareAbort and prepared.producer_epoch == 8
    assert prepared.partitions == frozenset() and prepared.ongoing_since_ms > 0 and prepared.txn_seq == 4
    assert finish(res).meta.state is TxnState.CompleteAbort


@pytest.mark.parametrize("commit", [True, False])
def test_retry_while_prepared_redrives_with_the_new_pair(commit):
    prepared = end(entry(TxnState.Ongoing), 10, 7, commit).meta
    res = end(prepared, 10, 7, commit)
    assert res.error_code == ErrorCode.none and res.meta is None and res.reply is None
    assert res.effects == (WriteMarkers(10, 8, commit, prepared.partitions, frozenset(), TID, 3),)


def test_unknown_id_and_wrong_producer_id():
    assert end(None, 10, 7, True).error_code == ErrorCode.invalid_producer_id_mapping
    assert end(entry(TxnState.Ongoing), 11, 7, True).error_code == ErrorCode.invalid_producer_id_mapping


def test_exhausted_epoch_rolls_to_a_new_id_and_the_old_ids_retry_gets_it():
    alloc = Alloc(9000)
    meta = entry(TxnState.Ongoing, epoch=EPOCH_EXHAUSTED)
    res = end(meta, 10, EPOCH_EXHAUSTED, True, alloc)
    prepared = res.meta
    assert (prepared.producer_id, prepared.producer_epoch, prepared.next_producer_id) == (10, I16_MAX, 9000)
    assert res.write_markers.producer_epoch == I16_MAX
    assert continues_with(prepared) == (9000, 0)
    done = finish(res)
    assert (done.meta.producer_id, done.meta.producer_epoch, done.meta.last_producer_id) == (9000, 0, 10)
    assert done.meta.next_producer_id == -1 and done.reply == Reply(ErrorCode.none, 9000, 0)
    # the retry at the old id and epoch
    retry = end(done.meta, 10, EPOCH_EXHAUSTED, True)
    assert retry.meta is None and retry.reply == Reply(ErrorCode.none, 9000, 0)
    # a late dispatcher of the rotated transaction finds it complete
    assert complete_end_txn(done.meta, 7_000, dispatched=res.write_markers).error_code == ErrorCode.none
    # the new id at epoch 0 goes on
    assert end(done.meta, 9000, 0, False).meta.producer_epoch == 1
    # an InitProducerId retry of the old pair is answered with the new id
    again = init_producer_id(done.meta, TID, TIMEOUT, 900_000, 10, EPOCH_EXHAUSTED, 8_000, alloc, 4)
    assert again.reply == Reply(ErrorCode.none, 9000, 0) and alloc.calls == 1


def test_versions_below_5_keep_the_epoch_and_record_tv1():
    meta = entry(TxnState.Ongoing, txn_version=TV2)
    res = prepare_end_txn(meta, 10, 7, True, 5_000, 4)
    assert res.meta.producer_epoch == 7 and res.meta.txn_version == TV1


def test_begin_records_the_version_of_the_request():
    for version, tv in [(0, TV1), (3, TV1), (4, TV2), (5, TV2)]:
        res = add_partitions(entry(TxnState.CompleteCommit), 10, 7, [P0], 1_000, version)
        assert res.meta.txn_version == tv
    ongoing = entry(TxnState.Ongoing, txn_version=TV1)
    assert add_partitions(ongoing, 10, 7, [P1], 1_000, 5).meta.txn_version == TV1  # kept to its end


def test_reaper_ends_a_tv2_transaction_as_its_client_would_and_fences_a_tv1_one():
    tv2 = entry(TxnState.Ongoing, txn_version=TV2)._replace(timeout_ms=10)
    res = reaper_abort(tv2, 1_000, allocate_pid=Alloc())
    assert (res.meta.state, res.meta.producer_epoch, res.meta.last_producer_epoch) == (TxnState.PrepareAbort, 8, 7)
    done = finish(res).meta
    assert end(done, 10, 7, False).reply == Reply(ErrorCode.none, 10, 8)  # the client's abort: a retry
    tv1 = entry(TxnState.Ongoing)._replace(timeout_ms=10)
    res1 = reaper_abort(tv1, 1_000)
    assert (res1.meta.producer_epoch, res1.meta.last_producer_epoch) == (8, -1)
    exhausted = entry(TxnState.Ongoing, epoch=EPOCH_EXHAUSTED, txn_version=TV2)._replace(timeout_ms=10)
    rotating = reaper_abort(exhausted, 1_000, allocate_pid=Alloc(77)).meta
    assert rotating.next_producer_id == 77 and continues_with(rotating) == (77, 0)


def test_old_slot_entries_read_as_tv1():
    raw = entry(TxnState.Ongoing).to_json()
    del raw["transaction_version"], raw["next_producer_id"]
    meta = TxnMetadata.from_json(raw)
    assert meta.txn_version == TV1 and meta.next_producer_id == -1
    with pytest.raises(ValueError):
        TxnMetadata.from_json({**raw, "transaction_version": 3})


# --- the stateful model with both versions ------------------------------------------------


class TxnMachineBothVersions(TxnMachine):
    """``test_txn.TxnMachine`` with requests of every version (EndTxn v5 and the broker
    form of AddPartitionsToTxn among them), and a conforming client: it takes the version
    of each transaction from the finalized level when the transaction begins and keeps it
    to its end, while ``set_level`` changes the level at any step (an upgrade or
    downgrade mid-flight)."""

    def __init__(self) -> None:
        super().__init__()
        self.level = TV2
        self.client_tv: int | None = None  # the version of the client's open transaction

    def _retry_pair(self, old: TxnMetadata, pid: int, epoch: int) -> bool:
        return old.producer_epoch == epoch + 1 or (
            old.last_producer_id == pid and epoch == EPOCH_EXHAUSTED and old.producer_epoch == 0)

    @rule(data=st.data(), commit=st.booleans(), version=st.integers(0, 5))
    def end_txn(self, data: st.DataObject, commit: bool, version: int) -> None:
        if version < V5:
            super().end_txn(data, commit, version)
            return
        pid, epoch = self._pair(data)
        old = self.meta
        result = prepare_end_txn(old, pid, epoch, commit, self.now, version, allocate_pid=self.alloc)
        self._apply(result)
        if result.error_code != ErrorCode.none:
            assert result.meta is None
            return
        assert old is not None
        if result.meta is not None:  # a new end: epoch + 1, markers at it
            new = result.meta
            event(f"v5 end prepared from {old.state.value}{', rotating' if new.next_producer_id != -1 else ''}")
            assert (pid, epoch) == (old.producer_id, old.producer_epoch)
            assert new.state.is_prepared and new.txn_version == TV2
            assert new.producer_epoch == min(old.producer_epoch + 1, I16_MAX)
            assert (new.next_producer_id != -1) == (old.producer_epoch >= EPOCH_EXHAUSTED)
            assert result.write_markers.producer_epoch == new.producer_epoch
            self.dispatched.append(result.write_markers)
            self.pairs.append(continues_with(new))
        elif result.reply is None:  # re-driven while prepared: a retry only
            event("v5 retry re-driven")
            assert old.state.is_prepared and self._retry_pair(old, pid, epoch)
            self.dispatched.append(result.write_markers)
        else:  # a retry of a finished end: the pair the first answer gave
            event("v5 retry of a finished end")
            assert old.state.is_complete and self._retry_pair(old, pid, epoch)
            assert (result.reply.producer_id, result.reply.producer_epoch) == continues_with(old)

    @rule(data=st.data(), parts=st.sets(st.sampled_from([P0, P1, Q0]), max_size=2), version=st.integers(0, 5))
    def add_partitions(self, data: st.DataObject, parts: set, version: int) -> None:
        was = self.meta.state if self.meta is not None else None
        super().add_partitions(data, parts, version)
        if was is not None and was.can_begin and self.meta.state is TxnState.Ongoing:
            assert self.meta.txn_version == (TV2 if version > 3 else TV1)
            self.client_tv = None  # not the conforming client's transaction

    @rule(ms=st.integers(1, 2 * TIMEOUT))
    def tick_and_reap(self, ms: int) -> None:
        self.now += ms
        if self.meta is None:
            return
        old = self.meta
        due = timed_out(old, self.now)
        result = reaper_abort(old, self.now, allocate_pid=self.alloc)
        self._apply(result)
        if not due:
            assert result.meta is None and result.effects == ()
            return
        new = self.meta
        assert new.state is TxnState.PrepareAbort and new.producer_epoch == min(old.producer_epoch + 1, I16_MAX)
        assert new.last_producer_epoch == (old.producer_epoch if old.txn_version == TV2 else -1)
        assert result.write_markers.producer_epoch == new.producer_epoch
        self.dispatched.append(result.write_markers)
        self.client_tv = None

    @rule(level=st.sampled_from([TV1, TV2]))
    def set_level(self, level: int) -> None:
        self.level = level

    @precondition(lambda self: self.meta is not None and self.meta.state.can_begin and self.client_tv is None)
    @rule(parts=st.sets(st.sampled_from([P0, P1, Q0]), min_size=1, max_size=2))
    def client_begin(self, parts: set) -> None:
        meta = self.meta
        version = 5 if self.level == TV2 else 3  # the broker form for a TV2 producer's Produce
        result = add_partitions(meta, meta.producer_id, meta.producer_epoch, parts, self.now, version)
        self._apply(result)
        assert result.error_code == ErrorCode.none
        assert self.meta.state is TxnState.Ongoing and self.meta.txn_version == self.level
        self.client_tv = self.level

    @precondition(lambda self: self.client_tv is not None and self.meta is not None
                  and self.meta.state is TxnState.Ongoing)
    @rule(commit=st.booleans(), change=st.sampled_from([None, TV1, TV2]))
    def client_end(self, commit: bool, change: int | None) -> None:
        if change is not None:  # the level changes while the transaction is open
            self.level = change
        old = self.meta
        tv = self.client_tv
        version = V5 if tv == TV2 else 4  # the version it began with, whatever the level now
        result = prepare_end_txn(old, old.producer_id, old.producer_epoch, commit, self.now, version,
                                 allocate_pid=self.alloc)
        self._apply(result)
        prepared = self.meta
        assert prepared.txn_version == tv
        bumped = min(old.producer_epoch + 1, I16_MAX) if tv == TV2 else old.producer_epoch
        assert prepared.producer_epoch == bumped and result.write_markers.producer_epoch == bumped
        markers = result.write_markers
        self.durable.add((markers.producer_id, markers.producer_epoch, markers.commit, markers.txn_seq))
        done = complete_end_txn(prepared, self.now, dispatched=markers)
        self._apply(done)
        assert self.meta.state.is_complete
        event(f"client transaction under TV{tv} ended at level {self.level}"
              f"{', rotating' if prepared.next_producer_id != -1 else ''}")
        if tv == TV2:  # the answer is what the entry now holds
            assert (done.reply.producer_id, done.reply.producer_epoch) == \
                (self.meta.producer_id, self.meta.producer_epoch)
            self.pairs.append((self.meta.producer_id, self.meta.producer_epoch))
        self.client_tv = None

    @rule()
    def coordinator_failover(self) -> None:
        super().coordinator_failover()
        if self.meta is not None:
            [*_] = pending_dispatches(SlotState({TID: self.meta}))


TxnMachineBothVersions.TestCase.settings = settings(max_examples=300, stateful_step_count=50, deadline=None)
TestTxnMachineBothVersions = TxnMachineBothVersions.TestCase
