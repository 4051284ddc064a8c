"""The effects of the transaction coordinator's machine (``kaas.domain.txn``), which its
caller carries out in order (that module's docstring says how), the result that carries
them (``TxnResult``), and the builders every transition shares. Pure: no I/O.
"""

from __future__ import annotations

from typing import NamedTuple, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.domain.kinds import same_kind
from kaas.domain.txn_records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TxnMetadata,
    TxnState,
)

__all__ = [
    "Effect",
    "Fence",
    "OffsetHook",
    "Persist",
    "Reply",
    "TxnResult",
    "WriteMarkers",
    "dispatch_of",
    "error",
    "moved",
    "stamp",
    "unchanged_ok",
]

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


def error(code: ErrorCode) -> TxnResult:
    return TxnResult(code, None, (Reply(code),))


def unchanged_ok() -> TxnResult:
    return TxnResult(ErrorCode.none, None, (Reply(ErrorCode.none),))


def dispatch_of(meta: TxnMetadata) -> WriteMarkers:
    return WriteMarkers(
        producer_id=meta.producer_id,
        producer_epoch=meta.producer_epoch,
        commit=meta.state is TxnState.PrepareCommit,
        partitions=meta.partitions,
        groups=meta.groups,
        transactional_id=meta.transactional_id,
        txn_seq=meta.txn_seq,
    )


def moved(
    meta: TxnMetadata,
    state: TxnState,
    partitions: frozenset[TopicPartition],
    groups: frozenset[str],
    ongoing_since_ms: int,
    last_update_ms: int,
    txn_seq: int,
    txn_version: int | None = None,
) -> TxnMetadata:
    """``meta._replace(state=..., ...)`` for the transitions of a transaction (begin, add,
    prepare, complete), which keep the producer fields: positional construction, a third of
    ``_replace``'s cost, and every transactional request makes one. ``txn_version`` None
    keeps the entry's; ``next_producer_id`` is kept."""
    return TxnMetadata(
        meta.transactional_id, meta.producer_id, meta.producer_epoch, meta.last_producer_id,
        meta.last_producer_epoch, meta.timeout_ms, state, partitions, groups, ongoing_since_ms,
        last_update_ms, txn_seq, meta.txn_version if txn_version is None else txn_version,
        meta.next_producer_id,
    )


def stamp(now_ms: int) -> int:
    """``ongoing_since_ms`` for a transaction starting at ``now_ms``; 0 means "none"."""
    return max(now_ms, 1)
