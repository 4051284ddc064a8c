"""The log cleaner's planner: which records of the cleanable part of a compacted log to keep.
Pure: batches and the log's transaction facts in, a decision per batch out (no I/O).

Kafka's rules (KIP-98's transaction-aware cleaning included):

- keep the latest record of every key; offsets never change (a batch keeps its base offset
  and last offset delta, so a rebuilt batch's records keep their offsets);
- a tombstone (null value) is kept until its batch is older than ``delete.retention.ms``,
  then removed (with everything older of its key: it was the latest);
- records of aborted transactions are removed, and never count as "the latest" of a key;
- a transaction's marker is kept while any record of that transaction remains, then once
  older than ``delete.retention.ms`` it is removed. Markers carry the same control key, so
  they are never deduplicated by key (a trap Redpanda fell into);
- the last batch of every live producer is kept (empty if none of its records remain), so
  an idempotent retry after cleaning is still recognised from the log alone;
- records without a key are kept (they predate the compact policy; new ones are refused
  at produce).

Invariants (checked by the property tests):
    - a read_committed read of the cleaned range gives, per key, the value of the latest
      committed record, or nothing when that is a tombstone older than the horizon;
    - every kept record keeps its offset; no record of an aborted transaction is kept;
    - a marker is kept while a record of its transaction is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["BatchInfo", "RecordInfo", "Keep", "Drop", "Filter", "plan"]


class RecordInfo(NamedTuple):
    """One data record (a tuple: the cleaner makes one per record of the range)."""

    offset: int
    key: bytes | None
    tombstone: bool


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """One batch of the cleanable range. ``control`` is None for data, else 0 (ABORT) or
    1 (COMMIT); ``records`` is empty for control batches."""

    base_offset: int
    producer_id: int
    transactional: bool
    control: int | None
    max_timestamp: int
    records: tuple[RecordInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class Keep:
    """Keep the batch as it is."""


@dataclass(frozen=True, slots=True)
class Drop:
    """Remove the whole batch."""


@dataclass(frozen=True, slots=True)
class Filter:
    """Rebuild the batch with only these records (offsets); may be empty (a producer's
    last batch kept for its sequence)."""

    offsets: tuple[int, ...]


Decision = Keep | Drop | Filter


def plan(batches: list[BatchInfo], aborted: list[tuple[int, int, int]], last_batch_of: dict[int, int],
         now_ms: int, delete_retention_ms: int) -> list[Decision]:
    """Decide every batch of the cleanable range (in offset order).

    Args:
        batches: the cleanable range, oldest first; every batch in it is below the last
            stable offset, so each transaction with data in it has its marker in the log.
        aborted: the log's aborted transactions, ``(marker offset, producer id, first
            offset)``: a transactional data batch of that producer between first offset and
            marker belongs to an aborted transaction.
        last_batch_of: for every live producer, the base offset of its last batch in the
            whole log (a batch at that offset is kept, possibly empty).
        now_ms: the wall clock.
        delete_retention_ms: how long tombstones and emptied markers stay.

    Returns:
        one decision per batch, in order.
    """
    aborted_batch = _aborted_batches(batches, aborted)

    def expired(b: BatchInfo) -> bool:
        return now_ms - b.max_timestamp > delete_retention_ms

    kept_records = _kept_records(batches, aborted_batch, expired)
    marker_has_data = _markers_with_data(batches, kept_records, last_batch_of)
    out: list[Decision] = []
    for i, b in enumerate(batches):
        last = last_batch_of.get(b.producer_id) == b.base_offset and b.producer_id >= 0
        if b.control is not None:
            out.append(Keep() if marker_has_data[i] or last or not expired(b) else Drop())
            continue
        kept = kept_records[i]
        if len(kept) == len(b.records):
            out.append(Keep())
        elif kept or last:
            out.append(Filter(kept))
        else:
            out.append(Drop())
    return out


def _aborted_batches(batches: list[BatchInfo], aborted: list[tuple[int, int, int]]) -> list[bool]:
    """Per batch: is it transactional data of an aborted transaction?"""
    by_pid: dict[int, list[tuple[int, int]]] = {}
    for marker, pid, first in aborted:
        by_pid.setdefault(pid, []).append((first, marker))

    def is_aborted(b: BatchInfo) -> bool:
        if not b.transactional or b.control is not None:
            return False
        return any(first <= b.base_offset < marker for first, marker in by_pid.get(b.producer_id, ()))

    return [is_aborted(b) for b in batches]


def _kept_records(batches: list[BatchInfo], aborted_batch: list[bool],
                  expired: Callable[[BatchInfo], bool]) -> list[tuple[int, ...]]:
    """Per batch, the offsets of the records kept: a keyless record, or a key's latest record
    unless it is a tombstone past ``delete.retention.ms``; none of an aborted batch or a
    marker."""
    latest: dict[bytes, int] = {}
    for b, ab in zip(batches, aborted_batch):
        if ab or b.control is not None:
            continue
        for r in b.records:
            if r.key is not None:
                latest[r.key] = r.offset  # later offsets overwrite: the last one wins

    kept_records: list[tuple[int, ...]] = []
    for b, ab in zip(batches, aborted_batch):
        if b.control is not None:
            kept_records.append(())
            continue
        keep = []
        if not ab:
            for r in b.records:
                if r.key is None:
                    keep.append(r.offset)
                elif latest[r.key] == r.offset and not (r.tombstone and expired(b)):
                    keep.append(r.offset)
        kept_records.append(tuple(keep))
    return kept_records


def _markers_with_data(batches: list[BatchInfo], kept_records: list[tuple[int, ...]],
                       last_batch_of: dict[int, int]) -> dict[int, bool]:
    """Per marker batch index: does its transaction still have a record? Walks forward,
    attributing each producer's transactional data to its open transaction until that
    producer's marker."""
    open_has_data: dict[int, bool] = {}
    marker_has_data: dict[int, bool] = {}
    for i, b in enumerate(batches):
        if not b.transactional:
            continue
        if b.control is None:
            if kept_records[i] or last_batch_of.get(b.producer_id) == b.base_offset:
                open_has_data[b.producer_id] = True
            else:
                open_has_data.setdefault(b.producer_id, False)
        else:
            marker_has_data[i] = open_has_data.pop(b.producer_id, False)
    return marker_has_data
