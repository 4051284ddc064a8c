"""ListOffsets by time, record by record, over a partition's segments.

The segments' max record timestamps skip whole segments and trusted batch headers skip
whole batches (``records.header_max_trusted``); the records of a batch that may hold the
answer are read, so an answer can sit inside a batch, as Apache's (Kafka 3.8 and later).
On LogAppendTime batches every record carries the batch's max timestamp.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from kaas.storage.segment import Segment
from kaas.wire import batch as wb
from kaas.wire import records as wr

__all__ = ["BatchesOf", "first_at_or_after", "max_record"]

Buffer = bytes | memoryview
# the batches of a segment from the log start: (header, buffer, the batch's position in it)
BatchesOf = Callable[[Segment], Iterator[tuple[wb.BatchHeader, Buffer, int]]]


def first_at_or_after(segments: Iterable[Segment], log_start: int, ts: int,
                      batches_of: BatchesOf) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or past ``log_start`` whose timestamp is
    at least ``ts``, else None."""
    for seg in segments:
        if seg.max_timestamp < ts or seg.next_offset <= log_start:
            continue
        for h, buf, pos in batches_of(seg):
            if wr.header_max_trusted(h) and h.max_timestamp < ts:
                continue
            for offset, stamp in _stamps(h, buf, pos):
                if stamp >= ts and offset >= log_start:
                    return offset, stamp
    return None


def max_record(segments: list[Segment], log_start: int, batches_of: BatchesOf) -> tuple[int, int] | None:
    """MAX_TIMESTAMP (KIP-734): (offset, timestamp) of the record carrying the highest
    timestamp at or past ``log_start``, the first such record on ties; None for no records.

    The first segment whose max is the highest gives the batch (the first whose max equals
    it) and that batch's records give the record. When no record there has it (the max
    came from records below the log start, or from an overstated header of a batch stored
    before produce rewrote headers), every record is compared.
    """
    live = [s for s in segments if s.next_offset > log_start and s.next_offset > s.base_offset]
    if not live:
        return None
    top = max(s.max_timestamp for s in live)
    for seg in live:
        if seg.max_timestamp != top:
            continue
        for h, buf, pos in batches_of(seg):
            if wr.header_max_trusted(h) and h.max_timestamp != top:
                continue
            for offset, stamp in _stamps(h, buf, pos):
                if stamp == top and offset >= log_start:
                    return offset, stamp
    best: tuple[int, int] | None = None
    for seg in live:
        for h, buf, pos in batches_of(seg):
            for offset, stamp in _stamps(h, buf, pos):
                if offset >= log_start and (best is None or stamp > best[1]):
                    best = (offset, stamp)
    return best


def _stamps(h: wb.BatchHeader, buf: Buffer, pos: int) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record of the batch at ``buf[pos:]``; a batch whose
    records cannot be read (a codec this broker lacks) stands as its last offset at its
    header's max timestamp."""
    try:
        stamps = wr.timestamps(memoryview(buf)[pos:pos + h.size], h)
    except wr.RecordsError:
        return [(h.last_offset, h.max_timestamp)]
    base = h.base_offset
    return [(base + delta, stamp) for delta, stamp in stamps]
