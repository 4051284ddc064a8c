"""Which segments retention deletes: the rule of Apache Kafka's
``UnifiedLog.deletableSegments`` and its retention.bytes / retention.ms predicates, pure.

Segments are considered oldest first; deletion stops at the first one that is kept. A
segment may go only when

- its upper bound (the next segment's base offset, or the log end for the last segment) is
  at or below the high watermark, so the log start offset never passes it;
- the policy's predicate holds for it;
- it is not the last segment while empty (an empty active segment is never deleted).

The last (active) segment is deletable like any other: when every segment goes, the caller
first rolls a new empty segment at the log end, which becomes the whole log.

retention.bytes runs first (Apache ``deleteRetentionSizeBreachedSegments``): with the log's
size ``S`` at or over ``retention.bytes`` ``R``, the oldest segments are deleted while the
excess ``S - R`` still covers their sizes. retention.ms then runs over what is left
(``deleteRetentionMsBreachedSegments``): a segment goes when ``now - largest_timestamp >
retention.ms``. A negative setting turns its policy off.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

__all__ = ["SegmentView", "deletable", "size_breached", "time_breached"]


class SegmentView(NamedTuple):
    """What the rule reads of one segment."""

    base_offset: int
    size: int  # bytes
    largest_timestamp: int  # its records' max timestamp, or the file's mtime when none has one


def _prefix(segments: Sequence[SegmentView], log_end: int, high_watermark: int,
            predicate: Callable[[SegmentView], bool]) -> int:
    """How many of the oldest ``segments`` go under ``predicate`` (called oldest first, and
    only for segments below the high watermark, until it first says no)."""
    n = 0
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        upper = log_end if last else segments[i + 1].base_offset
        if high_watermark < upper or not predicate(seg) or (last and seg.size == 0):
            break
        n += 1
    return n


def size_breached(segments: Sequence[SegmentView], *, log_end: int, high_watermark: int,
                  retention_bytes: int) -> int:
    """How many of the oldest segments retention.bytes deletes."""
    total = sum(s.size for s in segments)
    if retention_bytes < 0 or total < retention_bytes:
        return 0
    excess = total - retention_bytes

    def over(seg: SegmentView) -> bool:
        nonlocal excess
        if excess - seg.size < 0:
            return False
        excess -= seg.size
        return True

    return _prefix(segments, log_end, high_watermark, over)


def time_breached(segments: Sequence[SegmentView], *, log_end: int, high_watermark: int,
                  now_ms: int, retention_ms: int) -> int:
    """How many of the oldest segments retention.ms deletes: those whose newest record is
    more than ``retention_ms`` before ``now_ms`` (a future timestamp keeps its segment)."""
    if retention_ms < 0:
        return 0
    return _prefix(segments, log_end, high_watermark, lambda s: now_ms - s.largest_timestamp > retention_ms)


def deletable(segments: Sequence[SegmentView], *, log_end: int, high_watermark: int, now_ms: int,
              retention_ms: int, retention_bytes: int) -> int:
    """How many of the oldest segments one retention pass deletes: retention.bytes, then
    retention.ms over the remaining segments. When it is ``len(segments)``, the caller
    rolls an empty segment at ``log_end`` before deleting them."""
    by_size = size_breached(segments, log_end=log_end, high_watermark=high_watermark,
                            retention_bytes=retention_bytes)
    rest = segments[by_size:]
    return by_size + time_breached(rest, log_end=log_end, high_watermark=high_watermark,
                                   now_ms=now_ms, retention_ms=retention_ms)
