"""transaction.version 2 (KIP-890 part 2) on the transaction coordinator (``kaas.domain.txn``):
EndTxn v5+ and the reaper's abort of a transaction that began under TV2. Pure: pids come
from the ``allocate_pid`` callable the caller passes.

Every end of a TV2 transaction, commit or abort, bumps the producer epoch: the Prepare*
entry holds the new epoch, the markers are written at it, and the client continues with
it (EndTxn v5 answers ``continues_with``). A batch of the finished transaction that
arrives late carries the old epoch and is refused on every partition the markers reached;
one arriving on a partition they did not reach finds no open transaction of the new epoch
at its coordinator. When the epoch is exhausted (>= 32766) the Prepare* entry is bumped to
32767 and carries a fresh ``next_producer_id``; its completion moves to that id at epoch 0
(Apache ``TransactionMetadata.prepareAbortOrCommit`` / ``prepareComplete``).

The rules of EndTxn v5 (Apache 4.4 ``TransactionCoordinator.endTransaction``), with
``E`` the request's epoch and ``cur`` the entry's:

- a retry: ``cur == E + 1`` (the bump of the transaction this request ended), or an
  overflow retry: the entry rotated from the request's id (``last_producer_id``) at
  E = 32766 and is at epoch 0;
- no entry, or a producer id that is neither the entry's nor an overflow retry's:
  INVALID_PRODUCER_ID_MAPPING;
- the epoch valid for the state, else PRODUCER_FENCED: Ongoing and Empty ``E == cur``;
  Prepare* a retry; Complete* a retry or ``E == cur``;
- Ongoing -> Prepare*, epoch + 1, partitions and groups kept;
- Complete* of the asked outcome, as a retry: NONE with ``continues_with``, unchanged;
- an abort on Empty, CompleteAbort, or CompleteCommit not as a retry: an empty transaction
  aborted (Prepare* with no partitions, epoch + 1), so that the epoch still rises;
- a commit retried on CompleteAbort: PRODUCER_FENCED. Only the coordinator's own abort
  (a timeout) ends a transaction the client is committing; Apache answers so since
  KAFKA-20785, after 4.4.0, which answered INVALID_TXN_STATE, fatal to Kafka Streams;
- a commit on Empty or on CompleteAbort not as a retry, an abort retried on
  CompleteCommit, the other outcome on Prepare*: INVALID_TXN_STATE;
- Prepare* of the asked outcome, as a retry: re-driven (``WriteMarkers`` again), where
  Apache answers CONCURRENT_TRANSACTIONS (the same choice as TV1: ``txn.prepare_end_txn``).

``last_producer_epoch`` of a TV2 Prepare* is the epoch it was bumped from (Apache sets it
so); an InitProducerId naming that pair is then the retry of a lost reply
(``txn_init``) and gets the current pair.
"""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.errors import ErrorCode

from kaas.domain.txn_effects import Persist, Reply, TxnResult, WriteMarkers, dispatch_of, error, stamp
from kaas.domain.txn_records import (
    EPOCH_EXHAUSTED,
    I16_MAX,
    NO_GROUPS,
    NO_PARTITIONS,
    NO_PRODUCER_ID,
    TV2,
    TxnMetadata,
    TxnState,
)

__all__ = ["complete_rotated", "continues_with", "end_txn_v2", "is_dispatch_of", "reaper_abort_v2"]


def continues_with(meta: TxnMetadata) -> tuple[int, int]:
    """The producer id and epoch a client continues with after ``meta``'s transaction ends:
    a rotating Prepare* entry's ``next_producer_id`` at epoch 0, else the entry's pair."""
    if meta.state.is_prepared and meta.next_producer_id != NO_PRODUCER_ID:
        return meta.next_producer_id, 0
    return meta.producer_id, meta.producer_epoch


def _prepare(meta: TxnMetadata, commit: bool, now_ms: int, allocate_pid: Callable[[], int] | None,
             *, empty: bool) -> TxnMetadata:
    """The Prepare* entry of a TV2 end: epoch + 1 (a fresh id to move to when the epoch is
    exhausted); ``empty``: an abort with no transaction open, which begins and prepares an
    empty one."""
    next_pid = NO_PRODUCER_ID
    if meta.producer_epoch >= EPOCH_EXHAUSTED:
        if allocate_pid is None:
            raise ValueError("an exhausted epoch needs allocate_pid")
        next_pid = allocate_pid()
    return meta._replace(
        state=TxnState.PrepareCommit if commit else TxnState.PrepareAbort,
        producer_epoch=min(meta.producer_epoch + 1, I16_MAX),
        last_producer_id=meta.producer_id,
        last_producer_epoch=meta.producer_epoch,
        next_producer_id=next_pid,
        txn_version=TV2,
        ongoing_since_ms=stamp(now_ms) if empty else meta.ongoing_since_ms,
        last_update_ms=now_ms,
        txn_seq=meta.txn_seq + 1 if empty else meta.txn_seq,
    )


def _prepared(meta: TxnMetadata, commit: bool, now_ms: int, allocate_pid: Callable[[], int] | None,
              *, empty: bool = False) -> TxnResult:
    prepared = _prepare(meta, commit, now_ms, allocate_pid, empty=empty)
    return TxnResult(ErrorCode.none, prepared, (Persist(prepared), dispatch_of(prepared)))


def end_txn_v2(meta: TxnMetadata | None, pid: int, epoch: int, commit: bool, now_ms: int,
               allocate_pid: Callable[[], int] | None) -> TxnResult:
    """EndTxn v5+, first phase: the rules of the module docstring.

    Args:
        meta: the current entry, or None.
        pid: request producer id.
        epoch: request producer epoch.
        commit: the request's ``committed`` flag.
        now_ms: the caller's clock.
        allocate_pid: returns a never-used pid; called only when the epoch is exhausted.

    Returns:
        As ``txn.prepare_end_txn``: ``(Persist, WriteMarkers)`` for a new Prepare*,
        ``(WriteMarkers,)`` to re-drive one, a ``Reply`` carrying the pair the client
        continues with for a retry of a finished end, or an error ``Reply``.
    """
    if meta is None:
        return error(ErrorCode.invalid_producer_id_mapping)
    cur = meta.producer_epoch
    retry_on_bump = cur == epoch + 1
    retry_on_overflow = meta.last_producer_id == pid and epoch == EPOCH_EXHAUSTED and cur == 0
    is_retry = retry_on_bump or retry_on_overflow
    state = meta.state
    if state is TxnState.Ongoing or state is TxnState.Empty:
        valid = epoch == cur
    elif state.is_prepared:
        valid = retry_on_bump
    else:
        valid = is_retry or epoch == cur
    if meta.producer_id != pid and not retry_on_overflow:
        return error(ErrorCode.invalid_producer_id_mapping)
    if not valid:
        return error(ErrorCode.producer_fenced)
    if state is TxnState.Ongoing:
        return _prepared(meta, commit, now_ms, allocate_pid)
    if state.is_prepared:
        if (state is TxnState.PrepareCommit) == commit:
            return TxnResult(ErrorCode.none, None, (dispatch_of(meta),))
        return error(ErrorCode.invalid_txn_state)
    if commit:
        if state is TxnState.CompleteCommit and is_retry:
            return TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none, *continues_with(meta)),))
        if state is TxnState.CompleteAbort and is_retry:
            # A commit that crossed the coordinator's own (timeout) abort: a client's retry
            # carries the end it sent, so only that abort leads here. Fenced, from which
            # Streams recovers, as Apache answers since KAFKA-20785 (4.4.0 answered 48).
            return error(ErrorCode.producer_fenced)
        return error(ErrorCode.invalid_txn_state)
    if state is TxnState.CompleteAbort and is_retry:
        return TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none, *continues_with(meta)),))
    if state is TxnState.CompleteCommit and is_retry:
        return error(ErrorCode.invalid_txn_state)  # the abort of a transaction that committed
    return _prepared(meta, False, now_ms, allocate_pid, empty=True)


def reaper_abort_v2(meta: TxnMetadata, now_ms: int, allocate_pid: Callable[[], int] | None) -> TxnResult:
    """The timeout abort of an Ongoing transaction that began under TV2: the end the client
    would have sent (epoch + 1, ``last_producer_epoch`` its epoch), so that its own abort
    after the timeout is answered as a retry, with the epoch it continues with, and it
    goes on (Apache 4.4 with transaction.version 2 finalized). A new producer instance of
    the id still fences it with InitProducerId.

    Returns:
        ``(Persist, WriteMarkers(abort))``; the reconcile completes it.
    """
    return _prepared(meta, False, now_ms, allocate_pid)


def complete_rotated(meta: TxnMetadata, state: TxnState, now_ms: int) -> TxnMetadata:
    """The Complete* entry of a prepared TV2 transaction whose epoch was exhausted: the
    ``next_producer_id`` at epoch 0; ``last_producer_id`` the old id and
    ``last_producer_epoch`` the epoch the client ended it with (an overflow retry)."""
    return meta._replace(
        producer_id=meta.next_producer_id,
        producer_epoch=0,
        last_producer_id=meta.producer_id,
        next_producer_id=NO_PRODUCER_ID,
        state=state,
        partitions=NO_PARTITIONS,
        groups=NO_GROUPS,
        ongoing_since_ms=0,
        last_update_ms=now_ms,
    )


def is_dispatch_of(meta: TxnMetadata, dispatched: WriteMarkers) -> bool:
    """True when ``dispatched`` describes ``meta``'s transaction: same id, ``txn_seq``, and
    the pair the markers were written at: the entry's own, or, once a rotating entry
    completed, the id it left (at its epoch 32767, ``last_producer_epoch + 1``)."""
    if dispatched.transactional_id != meta.transactional_id or dispatched.txn_seq != meta.txn_seq:
        return False
    if (dispatched.producer_id, dispatched.producer_epoch) == (meta.producer_id, meta.producer_epoch):
        return True
    return (meta.state.is_complete and meta.producer_epoch == 0 and meta.last_producer_id != meta.producer_id
            and dispatched.producer_id == meta.last_producer_id
            and dispatched.producer_epoch == min(meta.last_producer_epoch + 1, I16_MAX))
