"""InitProducerId on the transaction coordinator (``kaas.domain.txn``): a transactional id's
producer id and epoch, allocated, bumped on a rejoin (KIP-360), renewed when the epoch is
exhausted, and the fence that aborts an Ongoing transaction on the coordinator's own
initiative (``fence_and_abort``: InitProducerId while Ongoing, the timeout reaper).
Pure: pids come from the ``allocate_pid`` callable the caller passes.

Order of checks (Apache ``KafkaApis`` + ``TransactionCoordinator.handleInitProducerId``):

1. v3+: exactly one of ``req_pid``/``req_epoch`` is -1 -> INVALID_REQUEST.
2. ``txn_id is None`` (idempotent producer): fresh pid, epoch 0, no entry, no Persist;
   any pid/epoch sent is ignored.
3. ``txn_id == ""`` -> INVALID_REQUEST; ``timeout_ms`` not in ``1..max_timeout_ms``
   -> INVALID_TRANSACTION_TIMEOUT.
4. No entry: fresh pid at epoch 0, state Empty (a pid/epoch sent is accepted, like
   Apache's migration case).
5. pid/epoch sent (v3+, KIP-360) matching neither ``(producer_id, producer_epoch)``
   nor ``(last_producer_id, last_producer_epoch)`` -> PRODUCER_FENCED (v4+) or
   INVALID_PRODUCER_EPOCH (v0-3). Checked in every state, so a zombie cannot abort
   the live session's transaction.
6. By state:
   - Prepare*: CONCURRENT_TRANSACTIONS, unchanged.
   - Ongoing, no pair (a new producer instance) or the previous pair:
     ``fence_and_abort`` (epoch + 1,
     PrepareAbort, ABORT markers) and CONCURRENT_TRANSACTIONS; the client's retry
     gets the next epoch once the entry is CompleteAbort (the fence epoch itself is
     never handed to a new instance, as in Apache).
   - Ongoing, the *current* pair sent (KIP-360: the live session asks for an epoch
     bump without having aborted first): the same abort, but the session's epoch is
     kept as the previous pair, so its retry is recognised below instead of being
     fenced. Apache answers that retry PRODUCER_FENCED, which every client treats as
     fatal; nothing but a newer producer instance may fence a session here.
   - Empty/Complete*, sent pair matches the *previous* pair: a retry of a bump whose
     reply was lost (or of the KIP-360 abort above); answer the current pid/epoch
     unchanged (Fence re-emitted). When that epoch is 32767 (the fence of an
     exhausted epoch, never handed out) the pid is rotated instead.
   - Empty/Complete*, epoch exhausted (>= 32766): fresh pid, epoch 0, Empty;
     ``Fence(old pid, 32767)`` retires the old pid everywhere.
   - Empty/Complete*: same pid, epoch + 1, Empty, dispatch set empty;
     ``Fence(pid, epoch)`` is due because the epoch is > 0.

``last_producer_epoch`` records the session's old epoch only for a KIP-360 request
(pair sent); a new producer instance (no pair) or a coordinator-initiated fence (the
reaper) resets it to -1, as in Apache.
"""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.errors import ErrorCode

from kaas.domain.txn_effects import Effect, Fence, Persist, Reply, TxnResult, dispatch_of, error
from kaas.domain.txn_records import (
    EPOCH_EXHAUSTED,
    I16_MAX,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TxnMetadata,
    TxnState,
)

__all__ = ["fence_and_abort", "init_producer_id"]

# --- InitProducerId --------------------------------------------------------------------


def init_producer_id(
    meta: TxnMetadata | None,
    txn_id: str | None,
    timeout_ms: int,
    max_timeout_ms: int,
    req_pid: int,
    req_epoch: int,
    now_ms: int,
    allocate_pid: Callable[[], int],
    request_version: int,
) -> TxnResult:
    """InitProducerId (key 22) on the coordinator of ``txn_id``, checked in the order the
    module docstring gives.

    Args:
        meta: the current entry, or None.
        txn_id: the request's transactional id (None for an idempotent producer).
        timeout_ms: requested ``transaction.timeout.ms``.
        max_timeout_ms: the broker's ``transaction.max.timeout.ms``.
        req_pid: the request's producer id (-1 when not sent; ignored below v3).
        req_epoch: the request's producer epoch (-1 when not sent; ignored below v3).
        now_ms: the caller's clock.
        allocate_pid: returns a never-used pid; called only when one is needed.
        request_version: the InitProducerId version.

    Returns:
        A ``TxnResult``; ``Reply`` carries the pid/epoch to answer with. Effects in order:
        ``Persist``, then ``WriteMarkers`` (Ongoing case) or ``Fence``, then ``Reply``.
    """
    expected: tuple[int, int] | None = None
    if request_version >= 3:
        if (req_pid == NO_PRODUCER_ID) != (req_epoch == NO_PRODUCER_EPOCH):
            return error(ErrorCode.invalid_request)
        if req_pid != NO_PRODUCER_ID:
            expected = (req_pid, req_epoch)

    if txn_id is None:
        return TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none, allocate_pid(), 0),))
    if txn_id == "":
        return error(ErrorCode.invalid_request)
    if timeout_ms <= 0 or timeout_ms > max_timeout_ms:
        return error(ErrorCode.invalid_transaction_timeout)

    if meta is None:
        created = TxnMetadata(
            transactional_id=txn_id,
            producer_id=allocate_pid(),
            producer_epoch=0,
            timeout_ms=timeout_ms,
            state=TxnState.Empty,
            last_update_ms=now_ms,
        )
        return TxnResult(
            ErrorCode.none,
            created,
            (Persist(created), Reply(ErrorCode.none, created.producer_id, 0)),
        )
    fenced = ErrorCode.producer_fenced if request_version >= 4 else ErrorCode.invalid_producer_epoch
    return _rejoin(meta, expected, timeout_ms, now_ms, allocate_pid, fenced)


def _rejoin(meta: TxnMetadata, expected: tuple[int, int] | None, timeout_ms: int, now_ms: int,
            allocate_pid: Callable[[], int], fenced: ErrorCode) -> TxnResult:
    """Steps 5 and 6 of the module docstring: an id with an entry, and the pid/epoch pair
    the request sent (``expected``, None when it sent none)."""
    current = (meta.producer_id, meta.producer_epoch)
    previous = (meta.last_producer_id, meta.last_producer_epoch)
    matches_previous = (
        expected is not None
        and expected != current
        and previous[1] != NO_PRODUCER_EPOCH
        and expected == previous
    )
    if expected is not None and expected != current and not matches_previous:
        return error(fenced)

    if meta.state.is_prepared:
        return error(ErrorCode.concurrent_transactions)

    if meta.state is TxnState.Ongoing:
        # The live session (current pair sent) keeps its claim: its retry is a retry.
        session = meta.producer_epoch if expected == current else NO_PRODUCER_EPOCH
        aborted = fence_and_abort(meta, now_ms, previous_epoch=session)
        return TxnResult(
            ErrorCode.concurrent_transactions,
            aborted.meta,
            (*aborted.effects, Reply(ErrorCode.concurrent_transactions)),
        )

    if matches_previous and meta.producer_epoch < I16_MAX:
        # The bump was persisted but its reply lost: answer it again, re-emitting the
        # fence in case the caller died before carrying it out.
        fences: list[Effect] = []
        if meta.last_producer_id not in (NO_PRODUCER_ID, meta.producer_id):
            fences.append(Fence(meta.last_producer_id, I16_MAX))
        if meta.producer_epoch > 0:
            fences.append(Fence(*current))
        return TxnResult(ErrorCode.none, None, (*fences, Reply(ErrorCode.none, *current)))
    return _next_epoch(meta, expected, timeout_ms, now_ms, allocate_pid)


def _next_epoch(meta: TxnMetadata, expected: tuple[int, int] | None, timeout_ms: int, now_ms: int,
                allocate_pid: Callable[[], int]) -> TxnResult:
    """An Empty or Complete* entry's next session: epoch + 1, or a fresh pid at epoch 0 once
    the epoch is exhausted (the old pid fenced at 32767 everywhere)."""
    if meta.producer_epoch >= EPOCH_EXHAUSTED:
        rotated = meta._replace(
            producer_id=allocate_pid(),
            producer_epoch=0,
            last_producer_id=meta.producer_id,
            # the sent epoch: the current one, or (a retried KIP-360 abort that fenced the
            # last bumpable epoch) the previous one; either way the retry of a lost reply
            # matches it
            last_producer_epoch=expected[1] if expected is not None else NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms,
            state=TxnState.Empty,
            partitions=frozenset(),
            groups=frozenset(),
            ongoing_since_ms=0,
            last_update_ms=now_ms,
        )
        return TxnResult(
            ErrorCode.none,
            rotated,
            (
                Persist(rotated),
                Fence(meta.producer_id, I16_MAX),
                Reply(ErrorCode.none, rotated.producer_id, 0),
            ),
        )

    bumped = meta._replace(
        producer_epoch=meta.producer_epoch + 1,
        last_producer_id=meta.producer_id,
        last_producer_epoch=meta.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
        timeout_ms=timeout_ms,
        state=TxnState.Empty,
        partitions=frozenset(),
        groups=frozenset(),
        ongoing_since_ms=0,
        last_update_ms=now_ms,
    )
    return TxnResult(
        ErrorCode.none,
        bumped,
        (
            Persist(bumped),
            Fence(bumped.producer_id, bumped.producer_epoch),
            Reply(ErrorCode.none, bumped.producer_id, bumped.producer_epoch),
        ),
    )


def fence_and_abort(meta: TxnMetadata, now_ms: int, *, previous_epoch: int = NO_PRODUCER_EPOCH) -> TxnResult:
    """Abort an Ongoing transaction on the coordinator's own initiative, fencing its producer.

    Used by InitProducerId while Ongoing and by the timeout reaper (and fit for an admin
    abort). Ongoing -> PrepareAbort with epoch + 1 (Apache ``prepareFenceProducerEpoch``:
    ``last_producer_epoch`` becomes -1, so the fenced session cannot pass for the previous
    one), dispatch set retained. The markers carry the bumped epoch, which fences the
    transaction's partitions; the zombie's next AddPartitions/EndTxn fails the epoch check.
    No ``Fence`` effect: the next rejoin emits it.

    Args:
        meta: the current entry.
        now_ms: the caller's clock.
        previous_epoch: ``last_producer_epoch`` of the aborting entry: -1 (a fence), or
            the current epoch when the live session itself asked for the bump (KIP-360),
            so that its retried InitProducerId is answered rather than fenced.

    Returns:
        ``(Persist, WriteMarkers(abort))`` and no Reply; any state but Ongoing:
        INVALID_TXN_STATE, unchanged, no effects.
    """
    if meta.state is not TxnState.Ongoing:
        return TxnResult(ErrorCode.invalid_txn_state)
    aborting = meta._replace(
        # Unreachable at I16_MAX: clients never hold an epoch >= EPOCH_EXHAUSTED and the
        # coordinator bumps at most once per transaction; never wrap, never fall.
        producer_epoch=min(meta.producer_epoch + 1, I16_MAX),
        last_producer_id=meta.producer_id,
        last_producer_epoch=previous_epoch,
        state=TxnState.PrepareAbort,
        last_update_ms=now_ms,
    )
    return TxnResult(ErrorCode.none, aborting, (Persist(aborting), dispatch_of(aborting)))
