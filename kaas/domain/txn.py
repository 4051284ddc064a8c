"""Transaction coordinator state machine: one ``TxnMetadata`` per transactional id.

Pure: every operation takes the current entry (or ``None``) plus the request fields and
``now_ms``, and returns a ``TxnResult`` holding the error code, the new entry (``None``
when nothing changed) and the effects the caller must carry out, *in tuple order*:

* ``Persist(meta)``: write the slot file holding ``meta`` (tmp + fsync + rename) before
  anything that follows it, in particular before any ``Reply``/``WriteMarkers``.
* ``WriteMarkers(...)``: the dispatch set of a Prepare* entry. Self-led partitions first,
  then the marker queue for peer-led ones. When every marker is durable the caller calls
  ``complete_end_txn(meta, now_ms, dispatched=<that effect>)``. When any dispatch fails
  the entry stays prepared, the EndTxn answer is COORDINATOR_NOT_AVAILABLE and the
  reconcile (``pending_dispatches``) finishes it later.
* ``Fence(producer_id, producer_epoch)``: cross-partition + cross-broker fence of every
  epoch below ``producer_epoch`` for that pid (idempotent; may be repeated).
* ``OffsetHook(producer_id, groups, commit)``: commit or discard the pending offsets
  staged by TxnOffsetCommit for ``(group, producer_id)``. Idempotent.
* ``Reply(error_code, producer_id, producer_epoch)``: the answer can go out now. A result
  *without* a ``Reply`` waits on a ``WriteMarkers`` outcome (see ``prepare_end_txn``).

State names are Kafka's (``TxnState.PrepareCommit.value == "PrepareCommit"``). Rules follow
docs/transactions.rst and Apache's ``TransactionCoordinator`` (TV0/1):

====================  =========================================================
transition            trigger
====================  =========================================================
(none) -> Empty       InitProducerId, first allocation: fresh pid, epoch 0
Empty/Complete* ->    InitProducerId rejoin: same pid, epoch + 1 (``Fence``);
Empty                 epoch exhausted (>= 32766): fresh pid, epoch 0
Ongoing ->            InitProducerId while Ongoing: epoch + 1, ABORT markers,
PrepareAbort          reply CONCURRENT_TRANSACTIONS (the client retries; a
                      KIP-360 retry of the live session then gets that epoch)
Empty/Complete* ->    AddPartitionsToTxn / AddOffsetsToTxn, stamps
Ongoing               ``ongoing_since_ms``, ``txn_seq += 1``
Ongoing -> Prepare*   EndTxn(commit|abort), dispatch set retained
Ongoing ->            timeout reaper: epoch + 1, dispatch set retained
PrepareAbort
Prepare* -> Complete* every marker durable: clears partitions + groups
--- TV2 (EndTxn v5+, ``txn_tv2``) ---------------------------------------------
Ongoing -> Prepare*   EndTxn: epoch + 1 (markers at it); exhausted: + a
                      ``next_producer_id``
Empty/Complete* ->    EndTxn(abort), not a retry: an empty transaction,
PrepareAbort          epoch + 1
Ongoing ->            timeout reaper of a TV2 transaction: as its EndTxn(abort)
PrepareAbort
Prepare* -> Complete* a ``next_producer_id``: that pid at epoch 0
====================  =========================================================

Each entry records the transaction version its transaction runs under (``txn_version``):
set when the transaction begins, from the request that began it, and at EndTxn, from
that request's version (the client learns a new epoch only from EndTxn v5).

``txn_seq`` numbers the transactions of one transactional id (it rises when a transaction
begins). ``WriteMarkers`` carries it so that a slow dispatcher (the reconcile racing the
EndTxn handler) can never complete a *later* transaction of the same pid and epoch whose
markers it did not write.

Invariants:
    - Epochs never fall: for a given producer id the stored epoch only rises. Exhaustion
      allocates a fresh producer id instead of wrapping; a producer id, once left, never
      comes back as the current one.
    - TV2: every end (commit, abort, timeout) raises the epoch by one, or moves to a new
      producer id at epoch 0; the markers carry the raised epoch, never the client's.
    - A Prepare* entry keeps its dispatch set (partitions + groups) unchanged until the
      Complete* transition: it is the durable record of markers still owed. Nothing but
      ``complete_end_txn`` leaves Prepare*.
    - Empty and Complete* entries have no partitions, no groups and
      ``ongoing_since_ms == 0``; Ongoing and Prepare* entries have ``ongoing_since_ms > 0``.
    - Complete* only after every marker is durable. That is the caller's duty, encoded by
      the effect order: ``prepare_end_txn`` yields ``(Persist, WriteMarkers)`` and only
      ``complete_end_txn`` (called once the markers are durable) yields
      ``(OffsetHook, Persist, Reply)``. The hook runs before the Complete* write: a crash
      between the two leaves the entry prepared and the reconcile re-runs both, which is
      safe because markers and the hook are idempotent.
    - ``Persist`` precedes every ``WriteMarkers`` and every ``Reply`` in one result.
    - ``txn_seq`` never falls.

No I/O, no clock, no logging: times come in as ``now_ms``; pids come from the
``allocate_pid`` callable the caller passes (the persisted PID-block allocator).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

# The records, the effects and InitProducerId live in modules of their own; this module is
# the transaction's own transitions and the one import point of the machine.
from kaas.domain.txn_effects import (
    Effect,
    Fence,
    OffsetHook,
    Persist,
    Reply,
    TxnResult,
    WriteMarkers,
    dispatch_of,
    error,
    moved,
    stamp,
    unchanged_ok,
)
from kaas.domain.txn_init import fence_and_abort, init_producer_id
from kaas.domain.txn_records import (
    EPOCH_EXHAUSTED,
    I16_MAX,
    NO_GROUPS,
    NO_PARTITIONS,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    SLOT_FORMAT,
    TV1,
    TV2,
    SlotState,
    TopicPartition,
    TxnMetadata,
    TxnState,
    version_of_add_partitions,
    version_of_end_txn,
)
from kaas.domain.txn_tv2 import complete_rotated, continues_with, end_txn_v2, is_dispatch_of, reaper_abort_v2

__all__ = [
    "EPOCH_EXHAUSTED",
    "I16_MAX",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "SLOT_FORMAT",
    "TV1",
    "TV2",
    "Effect",
    "Fence",
    "OffsetHook",
    "Persist",
    "Reply",
    "SlotState",
    "TopicPartition",
    "TxnDescription",
    "TxnMetadata",
    "TxnResult",
    "TxnState",
    "WriteMarkers",
    "add_offsets",
    "add_partitions",
    "complete_end_txn",
    "continues_with",
    "describe",
    "expired",
    "fence_and_abort",
    "init_producer_id",
    "offset_hook_of",
    "pending_dispatches",
    "prepare_end_txn",
    "reaper_abort",
    "timed_out",
    "version_of_add_partitions",
    "version_of_end_txn",
]

# --- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------


def _check_producer(
    meta: TxnMetadata | None, pid: int, epoch: int, request_version: int
) -> TxnResult | None:
    """Common checks of AddPartitions/AddOffsets/EndTxn: 49, then 90 (47 below v2)."""
    if meta is None or meta.producer_id != pid:
        return error(ErrorCode.invalid_producer_id_mapping)
    if meta.producer_epoch != epoch:
        return error(
            ErrorCode.producer_fenced if request_version >= 2 else ErrorCode.invalid_producer_epoch
        )
    return None


def _add(
    meta: TxnMetadata | None,
    pid: int,
    epoch: int,
    partitions: frozenset[TopicPartition],
    groups: frozenset[str],
    now_ms: int,
    request_version: int,
    txn_version: int,
) -> TxnResult:
    failed = _check_producer(meta, pid, epoch, request_version)
    if failed is not None:
        return failed
    assert meta is not None
    if meta.state.is_prepared:
        return error(ErrorCode.concurrent_transactions)
    if meta.state is TxnState.Ongoing:
        if partitions <= meta.partitions and groups <= meta.groups:
            return unchanged_ok()
        updated = moved(meta, meta.state, meta.partitions | partitions, meta.groups | groups,
                         meta.ongoing_since_ms, now_ms, meta.txn_seq)
    else:  # Empty / Complete*: a new transaction begins, under the version of this request
        updated = moved(meta, TxnState.Ongoing, partitions, groups, stamp(now_ms), now_ms, meta.txn_seq + 1,
                        txn_version)
    return TxnResult(ErrorCode.none, updated, (Persist(updated), Reply(ErrorCode.none)))


def add_partitions(
    meta: TxnMetadata | None,
    pid: int,
    epoch: int,
    partitions: Iterable[TopicPartition],
    now_ms: int,
    request_version: int,
) -> TxnResult:
    """AddPartitionsToTxn (key 24).

    Checks in order: no entry or pid mismatch -> INVALID_PRODUCER_ID_MAPPING; epoch
    mismatch -> PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v2); Prepare* ->
    CONCURRENT_TRANSACTIONS. Empty/Complete* -> Ongoing (stamps ``ongoing_since_ms``,
    ``txn_seq + 1``, ``txn_version`` from the request version: v4+ is the broker form a
    partition leader sends for a TV2 producer, ``version_of_add_partitions``); Ongoing
    adds the partitions (the transaction keeps the version it began with), or answers
    NONE without Persist when they are all present already. The handler copies the code
    to every partition.

    Args:
        meta: the current entry, or None.
        pid: request producer id.
        epoch: request producer epoch.
        partitions: ``(topic, partition)`` pairs to add.
        now_ms: the caller's clock.
        request_version: the AddPartitionsToTxn version.

    Returns:
        A ``TxnResult``; effects ``(Persist, Reply)`` on change, else ``(Reply,)``.
    """
    return _add(meta, pid, epoch, frozenset(partitions), frozenset(), now_ms, request_version,
                version_of_add_partitions(request_version))


def add_offsets(
    meta: TxnMetadata | None,
    pid: int,
    epoch: int,
    group: str,
    now_ms: int,
    request_version: int,
    *,
    txn_version: int = TV1,
) -> TxnResult:
    """AddOffsetsToTxn (key 25): same checks and transitions as ``add_partitions``, adding
    ``group`` to the groups the completion's ``OffsetHook`` commits or discards.

    Args:
        meta: the current entry, or None.
        pid: request producer id.
        epoch: request producer epoch.
        group: the consumer group id.
        now_ms: the caller's clock.
        request_version: the AddOffsetsToTxn version (the epoch error's spelling).
        txn_version: the version a transaction begun here runs under: TV1 for
            AddOffsetsToTxn itself (TV2 clients never send it), TV2 for the group
            coordinator's implicit add of a TxnOffsetCommit v5.

    Returns:
        A ``TxnResult``; effects ``(Persist, Reply)`` on change, else ``(Reply,)``.
    """
    return _add(meta, pid, epoch, frozenset(), frozenset((group,)), now_ms, request_version, txn_version)


# --- EndTxn ----------------------------------------------------------------------------


def prepare_end_txn(
    meta: TxnMetadata | None,
    pid: int,
    epoch: int,
    commit: bool,
    now_ms: int,
    request_version: int,
    *,
    committed_here: bool = False,
    allocate_pid: Callable[[], int] | None = None,
) -> TxnResult:
    """EndTxn (key 26), first phase. v5+ is transaction.version 2: ``txn_tv2.end_txn_v2``
    (the epoch bumped at every end); the rules below are versions 0-4's (TV1).

    - No entry or pid mismatch -> INVALID_PRODUCER_ID_MAPPING; epoch mismatch ->
      PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v2).
    - Ongoing -> PrepareCommit / PrepareAbort, partitions + groups retained. Effects
      ``(Persist, WriteMarkers)``, no ``Reply``: the caller dispatches the markers, then
      calls ``complete_end_txn`` and answers with its ``Reply`` (NONE); if a dispatch
      fails it answers COORDINATOR_NOT_AVAILABLE and the entry stays prepared.
    - Every other state: ``_end_not_ongoing``.

    Args:
        meta: the current entry, or None.
        pid: request producer id.
        epoch: request producer epoch.
        commit: the request's ``committed`` flag.
        now_ms: the caller's clock.
        request_version: the EndTxn version.
        committed_here: the caller prepared the commit of this entry's transaction (same
            pid, epoch and ``txn_seq``) and has owned the entry without a break since.
        allocate_pid: returns a never-used pid (v5+, an exhausted epoch only).

    Returns:
        A ``TxnResult`` as described.
    """
    if version_of_end_txn(request_version) == TV2:
        return end_txn_v2(meta, pid, epoch, commit, now_ms, allocate_pid)
    failed = _check_producer(meta, pid, epoch, request_version)
    if failed is not None:
        return failed
    assert meta is not None
    if meta.state is TxnState.Ongoing:
        prepared = moved(meta, TxnState.PrepareCommit if commit else TxnState.PrepareAbort, meta.partitions,
                          meta.groups, meta.ongoing_since_ms, now_ms, meta.txn_seq, TV1)
        return TxnResult(ErrorCode.none, prepared, (Persist(prepared), dispatch_of(prepared)))
    return _end_not_ongoing(meta, commit, committed_here)


def _end_not_ongoing(meta: TxnMetadata, commit: bool, committed_here: bool) -> TxnResult:
    """``prepare_end_txn`` (TV1) of an entry of the request's pid and epoch that is not
    Ongoing: a retry, an abort with nothing open, or a refusal.

    - Matching Complete* (a retry after a lost reply) -> NONE, unchanged.
    - Abort on Empty or CompleteCommit -> NONE, unchanged: no transaction of this pid and
      epoch is open, so there is nothing to abort. It is the abort librdkafka (2.x) and
      the Java client send before a KIP-360 epoch bump when an AddPartitionsToTxn timed
      out unanswered (its coordinator paused or moved), and Apache's INVALID_TXN_STATE
      there is fatal to them. Clients never abort a transaction whose commit they sent
      without an answer (they must retry the commit), so the CompleteCommit here is an
      earlier transaction's, not this one's.
    - Abort on CompleteCommit when ``committed_here`` -> INVALID_TXN_STATE, as Apache
      answers (TV1): this coordinator decided that commit itself and has owned the entry
      since, so every AddPartitionsToTxn of the producer since then reached it; none did,
      so the abort names the committed transaction, which cannot be undone.
    - Matching Prepare* (a retry after COORDINATOR_NOT_AVAILABLE, or while the reconcile
      works): **re-drive** rather than Apache's CONCURRENT_TRANSACTIONS. Effects
      ``(WriteMarkers,)`` re-derived from the retained dispatch set, no Persist, no Reply;
      the caller handles it exactly like the first attempt. docs/transactions.rst makes this the
      recovery path ("a producer retry ... re-derives the same dispatch set and finishes
      the job"), and it answers NONE as soon as the markers are durable instead of
      making the client spin on 51 until the 10 s reconcile. Both are safe for clients:
      librdkafka, Java and aiokafka retry 51 as well.
    - Commit on Empty, PrepareAbort or CompleteAbort, abort on PrepareCommit ->
      INVALID_TXN_STATE (the outcome asked for is not the one decided or possible).
    """
    state = meta.state
    wanted_prepare = TxnState.PrepareCommit if commit else TxnState.PrepareAbort
    wanted_complete = TxnState.CompleteCommit if commit else TxnState.CompleteAbort
    if state is wanted_complete:
        return unchanged_ok()
    if state is wanted_prepare:
        return TxnResult(ErrorCode.none, None, (dispatch_of(meta),))
    if not commit and (state is TxnState.Empty or (state is TxnState.CompleteCommit and not committed_here)):
        # Nothing of this epoch is open: an abort of a transaction whose registration
        # never reached the coordinator (a request lost with a paused or moved
        # coordinator). No data of it exists anywhere (KIP-890 verification accepts
        # transactional batches only for partitions of an Ongoing entry), so it is
        # aborted already.
        return unchanged_ok()
    return error(ErrorCode.invalid_txn_state)


def complete_end_txn(
    meta: TxnMetadata | None,
    now_ms: int,
    *,
    dispatched: WriteMarkers | None = None,
) -> TxnResult:
    """EndTxn second phase (and the reconcile's): every marker of the dispatch is durable.

    PrepareCommit -> CompleteCommit, PrepareAbort -> CompleteAbort; clears partitions and
    groups, ``ongoing_since_ms = 0``; a TV2 entry with a ``next_producer_id`` moves to it
    at epoch 0 (``txn_tv2.complete_rotated``). Effects ``(OffsetHook, Persist,
    Reply(NONE, pid, epoch))``, the pair the client continues with; ``OffsetHook``
    (groups from before clearing) is left out when there are no groups.

    When ``dispatched`` (the ``WriteMarkers`` that was carried out) is given, it must
    describe this entry's transaction (``txn_tv2.is_dispatch_of``: same id, pid and epoch
    of the markers, ``txn_seq``; same direction and a superset of its partitions and
    groups):

    - the entry is already the matching Complete* -> NONE, unchanged (someone else
      completed it; the hook has fired already);
    - anything else -> INVALID_TXN_STATE, unchanged (a stale dispatch: drop it).

    Without ``dispatched``, a Prepare* entry is completed unconditionally, a Complete*
    entry answers NONE unchanged (idempotent) and any other state INVALID_TXN_STATE,
    unchanged. Callers that dispatch outside one critical section (the EndTxn handler and
    the reconcile both do) should pass it, or a slow dispatcher could complete a later
    transaction of the same pid and epoch whose markers it never wrote.

    Args:
        meta: the current entry (re-read under the slot lock after dispatching).
        now_ms: the caller's clock.
        dispatched: the carried-out ``WriteMarkers``, or None.

    Returns:
        A ``TxnResult`` as described.
    """
    if meta is None:
        return error(ErrorCode.invalid_txn_state)
    if dispatched is not None:
        if not is_dispatch_of(meta, dispatched):
            return error(ErrorCode.invalid_txn_state)
        if meta.state.is_complete:
            done = TxnState.CompleteCommit if dispatched.commit else TxnState.CompleteAbort
            return unchanged_ok() if meta.state is done else error(ErrorCode.invalid_txn_state)
        if not (
            meta.state.is_prepared
            and (meta.state is TxnState.PrepareCommit) == dispatched.commit
            and meta.partitions <= dispatched.partitions
            and meta.groups <= dispatched.groups
        ):
            return error(ErrorCode.invalid_txn_state)
    elif meta.state.is_complete:
        return unchanged_ok()
    elif not meta.state.is_prepared:
        return error(ErrorCode.invalid_txn_state)

    commit = meta.state is TxnState.PrepareCommit
    done_state = TxnState.CompleteCommit if commit else TxnState.CompleteAbort
    if meta.next_producer_id != NO_PRODUCER_ID:  # a TV2 end of an exhausted epoch
        completed = complete_rotated(meta, done_state, now_ms)
    else:
        completed = moved(meta, done_state, NO_PARTITIONS, NO_GROUPS, 0, now_ms, meta.txn_seq)
    effects: tuple[Effect, ...] = (Persist(completed), Reply(ErrorCode.none, *continues_with(completed)))
    if meta.groups:
        effects = (OffsetHook(meta.producer_id, meta.groups, commit), *effects)
    return TxnResult(ErrorCode.none, completed, effects)


def offset_hook_of(dispatch: WriteMarkers) -> OffsetHook | None:
    """The offset hook of a prepared transaction, from its dispatch set (None without
    groups): the one ``complete_end_txn`` gives for the same entry. A coordinator may carry
    it out once Prepare* is durable, beside the peer-led markers rather than after them:
    Prepare* is the decision, so offsets committed (or discarded) early agree with the
    outcome the markers will show, and a read_committed reader still sees the records only
    once their markers land. The hook is idempotent; Complete* is written only after both."""
    if not dispatch.groups:
        return None
    return OffsetHook(dispatch.producer_id, dispatch.groups, dispatch.commit)


# --- fence, reaper, reconcile ----------------------------------------------------------


def timed_out(meta: TxnMetadata, now_ms: int) -> bool:
    """True when ``meta`` is Ongoing and ``now_ms > ongoing_since_ms + timeout_ms``."""
    return meta.state is TxnState.Ongoing and now_ms > meta.ongoing_since_ms + meta.timeout_ms


def expired(meta: TxnMetadata, now_ms: int, expiration_ms: int) -> bool:
    """``transactional.id.expiration.ms``: True when ``meta`` has no transaction open or
    finishing (Empty, CompleteCommit, CompleteAbort) and the coordinator has seen no
    request for it for longer than ``expiration_ms``: both times are the coordinator's
    clock (``last_update_ms`` is stamped with the ``now_ms`` of each transition), never a
    client's. The entry may then be dropped; the id's next InitProducerId gets a new pid.
    """
    return (meta.state is TxnState.Empty or meta.state.is_complete) and \
        now_ms - meta.last_update_ms > expiration_ms


def reaper_abort(meta: TxnMetadata, now_ms: int, *, allocate_pid: Callable[[], int] | None = None) -> TxnResult:
    """The 10 s timeout sweep for one entry.

    Args:
        meta: the current entry.
        now_ms: the caller's clock.
        allocate_pid: returns a never-used pid (a TV2 transaction of an exhausted epoch).

    Returns:
        When ``timed_out``: PrepareAbort with epoch + 1, effects ``(Persist,
        WriteMarkers(abort))``, which the reconcile completes; under the version the
        transaction began with: TV1 ``fence_and_abort`` (the producer is fenced), TV2
        ``txn_tv2.reaper_abort_v2`` (its own abort is then a retry, answered with the new
        epoch). Otherwise NONE, unchanged, no effects.
    """
    if not timed_out(meta, now_ms):
        return TxnResult(ErrorCode.none)
    if meta.txn_version == TV2:
        return reaper_abort_v2(meta, now_ms, allocate_pid)
    return fence_and_abort(meta, now_ms)


def pending_dispatches(slot_state: SlotState) -> list[WriteMarkers]:
    """The dispatch set of every Prepare* entry of a slot, for the marker reconcile.

    Args:
        slot_state: one slot file's entries.

    Returns:
        One ``WriteMarkers`` per prepared entry, ordered by transactional id. After the
        markers are durable, pass each to ``complete_end_txn(dispatched=...)``.
    """
    return [
        dispatch_of(slot_state.entries[txn_id])
        for txn_id in sorted(slot_state.entries)
        if slot_state.entries[txn_id].state.is_prepared
    ]


# --- admin -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TxnDescription:
    """What DescribeTransactions (65) and ListTransactions (66) report for one entry.

    Attributes:
        transactional_id: the id.
        state: Kafka's state name ("Empty", "Ongoing", "PrepareCommit", ...).
        producer_id: current pid.
        producer_epoch: current epoch.
        timeout_ms: ``transaction_timeout_ms``.
        start_time_ms: ``transaction_start_time_ms``: ``ongoing_since_ms``, or -1.
        topics: ``(topic, sorted partitions)`` pairs, sorted by topic.
        groups: sorted group ids (kaas has no ``__consumer_offsets`` partitions to list).
    """

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    topics: tuple[tuple[str, tuple[int, ...]], ...]
    groups: tuple[str, ...]


def describe(meta: TxnMetadata) -> TxnDescription:
    """Describe one entry for DescribeTransactions / ListTransactions.

    Args:
        meta: the entry.

    Returns:
        Its ``TxnDescription``.
    """
    by_topic: dict[str, list[int]] = {}
    for topic, partition in meta.partitions:
        by_topic.setdefault(topic, []).append(partition)
    return TxnDescription(
        transactional_id=meta.transactional_id,
        state=meta.state.value,
        producer_id=meta.producer_id,
        producer_epoch=meta.producer_epoch,
        timeout_ms=meta.timeout_ms,
        start_time_ms=meta.ongoing_since_ms if meta.ongoing_since_ms > 0 else -1,
        topics=tuple((t, tuple(sorted(by_topic[t]))) for t in sorted(by_topic)),
        groups=tuple(sorted(meta.groups)),
    )
