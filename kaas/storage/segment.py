"""One segment of a partition's log: its file names, its in-memory view (size, next
offset, max record timestamp, sparse index), and the two small files written beside it
when it is closed.

    <base-offset:020d>-e<epoch>.log    record batches, byte-for-byte as produced
    <base-offset:020d>-e<epoch>.idx    msgpack summary of a closed segment: size, next
                                       offset, max record timestamp ("ts": "records": the
                                       records' max, not the batch headers' as sent), the
                                       sparse index
    <base-offset:020d>-e<epoch>.txnidx msgpack list of the segment's aborted transactions,
                                       (marker offset, producer id, first offset)

A summary is trusted only when its recorded size is the segment file's size: a segment
that grew past it (late bytes of a deposed leader) is scanned again.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import msgpack

from kaas import spans
from kaas.errors import CorruptState
from kaas.storage import atomic
from kaas.wire import batch as wb

__all__ = ["LogConfig", "ReadResult", "Segment", "SpanRead", "epoch_end", "list_segments", "load_summary",
           "read_spans", "read_txnidx", "segment_name", "size_of", "write_closed"]

_SEGMENT_RE = re.compile(r"^(\d{20})-e(\d+)\.log$")
_READ_CHUNK = 256 * 1024
# ``Segment.locate`` reads the batch headers through this window, one per process: filled
# and parsed with no await in between (storage is synchronous).
_SCAN = bytearray(8 * 1024)
_SCAN_VIEW = memoryview(_SCAN)

AbortedTxn = tuple[int, int, int]  # (marker offset, producer id, first offset)


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 128 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    fsync: bool = True
    # cleanup.policy: "delete" runs retention; "compact" the cleaner; both for "compact,delete"
    delete: bool = True
    compact: bool = False
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1
    delete_retention_ms: int = 24 * 3600 * 1000
    file_delete_delay_ms: int = 0  # file.delete.delay.ms: dropped segments wait as *.deleted (storage.trash)
    # flush.messages / flush.ms: fsync once this many offsets, or this long, are not yet
    # durable (tasks.flush); 2**63 - 1: only acks=all, markers, rolls and hand-over do
    flush_messages: int = 2**63 - 1
    flush_ms: int = 2**63 - 1


class Summary(TypedDict):
    """A closed segment's ``.idx`` (msgpack), format 1: what a scan of its log would find
    (``ts``: ``records``, the max timestamp was read from the records)."""

    format: int
    size: int
    next_offset: int
    max_timestamp: int
    ts: str
    offsets: list[int]
    positions: list[int]


@dataclass(slots=True)
class Segment:
    base_offset: int
    epoch: int
    path: Path
    fd: int = -1
    size: int = 0
    next_offset: int = 0
    max_timestamp: int = -1
    created_ms: int = 0
    index_offsets: list[int] = field(default_factory=list)
    index_positions: list[int] = field(default_factory=list)
    bytes_since_index: int = 0
    summary_ts_from_records: bool = True  # False: a summary loaded from before "ts": "records"

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def files(self) -> tuple[Path, Path, Path]:
        """The segment's log, summary and aborted-transaction index."""
        return self.path, self.path.with_suffix(".idx"), self.path.with_suffix(".txnidx")

    def index_add(self, offset: int, position: int) -> None:
        self.index_offsets.append(offset)
        self.index_positions.append(position)
        self.bytes_since_index = 0

    def lookup(self, offset: int) -> int:
        """File position of the indexed batch at or before ``offset``."""
        i = bisect.bisect_right(self.index_offsets, offset) - 1
        return self.index_positions[i] if i >= 0 else 0

    def open_fd(self) -> int:
        """The segment's fd (the active segment's append fd, else one opened for reading)."""
        if self.fd < 0:
            self.fd = os.open(self.path, os.O_RDONLY)
        return self.fd

    def read(self, offset: int, max_bytes: int, limit: int, min_one: bool) -> ReadResult | None:
        """Whole batches of this segment from the one holding ``offset``, below ``limit``,
        up to ``max_bytes`` (the first batch even when larger, with ``min_one``); None when
        the segment ends at or before ``offset``. The batches are contiguous on disk, so
        headers are scanned to find the byte range and the range is returned as one slice
        (no per-batch copies, no join)."""
        fd = self.open_fd()
        size = self.size
        pos = self.lookup(offset)
        start = end = -1
        first = -1
        nxt = offset
        chunk = b""
        data: bytes | memoryview
        chunk_pos = pos
        done = False
        while pos < size and not done:
            want = min(max(_READ_CHUNK, max_bytes + wb.HEADER_SIZE), size - pos)
            chunk = os.pread(fd, want, pos)
            chunk_pos = pos
            if len(chunk) < wb.HEADER_SIZE:
                break
            p = 0
            while len(chunk) - p >= wb.HEADER_SIZE:
                h = wb.parse_header(chunk, p)
                if h.base_offset >= limit or pos + p + h.size > size:
                    done = True
                    break
                if h.next_offset <= offset:
                    p += h.size
                    continue
                taken = end - start if start >= 0 else 0
                if taken + h.size > max_bytes and (taken or not min_one):
                    done = True
                    break
                if start < 0:
                    start = pos + p
                    first = h.base_offset
                end = pos + p + h.size
                nxt = h.next_offset
                p += h.size
            pos += p
            if p == 0:
                break
        if start < 0:
            if self.next_offset <= offset:
                return None
            return ReadResult(b"", offset, offset)
        if start >= chunk_pos and end <= chunk_pos + len(chunk):
            data = memoryview(chunk)[start - chunk_pos:end - chunk_pos]
        else:
            data = os.pread(fd, end - start, start)
            if len(data) < end - start:  # truncated under us: return what is whole
                data = data[:0]
                return ReadResult(b"", offset, offset)
        return ReadResult(data, first, nxt)

    def locate(self, offset: int, max_bytes: int, limit: int, min_one: bool) -> tuple[int, int, int, int, int] | None:
        """What ``read`` would return, without reading the records: (start, end) in the
        file (-1, -1 when nothing), first and next offset, and the records in it. Only the
        batch headers are read, through a small window."""
        fd = self.open_fd()
        size = self.size
        pos = self.lookup(offset)
        start = end = first = -1
        nxt = offset
        count = 0
        win_pos = win_end = 0
        header = wb.HEADER_SIZE
        while pos + header <= size:
            if pos < win_pos or pos + header > win_end:
                got = os.preadv(fd, (_SCAN_VIEW[:min(len(_SCAN), size - pos)],), pos)
                if got < header:
                    break
                win_pos, win_end = pos, pos + got
            h = wb.parse_header(_SCAN_VIEW[:win_end - win_pos], pos - win_pos)
            if h.base_offset >= limit or pos + h.size > size or h.size < header:
                break
            if h.next_offset > offset:
                taken = end - start if start >= 0 else 0
                if taken + h.size > max_bytes and (taken or not min_one):
                    break
                if start < 0:
                    start, first = pos, h.base_offset
                end = pos + h.size
                nxt = h.next_offset
                count += h.records_count
            pos += h.size
        if start < 0 and self.next_offset <= offset:
            return None
        return start, end, first, nxt, count

    def read_span(self, offset: int, max_bytes: int, limit: int, min_one: bool, span_min: int) -> SpanRead | None:
        """``read`` for a Fetch answer: the records as a ``FileSpan`` when there are at
        least ``span_min`` bytes of them (and a span is available), else as bytes; with
        their count. None when the segment ends at or before ``offset``."""
        found = self.locate(offset, max_bytes, limit, min_one)
        if found is None:
            return None
        start, end, first, nxt, count = found
        n = end - start
        if start < 0:
            return SpanRead(b"", offset, offset, 0)
        if n >= span_min and spans.available():
            return SpanRead(spans.FileSpan(self.fd, start, n), first, nxt, count)
        data = os.pread(self.fd, n, start)
        if len(data) < n:  # truncated under us: nothing
            return SpanRead(b"", offset, offset, 0)
        return SpanRead(data, first, nxt, count)

    def batches_from(self, start: int) -> Iterator[tuple[wb.BatchHeader, bytes | memoryview, int]]:
        """(header, buffer, position in it) of every batch of this segment that ends past
        ``start`` (the log start)."""
        off = max(self.base_offset, start)
        while off < self.next_offset:
            res = self.read(off, 1 << 20, self.next_offset, True)
            if res is None or not res.records:
                return
            buf = res.records
            for pos, h in wb.iter_headers(buf):
                if h.next_offset > off:
                    yield h, buf, pos
            off = res.next_offset

    def age_reference(self) -> int:
        """This segment's age reference for retention.ms: its records' max timestamp,
        or, when no record carries one (all below 0), the file's modification time, as
        Apache's LogSegment.largestTimestamp does: such a segment still expires."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        try:
            return os.stat(self.path).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return self.max_timestamp

    def summary(self) -> bytes:
        summary: Summary = {
            "format": 1, "size": self.size, "next_offset": self.next_offset,
            "max_timestamp": self.max_timestamp, "ts": "records",
            "offsets": self.index_offsets, "positions": self.index_positions,
        }
        data: bytes = msgpack.packb(summary)
        return data


@dataclass(slots=True)
class ReadResult:
    records: bytes | memoryview
    first_offset: int  # base offset of the first batch returned (or the fetch offset)
    next_offset: int  # offset after the last batch returned


@dataclass(slots=True)
class SpanRead:
    """``Segment.read_span``'s answer: ``ReadResult`` and the count of records."""

    records: bytes | spans.FileSpan
    first_offset: int
    next_offset: int
    records_count: int


def read_spans(segments: list[Segment], i: int, offset: int, max_bytes: int, limit: int, min_one: bool,
               span_min: int) -> SpanRead:
    """``Segment.read_span`` over ``segments`` from the ``i``-th (the one holding
    ``offset``), each segment's reads bounded by the next one's base offset."""
    while i < len(segments):
        seg_limit = segments[i + 1].base_offset if i + 1 < len(segments) else limit
        res = segments[i].read_span(offset, max_bytes, min(limit, seg_limit), min_one, span_min)
        if res is not None:
            return res
        i += 1
    return SpanRead(b"", offset, offset, 0)


def segment_name(base_offset: int, epoch: int) -> str:
    return f"{base_offset:020d}-e{epoch}.log"


def epoch_end(segments: list[Segment], epoch: int, log_end: int) -> tuple[int, int]:
    """OffsetForLeaderEpoch over ``segments``: (the largest leader epoch <= ``epoch``, the
    first offset of the next epoch, or ``log_end``); (-1, -1) when there is none."""
    starts: list[tuple[int, int]] = []
    for seg in segments:
        if not starts or seg.epoch != starts[-1][0]:
            starts.append((seg.epoch, seg.base_offset))
    found = end = -1
    for i, (e, _start) in enumerate(starts):
        if e <= epoch:
            found = e
            end = starts[i + 1][1] if i + 1 < len(starts) else log_end
    return (found, end) if found >= 0 else (-1, -1)


def list_segments(path: Path) -> list[Segment]:
    """The segment files of the partition directory ``path``, by (base offset, epoch)."""
    segs = []
    for entry in os.listdir(path):
        m = _SEGMENT_RE.match(entry)
        if m:
            segs.append(Segment(int(m.group(1)), int(m.group(2)), path / entry))
    segs.sort(key=lambda s: (s.base_offset, s.epoch))
    return segs


def load_summary(seg: Segment) -> bool:
    """Fill ``seg`` from its ``.idx`` summary. False when there is none, it does not parse,
    or it describes a file of another size (then the segment is scanned instead)."""
    try:
        data = msgpack.unpackb(seg.path.with_suffix(".idx").read_bytes())
        size = os.stat(seg.path).st_size
    except (OSError, ValueError, msgpack.UnpackException):
        return False
    if not isinstance(data, dict) or data.get("size") != size:
        return False
    seg.size = size
    seg.next_offset = data["next_offset"]
    seg.max_timestamp = data["max_timestamp"]
    seg.summary_ts_from_records = data.get("ts") == "records"
    seg.index_offsets = list(data["offsets"])
    seg.index_positions = list(data["positions"])
    return True


def read_txnidx(seg: Segment) -> list[AbortedTxn]:
    """The aborted transactions recorded for ``seg`` ([] without a ``.txnidx``).

    Raises:
        CorruptState: the file exists but does not parse.
    """
    path = seg.path.with_suffix(".txnidx")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    try:
        return [(int(a), int(b), int(c)) for a, b, c in msgpack.unpackb(raw)]
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptState(str(path), str(exc)) from None


def write_closed(seg: Segment, aborted: list[AbortedTxn], *, fsync: bool, summary: bool = True) -> None:
    """Write what a closed segment keeps beside it: its aborted transactions (those whose
    marker lies in it; no file when none) and, with ``summary``, its ``.idx``."""
    entries = [list(a) for a in aborted if seg.base_offset <= a[0] < seg.next_offset]
    if entries:
        atomic.write_bytes(seg.path.with_suffix(".txnidx"), msgpack.packb(entries), fsync=fsync)
    if summary:
        atomic.write_bytes(seg.path.with_suffix(".idx"), seg.summary(), fsync=fsync)


def size_of(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
