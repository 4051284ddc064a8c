"""The transaction coordinator's records (``kaas.domain.txn``): a transactional id's state
(``TxnState``, Kafka's names), its entry (``TxnMetadata``) and a slot's entries
(``SlotState``), with the JSON form of a slot file (``to_json``/``from_json``; the file is
``storage.txn_store``'s). Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, TypeAlias, TypedDict

__all__ = [
    "EPOCH_EXHAUSTED",
    "I16_MAX",
    "NO_GROUPS",
    "NO_PARTITIONS",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "SLOT_FORMAT",
    "TRANSACTION_VERSIONS",
    "TV1",
    "TV2",
    "SlotState",
    "TopicPartition",
    "TxnMetadata",
    "TxnState",
    "version_of_add_partitions",
    "version_of_end_txn",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
I16_MAX = 32767
EPOCH_EXHAUSTED = I16_MAX - 1
"""Apache ``TransactionMetadata.isEpochExhausted``: an epoch >= this gets a fresh pid."""

SLOT_FORMAT = 1

TV1 = 1
"""transaction.version 0 and 1 (they behave alike; Apache's TV_0 is the old clients'): the
epoch stays through a transaction's end, the client adds its partitions and groups."""
TV2 = 2
"""transaction.version 2 (KIP-890 part 2): every EndTxn bumps the epoch and tells the client."""
TRANSACTION_VERSIONS = (TV1, TV2)


def version_of_add_partitions(request_version: int) -> int:
    """The transaction version an AddPartitionsToTxn request implies (Apache
    ``TransactionVersion.transactionVersionForAddPartitionsToTxn``): the broker form (v4+,
    sent by a partition leader for a TV2 producer's Produce) is TV2, the client form TV1."""
    return TV2 if request_version > 3 else TV1


def version_of_end_txn(request_version: int) -> int:
    """The transaction version an EndTxn request implies (Apache
    ``TransactionVersion.transactionVersionForEndTxn``): v5+ is TV2, the client reads the
    producer id and epoch it continues with from the answer."""
    return TV2 if request_version > 4 else TV1

TopicPartition: TypeAlias = tuple[str, int]
NO_PARTITIONS: frozenset[TopicPartition] = frozenset()
NO_GROUPS: frozenset[str] = frozenset()


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
        txn_version: the transaction version (``TV1``/``TV2``) the current or last
            transaction runs under (Apache's ``clientTransactionVersion``): set when it
            begins, from the request that began it, and at its EndTxn, from that request.
            Transactions the coordinator ends itself (the reaper) end under it.
        next_producer_id: in a Prepare* entry of a TV2 transaction whose epoch was
            exhausted, the producer id its completion moves to (at epoch 0); -1 otherwise.
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
    txn_version: int = TV1
    next_producer_id: int = NO_PRODUCER_ID

    def to_json(self) -> TxnEntryRecord:
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
            "transaction_version": self.txn_version,
            "next_producer_id": self.next_producer_id,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, object]) -> TxnMetadata:
        """Inverse of ``to_json``.

        Args:
            obj: a dict as produced by ``to_json`` (``txn_seq`` may be absent: 0; files
                written before transaction.version 2 lack ``transaction_version``, read as
                TV1, and ``next_producer_id``, read as -1).

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
            items = obj["partitions"]
            if not isinstance(items, Iterable):
                raise TypeError(f"partitions {items!r} is not a list")
            for item in items:
                topic, partition = item
                if not isinstance(topic, str) or not isinstance(partition, int):
                    raise ValueError(f"bad partition {item!r}")
                partitions.append((topic, partition))
            groups = obj["groups"]
            if not isinstance(groups, Iterable):
                raise TypeError(f"groups {groups!r} is not a list")
            if not all(isinstance(g, str) for g in groups):
                raise ValueError(f"bad groups {groups!r}")
            (producer_id, producer_epoch, last_producer_id, last_producer_epoch, timeout_ms, since, update, seq,
             version, next_pid) = _ints(
                (obj["producer_id"], obj["producer_epoch"], obj["last_producer_id"], obj["last_producer_epoch"],
                 obj["timeout_ms"], obj["ongoing_since_ms"], obj["last_update_ms"], obj.get("txn_seq", 0),
                 obj.get("transaction_version", TV1), obj.get("next_producer_id", NO_PRODUCER_ID)))
            name = obj["state"]
            state = _STATE_OF.get(name) if isinstance(name, str) else None
            if state is None:
                raise ValueError(f"{name!r} is not a TxnState")
            if version not in TRANSACTION_VERSIONS:
                raise ValueError(f"transaction_version {version!r} is not one of {TRANSACTION_VERSIONS}")
            return cls(txn_id, producer_id, producer_epoch, last_producer_id, last_producer_epoch, timeout_ms, state,
                       frozenset(partitions), frozenset(groups), since, update, seq, version, next_pid)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"bad transaction entry: {exc!r}") from exc


_STATE_OF = {state.value: state for state in TxnState}


def _ints(values: tuple[object, ...]) -> list[int]:
    """``values``, each checked to be an int (JSON gives int or bool: an int subclass other
    than bool is rare).

    Raises:
        ValueError: one is not.
    """
    out: list[int] = []
    for value in values:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"an int field holds {value!r}")
        out.append(value)
    return out


class TxnEntryRecord(TypedDict):
    """One transaction of a slot file (``TxnMetadata.to_json``). Files written before
    ``txn_seq``, ``transaction_version`` and ``next_producer_id`` existed lack them."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_id: int
    last_producer_epoch: int
    timeout_ms: int
    state: str
    """The ``TxnState`` by its Kafka name."""
    partitions: list[list[str | int]]
    """Each ``[topic, partition]``, sorted."""
    groups: list[str]
    ongoing_since_ms: int
    last_update_ms: int
    txn_seq: int
    transaction_version: int
    next_producer_id: int


class SlotFile(TypedDict):
    """``txn_state/slot-N.json``, format ``SLOT_FORMAT``: its transactions by id
    (``storage.txn_store`` writes the same bytes without building this dict)."""

    format: int
    transactions: dict[str, TxnEntryRecord]


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

    def to_json(self) -> SlotFile:
        """Plain-typed form: ``{"format": 1, "transactions": {id: entry}}``, ids sorted."""
        return {
            "format": SLOT_FORMAT,
            "transactions": {k: self.entries[k].to_json() for k in sorted(self.entries)},
        }

    @classmethod
    def from_json(cls, obj: object) -> SlotState:
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
            if not isinstance(value, Mapping):
                raise ValueError(f"bad transaction entry: {value!r}")
            meta = TxnMetadata.from_json(value)
            if meta.transactional_id != key:
                raise ValueError(f"slot key {key!r} holds entry {meta.transactional_id!r}")
            entries[key] = meta
        return cls(entries)
