"""transaction.version 2 on ``TxnCoordinator`` (the fake brokers of ``test_txn_coordinator``:
real partition logs and slot files): EndTxn v5 bumps the epoch at every end and answers
the pair the client continues with, markers carry the new epoch, a late batch of the
finished transaction is refused, retries at the previous epoch get the same answer, an
exhausted epoch rolls to a new producer id, the reaper aborts a TV2 transaction with a
bump (on trio's MockClock), and a takeover finishes a prepared TV2 transaction.
"""

from __future__ import annotations

import pytest
import trio
from kio.schema.errors import ErrorCode

from kaas.clock import TrioClock
from kaas.domain.routing import txn_slot
from kaas.domain.txn import EPOCH_EXHAUSTED, TV1, TV2, TxnMetadata, TxnState
from kaas.errors import KaasError
from kaas.tasks import txn as txn_tasks
from tests.component.test_txn_coordinator import cluster, open_txn, produce, state_of, state_on_file

__all__ = ["cluster"]  # the fixture, shared with test_txn_coordinator

V5 = 5  # EndTxn v5: transaction.version 2
V4 = 4
ADD_V = 3  # the client form of AddPartitionsToTxn still works for a TV2 client's coordinator


async def begin(c, txn_id: str, parts, pid: int | None = None, epoch: int | None = None,
                timeout_ms: int = 60_000, add_version: int = ADD_V) -> tuple[int, int]:
    if pid is None:
        pid, epoch = await c.init_producer_id(txn_id, timeout_ms, -1, -1, 5)
    assert epoch is not None
    assert await c.add_partitions(txn_id, pid, epoch, parts, add_version) == ErrorCode.none
    return pid, epoch


async def test_every_end_bumps_the_epoch_and_markers_carry_it(cluster):
    world, (b0, b1, _b2) = cluster
    p0, p1 = b0.lead("t", 0), b1.lead("t", 1)
    pid, epoch = await begin(b0.txn, "x", [("t", 0), ("t", 1)])
    start = epoch
    for n in range(6):
        commit = n % 3 != 2
        await produce(p0, "x", pid, epoch)
        await produce(p1, "x", pid, epoch)
        code, new_pid, new_epoch = await b0.txn.end_transaction("x", pid, epoch, commit, V5)
        assert (code, new_pid, new_epoch) == (ErrorCode.none, pid, epoch + 1)
        await b1.txn.apply_queue()
        assert not open_txn(p0) and not open_txn(p1)
        # the markers were written at the new epoch: the partitions know it
        assert p0.log.producers.get(pid).epoch == epoch + 1
        assert p1.log.producers.get(pid).epoch == epoch + 1
        meta = state_of(b0, "x")
        assert meta.state is (TxnState.CompleteCommit if commit else TxnState.CompleteAbort)
        assert (meta.producer_epoch, meta.last_producer_epoch, meta.txn_version) == (epoch + 1, epoch, TV2)
        # a late batch of the finished transaction is refused where its markers landed
        with pytest.raises(KaasError) as exc:
            await produce(p0, "x", pid, epoch, seq=2)
        assert exc.value.code == ErrorCode.invalid_producer_epoch
        epoch = new_epoch
        assert await b0.txn.add_partitions("x", pid, epoch, [("t", 0), ("t", 1)], ADD_V) == ErrorCode.none
    assert epoch == start + 6


async def test_retry_at_the_previous_epoch_gets_the_same_answer(cluster):
    world, (b0, _b1, _b2) = cluster
    p0 = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "x", [("t", 0)])
    await produce(p0, "x", pid, epoch)
    first = await b0.txn.end_transaction("x", pid, epoch, True, V5)
    assert first == (ErrorCode.none, pid, epoch + 1)
    # the answer was lost: the same request again
    assert await b0.txn.end_transaction("x", pid, epoch, True, V5) == first
    # the other outcome for the committed transaction cannot be had
    assert (await b0.txn.end_transaction("x", pid, epoch, False, V5))[0] == ErrorCode.invalid_txn_state
    # older than the previous epoch, or another producer id
    assert (await b0.txn.end_transaction("x", pid, epoch - 1 if epoch else 7, True, V5))[0] == \
        ErrorCode.producer_fenced
    assert (await b0.txn.end_transaction("x", pid + 1, epoch + 1, True, V5))[0] == \
        ErrorCode.invalid_producer_id_mapping
    assert (await b0.txn.end_transaction("nobody", pid, epoch, True, V5))[0] == \
        ErrorCode.invalid_producer_id_mapping
    # the state is what the first answer left
    meta = state_of(b0, "x")
    assert (meta.state, meta.producer_epoch) == (TxnState.CompleteCommit, epoch + 1)


async def test_abort_with_nothing_open_still_bumps(cluster):
    """EndTxn v5 abort on Empty (or after a commit, at the new epoch) ends an empty
    transaction: no markers, the epoch rises, as in Apache; a commit there is 48."""
    world, (b0, _b1, _b2) = cluster
    pid, epoch = await b0.txn.init_producer_id("x", 60_000, -1, -1, 5)
    assert (await b0.txn.end_transaction("x", pid, epoch, True, V5))[0] == ErrorCode.invalid_txn_state
    assert await b0.txn.end_transaction("x", pid, epoch, False, V5) == (ErrorCode.none, pid, epoch + 1)
    assert await b0.txn.end_transaction("x", pid, epoch, False, V5) == (ErrorCode.none, pid, epoch + 1)  # retry
    assert await b0.txn.end_transaction("x", pid, epoch + 1, False, V5) == (ErrorCode.none, pid, epoch + 2)
    assert state_of(b0, "x").state is TxnState.CompleteAbort


async def test_an_exhausted_epoch_rolls_to_a_new_producer_id(cluster):
    world, (b0, b1, _b2) = cluster
    p0, p1 = b0.lead("t", 0), b1.lead("t", 1)
    pid, _ = await b0.txn.init_producer_id("x", 60_000, -1, -1, 5)
    slot = txn_slot("x")
    await b0.txn.slots.persist(slot, TxnMetadata("x", pid, EPOCH_EXHAUSTED - 1, pid, -1, 60_000))
    epoch = EPOCH_EXHAUSTED - 1
    await begin(b0.txn, "x", [("t", 0), ("t", 1)], pid, epoch)
    await produce(p0, "x", pid, epoch)
    assert await b0.txn.end_transaction("x", pid, epoch, True, V5) == (ErrorCode.none, pid, EPOCH_EXHAUSTED)
    await b1.txn.apply_queue()
    epoch = EPOCH_EXHAUSTED
    await begin(b0.txn, "x", [("t", 0), ("t", 1)], pid, epoch)
    await produce(p0, "x", pid, epoch)
    await produce(p1, "x", pid, epoch)
    code, new_pid, new_epoch = await b0.txn.end_transaction("x", pid, epoch, False, V5)
    assert code == ErrorCode.none and new_pid != pid and new_epoch == 0
    await b1.txn.apply_queue()
    assert not open_txn(p0) and not open_txn(p1)
    assert p0.log.producers.get(pid).epoch == 32767  # the old id's markers: its last epoch
    meta = state_of(b0, "x")
    assert (meta.producer_id, meta.producer_epoch, meta.last_producer_id, meta.next_producer_id) == \
        (new_pid, 0, pid, -1)
    # the retry of the lost answer, at the old id, gets the same answer
    assert await b0.txn.end_transaction("x", pid, epoch, False, V5) == (ErrorCode.none, new_pid, 0)
    # and the new id works
    await begin(b0.txn, "x", [("t", 0)], new_pid, 0)
    await produce(p0, "x", new_pid, 0)
    assert await b0.txn.end_transaction("x", new_pid, 0, True, V5) == (ErrorCode.none, new_pid, 1)


async def test_version_follows_the_request_and_v4_keeps_the_epoch(cluster):
    """The request decides, as in Apache: EndTxn v4 ends without a bump whatever
    transaction.version is finalized; the entry records the version of each end."""
    world, (b0, _b1, _b2) = cluster
    p0 = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "x", [("t", 0)])
    assert state_of(b0, "x").txn_version == TV1  # AddPartitionsToTxn v3: the client form
    await produce(p0, "x", pid, epoch)
    assert await b0.txn.end_transaction("x", pid, epoch, True, V4) == (ErrorCode.none, -1, -1)
    assert (state_of(b0, "x").producer_epoch, state_of(b0, "x").txn_version) == (epoch, TV1)
    await begin(b0.txn, "x", [("t", 0)], pid, epoch, add_version=5)  # the broker form: TV2
    assert state_of(b0, "x").txn_version == TV2
    assert await b0.txn.end_transaction("x", pid, epoch, True, V5) == (ErrorCode.none, pid, epoch + 1)


async def test_takeover_finishes_a_prepared_tv2_transaction(cluster):
    """A dispatch fails (no leader for a partition): the Prepare* entry (new epoch, next
    id) stays on file; a new owner reads it afresh and completes it to the next id, and
    the client's retry, sent to the new owner, gets the answer it missed."""
    world, (b0, b1, _b2) = cluster
    p0 = b0.lead("t", 0)
    world.leaders[("t", 1)] = 7  # a leader nobody knows alive: no leader
    pid, _ = await b0.txn.init_producer_id("x", 60_000, -1, -1, 5)
    await b0.txn.slots.persist(txn_slot("x"), TxnMetadata("x", pid, EPOCH_EXHAUSTED, pid, -1, 60_000))
    await begin(b0.txn, "x", [("t", 0), ("t", 1)], pid, EPOCH_EXHAUSTED)
    await produce(p0, "x", pid, EPOCH_EXHAUSTED)
    code, _pid, _epoch = await b0.txn.end_transaction("x", pid, EPOCH_EXHAUSTED, True, V5)
    assert code == ErrorCode.coordinator_not_available
    on_file = state_on_file(b0, "x")
    assert (on_file.state, on_file.producer_epoch, on_file.txn_version) == (TxnState.PrepareCommit, 32767, TV2)
    nxt = on_file.next_producer_id
    assert nxt > 0
    assert not open_txn(p0) and p0.log.producers.get(pid).epoch == 32767  # self-led marker, new epoch
    world.slot_owner = 1  # b1 takes the slot over and reads the file afresh
    b1.lead("t", 1)
    await b1.txn.sweep()
    meta = state_of(b1, "x")
    assert (meta.state, meta.producer_id, meta.producer_epoch, meta.last_producer_id) == \
        (TxnState.CompleteCommit, nxt, 0, pid)
    assert await b1.txn.end_transaction("x", pid, EPOCH_EXHAUSTED, True, V5) == (ErrorCode.none, nxt, 0)
    assert await b1.txn.add_partitions("x", nxt, 0, [("t", 0)], 5) == ErrorCode.none


@pytest.fixture
def mock_clock():
    return trio.testing.MockClock(autojump_threshold=0.02)


async def test_reaper_aborts_a_tv2_transaction_with_a_bump_on_mock_time(cluster, mock_clock, monkeypatch):
    """The sweep runs on trio's MockClock: past the timeout, a TV2 transaction is aborted
    with epoch + 1 and its markers written at it; the producer's own abort afterwards is
    a retry, answered with the new epoch (it goes on, as in Apache); a TV1 transaction's
    producer is fenced instead."""
    world, (b0, _b1, _b2) = cluster
    b0.clock = TrioClock(mock_clock)
    monkeypatch.setenv(txn_tasks.SWEEP_ENV, "1000")
    p0 = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "tv2", [("t", 0)], timeout_ms=5_000, add_version=5)
    pid1, epoch1 = await begin(b0.txn, "tv1", [("t", 0)], timeout_ms=5_000)
    await produce(p0, "tv2", pid, epoch)
    await produce(p0, "tv1", pid1, epoch1)
    async with trio.open_nursery() as nursery:
        b0.txn.finisher.nursery = nursery
        nursery.start_soon(txn_tasks.serve_sweeps, b0.txn)
        await trio.sleep(4)
        assert state_of(b0, "tv2").state is TxnState.Ongoing
        await trio.sleep(3)
        nursery.cancel_scope.cancel()
    meta = state_of(b0, "tv2")
    assert (meta.state, meta.producer_epoch, meta.last_producer_epoch) == (TxnState.CompleteAbort, epoch + 1, epoch)
    assert not open_txn(p0) and p0.log.producers.get(pid).epoch == epoch + 1
    assert await b0.txn.end_transaction("tv2", pid, epoch, False, V5) == (ErrorCode.none, pid, epoch + 1)
    assert await b0.txn.add_partitions("tv2", pid, epoch + 1, [("t", 0)], 5) == ErrorCode.none
    meta1 = state_of(b0, "tv1")
    assert (meta1.state, meta1.producer_epoch, meta1.last_producer_epoch) == \
        (TxnState.CompleteAbort, epoch1 + 1, -1)
    assert await b0.txn.end_txn("tv1", pid1, epoch1, False, V4) == ErrorCode.producer_fenced
