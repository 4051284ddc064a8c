"""The vocabulary of a share partition (KIP-932): record states, acknowledgement types and
batches, the limits a partition runs with, the spans it acquires from, and what its
transitions return and persist (``domain.share_partition`` is the machine).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from kaas.domain.groups.configs import reset_duration_ms

__all__ = [
    "MAX_DELIVERY_COUNT",
    "AckBatch",
    "AckType",
    "Acquisition",
    "AutoOffsetReset",
    "Delta",
    "Outcome",
    "Persisted",
    "Range",
    "RecordState",
    "ShareError",
    "ShareLimits",
    "Span",
    "check_ack_batches",
    "spans_of",
]

MAX_DELIVERY_COUNT = 32767  # an int16 on the wire


class RecordState(enum.IntEnum):
    """Apache's record states, valued as its persister writes them."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4

    @property
    def terminal(self) -> bool:
        return self in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class AckType(enum.IntEnum):
    """Acknowledge types of ShareFetch/ShareAcknowledge (RENEW from v2, KIP-1222)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass(frozen=True, slots=True)
class AutoOffsetReset:
    """``share.auto.offset.reset``: where a share partition with no state starts.

    ``kind`` is ``earliest`` (the log start), ``latest`` (the log end: Apache's default) or
    ``by_duration`` (the first record at most ``duration_ms`` old)."""

    kind: str = "latest"
    duration_ms: int = 0

    @classmethod
    def parse(cls, value: str) -> AutoOffsetReset:
        """Parse a config value (``by_duration:`` takes an ISO-8601 duration, ``PT1H``;
        ``domain.groups.configs`` validates the group config).

        Raises:
            ValueError: not one of the three forms, or a negative or malformed duration.
        """
        v = value.strip()
        duration = reset_duration_ms(v)
        return cls(v) if duration is None else cls("by_duration", duration)


@dataclass(frozen=True, slots=True)
class ShareLimits:
    """What one share partition runs with: the group's delivery-count limit, record lock
    duration, record-lock limit and ``share.renew.acknowledge.enable`` (its group configs,
    else the broker's settings). ``domain.groups.configs`` refuses values
    outside Apache's ranges where they are configured; this refuses what no configuration
    can reach.

    Raises:
        ValueError: a delivery-count limit outside 2..25, a lock under a second, no locks.
    """

    delivery_count_limit: int = 5
    record_lock_duration_ms: int = 30_000
    max_record_locks: int = 2_000
    renew_enabled: bool = True

    def __post_init__(self) -> None:
        if not 2 <= self.delivery_count_limit <= 25:
            raise ValueError(f"delivery-count limit {self.delivery_count_limit} outside 2..25")
        if self.record_lock_duration_ms < 1000:
            raise ValueError(f"record lock duration {self.record_lock_duration_ms} ms under a second")
        if self.max_record_locks < 1:
            raise ValueError(f"max record locks {self.max_record_locks} below 1")


class ShareError(Exception):
    """A request the machine refuses, with the code the handler answers (per partition)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class AckBatch:
    """One acknowledgement batch: offsets ``first``..``last`` and either one type for all
    of them or one per offset."""

    first: int
    last: int
    types: tuple[int, ...]

    def type_runs(self, lo: int) -> Iterator[tuple[int, int, AckType]]:
        """(first, last, type) over [max(lo, first), last], consecutive equal types merged."""
        if len(self.types) == 1:
            if lo <= self.last:
                yield max(lo, self.first), self.last, AckType(self.types[0])
            return
        run_first, run_type = -1, -1
        for off in range(max(lo, self.first), self.last + 1):
            t = self.types[off - self.first]
            if t != run_type:
                if run_first >= 0:
                    yield run_first, off - 1, AckType(run_type)
                run_first, run_type = off, t
        if run_first >= 0:
            yield run_first, self.last, AckType(run_type)


def check_ack_batches(batches: Sequence[AckBatch], *, renew: bool, max_type: int) -> str | None:
    """What is wrong with a partition's acknowledgement batches as a request (Apache's
    ``validateAcknowledgementBatches``: INVALID_REQUEST), or None.

    Args:
        renew: the request's ``is_renew_ack`` (type 4 is allowed only with it).
        max_type: the highest type the version knows (3 for v1, 4 for v2).
    """
    prev_last = -1
    for b in batches:
        if b.first > b.last:
            return f"acknowledgement batch {b.first}-{b.last} is reversed"
        if b.first < prev_last:  # (one shared offset passes here, as in Apache: ``acknowledge`` refuses it)
            return f"acknowledgement batch {b.first}-{b.last} overlaps or precedes the one before"
        if not b.types:
            return f"acknowledgement batch {b.first}-{b.last} has no acknowledge type"
        if len(b.types) > 1 and len(b.types) != b.last - b.first + 1:
            return (f"acknowledgement batch {b.first}-{b.last} has {len(b.types)} types"
                    f" for {b.last - b.first + 1} offsets")
        for t in b.types:
            if t < 0 or t > max_type:
                return f"unknown acknowledge type {t}"
            if t == AckType.RENEW and not renew:
                return "a renew acknowledgement in a request without is_renew_ack"
        prev_last = b.last
    return None


@dataclass(frozen=True, slots=True)
class Span:
    """Offsets ``first``..``last`` of one batch read from the log: ``deliverable`` data, or
    not (a control batch; data of an aborted transaction under read_committed)."""

    first: int
    last: int
    deliverable: bool


def spans_of(batches: Iterable[tuple[int, int, int, bool, bool]],
             aborted: Iterable[tuple[int, int, int]], read_committed: bool) -> list[Span]:
    """The spans of batches read from a log.

    Args:
        batches: (base offset, last offset, producer id, transactional, control) in order.
        aborted: the log's aborted transactions (marker offset, producer id, first offset)
            whose markers lie at or past the first batch.
        read_committed: the group's ``share.isolation.level`` is read_committed: data of
            an aborted transaction is not deliverable (the reader never gets past the
            last stable offset, so every transaction it reads is decided).
    """
    by_pid: dict[int, list[tuple[int, int]]] = {}
    if read_committed:
        for marker, pid, first in aborted:
            by_pid.setdefault(pid, []).append((first, marker))
    out = []
    for base, last, pid, transactional, control in batches:
        ok = not control
        if ok and transactional and pid in by_pid:
            ok = not any(first <= base < marker for first, marker in by_pid[pid])
        out.append(Span(base, last, ok))
    return out


Range = tuple[int, int, int, int]
"""(first offset, last offset, state, delivery count): how the state of offsets is persisted."""


@dataclass(frozen=True, slots=True)
class Delta:
    """What one transition changed: the window's new bounds and the new (state, delivery
    count) of the offsets it touched, in offset order. Replayed over the state before it,
    it gives the state after it."""

    start: int
    end: int
    ranges: tuple[Range, ...] = ()


@dataclass(frozen=True, slots=True)
class Persisted:
    """The durable form of a share partition: its window and the state of every offset in
    it (ACQUIRED records keep their delivery count; who holds them is not kept)."""

    start: int
    end: int
    ranges: tuple[Range, ...] = ()


@dataclass(slots=True)
class Outcome:
    """A transition's result: the ``delta`` to make durable (None: nothing durable
    changed) and what happened, for the metrics."""

    delta: Delta | None = None
    acknowledged: dict[AckType, int] = field(default_factory=dict)
    expired: int = 0
    archived: int = 0


@dataclass(slots=True)
class Acquisition(Outcome):
    """``acquire`` 's result: the acquired (first, last, delivery count) ranges, in order."""

    acquired: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(last - first + 1 for first, last, _ in self.acquired)
