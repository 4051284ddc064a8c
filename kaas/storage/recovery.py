"""Recovery of a partition directory at takeover: which segments are live, which bytes of
them are whole, and what producer state and aborted transactions they hold.

What a new leader does (``PartitionLog.open``, after it wrote the manifest with its epoch):

1. segments a newer epoch took over are removed (a segment is dead when one of a higher
   epoch starts at or before its base: every byte in it is a deposed leader's late write);
2. each live segment is taken from its summary when the summary matches the file, else
   scanned: every batch's magic, offset and CRC is checked, the sparse index rebuilt, and
   the file cut at the first bad batch, or at bytes at or past the next segment's base
   (late bytes of a deposed leader);
3. the batches past the producer snapshot's offset are replayed (``on_batch``), so the
   idempotence window, open transactions and aborted index are the previous leader's;
4. the cut bytes are fsynced: what recovery verified is durable from here on.

Recovery never drops bytes silently: each cut is in ``cuts`` (for the caller's log line)
and appended to ``recovery.json`` (the last 100; ``kaas inspect log`` shows them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, cast

from kaas.errors import CorruptState
from kaas.storage import atomic, fs
from kaas.storage.segment import AbortedTxn, LogConfig, Segment, list_segments, load_summary, read_txnidx, size_of
from kaas.wire import batch as wb
from kaas.wire import records as wr

__all__ = ["RECOVERY_FILE", "OnBatch", "Recovered", "Recovery", "write_journal"]

RECOVERY_FILE = "recovery.json"
_KEEP = 100


class Cut(TypedDict):
    """One cut recovery made: bytes ``[from_byte, to_byte)`` of ``segment``, from
    ``from_offset`` on; ``action`` is what was done to them (``truncated``, ...)."""

    time_ms: int
    segment: str
    action: str
    epoch: int
    from_byte: int
    to_byte: int
    bytes: int
    from_offset: int
    reason: str


class Journal(TypedDict):
    """``recovery.json``, format 1: the last 100 cuts, oldest first."""

    format: int
    entries: list[Cut]

OnBatch = Callable[[wb.BatchHeader, bytes, int], None]


@dataclass(frozen=True, slots=True)
class Recovered:
    segments: list[Segment]
    log_end_offset: int


class Recovery:
    """One open's recovery of the partition directory ``path``.

    Args:
        epoch: the epoch of the leader recovering (recorded with each cut).
        clock: the broker's wall clock in ms (recorded with each cut).
        cleaned: names of segments the cleaner rewrote (their offsets have gaps).
        remove: gives a dead segment's files up (closing its fd, keeping them for
            ``file.delete.delay.ms``).
    """

    def __init__(self, path: Path, config: LogConfig, *, epoch: int, clock: Callable[[], int],
                 cleaned: set[str], remove: Callable[[Segment], None]) -> None:
        self.path = path
        self.config = config
        self.epoch = epoch
        self.clock = clock
        self.cleaned = cleaned
        self.remove = remove
        self.cuts: list[Cut] = []
        self.notes: list[str] = []

    def run(self, aborted: list[AbortedTxn], on_batch: OnBatch, replay_from: int,
            log_start_offset: int) -> Recovered:
        """Recover every segment; ``aborted`` (changed in place) ends as the aborted index.

        Raises:
            CorruptState: a segment overlaps the next one, or a ``.txnidx`` does not parse.
        """
        segs = self._drop_dead(list_segments(self.path))
        kept: list[Segment] = []
        for i, seg in enumerate(segs):
            limit = segs[i + 1].base_offset if i + 1 < len(segs) else None
            if limit is not None and limit <= seg.base_offset:
                # Same base as the next (an empty segment of an older epoch): drop it.
                self.scan(seg, None, None, replay_from)
                if seg.next_offset == seg.base_offset:
                    if seg.size:
                        self._cut(seg, "removed", 0, seg.size, "empty segment superseded by a newer one at the "
                                  "same base", seg.base_offset)
                    self.remove(seg)
                    continue
                raise CorruptState(str(seg.path), "overlaps the next segment")
            # A summary past the next segment covers late bytes of a deposed leader: rescan.
            loaded = limit is not None and load_summary(seg) and seg.next_offset <= limit
            if loaded and seg.max_timestamp < 0 and not seg.summary_ts_from_records:
                # Written before the max came from the records (every batch said -1):
                # rescan it once and keep the recomputed summary, for time retention and
                # ListOffsets by time.
                self.scan(seg, limit, None, replay_from)
                atomic.write_bytes(seg.path.with_suffix(".idx"), seg.summary(), fsync=self.config.fsync)
                self.notes.append(f"{seg.name}: summary without record timestamps rescanned; "
                                  f"max timestamp {seg.max_timestamp}")
            if loaded and seg.next_offset <= replay_from:
                aborted.extend(read_txnidx(seg))
            else:
                if seg.base_offset < replay_from:
                    aborted.extend(read_txnidx(seg))
                    aborted[:] = [a for a in aborted if a[0] < replay_from]
                self.scan(seg, limit, on_batch, replay_from)
            kept.append(seg)
        aborted.sort()
        end = kept[-1].next_offset if kept else log_start_offset
        return Recovered(kept, max(end, log_start_offset))

    def _drop_dead(self, segs: list[Segment]) -> list[Segment]:
        """Remove segments a newer epoch took over (see the module's step 1)."""
        live: list[Segment] = []
        top = -1  # highest epoch among segments based at or before the current base
        i = 0
        while i < len(segs):
            j = i
            while j < len(segs) and segs[j].base_offset == segs[i].base_offset:
                j += 1
            top = max(top, segs[j - 1].epoch)  # sorted by (base, epoch)
            for seg in segs[i:j]:
                if seg.epoch < top:
                    self._cut(seg, "removed", 0, size_of(seg.path),
                              f"superseded: a segment of epoch {top} starts at or before its base", seg.base_offset)
                    self.remove(seg)
                else:
                    live.append(seg)
            i = j
        return live

    def scan(self, seg: Segment, limit: int | None, on_batch: OnBatch | None, replay_from: int) -> None:
        """Verify every batch of ``seg``, rebuild its index, truncate a torn or dead tail;
        hand the batches at or past ``replay_from`` to ``on_batch``."""
        with open(seg.path, "rb") as f:
            data = f.read()
        pos = 0
        expected = seg.base_offset
        seg.index_offsets.clear()
        seg.index_positions.clear()
        seg.bytes_since_index = 0
        seg.max_timestamp = -1
        gaps = seg.name in self.cleaned  # a cleaned segment has offset gaps; others are dense
        reason = "incomplete batch (torn write)"
        for pos_, h in wb.iter_headers(data):
            if h.magic != 2:
                reason = f"bad magic byte {h.magic}"
                break
            if h.base_offset < expected or (h.base_offset > expected and not gaps):
                reason = f"batch base offset {h.base_offset} where {expected} was expected"
                break
            if not wb.crc_ok(data, pos_, h):
                reason = "CRC32C mismatch"
                break
            if limit is not None and h.base_offset >= limit:
                reason = f"bytes of a deposed leader at or past offset {limit}, where the next segment starts"
                break
            if not seg.index_offsets or seg.bytes_since_index >= self.config.index_interval_bytes:
                seg.index_add(h.base_offset, pos_)
            seg.bytes_since_index += h.size
            ts = h.max_timestamp if wr.header_max_trusted(h) else \
                wr.batch_max_timestamp(memoryview(data)[pos_:pos_ + h.size], h)
            if ts > seg.max_timestamp:
                seg.max_timestamp = ts
            if on_batch is not None and h.base_offset >= replay_from:
                on_batch(h, data, pos_)
            expected = h.next_offset
            pos = pos_ + h.size
        seg.next_offset = expected
        seg.size = pos
        with open(seg.path, "r+b") as f:
            if pos < len(data):
                self._cut(seg, "truncated", pos, len(data), reason, expected)
                f.truncate(pos)
            if self.config.fsync:
                # What recovery verified is durable from here on (durable_offset): a
                # SIGKILLed leader's unsynced tail, or the tail of a log failed by an fsync.
                fs.fsync(f.fileno(), point="append.fsync", path=str(seg.path))

    def _cut(self, seg: Segment, action: str, start: int, end: int, reason: str, offset: int) -> None:
        """Record one cut (bytes [start, end) of ``seg``, from ``offset`` on)."""
        self.cuts.append({
            "time_ms": self.clock(), "segment": seg.name, "action": action,
            "epoch": self.epoch, "from_byte": start, "to_byte": end, "bytes": end - start,
            "from_offset": offset, "reason": reason,
        })


def write_journal(path: Path, cuts: list[Cut], *, fsync: bool) -> str | None:
    """Append ``cuts`` to the partition's ``recovery.json`` (the last 100 kept). Returns
    why the journal could not be read or written, else None: the warning log line is the
    primary record, and the open goes on (the cut is made and logged)."""
    if not cuts:
        return None
    journal = Path(path) / RECOVERY_FILE
    error = None
    try:
        old = cast("Journal | None", atomic.read_json(journal))
        entries = list(old.get("entries", [])) if old else []
    except CorruptState as exc:
        entries = []
        error = f"{exc} (replaced)"
    entries = (entries + cuts)[-_KEEP:]
    try:
        record: Journal = {"format": 1, "entries": entries}
        atomic.write_json(journal, record, fsync=fsync)
    except OSError as exc:
        error = f"{journal}: {exc}"
    return error
