"""Per-partition producer state: the idempotence dedupe window and open-transaction starts.

One ``ProducerStateTable`` per partition. The produce path runs ``check`` on each batch
header under the partition mutex and, once the append succeeded, ``record``. Control
markers go through ``check_marker`` and then ``end_txn``. Rules follow Apache
``ProducerAppendInfo`` / ``ProducerStateEntry`` (docs/transactions.rst):

* ``pid < 0``: not idempotent, always appended.
* ``pid >= 0`` with ``base_sequence < 0`` (or an empty batch): INVALID_RECORD 87.
* Unknown pid (new, or expired): any sequence is accepted.
* Same epoch, ``(first_seq, last_seq)`` equal to one of the last 5 batches: duplicate;
  echo that batch's base offset and timestamp, write nothing.
* Lower epoch: INVALID_PRODUCER_EPOCH 47.
* Higher epoch: the base sequence must be 0, else OUT_OF_ORDER_SEQUENCE_NUMBER 45.
* Same epoch: the base sequence must be ``(last_seq + 1) mod 2**31`` (0 when the window
  is empty, e.g. after a fence), else 45. That covers duplicates older than the window.
* A non-transactional batch from a pid with a transaction open on this partition:
  INVALID_TXN_STATE 48 (Apache ``appendDataBatch``).

Sequences are int32 and wrap: after ``2**31 - 1`` comes 0.

Invariants:
    - an entry's epoch never decreases (``record``, ``end_txn`` and ``fence`` only raise it);
    - the dedupe ring holds at most ``WINDOW`` batches, all of the entry's current epoch,
      oldest first; raising the epoch clears it;
    - ``txn_first_offset`` is set by the first transactional batch after no transaction was
      open and cleared only by ``end_txn``; ``expire`` never drops an entry whose
      transaction is open, so the LSO can never move past an open transaction;
    - ``first_unstable_offset()`` equals ``min(e.txn_first_offset)`` over entries with a
      transaction open (``None`` when there is none);
    - ``from_snapshot(t.to_snapshot(), now_ms=...)`` classifies every batch exactly as
      ``t`` does;
    - expiry (``producer.id.expiration.ms``, KIP-854) counts from ``last_append_ms``, the
      broker's clock at the producer's last append, marker or fence (``now_ms``), never
      from a batch's timestamp: a client's clock (Sarama's MaxTimestamp -1, a skewed host)
      cannot expire an entry early or pin it forever. Batch timestamps are only echoed
      to duplicates.

Pure: no I/O, no clock, no logging. Times are passed in (``timestamp``, ``now_ms``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import TypedDict

from kio.schema.errors import ErrorCode

from kaas.domain.producer_batches import (
    APPEND,
    INT32_MAX,
    SEQ_MODULUS,
    WINDOW,
    Append,
    BatchMeta,
    Decision,
    Duplicate,
    ProducerEntry,
    Reject,
    last_sequence,
    next_sequence,
)

__all__ = [
    "INT32_MAX",
    "SEQ_MODULUS",
    "SNAPSHOT_FORMAT",
    "WINDOW",
    "Append",
    "BatchMeta",
    "Decision",
    "Duplicate",
    "ProducerEntry",
    "ProducerStateTable",
    "Reject",
    "last_sequence",
    "next_sequence",
]

SNAPSHOT_FORMAT = 1


class ProducerEntrySnapshot(TypedDict):
    """One producer of a ``TableSnapshot``."""

    producer_id: int
    epoch: int
    last_timestamp: int
    coordinator_epoch: int
    txn_first_offset: int | None
    batches: list[list[int]]
    """Each ``[first_seq, last_seq, base_offset, last_offset, timestamp]``, oldest first."""


class TableSnapshot(TypedDict):
    """``ProducerStateTable.to_snapshot``: the ``producers`` of ``producer-state.snapshot``."""

    format: int
    clock_ms: int
    clock: str
    entries: list[ProducerEntrySnapshot]


class ProducerStateTable:
    """Producer state of one partition: dedupe windows and open-transaction starts.

    Not thread-safe; the caller holds the partition mutex across ``check``, the append
    and ``record``.
    """

    __slots__ = ("_clock_ms", "_entries", "_txn_heap")

    def __init__(self) -> None:
        self._entries: dict[int, ProducerEntry] = {}
        # (txn_first_offset, pid); stale items are skipped lazily, see first_unstable_offset.
        self._txn_heap: list[tuple[int, int]] = []
        # Highest broker time seen (now_ms arguments): stamps entries created without an
        # explicit time so they do not look idle since the epoch.
        self._clock_ms = -1

    # -- lookup --------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, producer_id: object) -> bool:
        return producer_id in self._entries

    def __iter__(self) -> Iterator[ProducerEntry]:
        return iter(self._entries.values())

    def get(self, producer_id: int) -> ProducerEntry | None:
        """The entry for ``producer_id``, or None when it is unknown here.

        Args:
            producer_id: the pid.

        Returns:
            The live entry (do not mutate it), or None.
        """
        return self._entries.get(producer_id)

    def last_batch_offsets(self) -> dict[int, int]:
        """Base offset of the last data batch of every live producer (the log cleaner keeps
        these batches, so a retry after cleaning is still recognised from the log)."""
        return {pid: e.batches[-1].base_offset for pid, e in self._entries.items() if e.batches}

    # -- produce path --------------------------------------------------------------------

    def check(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        record_count: int,
        is_transactional: bool,
    ) -> Decision:
        """Classify a data batch before it is appended. Changes nothing.

        Args:
            producer_id: the batch header's producerId (-1 when not idempotent).
            epoch: the batch header's producerEpoch.
            base_sequence: the batch header's baseSequence.
            record_count: the batch header's record count.
            is_transactional: the batch's transactional attribute bit.

        Returns:
            ``Append()``; ``Duplicate(base_offset, timestamp)`` to echo without writing; or
            ``Reject(code, reason)`` with 87 INVALID_RECORD, 47 INVALID_PRODUCER_EPOCH,
            45 OUT_OF_ORDER_SEQUENCE_NUMBER or 48 INVALID_TXN_STATE.
        """
        if producer_id < 0:
            return APPEND
        if base_sequence < 0:
            return Reject(
                ErrorCode.invalid_record,
                f"producer {producer_id} sent base sequence {base_sequence}",
            )
        if record_count < 1:
            return Reject(
                ErrorCode.invalid_record,
                f"producer {producer_id} sent a batch of {record_count} records",
            )
        entry = self._entries.get(producer_id)
        if entry is None:
            return APPEND
        first_seq = base_sequence
        if epoch == entry.epoch:
            dup = entry.find_batch(first_seq, last_sequence(first_seq, record_count))
            if dup is not None:
                return Duplicate(dup.base_offset, dup.timestamp)
        if epoch < entry.epoch:
            return Reject(
                ErrorCode.invalid_producer_epoch,
                f"producer {producer_id} epoch {epoch} is older than {entry.epoch}",
            )
        if epoch > entry.epoch:
            if first_seq != 0:
                return Reject(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {producer_id} new epoch {epoch} must start at sequence 0, "
                    f"got {first_seq}",
                )
        else:
            expected = next_sequence(entry.last_seq)
            if first_seq != expected:
                return Reject(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {producer_id} epoch {epoch} expected sequence {expected}, "
                    f"got {first_seq}",
                )
        if entry.txn_first_offset is not None and not is_transactional:
            return Reject(
                ErrorCode.invalid_txn_state,
                f"producer {producer_id} has a transaction open since offset "
                f"{entry.txn_first_offset}; expected a transactional batch",
            )
        return APPEND

    def record(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        record_count: int,
        base_offset: int,
        timestamp: int,
        is_transactional: bool,
        *,
        now_ms: int,
    ) -> None:
        """Note a data batch that ``check`` accepted and that is now appended.

        A higher epoch clears the ring. A lower epoch (a fence raced with the append)
        leaves epoch and ring alone but still tracks a transaction start, so the LSO
        holds until that transaction's marker.

        Args:
            producer_id: the batch's pid; negative pids are ignored.
            epoch: the batch's producer epoch.
            base_sequence: the batch's base sequence.
            record_count: records in the batch.
            base_offset: offset the batch was written at.
            timestamp: the batch's timestamp to echo to duplicates (its max timestamp, the
                log append time on LogAppendTime topics); a client's value, never used
                for expiry.
            is_transactional: the batch's transactional bit.
            now_ms: the broker's clock at the append; the entry is idle from here.
        """
        if producer_id < 0:
            return
        self._clock_ms = max(self._clock_ms, now_ms)
        entry = self._entries.get(producer_id)
        if entry is None:
            entry = ProducerEntry(producer_id=producer_id, epoch=epoch)
            self._entries[producer_id] = entry
        else:
            entry.raise_epoch(epoch)
        if epoch == entry.epoch:
            entry.batches.append(
                BatchMeta(base_sequence, last_sequence(base_sequence, record_count), base_offset,
                          base_offset + record_count - 1, timestamp)
            )
        entry.last_append_ms = max(entry.last_append_ms, now_ms)
        if is_transactional and entry.txn_first_offset is None:
            entry.txn_first_offset = base_offset
            self._push_txn(base_offset, producer_id)

    # -- transaction markers -------------------------------------------------------------

    def check_marker(
        self, producer_id: int, epoch: int, coordinator_epoch: int | None = None
    ) -> Append | Reject:
        """Classify a COMMIT/ABORT control marker before it is appended. Changes nothing.

        Args:
            producer_id: the transaction's pid.
            epoch: the marker's producer epoch.
            coordinator_epoch: the marker's coordinator epoch, when the caller tracks one.

        Returns:
            ``Append()``, or ``Reject`` with 87 for a negative pid, 47 for an epoch below
            the known one, 52 TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch.
        """
        if producer_id < 0:
            return Reject(ErrorCode.invalid_record, "control marker without a producer id")
        entry = self._entries.get(producer_id)
        if entry is None:
            return APPEND
        if epoch < entry.epoch and entry.txn_first_offset is None:
            return Reject(
                ErrorCode.invalid_producer_epoch,
                f"marker for producer {producer_id} epoch {epoch} is older than {entry.epoch}",
            )
        if coordinator_epoch is not None and coordinator_epoch < entry.coordinator_epoch:
            return Reject(
                ErrorCode.transaction_coordinator_fenced,
                f"marker coordinator epoch {coordinator_epoch} is older than "
                f"{entry.coordinator_epoch}",
            )
        return APPEND

    def end_txn(
        self,
        producer_id: int,
        epoch: int,
        *,
        coordinator_epoch: int | None = None,
        now_ms: int | None = None,
    ) -> int | None:
        """Note an appended COMMIT/ABORT marker: the pid's transaction here has ended.

        Creates the entry when the pid is unknown (a marker for a partition that got no
        data still fixes the epoch, as in Apache). A marker with an epoch below the known
        one is stale and changes nothing (``check_marker`` rejects it beforehand), unless
        the pid still has a transaction open here: a fence that overtook a queued marker
        must not leave that transaction (and the LSO) open forever.

        Args:
            producer_id: the transaction's pid.
            epoch: the marker's producer epoch; a higher one is adopted and clears the ring.
            coordinator_epoch: the marker's coordinator epoch, stored when given.
            now_ms: time of the append, for expiry; when None the entry keeps its time.

        Returns:
            First offset of the transaction that ended (for the aborted-txn index), or None
            when no transaction was open here for this pid.
        """
        if now_ms is not None:
            self._clock_ms = max(self._clock_ms, now_ms)
        entry = self._entries.get(producer_id)
        if entry is None:
            entry = ProducerEntry(
                producer_id=producer_id,
                epoch=epoch,
                last_append_ms=self._clock_ms if now_ms is None else now_ms,
            )
            self._entries[producer_id] = entry
        elif epoch < entry.epoch:
            # A marker of an older session whose transaction is still open here: the
            # cross-broker fence (a rejoin's epoch bump) reached this partition before the
            # queued marker did. It still closes that transaction; the epoch stays.
            if entry.txn_first_offset is None:
                return None
        else:
            entry.raise_epoch(epoch)
        if coordinator_epoch is not None:
            entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        if now_ms is not None:
            entry.last_append_ms = max(entry.last_append_ms, now_ms)
        first = entry.txn_first_offset
        entry.txn_first_offset = None  # the heap item goes stale and is skipped lazily
        return first

    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest open transaction on this partition.

        The LSO is this, or the high watermark when it is None. Amortised O(log n).

        Returns:
            ``min(txn_first_offset)`` over entries with an open transaction, or None.
        """
        heap = self._txn_heap
        while heap:
            offset, pid = heap[0]
            entry = self._entries.get(pid)
            if entry is not None and entry.txn_first_offset == offset:
                return offset
            heapq.heappop(heap)
        return None

    def open_transactions(self) -> dict[int, int]:
        """Open transactions here.

        Returns:
            ``{pid: txn_first_offset}`` for every entry with a transaction open.
        """
        return {
            e.producer_id: e.txn_first_offset
            for e in self._entries.values()
            if e.txn_first_offset is not None
        }

    def _push_txn(self, offset: int, producer_id: int) -> None:
        heapq.heappush(self._txn_heap, (offset, producer_id))
        # Stale items under a long-lived open transaction are never popped; rebuild when
        # they dominate. Amortised O(1): a rebuild needs len(entries) + 32 pushes first.
        if len(self._txn_heap) > 2 * len(self._entries) + 32:
            self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        self._txn_heap = [(off, pid) for pid, off in self.open_transactions().items()]
        heapq.heapify(self._txn_heap)

    # -- fencing and expiry --------------------------------------------------------------

    def fence(self, producer_id: int, new_epoch: int, *, now_ms: int | None = None) -> bool:
        """Cross-partition fence on rejoin: raise the pid's epoch and clear its window.

        A batch at an older epoch then gets 47; the new session must start at sequence 0.
        An open transaction stays open (its ABORT marker ends it). A ``new_epoch`` at or
        below the known one changes nothing, so re-applying a fence is harmless.

        Args:
            producer_id: the pid.
            new_epoch: the epoch the coordinator handed out.
            now_ms: time of the fence, for expiry of a newly created entry; when None a
                new entry takes the latest time this table has seen.

        Returns:
            True when the entry was created or its epoch raised.
        """
        if now_ms is not None:
            self._clock_ms = max(self._clock_ms, now_ms)
        entry = self._entries.get(producer_id)
        if entry is None:
            self._entries[producer_id] = ProducerEntry(
                producer_id=producer_id,
                epoch=new_epoch,
                last_append_ms=self._clock_ms if now_ms is None else now_ms,
            )
            return True
        if not entry.raise_epoch(new_epoch):
            return False
        if now_ms is not None:
            entry.last_append_ms = max(entry.last_append_ms, now_ms)
        return True

    def expire(self, now_ms: int, max_idle_ms: int) -> list[ProducerEntry]:
        """Drop entries idle longer than ``max_idle_ms`` that have no open transaction.

        Idle means ``now_ms - last_append_ms``: both are the broker's clock, so no batch
        timestamp a client sent takes part.

        Args:
            now_ms: the broker's clock now.
            max_idle_ms: idle limit (``producer.id.expiration.ms``, KIP-854).

        Returns:
            The dropped entries, ascending by pid (for the caller to log: each is dropped,
            and so reported, once). Their pid's next batch is accepted at any sequence.
        """
        self._clock_ms = max(self._clock_ms, now_ms)
        dropped = [
            e
            for pid, e in sorted(self._entries.items())
            if e.txn_first_offset is None and now_ms - e.last_append_ms > max_idle_ms
        ]
        for e in dropped:
            del self._entries[e.producer_id]
        return dropped

    # -- snapshot and describe -----------------------------------------------------------

    def to_snapshot(self) -> TableSnapshot:
        """Plain-data form for ``producer-state.snapshot`` (msgpack- and JSON-able).

        Returns:
            ``{"format": 1, "clock_ms": int, "clock": "broker", "entries": [{"producer_id",
            "epoch", "last_timestamp", "coordinator_epoch", "txn_first_offset" (int or
            None), "batches": [[first_seq, last_seq, base_offset, last_offset, timestamp],
            ...]}]}`` with entries ascending by pid and batches oldest first. An entry's
            ``last_timestamp`` is its ``last_append_ms``; ``"clock": "broker"`` says so
            (snapshots written before it held a batch timestamp there).
        """
        return {
            "format": SNAPSHOT_FORMAT,
            "clock_ms": self._clock_ms,
            "clock": "broker",
            "entries": [
                {
                    "producer_id": e.producer_id,
                    "epoch": e.epoch,
                    "last_timestamp": e.last_append_ms,
                    "coordinator_epoch": e.coordinator_epoch,
                    "txn_first_offset": e.txn_first_offset,
                    "batches": [
                        [b.first_seq, b.last_seq, b.base_offset, b.last_offset, b.timestamp]
                        for b in e.batches
                    ],
                }
                for e in sorted(self._entries.values(), key=lambda e: e.producer_id)
            ],
        }

    @classmethod
    def from_snapshot(cls, d: object, *, now_ms: int) -> ProducerStateTable:
        """Rebuild a table from ``to_snapshot`` output.

        Idle times: an entry keeps its ``last_append_ms``, capped at ``now_ms`` (a clock
        ahead on the broker that wrote it must not keep the entry past one expiration
        period from now). A snapshot without ``"clock": "broker"`` (written before expiry
        went by the broker's clock) holds batch timestamps there, possibly a client's -1:
        its entries count as active at ``now_ms``, so a takeover never expires them at
        once; they expire one period after it at the latest.

        Args:
            d: the decoded snapshot.
            now_ms: the broker's clock at load.

        Returns:
            A table that classifies every batch as the snapshotted one did.

        Raises:
            ValueError: unknown format or malformed content (the storage caller maps it to
                CorruptState; never silently reset producer state).
        """
        if not isinstance(d, dict):
            raise ValueError(f"unsupported producer state snapshot format {type(d).__name__!r}")
        if d.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(f"unsupported producer state snapshot format {d.get('format')!r}")
        table = cls()
        broker_clock = d.get("clock") == "broker"
        try:
            _int(d.get("clock_ms", -1))
            table._clock_ms = now_ms
            for raw in d["entries"]:
                pid = _int(raw["producer_id"])
                if pid < 0 or pid in table._entries:
                    raise ValueError(f"bad or repeated producer id {pid}")
                txn = raw["txn_first_offset"]
                batches = raw["batches"]
                if len(batches) > WINDOW:
                    raise ValueError(f"producer {pid} has {len(batches)} batches cached")
                entry = ProducerEntry(
                    producer_id=pid,
                    epoch=_int(raw["epoch"]),
                    last_append_ms=(
                        min(_int(raw["last_timestamp"]), now_ms) if broker_clock else now_ms
                    ),
                    txn_first_offset=None if txn is None else _int(txn),
                    coordinator_epoch=_int(raw["coordinator_epoch"]),
                )
                for b in batches:
                    first_seq, last_seq, base_offset, last_offset, ts = (_int(x) for x in b)
                    entry.batches.append(
                        BatchMeta(first_seq, last_seq, base_offset, last_offset, ts)
                    )
                table._entries[pid] = entry
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed producer state snapshot: {exc!r}") from exc
        table._rebuild_heap()
        return table

    def describe(self) -> list[dict[str, int]]:
        """Rows for DescribeProducers, ascending by pid, keyed like kio's ``ProducerState``.

        Returns:
            One dict per entry: ``producer_id``, ``producer_epoch``, ``last_sequence``
            (-1 when none at this epoch), ``last_timestamp`` (the broker's clock at the
            last append: ``last_append_ms``), ``coordinator_epoch``,
            ``current_txn_start_offset`` (-1 when no transaction is open).
        """
        return [
            {
                "producer_id": e.producer_id,
                "producer_epoch": e.epoch,
                "last_sequence": e.last_seq,
                "last_timestamp": e.last_append_ms,
                "coordinator_epoch": e.coordinator_epoch,
                "current_txn_start_offset": (
                    -1 if e.txn_first_offset is None else e.txn_first_offset
                ),
            }
            for e in sorted(self._entries.values(), key=lambda e: e.producer_id)
        ]


def _int(x: object) -> int:
    if type(x) is not int:
        raise ValueError(f"expected an int, got {x!r}")
    return x
