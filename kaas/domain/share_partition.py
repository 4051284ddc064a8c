"""The share-partition machine (KIP-932): which records of one partition a share group has
handed out, to whom, how often, and what became of them.

One ``SharePartition`` per (share group, topic, partition), held by the partition's leader.
Its window runs from the share-partition start offset (SPSO, ``start``) to the end offset
(SPEO, ``end``, exclusive here: the first offset never looked at). Every offset of the
window is in exactly one state (Apache's ``RecordState``):

=============  ====================================================================
AVAILABLE      may be acquired (again); carries the deliveries it has had
ACQUIRED       handed to one member until its lock deadline
ACKNOWLEDGED   accepted: never delivered again (terminal)
ARCHIVED       rejected, a gap, past its delivery-count limit, or below the log start
               (terminal)
=============  ====================================================================

Below ``start`` everything is done; the start moves forward only, over a contiguous
prefix of terminal offsets (or when the log start passes it). The window holds runs of
offsets sharing a state, delivery count, member and deadline, so whole batches cost one
run each.

The transitions, with Apache's rules (``SharePartition``, ``InFlightState``):

- ``acquire``: the caller reads the log from ``next_fetch_offset()`` and hands over the
  batches it read as ``Span`` s. AVAILABLE offsets of deliverable spans are acquired
  (delivery count + 1); offsets past ``end`` join the window (deliverable ones acquired
  with count 1; control batches, aborted transactional data under read_committed and
  offsets absent from the log archived at once: the client never sees a gap). New
  batches are taken whole while fewer than ``max_records`` were acquired and the window
  holds fewer than ``max_record_locks`` offsets (Apache's soft limit); with
  ``record_limit`` (ShareFetch v2 acquire mode 1) exactly ``max_records``. A record on
  its last delivery attempt goes out alone (Apache's poison isolation, limit > 2).
- ``acknowledge``: every offset named must be ACQUIRED by the member (else
  INVALID_RECORD_STATE), and inside the window (else INVALID_REQUEST); all or nothing.
  GAP (0) and REJECT (3) archive, ACCEPT (1) acknowledges, RELEASE (2) makes it available
  again (archived once its delivery count reached the limit), RENEW (4) extends the lock.
- ``expire``: an ACQUIRED run past its deadline becomes AVAILABLE, or ARCHIVED once its
  delivery count reached the limit.
- ``release_member``: a member's session ended: its ACQUIRED records become AVAILABLE
  at once, keeping their delivery count (ARCHIVED once it reached the limit), as Apache
  4.4's ``releaseAcquiredRecords`` does: a record handed out before the session ended
  may have reached the application, so its next delivery is a redelivery.
- ``advance_log_start``: retention or DeleteRecords moved the log start past ``start``.

Every transition returns a ``Delta``: the new start and end and the (first, last, state,
delivery count) of the offsets it changed, which the caller makes durable before it
answers. ``Delta`` s replayed over a snapshot (``replay``) rebuild the window; a machine
``restore`` d from that treats every ACQUIRED record as if its lock had just expired
(Apache resets acquired records on load, keeping delivery counts), so a takeover never
loses an answered acknowledgement nor lets a delivery count fall.

Invariants:
    - the runs are sorted, contiguous and cover exactly [start, end);
    - an offset is ACQUIRED by at most one member, and only ACQUIRED runs have a member
      and a deadline;
    - ``start`` and ``end`` never move back; terminal offsets never change state;
    - a delivery count never exceeds the limit in force when it was acquired.

No I/O, no clock, no logging: times come in as ``now_ms``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kaas.domain.share_records import (
    MAX_DELIVERY_COUNT,
    AckBatch,
    AckType,
    Acquisition,
    AutoOffsetReset,
    Delta,
    Outcome,
    Persisted,
    Range,
    RecordState,
    ShareError,
    ShareLimits,
    Span,
    check_ack_batches,
    spans_of,
)

__all__ = [
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
    "SharePartition",
    "Span",
    "check_ack_batches",
    "spans_of",
]

@dataclass(slots=True)
class _Run:
    first: int
    last: int
    state: RecordState
    count: int
    member: str = ""
    deadline: int = 0

    def same_as(self, other: _Run) -> bool:
        return (self.state == other.state and self.count == other.count and self.member == other.member
                and self.deadline == other.deadline)


def _first(run: _Run) -> int:
    return run.first


class SharePartition:
    """One share partition's window (see the module docstring).

    Args:
        limits: the limits in force; the caller may replace ``limits`` between calls (a
            group config changed): new locks and new delivery attempts follow the new ones.
        start: the share-partition start offset.
        end: the end of the window (``start`` when empty).
    """

    def __init__(self, limits: ShareLimits, start: int) -> None:
        if start < 0:
            raise ValueError(f"negative start offset {start}")
        self.limits = limits
        self.start = start
        self.end = start
        self._runs: list[_Run] = []

    # ------------------------------------------------------------------ load

    @classmethod
    def replayed(cls, limits: ShareLimits, snapshot: Persisted, deltas: Iterable[Delta] = ()) -> SharePartition:
        """The window as persisted: ``snapshot`` with ``deltas`` replayed over it, ACQUIRED
        records still marked so (``restore`` releases them).

        Raises:
            ValueError: the snapshot or a delta does not describe a window (ranges out of
                order, outside the bounds, leaving offsets undescribed, an unknown state, a
                negative count, bounds moving back): the files are corrupt.
        """
        sp = cls(limits, snapshot.start)
        if snapshot.end < snapshot.start:
            raise ValueError(f"end {snapshot.end} below start {snapshot.start}")
        for first, last, state, count in snapshot.ranges:
            if first != sp.end or last < first or last >= snapshot.end:
                raise ValueError(f"range {first}-{last} does not continue the window at {sp.end}")
            sp._runs.append(_Run(first, last, _state(state), _count(count)))
            sp.end = last + 1
        if sp.end != snapshot.end:
            raise ValueError(f"offsets {sp.end}-{snapshot.end - 1} of the window have no state")
        for delta in deltas:
            sp.replay(delta)
        return sp

    def replay(self, delta: Delta) -> None:
        """Apply a persisted ``delta`` (see ``replayed`` for the errors)."""
        if delta.start < self.start or delta.end < self.end or delta.end < delta.start:
            raise ValueError(f"delta {delta.start}-{delta.end} moves the window {self.start}-{self.end} back")
        for first, last, state, count in delta.ranges:
            if last < first or last >= delta.end:
                raise ValueError(f"range {first}-{last} outside the window's end {delta.end}")
            s, c = _state(state), _count(count)
            if first > self.end:
                raise ValueError(f"offsets {self.end}-{first - 1} of the window have no state")
            if first < self.end:
                self._mark(first, min(last, self.end - 1), s, c)
            if last >= self.end:
                self._extend(self.end, last, s, c)
        if self.end < delta.end and delta.start < delta.end:
            raise ValueError(f"offsets {self.end}-{delta.end - 1} of the window have no state")
        self._move_start(delta.start)
        self.end = max(self.end, self.start)
        self._normalise()

    def restore(self) -> Outcome:
        """After a load: every ACQUIRED record's lock has lapsed (its holder's leader is
        gone): AVAILABLE again with its delivery count, or ARCHIVED when that reached the
        limit. Returns what to persist (a delta when anything moved)."""
        return self._release(lambda r: r.state == RecordState.ACQUIRED, expired=False)

    def snapshot(self) -> Persisted:
        """The durable form of the window now (who holds a record is not part of it)."""
        out: list[Range] = []
        for r in self._runs:
            if out and out[-1][2] == r.state and out[-1][3] == r.count:
                out[-1] = (out[-1][0], r.last, out[-1][2], r.count)
            else:
                out.append((r.first, r.last, int(r.state), r.count))
        return Persisted(self.start, self.end, tuple(out))

    # ------------------------------------------------------------------ reading

    def next_fetch_offset(self) -> int:
        """Where the next read of the log starts: the first AVAILABLE offset, else ``end``."""
        for r in self._runs:
            if r.state == RecordState.AVAILABLE:
                return r.first
        return self.end

    def can_acquire(self) -> bool:
        """Something may be acquired: an AVAILABLE record, or room for new ones."""
        return self.next_fetch_offset() < self.end or self.end - self.start < self.limits.max_record_locks

    def next_deadline(self) -> int | None:
        """The earliest lock deadline, None when nothing is acquired."""
        deadlines = [r.deadline for r in self._runs if r.state == RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    def counts(self) -> dict[RecordState, int]:
        """Offsets of the window per state."""
        out = dict.fromkeys(RecordState, 0)
        for r in self._runs:
            out[r.state] += r.last - r.first + 1
        return out

    def runs(self) -> list[tuple[int, int, RecordState, int, str, int]]:
        """(first, last, state, delivery count, member, deadline) of every run (tests, tools)."""
        return [(r.first, r.last, r.state, r.count, r.member, r.deadline) for r in self._runs]

    # ------------------------------------------------------------------ transitions

    def acquire(self, member: str, fetch_offset: int, spans: Sequence[Span], *, max_records: int, now_ms: int,
                record_limit: bool = False) -> Acquisition:
        """Acquire for ``member`` what the log read from ``fetch_offset`` holds (``spans``,
        in order; offsets between them are absent from the log).

        Args:
            fetch_offset: ``next_fetch_offset()`` when the log was read.
            max_records: the request's MaxRecords (soft: whole new batches, unless
                ``record_limit``).
            record_limit: ShareFetch v2 ``share_acquire_mode`` 1: at most ``max_records``.
        """
        out = Acquisition()
        if not spans or max_records <= 0 or not member:
            return out
        lock_until = now_ms + self.limits.record_lock_duration_ms
        limit = self.limits.delivery_count_limit
        changed: list[Range] = []
        n = 0
        stop = False
        for first, last, deliverable in _segments(fetch_offset, spans):
            if stop:
                break
            # the part inside the window: AVAILABLE records are acquired (or archived, when
            # the log no longer holds them: compacted away)
            if first < self.end:
                hi = min(last, self.end - 1)
                lo = max(first, self.start)
                for r in list(self._pieces(lo, hi)):
                    if r.state != RecordState.AVAILABLE:
                        continue
                    if not deliverable:
                        self._mark(r.first, r.last, RecordState.ARCHIVED, r.count)
                        changed.append((r.first, r.last, int(RecordState.ARCHIVED), r.count))
                        out.archived += r.last - r.first + 1
                        continue
                    take_last = r.last
                    last_try = limit > 2 and r.count + 1 >= limit
                    if last_try:  # delivered alone: a poison record must not take others down
                        if n > 0:
                            stop = True
                            break
                        take_last = r.first
                    elif n + (take_last - r.first + 1) > max_records:
                        take_last = r.first + (max_records - n) - 1
                    count = r.count + 1
                    self._mark(r.first, take_last, RecordState.ACQUIRED, count, member, lock_until)
                    changed.append((r.first, take_last, int(RecordState.ACQUIRED), count))
                    _add_range(out.acquired, r.first, take_last, count)
                    n += take_last - r.first + 1
                    if last_try or n >= max_records:
                        stop = True
                        break
                if stop or last < self.end:
                    continue
                first = self.end
            # past the window: new offsets
            if not deliverable:
                self._extend(first, last, RecordState.ARCHIVED, 0)
                changed.append((first, last, int(RecordState.ARCHIVED), 0))
                out.archived += last - first + 1
                continue
            if n >= max_records or self.end - self.start >= self.limits.max_record_locks:
                break
            take_last = last
            if record_limit and n + (last - first + 1) > max_records:
                take_last = first + (max_records - n) - 1
                stop = True
            self._extend(first, take_last, RecordState.ACQUIRED, 1, member, lock_until)
            changed.append((first, take_last, int(RecordState.ACQUIRED), 1))
            _add_range(out.acquired, first, take_last, 1)
            n += take_last - first + 1
        if changed:
            self._advance()
            self._normalise()
            out.delta = Delta(self.start, self.end, _sorted(changed))
        return out

    def acknowledge(self, member: str, batches: Sequence[AckBatch], now_ms: int) -> Outcome:
        """Acknowledge ``member`` 's records: all of the batches or none.

        ``batches`` passed ``check_ack_batches``. Offsets below ``start`` in a batch that
        reaches ``start`` are done already and skipped; a batch wholly below ``start`` is
        refused, as Apache refuses a batch none of whose offsets is in its in-flight cache.

        Raises:
            ShareError: INVALID_RECORD_STATE for an offset not ACQUIRED, or acquired by
                another member, for a batch wholly below ``start``, for a RENEW in a
                group that does not take them, when nothing is in flight, or acknowledged by two
                batches (a batch may begin at the offset the one before ends at, as
                Apache's request check lets through: its first acknowledgement leaves
                the offset ACQUIRED only when it was a RENEW); INVALID_REQUEST for
                offsets past the acquired ones.
        """
        prev: tuple[int, int] | None = None  # (last offset, its type) of the batch before
        for b in batches:
            if b.last < self.start:
                raise ShareError(ErrorCode.invalid_record_state,
                                 f"offsets {b.first}-{b.last} are not in flight (below the start {self.start})")
            if not self.limits.renew_enabled and AckType.RENEW in b.types:
                raise ShareError(ErrorCode.invalid_record_state,
                                 "Renewing acquisition locks is not enabled for the group.")
            if prev is not None and b.first == prev[0] and prev[1] != AckType.RENEW:
                raise ShareError(ErrorCode.invalid_record_state,
                                 f"offset {b.first} is acknowledged by two batches")
            prev = (b.last, b.types[-1])
            if self.end == self.start:
                raise ShareError(ErrorCode.invalid_record_state,
                                 f"offsets {b.first}-{b.last} are not in flight (nothing is)")
            if b.first >= self.end:
                raise ShareError(ErrorCode.invalid_request,
                                 f"the first offset {b.first} is past the acquired records (end {self.end})")
            if b.last >= self.end:
                raise ShareError(ErrorCode.invalid_request,
                                 f"the last offset {b.last} is past the acquired records (end {self.end})")
            for r in self._overlapping(max(b.first, self.start), b.last):
                if r.state != RecordState.ACQUIRED:
                    raise ShareError(ErrorCode.invalid_record_state,
                                     f"offset {max(r.first, b.first, self.start)} is not acquired ({r.state.name})")
                if r.member != member:
                    raise ShareError(ErrorCode.invalid_record_state,
                                     f"member is not the owner of offset {max(r.first, b.first, self.start)}")
        out = Outcome()
        changed: list[Range] = []
        limit = self.limits.delivery_count_limit
        lock_until = now_ms + self.limits.record_lock_duration_ms
        for b in batches:
            for first, last, t in b.type_runs(self.start):
                out.acknowledged[t] = out.acknowledged.get(t, 0) + last - first + 1
                if t == AckType.RENEW:
                    for r in list(self._pieces(first, last)):
                        r.deadline = lock_until
                    continue
                for r in list(self._pieces(first, last)):
                    state = _ACK_STATE[t]
                    if state == RecordState.AVAILABLE and r.count >= limit:
                        state = RecordState.ARCHIVED
                    self._mark(r.first, r.last, state, r.count)
                    changed.append((r.first, r.last, int(state), r.count))
                    if state == RecordState.ARCHIVED:
                        out.archived += r.last - r.first + 1
        if changed:
            self._advance()
            self._normalise()
            out.delta = Delta(self.start, self.end, _sorted(changed))
        else:
            self._normalise()
        return out

    def expire(self, now_ms: int) -> Outcome:
        """Release every lock whose deadline passed (AVAILABLE, or ARCHIVED at the limit)."""
        return self._release(lambda r: r.state == RecordState.ACQUIRED and r.deadline <= now_ms, expired=True)

    def release_member(self, member: str) -> Outcome:
        """``member`` closed its share session (or its connection): its locks end at once.
        The delivery counts stay (Apache 4.4 releases with ``DeliveryCountOps.NO_OP``): the
        member may have handed the records to its application before it closed without
        acknowledging them, and a second delivery counted as a first would hide that."""
        return self._release(lambda r: r.state == RecordState.ACQUIRED and r.member == member, expired=False)

    def advance_log_start(self, log_start: int) -> Outcome:
        """The log now starts at ``log_start``: what lies below it is gone for good."""
        out = Outcome()
        if log_start <= self.start:
            return out
        out.archived = sum(min(r.last, log_start - 1) - r.first + 1 for r in self._runs
                           if r.first < log_start and not r.state.terminal)
        self._move_start(log_start)
        self.end = max(self.end, self.start)
        self._advance()
        out.delta = Delta(self.start, self.end)
        return out

    # ------------------------------------------------------------------ internals

    def _release(self, which: Callable[[_Run], bool], *, expired: bool) -> Outcome:
        out = Outcome()
        changed: list[Range] = []
        limit = self.limits.delivery_count_limit
        for r in [r for r in self._runs if which(r)]:
            count = r.count
            state = RecordState.AVAILABLE if count < limit else RecordState.ARCHIVED
            self._mark(r.first, r.last, state, count)
            changed.append((r.first, r.last, int(state), count))
            n = r.last - r.first + 1
            if expired:
                out.expired += n
            if state == RecordState.ARCHIVED:
                out.archived += n
        if changed:
            self._advance()
            self._normalise()
            out.delta = Delta(self.start, self.end, _sorted(changed))
        return out

    def _index(self, offset: int) -> int:
        """The index of the run holding ``offset`` (which lies in the window)."""
        return bisect.bisect_right(self._runs, offset, key=_first) - 1

    def _split(self, offset: int) -> None:
        """Make ``offset`` (inside the window) the first offset of a run."""
        i = self._index(offset)
        r = self._runs[i]
        if r.first == offset:
            return
        self._runs.insert(i + 1, _Run(offset, r.last, r.state, r.count, r.member, r.deadline))
        r.last = offset - 1

    def _pieces(self, first: int, last: int) -> Iterator[_Run]:
        """The runs overlapping [first, last], split so that they lie within it."""
        first = max(first, self.start)
        last = min(last, self.end - 1)
        if first > last:
            return
        self._split(first)
        if last + 1 < self.end:
            self._split(last + 1)
        i = self._index(first)
        while i < len(self._runs) and self._runs[i].first <= last:
            yield self._runs[i]
            i += 1

    def _overlapping(self, first: int, last: int) -> Iterator[_Run]:
        """The runs overlapping [first, last], unsplit (for reading only)."""
        if first > last or first >= self.end or last < self.start:
            return
        i = max(0, self._index(max(first, self.start)))
        while i < len(self._runs) and self._runs[i].first <= last:
            yield self._runs[i]
            i += 1

    def _mark(self, first: int, last: int, state: RecordState, count: int, member: str = "",
              deadline: int = 0) -> None:
        """Set every offset of [first, last] (inside the window) to one state and count."""
        for r in list(self._pieces(first, last)):
            r.state, r.count, r.member, r.deadline = state, count, member, deadline

    def _extend(self, first: int, last: int, state: RecordState, count: int, member: str = "",
                deadline: int = 0) -> None:
        assert first == self.end, (first, self.end)
        self._runs.append(_Run(first, last, state, count, member, deadline))
        self.end = last + 1

    def _move_start(self, start: int) -> None:
        """Drop everything below ``start`` (done, or gone from the log)."""
        if start <= self.start:
            return
        self.start = start
        while self._runs and self._runs[0].last < start:
            self._runs.pop(0)
        if self._runs and self._runs[0].first < start:
            self._runs[0].first = start

    def _advance(self) -> None:
        """Move the start over the terminal prefix of the window."""
        i = 0
        while i < len(self._runs) and self._runs[i].state.terminal:
            i += 1
        if i:
            self.start = self._runs[i - 1].last + 1
            del self._runs[:i]

    def _normalise(self) -> None:
        """Merge neighbouring runs that agree in everything."""
        runs = self._runs
        i = 1
        while i < len(runs):
            if runs[i - 1].same_as(runs[i]) and runs[i - 1].last + 1 == runs[i].first:
                runs[i - 1].last = runs[i].last
                del runs[i]
            else:
                i += 1


_ACK_STATE = {
    AckType.GAP: RecordState.ARCHIVED,
    AckType.ACCEPT: RecordState.ACKNOWLEDGED,
    AckType.RELEASE: RecordState.AVAILABLE,
    AckType.REJECT: RecordState.ARCHIVED,
}


def _state(value: int) -> RecordState:
    try:
        return RecordState(value)
    except ValueError:
        raise ValueError(f"unknown record state {value}") from None


def _count(value: int) -> int:
    if not 0 <= value <= MAX_DELIVERY_COUNT:
        raise ValueError(f"delivery count {value} out of range")
    return value


def _add_range(out: list[tuple[int, int, int]], first: int, last: int, count: int) -> None:
    if out and out[-1][1] + 1 == first and out[-1][2] == count:
        out[-1] = (out[-1][0], last, count)
    else:
        out.append((first, last, count))


def _sorted(changed: list[Range]) -> tuple[Range, ...]:
    return tuple(sorted(changed))


def _segments(fetch_offset: int, spans: Sequence[Span]) -> Iterator[tuple[int, int, bool]]:
    """(first, last, deliverable) from ``fetch_offset`` to the end of the last span, the
    offsets between spans (absent from the log) as undeliverable."""
    at = fetch_offset
    for s in spans:
        if s.last < at:
            continue
        if s.first > at:
            yield at, s.first - 1, False
            at = s.first
        yield at, s.last, s.deliverable
        at = s.last + 1
