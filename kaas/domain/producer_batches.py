"""One idempotent producer on one partition: its sequence arithmetic, the dedupe ring of its
last ``WINDOW`` batches (``ProducerEntry``), and the decisions on an incoming batch
(``Append``, ``Duplicate``, ``Reject``). ``producer_state.ProducerStateTable`` holds one entry
per producer id and applies the rules (that module's docstring lists them).

Sequences are int32 and wrap: after ``2**31 - 1`` comes 0.

Invariants:
    - an entry's epoch never decreases: ``raise_epoch`` only raises it, and clears the ring
      when it does;
    - the ring holds at most ``WINDOW`` batches, all of the entry's current epoch, oldest
      first.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple, TypeAlias

__all__ = [
    "APPEND",
    "INT32_MAX",
    "SEQ_MODULUS",
    "WINDOW",
    "Append",
    "BatchMeta",
    "Decision",
    "Duplicate",
    "ProducerEntry",
    "Reject",
    "last_sequence",
    "next_sequence",
]

INT32_MAX = 2**31 - 1
SEQ_MODULUS = 2**31
WINDOW = 5


def last_sequence(base_sequence: int, record_count: int) -> int:
    """The sequence of a batch's last record, wrapping after INT32_MAX.

    Args:
        base_sequence: the batch's base sequence (>= 0).
        record_count: records in the batch (>= 1).

    Returns:
        ``(base_sequence + record_count - 1) mod 2**31``.
    """
    return (base_sequence + record_count - 1) % SEQ_MODULUS


def next_sequence(last_seq: int) -> int:
    """The base sequence expected after a batch ending at ``last_seq``.

    Args:
        last_seq: last sequence written, or -1 when nothing was written at this epoch.

    Returns:
        ``(last_seq + 1) mod 2**31``; 0 for -1 and for INT32_MAX.
    """
    return (last_seq + 1) % SEQ_MODULUS


# --- decisions -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Append:
    """Accept the batch: append it, then call ``ProducerStateTable.record``."""


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The batch was already written: answer NONE with the original offset, write nothing.

    Attributes:
        base_offset: base offset the original batch was written at.
        timestamp: the timestamp recorded for it (log append time for the response).
    """

    base_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class Reject:
    """Refuse the batch.

    Attributes:
        code: the Kafka error code (an ``ErrorCode`` member, which is an int).
        reason: human text for logs and the response's error_message.
    """

    code: int
    reason: str


Decision: TypeAlias = Append | Duplicate | Reject

APPEND = Append()
"""The one ``Append`` decision (it carries nothing)."""


# --- state -----------------------------------------------------------------------------


class BatchMeta(NamedTuple):
    """What the dedupe ring remembers of one appended batch (a named tuple: one per
    appended batch of an idempotent producer).

    Attributes:
        first_seq: the batch's base sequence.
        last_seq: the sequence of its last record (wrapped).
        base_offset: log offset of its first record.
        last_offset: log offset of its last record.
        timestamp: timestamp recorded at append (echoed for duplicates).
    """

    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    timestamp: int


def _new_ring() -> deque[BatchMeta]:
    return deque(maxlen=WINDOW)


@dataclass(slots=True)
class ProducerEntry:
    """State of one producer id on one partition.

    Attributes:
        producer_id: the pid (>= 0).
        epoch: the highest epoch seen for this pid here.
        batches: the last ``WINDOW`` batches appended at ``epoch``, oldest first.
        last_append_ms: the broker's clock (ms) at the last append, marker or fence of
            this pid here, for expiry; never a client timestamp.
        txn_first_offset: first offset of the open transaction here, None when none.
        coordinator_epoch: coordinator epoch of the last marker, -1 when none.
    """

    producer_id: int
    epoch: int
    batches: deque[BatchMeta] = field(default_factory=_new_ring)
    last_append_ms: int = -1
    txn_first_offset: int | None = None
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        """Last sequence written at the current epoch, -1 when the ring is empty."""
        return self.batches[-1].last_seq if self.batches else -1

    def find_batch(self, first_seq: int, last_seq: int) -> BatchMeta | None:
        """Return the cached batch with exactly this sequence range, if any.

        Args:
            first_seq: base sequence of the incoming batch.
            last_seq: last sequence of the incoming batch.

        Returns:
            The matching ``BatchMeta`` or None.
        """
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def raise_epoch(self, epoch: int) -> bool:
        """Move to ``epoch`` if it is higher (clearing the ring); whether it did."""
        if epoch > self.epoch:
            self.epoch = epoch
            self.batches.clear()
            return True
        return False
