"""A partition directory's segment files as recovery sees them, read without writing:
the batch headers of a segment, which segments are dead, the aborted-transaction index,
the producer-state snapshot, and the log end offset.

Invariants:
    - files are opened ``O_RDONLY`` and read with ``pread``; no storage class that writes
      (``PartitionLog.open`` writes the manifest) is instantiated;
    - a segment is read up to its last whole batch: what follows is reported (``End``),
      never cut.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypedDict

import msgpack

from kaas.tools.inspect_data._files import listdir, read_bytes, size_of
from kaas.wire import batch as wb

SEGMENT_RE = re.compile(r"^(\d{20})-e(\d+)\.log$")


class Batch(NamedTuple):
    """A whole batch of a segment file: its byte position, header, and bytes (the header
    only when read without bodies)."""

    position: int
    header: wb.BatchHeader
    data: bytes


class End(NamedTuple):
    """The end of a segment walk: bytes from ``position`` to ``size`` are a torn tail."""

    position: int
    size: int


def iter_batches(path: Path, *, bodies: bool = True) -> Iterator[Batch | End]:
    """Yield a ``Batch`` for each whole batch of a segment file (``bodies=False``: the
    bytes are the header only, nothing more is read), then one ``End``.

    Raises:
        OSError: the file could not be opened or read.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while size - pos >= wb.HEADER_SIZE:
            head = os.pread(fd, wb.HEADER_SIZE, pos)
            if len(head) < wb.HEADER_SIZE:
                break
            h = wb.parse_header(head)
            if h.batch_length < wb.HEADER_SIZE - wb.LOG_OVERHEAD or pos + h.size > size:
                break
            body = os.pread(fd, h.size, pos) if bodies else head
            if len(body) < (h.size if bodies else wb.HEADER_SIZE):
                break
            yield Batch(pos, h, body)
            pos += h.size
        yield End(pos, size)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class SegmentFile:
    """A segment file named ``<base offset>-e<epoch>.log`` with recovery's view of it.

    Attributes:
        dead: a segment of a higher epoch starts at or before this one's base.
        limit: the next live segment's base (this one's bytes at or past it are dead:
            late writes of a deposed leader); None for the last, and for a dead one.
    """

    file: str
    base_offset: int
    epoch: int
    dead: bool
    limit: int | None


def segments(pdir: Path) -> list[SegmentFile]:
    """The segment files of a partition directory, by base offset then epoch."""
    named: list[tuple[str, int, int]] = []
    for name in listdir(pdir):
        m = SEGMENT_RE.match(name)
        if m:
            named.append((name, int(m.group(1)), int(m.group(2))))
    named.sort(key=lambda s: (s[1], s[2]))
    dead: list[bool] = []
    top = -1
    i = 0
    while i < len(named):
        j = i
        while j < len(named) and named[j][1] == named[i][1]:
            j += 1
        top = max(top, named[j - 1][2])
        dead += [epoch < top for _, _, epoch in named[i:j]]
        i = j
    live = [k for k in range(len(named)) if not dead[k]]
    limits: dict[int, int | None] = {k: named[live[n + 1]][1] if n + 1 < len(live) else None
                                     for n, k in enumerate(live)}
    return [SegmentFile(name, base, epoch, dead[k], limits.get(k))
            for k, (name, base, epoch) in enumerate(named)]


class AbortedTxn(TypedDict):
    """An entry of a segment's ``.txnidx``."""

    marker_offset: int
    producer_id: int
    first_offset: int


def read_txnidx(path: Path) -> tuple[list[AbortedTxn] | None, str | None]:
    """The aborted transactions of a ``.txnidx`` file: (entries, None), (None, None) when
    absent, or (None, error text)."""
    data = read_bytes(path)
    if data is None:
        return None, None
    try:
        return [AbortedTxn(marker_offset=a, producer_id=b, first_offset=c)
                for a, b, c in msgpack.unpackb(data)], None
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        return None, f"corrupt: {exc}"


def read_snapshot(path: Path) -> dict[str, object] | None:
    """A summary of a producer-state snapshot (offset, producer count, format), or
    ``{"error": ...}``; None when absent."""
    data = read_bytes(path)
    if data is None:
        return None
    try:
        obj = msgpack.unpackb(data, strict_map_key=False)
        return {"offset": obj["offset"], "producers": len(obj["producers"]), "format": obj.get("format")}
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
        return {"error": f"corrupt: {exc}"}


def log_end(pdir: Path) -> int | None:
    """The log end offset of a partition from its segment files: what its high watermark is
    while a leader serves it (kaas's high watermark is the log end), live even while a
    broker appends. The last live segment's ``.idx`` summary gives it when it covers the
    whole file (a segment closed by a roll or a hand-over); else a walk of that segment's
    batch headers only (no CRC check: ``kaas inspect log`` does that), ending where
    recovery would cut (a torn tail, a wrong base offset). None when there is no segment.

    Raises:
        OSError: a segment file could not be read.
    """
    live = [s for s in segments(pdir) if not s.dead]
    if not live:
        return None
    last = live[-1]
    path = pdir / last.file
    raw = read_bytes(path.with_suffix(".idx"))
    try:
        summary = msgpack.unpackb(raw) if raw else None
    except (ValueError, msgpack.UnpackException):
        summary = None  # walked instead, as recovery rescans a segment whose summary is bad
    size = size_of(path)
    if isinstance(summary, dict) and summary.get("size") == size and isinstance(summary.get("next_offset"), int):
        end: int = summary["next_offset"]
        return end
    expected = last.base_offset
    for item in iter_batches(path, bodies=False):
        if isinstance(item, End) or item.header.magic != 2 or item.header.base_offset < expected:
            break
        expected = item.header.next_offset  # (a cleaned segment may skip offsets)
    return expected
