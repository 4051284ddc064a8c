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
====================  =========================================================

``txn_seq`` numbers the transactions of one transactional id (it rises when a transaction
begins). ``WriteMarkers`` carries it so that a slow dispatcher (the reconcile racing the
EndTxn handler) can never complete a *later* transaction of the same pid and epoch whose
markers it did not write.

Invariants:
    - Epochs never fall: for a given producer id the stored epoch only rises. Exhaustion
      allocates a fresh producer id instead of wrapping; a producer id, once left, never
      comes back as the current one.
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

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.domain.kinds import same_kind

__all__ = [
    "EPOCH_EXHAUSTED",
    "I16_MAX",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "SLOT_FORMAT",
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
    "describe",
    "expired",
    "fence_and_abort",
    "init_producer_id",
    "offset_hook_of",
    "pending_dispatches",
    "prepare_end_txn",
    "reaper_abort",
    "timed_out",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
I16_MAX = 32767
EPOCH_EXHAUSTED = I16_MAX - 1
"""Apache ``TransactionMetadata.isEpochExhausted``: an epoch >= this gets a fresh pid."""

SLOT_FORMAT = 1

TopicPartition: TypeAlias = tuple[str, int]
_NO_PARTITIONS: frozenset[TopicPartition] = frozenset()
_NO_GROUPS: frozenset[str] = frozenset()


class TxnState(enum.Enum):
    """Transaction states, valued with Kafka's spelling (DescribeTransactions, ListTransactions)."""

    Empty = "Empty"
    Ongoing = "Ongoing"
    PrepareCommit = "PrepareCommit"
    PrepareAbort = "PrepareAbort"
    CompleteCommit = "CompleteCommit"
    CompleteAbort = "CompleteAbort"

    @property
    def is_prepared(self) -> bool:
        """True for PrepareCommit and PrepareAbort (markers still owed)."""
        return self in (TxnState.PrepareCommit, TxnState.PrepareAbort)

    @property
    def is_complete(self) -> bool:
        """True for CompleteCommit and CompleteAbort."""
        return self in (TxnState.CompleteCommit, TxnState.CompleteAbort)

    @property
    def can_begin(self) -> bool:
        """True where AddPartitions/AddOffsets start a new transaction (Empty, Complete*)."""
        return self is TxnState.Empty or self.is_complete


# --- metadata --------------------------------------------------------------------------


class TxnMetadata(NamedTuple):
    """The coordinator's entry for one transactional id (one row of a slot file).

    A named tuple (equal only to its own kind: ``kinds.same_kind``); change one with ``_replace``.

    Attributes:
        transactional_id: the client's ``transactional.id``.
        producer_id: current pid.
        producer_epoch: current epoch (the only one accepted from the client).
        last_producer_id: pid before the last InitProducerId (== ``producer_id`` unless
            the pid was rotated on epoch exhaustion); -1 on first allocation.
        last_producer_epoch: epoch before the last KIP-360 bump, so that a retried
            InitProducerId whose reply was lost is recognised; -1 when the last bump came
            from a new producer instance or from a fence (so no zombie can claim it).
        timeout_ms: the producer's ``transaction.timeout.ms``.
        state: the ``TxnState``.
        partitions: the transaction's partitions; in Prepare* the marker dispatch set.
        groups: consumer groups added by AddOffsetsToTxn (offset hook targets).
        ongoing_since_ms: when the current transaction began (> 0 in Ongoing and
            Prepare*), 0 otherwise.
        last_update_ms: time of the last transition.
        txn_seq: number of transactions begun under this transactional id.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 60_000
    state: TxnState = TxnState.Empty
    partitions: frozenset[TopicPartition] = frozenset()
    groups: frozenset[str] = frozenset()
    ongoing_since_ms: int = 0
    last_update_ms: int = 0
    txn_seq: int = 0

    def to_json(self) -> dict[str, Any]:
        """Plain-typed form for the slot file.

        Returns:
            A dict of str/int/list values; partitions as sorted ``[topic, partition]``
            pairs, groups sorted, the state by its Kafka name.
        """
        return {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "last_producer_id": self.last_producer_id,
            "last_producer_epoch": self.last_producer_epoch,
            "timeout_ms": self.timeout_ms,
            "state": self.state.value,
            "partitions": [[t, p] for t, p in sorted(self.partitions)],
            "groups": sorted(self.groups),
            "ongoing_since_ms": self.ongoing_since_ms,
            "last_update_ms": self.last_update_ms,
            "txn_seq": self.txn_seq,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TxnMetadata:
        """Inverse of ``to_json``.

        Args:
            obj: a dict as produced by ``to_json`` (``txn_seq`` may be absent: 0).

        Returns:
            The entry.

        Raises:
            ValueError: a field is missing or has the wrong type.
        """
        try:
            txn_id = obj["transactional_id"]
            if not isinstance(txn_id, str):
                raise ValueError(f"transactional_id must be a str, got {txn_id!r}")
            partitions: list[TopicPartition] = []
            for item in obj["partitions"]:
                topic, partition = item
                if not isinstance(topic, str) or not isinstance(partition, int):
                    raise ValueError(f"bad partition {item!r}")
                partitions.append((topic, partition))
            groups = obj["groups"]
            if not all(isinstance(g, str) for g in groups):
                raise ValueError(f"bad groups {groups!r}")
            numbers = (obj["producer_id"], obj["producer_epoch"], obj["last_producer_id"], obj["last_producer_epoch"],
                       obj["timeout_ms"], obj["ongoing_since_ms"], obj["last_update_ms"], obj.get("txn_seq", 0))
            for value in numbers:  # (JSON gives int or bool: an int subclass other than bool is rare)
                if type(value) is not int and (not isinstance(value, int) or isinstance(value, bool)):
                    raise ValueError(f"an int field holds {value!r}")
            state = _STATE_OF.get(obj["state"])
            if state is None:
                raise ValueError(f"{obj['state']!r} is not a TxnState")
            producer_id, producer_epoch, last_producer_id, last_producer_epoch, timeout_ms, since, update, seq = numbers
            return cls(txn_id, producer_id, producer_epoch, last_producer_id, last_producer_epoch, timeout_ms, state,
                       frozenset(partitions), frozenset(groups), since, update, seq)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"bad transaction entry: {exc!r}") from exc


_STATE_OF = {state.value: state for state in TxnState}


@dataclass(frozen=True, slots=True)
class SlotState:
    """Every entry of one slot file (``txn_state/slot-N.json``).

    Attributes:
        entries: transactional id -> entry. Treat as read-only; use ``with_entry``.
    """

    entries: Mapping[str, TxnMetadata] = field(default_factory=dict)

    def get(self, transactional_id: str) -> TxnMetadata | None:
        """The entry for ``transactional_id``, or None."""
        return self.entries.get(transactional_id)

    def with_entry(self, meta: TxnMetadata) -> SlotState:
        """A copy with ``meta`` inserted or replaced."""
        entries = dict(self.entries)
        entries[meta.transactional_id] = meta
        return SlotState(entries)

    def with_changes(self, changes: Mapping[str, TxnMetadata | None]) -> SlotState:
        """A copy with each entry of ``changes`` inserted or replaced, and each id mapped to
        None dropped (the changes one slot write carries)."""
        entries = dict(self.entries)
        for transactional_id, meta in changes.items():
            if meta is None:
                entries.pop(transactional_id, None)
            else:
                entries[transactional_id] = meta
        return SlotState(entries)

    def without(self, transactional_id: str) -> SlotState:
        """A copy without the entry of ``transactional_id`` (an expired id)."""
        entries = dict(self.entries)
        entries.pop(transactional_id, None)
        return SlotState(entries)

    def to_json(self) -> dict[str, Any]:
        """Plain-typed form: ``{"format": 1, "transactions": {id: entry}}``, ids sorted."""
        return {
            "format": SLOT_FORMAT,
            "transactions": {k: self.entries[k].to_json() for k in sorted(self.entries)},
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> SlotState:
        """Inverse of ``to_json``.

        Args:
            obj: the parsed slot file.

        Returns:
            The slot state.

        Raises:
            ValueError: unknown format, malformed entry, or a key that differs from its
                entry's ``transactional_id``.
        """
        if not isinstance(obj, Mapping):
            raise ValueError(f"slot file is not an object: {obj!r}")
        if obj.get("format") != SLOT_FORMAT:
            raise ValueError(f"unsupported slot format {obj.get('format')!r}")
        raw = obj.get("transactions")
        if not isinstance(raw, Mapping):
            raise ValueError("slot has no transactions object")
        entries: dict[str, TxnMetadata] = {}
        for key, value in raw.items():
            meta = TxnMetadata.from_json(value)
            if meta.transactional_id != key:
                raise ValueError(f"slot key {key!r} holds entry {meta.transactional_id!r}")
            entries[key] = meta
        return cls(entries)


# --- effects ---------------------------------------------------------------------------


class Persist(NamedTuple):
    """Write the slot file with ``meta`` durably before carrying out the next effect."""

    meta: TxnMetadata


class WriteMarkers(NamedTuple):
    """Write COMMIT/ABORT control markers: the dispatch set of a Prepare* entry.

    Attributes:
        producer_id: the transaction's pid.
        producer_epoch: the marker epoch (bumped for a fence/reaper abort).
        commit: True for COMMIT, False for ABORT.
        partitions: every partition owed a marker.
        groups: groups whose staged offsets the completion commits or discards.
        transactional_id: whose entry to complete afterwards.
        txn_seq: the entry's ``txn_seq``; pass the effect back to ``complete_end_txn``.
    """

    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]
    groups: frozenset[str]
    transactional_id: str
    txn_seq: int


class Fence(NamedTuple):
    """Fence every epoch below ``producer_epoch`` of ``producer_id`` on every partition and
    broker (local walk + fence-log broadcast). Idempotent."""

    producer_id: int
    producer_epoch: int


class OffsetHook(NamedTuple):
    """Commit (``commit``) or discard the pending offsets of ``(group, producer_id)`` for
    each group. Idempotent."""

    producer_id: int
    groups: frozenset[str]
    commit: bool


class Reply(NamedTuple):
    """The response may go out now with these fields (pid/epoch only for InitProducerId)."""

    error_code: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


Effect: TypeAlias = Persist | WriteMarkers | Fence | OffsetHook | Reply


class TxnResult(NamedTuple):
    """Outcome of one operation.

    Attributes:
        error_code: the operation's code (for ``prepare_end_txn`` the answer to give once
            the markers are durable and the entry is complete).
        meta: the new entry, or None when the entry is unchanged.
        effects: to carry out in order.
    """

    error_code: ErrorCode
    meta: TxnMetadata | None = None
    effects: tuple[Effect, ...] = ()

    @property
    def reply(self) -> Reply | None:
        """The ``Reply`` effect, or None when the answer waits on a marker dispatch."""
        for effect in self.effects:
            if isinstance(effect, Reply):
                return effect
        return None

    @property
    def write_markers(self) -> WriteMarkers | None:
        """The ``WriteMarkers`` effect, if any."""
        for effect in self.effects:
            if isinstance(effect, WriteMarkers):
                return effect
        return None


# The entry and the effects are named tuples: every transactional request makes several,
# and a frozen dataclass cost four to six times as much to build. Equal only to their own
# kind, as dataclasses are (a Fence is never equal to an OffsetHook of the same values).
same_kind(TxnMetadata, Persist, WriteMarkers, Fence, OffsetHook, Reply, TxnResult)


def _error(code: ErrorCode) -> TxnResult:
    return TxnResult(code, None, (Reply(code),))


def _unchanged_ok() -> TxnResult:
    return TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none),))


def _dispatch(meta: TxnMetadata) -> WriteMarkers:
    return WriteMarkers(
        producer_id=meta.producer_id,
        producer_epoch=meta.producer_epoch,
        commit=meta.state is TxnState.PrepareCommit,
        partitions=meta.partitions,
        groups=meta.groups,
        transactional_id=meta.transactional_id,
        txn_seq=meta.txn_seq,
    )


def _moved(
    meta: TxnMetadata,
    state: TxnState,
    partitions: frozenset[TopicPartition],
    groups: frozenset[str],
    ongoing_since_ms: int,
    last_update_ms: int,
    txn_seq: int,
) -> TxnMetadata:
    """``meta._replace(state=..., ...)`` for the transitions of a transaction (begin, add,
    prepare, complete), which keep the producer fields: positional construction, a third of
    ``_replace``'s cost, and every transactional request makes one."""
    return TxnMetadata(
        meta.transactional_id, meta.producer_id, meta.producer_epoch, meta.last_producer_id,
        meta.last_producer_epoch, meta.timeout_ms, state, partitions, groups, ongoing_since_ms,
        last_update_ms, txn_seq,
    )


def _stamp(now_ms: int) -> int:
    """``ongoing_since_ms`` for a transaction starting at ``now_ms``; 0 means "none"."""
    return max(now_ms, 1)


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
    """InitProducerId (key 22) on the coordinator of ``txn_id``.

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
    fenced = ErrorCode.producer_fenced if request_version >= 4 else ErrorCode.invalid_producer_epoch
    expected: tuple[int, int] | None = None
    if request_version >= 3:
        if (req_pid == NO_PRODUCER_ID) != (req_epoch == NO_PRODUCER_EPOCH):
            return _error(ErrorCode.invalid_request)
        if req_pid != NO_PRODUCER_ID:
            expected = (req_pid, req_epoch)

    if txn_id is None:
        return TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none, allocate_pid(), 0),))
    if txn_id == "":
        return _error(ErrorCode.invalid_request)
    if timeout_ms <= 0 or timeout_ms > max_timeout_ms:
        return _error(ErrorCode.invalid_transaction_timeout)

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

    current = (meta.producer_id, meta.producer_epoch)
    previous = (meta.last_producer_id, meta.last_producer_epoch)
    matches_previous = (
        expected is not None
        and expected != current
        and previous[1] != NO_PRODUCER_EPOCH
        and expected == previous
    )
    if expected is not None and expected != current and not matches_previous:
        return _error(fenced)

    if meta.state.is_prepared:
        return _error(ErrorCode.concurrent_transactions)

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


# --- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------


def _check_producer(
    meta: TxnMetadata | None, pid: int, epoch: int, request_version: int
) -> TxnResult | None:
    """Common checks of AddPartitions/AddOffsets/EndTxn: 49, then 90 (47 below v2)."""
    if meta is None or meta.producer_id != pid:
        return _error(ErrorCode.invalid_producer_id_mapping)
    if meta.producer_epoch != epoch:
        return _error(
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
) -> TxnResult:
    failed = _check_producer(meta, pid, epoch, request_version)
    if failed is not None:
        return failed
    assert meta is not None
    if meta.state.is_prepared:
        return _error(ErrorCode.concurrent_transactions)
    if meta.state is TxnState.Ongoing:
        if partitions <= meta.partitions and groups <= meta.groups:
            return _unchanged_ok()
        updated = _moved(meta, meta.state, meta.partitions | partitions, meta.groups | groups,
                         meta.ongoing_since_ms, now_ms, meta.txn_seq)
    else:  # Empty / Complete*: a new transaction begins
        updated = _moved(meta, TxnState.Ongoing, partitions, groups, _stamp(now_ms), now_ms, meta.txn_seq + 1)
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
    ``txn_seq + 1``); Ongoing adds the partitions, or answers NONE without Persist when
    they are all present already. The handler copies the code to every partition.

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
    return _add(meta, pid, epoch, frozenset(partitions), frozenset(), now_ms, request_version)


def add_offsets(
    meta: TxnMetadata | None,
    pid: int,
    epoch: int,
    group: str,
    now_ms: int,
    request_version: int,
) -> TxnResult:
    """AddOffsetsToTxn (key 25): same checks and transitions as ``add_partitions``, adding
    ``group`` to the groups the completion's ``OffsetHook`` commits or discards.

    Args:
        meta: the current entry, or None.
        pid: request producer id.
        epoch: request producer epoch.
        group: the consumer group id.
        now_ms: the caller's clock.
        request_version: the AddOffsetsToTxn version.

    Returns:
        A ``TxnResult``; effects ``(Persist, Reply)`` on change, else ``(Reply,)``.
    """
    return _add(meta, pid, epoch, frozenset(), frozenset((group,)), now_ms, request_version)


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
) -> TxnResult:
    """EndTxn (key 26), first phase.

    - No entry or pid mismatch -> INVALID_PRODUCER_ID_MAPPING; epoch mismatch ->
      PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v2).
    - Ongoing -> PrepareCommit / PrepareAbort, partitions + groups retained. Effects
      ``(Persist, WriteMarkers)``, no ``Reply``: the caller dispatches the markers, then
      calls ``complete_end_txn`` and answers with its ``Reply`` (NONE); if a dispatch
      fails it answers COORDINATOR_NOT_AVAILABLE and the entry stays prepared.
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

    Args:
        meta: the current entry, or None.
        pid: request producer id.
        epoch: request producer epoch.
        commit: the request's ``committed`` flag.
        now_ms: the caller's clock.
        request_version: the EndTxn version.
        committed_here: the caller prepared the commit of this entry's transaction (same
            pid, epoch and ``txn_seq``) and has owned the entry without a break since.

    Returns:
        A ``TxnResult`` as described.
    """
    failed = _check_producer(meta, pid, epoch, request_version)
    if failed is not None:
        return failed
    assert meta is not None
    state = meta.state
    if state is TxnState.Ongoing:
        prepared = _moved(meta, TxnState.PrepareCommit if commit else TxnState.PrepareAbort, meta.partitions,
                          meta.groups, meta.ongoing_since_ms, now_ms, meta.txn_seq)
        return TxnResult(ErrorCode.none, prepared, (Persist(prepared), _dispatch(prepared)))
    wanted_prepare = TxnState.PrepareCommit if commit else TxnState.PrepareAbort
    wanted_complete = TxnState.CompleteCommit if commit else TxnState.CompleteAbort
    if state is wanted_complete:
        return _unchanged_ok()
    if state is wanted_prepare:
        return TxnResult(ErrorCode.none, None, (_dispatch(meta),))
    if not commit and (state is TxnState.Empty or (state is TxnState.CompleteCommit and not committed_here)):
        # Nothing of this epoch is open: an abort of a transaction whose registration
        # never reached the coordinator (a request lost with a paused or moved
        # coordinator). No data of it exists anywhere (KIP-890 verification accepts
        # transactional batches only for partitions of an Ongoing entry), so it is
        # aborted already.
        return _unchanged_ok()
    return _error(ErrorCode.invalid_txn_state)


def complete_end_txn(
    meta: TxnMetadata | None,
    now_ms: int,
    *,
    dispatched: WriteMarkers | None = None,
) -> TxnResult:
    """EndTxn second phase (and the reconcile's): every marker of the dispatch is durable.

    PrepareCommit -> CompleteCommit, PrepareAbort -> CompleteAbort; clears partitions and
    groups, ``ongoing_since_ms = 0``. Effects ``(OffsetHook, Persist, Reply(NONE))``;
    ``OffsetHook`` (groups from before clearing) is left out when there are no groups.

    When ``dispatched`` (the ``WriteMarkers`` that was carried out) is given, it must
    describe this entry's transaction (same pid, epoch, direction, ``txn_seq``, and a
    superset of its partitions and groups):

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
        return _error(ErrorCode.invalid_txn_state)
    if dispatched is not None:
        same_txn = (
            dispatched.transactional_id == meta.transactional_id
            and dispatched.producer_id == meta.producer_id
            and dispatched.producer_epoch == meta.producer_epoch
            and dispatched.txn_seq == meta.txn_seq
        )
        if not same_txn:
            return _error(ErrorCode.invalid_txn_state)
        if meta.state.is_complete:
            done = TxnState.CompleteCommit if dispatched.commit else TxnState.CompleteAbort
            return _unchanged_ok() if meta.state is done else _error(ErrorCode.invalid_txn_state)
        if not (
            meta.state.is_prepared
            and (meta.state is TxnState.PrepareCommit) == dispatched.commit
            and meta.partitions <= dispatched.partitions
            and meta.groups <= dispatched.groups
        ):
            return _error(ErrorCode.invalid_txn_state)
    elif meta.state.is_complete:
        return _unchanged_ok()
    elif not meta.state.is_prepared:
        return _error(ErrorCode.invalid_txn_state)

    commit = meta.state is TxnState.PrepareCommit
    completed = _moved(meta, TxnState.CompleteCommit if commit else TxnState.CompleteAbort, _NO_PARTITIONS,
                       _NO_GROUPS, 0, now_ms, meta.txn_seq)
    effects: tuple[Effect, ...] = (Persist(completed), Reply(ErrorCode.none))
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
    return TxnResult(ErrorCode.none, aborting, (Persist(aborting), _dispatch(aborting)))


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


def reaper_abort(meta: TxnMetadata, now_ms: int) -> TxnResult:
    """The 10 s timeout sweep for one entry.

    Args:
        meta: the current entry.
        now_ms: the caller's clock.

    Returns:
        When ``timed_out``: ``fence_and_abort`` (PrepareAbort, epoch + 1, effects
        ``(Persist, WriteMarkers(abort))``; the reconcile completes it). Otherwise NONE,
        unchanged, no effects.
    """
    if not timed_out(meta, now_ms):
        return TxnResult(ErrorCode.none)
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
        _dispatch(slot_state.entries[txn_id])
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
