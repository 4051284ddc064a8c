"""One partition's log on the data directory: epoch-stamped segments, a sparse offset
index, a manifest, recovery of a torn tail, reads in whole batches, retention.

Layout of a partition directory (its current leader is the only writer)::

    <base-offset:020d>-e<epoch>.log   record batches, byte-for-byte as produced
    <base-offset:020d>-e<epoch>.idx   msgpack summary of a closed segment (index, end, max
                                      record timestamp; "ts": "records" since it is the
                                      records' max, not the batch headers' as clients sent)
    <base-offset:020d>-e<epoch>.txnidx msgpack list of the segment's aborted transactions
    manifest.json                     {format, epoch, log_start_offset, high_watermark}
    producer-state.snapshot           msgpack {format, offset, producers}: the dedupe ring
                                      and open transactions as of ``offset`` (a segment roll)

Invariants:
    - offsets are dense: each appended batch starts at the previous batch's next offset;
    - a segment is only appended to by the epoch in its name; a new leader always rolls a
      fresh segment, so late bytes of a deposed leader never interleave with live data;
    - bytes of a segment at or past the next segment's base offset are dead and ignored
      (and truncated by recovery); a whole segment is dead when a segment of a newer epoch
      starts at or before its base (recovery deletes it), and a leader whose epoch is no
      longer the manifest's does not roll;
    - the manifest carries the epoch of the leader that owns the directory; it is written
      *before* recovery scans the log, and an old leader checks it before acknowledging;
    - nothing is ever appended after bytes of unknown state: a failed or short append is
      truncated back to the last good position (and fsynced) before the next write, and
      when that fails, or an fsync fails, the log is ``failed``: it refuses every append
      and every sync until it is reopened through recovery (a failed fsync is never retried
      as if it had succeeded);
    - recovery never truncates or drops bytes silently: each cut is recorded in
      ``recoveries`` and in ``recovery.json`` (the last 100 of them);
    - a segment's ``max_timestamp`` is the max of its records' timestamps: a batch whose
      header max is evidently not its records' (-1, or below its base timestamp, as
      Sarama 1.22 sent before produce rewrote headers) is read record by record when
      appended, scanned, or cleaned; a summary written before that rule with a max
      below 0 is rescanned and rewritten at the next open.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
from kio.schema.errors import ErrorCode

from kaas.clock import wall_ms
from kaas.domain.producer_state import ProducerStateTable
from kaas.errors import CorruptState, KaasError
from kaas.storage import atomic, cleaner, fs, trash
from kaas.wire import batch as wb
from kaas.wire import records as wr

_SEGMENT_RE = re.compile(r"^(\d{20})-e(\d+)\.log$")
_READ_CHUNK = 256 * 1024
RECOVERY_FILE = "recovery.json"
_RECOVERY_KEEP = 100


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

    def index_add(self, offset: int, position: int) -> None:
        self.index_offsets.append(offset)
        self.index_positions.append(position)
        self.bytes_since_index = 0

    def lookup(self, offset: int) -> int:
        """File position of the indexed batch at or before ``offset``."""
        i = bisect.bisect_right(self.index_offsets, offset) - 1
        return self.index_positions[i] if i >= 0 else 0

    def summary(self) -> bytes:
        return msgpack.packb({
            "format": 1, "size": self.size, "next_offset": self.next_offset,
            "max_timestamp": self.max_timestamp, "ts": "records",
            "offsets": self.index_offsets, "positions": self.index_positions,
        })


def segment_name(base_offset: int, epoch: int) -> str:
    return f"{base_offset:020d}-e{epoch}.log"


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    next_offset: int
    position: int
    segment: Segment


@dataclass(slots=True)
class ReadResult:
    records: bytes
    first_offset: int  # base offset of the first batch returned (or the fetch offset)
    next_offset: int  # offset after the last batch returned


class PartitionLog:
    """A partition's segments. Synchronous; the caller serialises writers.

    Args:
        path: the partition directory.
        config: segment and retention settings.
    """

    def __init__(self, path: Path, config: LogConfig, *, clock: Callable[[], int] = wall_ms) -> None:
        self.path = Path(path)
        self.clock = clock  # wall-clock milliseconds (segment ages, recovery journal, retention)
        self.config = config
        self.segments: list[Segment] = []
        self.epoch = -1
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.durable_offset = 0
        self._dirty: set[int] = set()  # fds with unsynced bytes
        self._closed = False
        self.producers = ProducerStateTable()
        # aborted transactions: (marker offset, producer id, first offset), sorted by marker
        self.aborted: list[tuple[int, int, int]] = []
        self.snapshot_error: str | None = None
        self.failed: str | None = None  # why the log refuses writes until reopened
        self.recoveries: list[dict] = []  # what this open's recovery cut, for the caller to log
        self.recovery_journal_error: str | None = None
        self.open_notes: list[str] = []  # e.g. a cleaning pass completed at takeover
        self.cleaning = False  # a cleaner pass is under way: retention leaves segment files alone
        self.cleaner_state: dict = {}  # cleaner.json: clean_offset, cleaned segments
        self._manifest_stamp: tuple[int, int, int] | None = None
        self._manifest_cached_epoch = -1
        self._manifest_file = str(self.path / "manifest.json")  # stat'ed before every ack
        self._open_ms = 0  # the clock at the last open: replayed producers are active from it

    # ------------------------------------------------------------------ open / recover

    def open(self, epoch: int | None = None) -> int:
        """Take the partition over: write the manifest with the new epoch, recover, roll.

        Recovery verifies the tail, loads the producer-state snapshot and replays the
        batches after it, so the dedupe ring, the open transactions and the aborted
        transaction index are those the previous leader had, even after a SIGKILL.

        Args:
            epoch: the leader epoch to stamp; None means previous epoch + 1.
        Returns:
            the epoch in force.
        Raises:
            CorruptState: the manifest exists but cannot be parsed, or is ahead of ``epoch``.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        manifest = self.read_manifest(self.path)
        prev_epoch = manifest["epoch"] if manifest else -1
        self.log_start_offset = manifest["log_start_offset"] if manifest else 0
        if epoch is None:
            epoch = prev_epoch + 1
        if epoch < prev_epoch:
            raise CorruptState(str(self.path / "manifest.json"),
                               f"asked to open at epoch {epoch} below the manifest's {prev_epoch}")
        self.epoch = epoch
        self._write_manifest(high_watermark=manifest.get("high_watermark", 0) if manifest else 0)
        fs.crash_point("takeover.after_manifest")
        self.open_notes = cleaner.finish(self.path, self.config.fsync)
        self.cleaner_state = cleaner.read_state(self.path)
        self._open_ms = self.clock()
        replay_from = self._load_snapshot()
        self._recover(self._replay, replay_from)
        if replay_from > self.log_end_offset:
            # The tail the snapshot covers is gone (torn or lost after the snapshot): its
            # dedupe ring would echo batches the log no longer holds. Rebuild from the log.
            self.snapshot_error = (f"{self.path / 'producer-state.snapshot'}: offset {replay_from}"
                                   f" past the recovered log end {self.log_end_offset}")
            self.producers = ProducerStateTable()
            self.aborted = []
            self._recover(self._replay, 0)
        self._write_recovery_journal()
        self.roll()
        return epoch

    def _load_snapshot(self) -> int:
        """Load producer-state.snapshot; returns the offset replay must start from."""
        path = self.path / "producer-state.snapshot"
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return 0
        try:
            obj = msgpack.unpackb(raw, strict_map_key=False)
            if not isinstance(obj, dict) or obj.get("format") != 1:
                raise ValueError("unknown snapshot format")
            self.producers = ProducerStateTable.from_snapshot(obj["producers"], now_ms=self._open_ms)
            self.aborted = []
            return int(obj["offset"])
        except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
            # The snapshot is a cache of what the log holds: report it and rebuild from the
            # whole log instead (the file is left in place for inspection until replaced).
            self.snapshot_error = f"{path}: {exc}"
            self.producers = ProducerStateTable()
            return 0

    def _replay(self, h: wb.BatchHeader, buf: bytes, pos: int) -> None:
        # When the previous leader appended a replayed batch is unknown (a batch's
        # timestamps are the client's, Sarama's MaxTimestamp is -1): its producer counts
        # as active at this open, so a takeover never expires state at once; it expires
        # one producer.id.expiration.ms after the takeover at the latest.
        self._track(h, buf, pos, h.base_offset, self._open_ms)

    def _track(self, h: wb.BatchHeader, buf, pos: int, base_offset: int, now_ms: int) -> None:
        """Update producer state and the aborted index for a batch at ``base_offset``
        appended at ``now_ms`` by the broker's clock."""
        if h.producer_id < 0:
            return
        if h.is_control:
            kind = wb.control_type(buf, pos, h)
            first = self.producers.end_txn(h.producer_id, h.producer_epoch, now_ms=now_ms)
            if kind == wb.CONTROL_ABORT and first is not None:
                self.aborted.append((base_offset, h.producer_id, first))
            return
        self.producers.record(h.producer_id, h.producer_epoch, h.base_sequence, h.records_count,
                              base_offset, h.max_timestamp, h.is_transactional, now_ms=now_ms)

    def write_snapshot(self) -> None:
        """Persist the producer state as of the log end (on roll and relinquish)."""
        fs.crash_point("snapshot.before_write")
        data = msgpack.packb({"format": 1, "offset": self.log_end_offset,
                              "producers": self.producers.to_snapshot()})
        atomic.write_bytes(self.path / "producer-state.snapshot", data, fsync=self.config.fsync)

    def _load_txnidx(self, seg: Segment) -> None:
        try:
            raw = seg.path.with_suffix(".txnidx").read_bytes()
        except FileNotFoundError:
            return
        try:
            entries = msgpack.unpackb(raw)
            self.aborted.extend((int(a), int(b), int(c)) for a, b, c in entries)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise CorruptState(str(seg.path.with_suffix(".txnidx")), str(exc)) from None

    def aborted_in(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer_id, first_offset) of aborted transactions whose marker is at or after
        ``start`` and whose first offset is below ``end``, sorted by first offset."""
        i = bisect.bisect_left(self.aborted, (start, -(2**63), -(2**63)))
        out = [(pid, first) for marker, pid, first in self.aborted[i:] if first < end]
        out.sort(key=lambda e: e[1])
        return out

    def last_stable_offset(self) -> int:
        first = self.producers.first_unstable_offset()
        return self.log_end_offset if first is None else min(first, self.log_end_offset)

    @staticmethod
    def read_manifest(path: Path) -> dict | None:
        return atomic.read_json(Path(path) / "manifest.json")

    def manifest_epoch(self) -> int:
        """The epoch in manifest.json as on the volume now. A stat decides whether the file
        changed since the last read (the check-before-ack runs on every acks=all produce)."""
        path = self._manifest_file
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return -1
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._manifest_stamp:
            return self._manifest_cached_epoch
        m = self.read_manifest(self.path)
        epoch = m["epoch"] if m else -1
        self._manifest_stamp, self._manifest_cached_epoch = stamp, epoch
        return epoch

    def _write_manifest(self, *, high_watermark: int | None = None, log_start_offset: int | None = None) -> None:
        atomic.write_json(self.path / "manifest.json", {
            "format": 1,
            "epoch": self.epoch,
            "log_start_offset": self.log_start_offset if log_start_offset is None else log_start_offset,
            "high_watermark": self.log_end_offset if high_watermark is None else high_watermark,
        }, fsync=self.config.fsync)

    def _list_segments(self) -> list[Segment]:
        segs = []
        for entry in os.listdir(self.path):
            m = _SEGMENT_RE.match(entry)
            if m:
                segs.append(Segment(int(m.group(1)), int(m.group(2)), self.path / entry))
        segs.sort(key=lambda s: (s.base_offset, s.epoch))
        return segs

    def _recover(self, on_batch, replay_from: int) -> None:
        segs = self._drop_dead_segments(self._list_segments())
        kept: list[Segment] = []
        for i, seg in enumerate(segs):
            limit = segs[i + 1].base_offset if i + 1 < len(segs) else None
            if limit is not None and limit <= seg.base_offset:
                # Same base as the next (an empty segment of an older epoch): drop it.
                self._scan(seg, limit=None, on_batch=None, replay_from=replay_from)
                if seg.next_offset == seg.base_offset:
                    if seg.size:
                        self._note_recovery(seg, "removed", 0, seg.size, "empty segment superseded "
                                            "by a newer one at the same base", seg.base_offset)
                    self._remove_segment(seg)
                    continue
                raise CorruptState(str(seg.path), "overlaps the next segment")
            # A summary past the next segment covers late bytes of a deposed leader: rescan.
            loaded = limit is not None and self._load_summary(seg) and seg.next_offset <= limit
            if loaded and seg.max_timestamp < 0 and not seg.summary_ts_from_records:
                # Written before the max came from the records (every batch said -1):
                # rescan it once and keep the recomputed summary, for time retention and
                # ListOffsets by time.
                self._scan(seg, limit, None, replay_from)
                atomic.write_bytes(seg.path.with_suffix(".idx"), seg.summary(), fsync=self.config.fsync)
                self.open_notes.append(f"{seg.name}: summary without record timestamps rescanned; "
                                       f"max timestamp {seg.max_timestamp}")
            if loaded and seg.next_offset <= replay_from:
                self._load_txnidx(seg)
            elif loaded and seg.base_offset < replay_from:
                self._load_txnidx(seg)
                self.aborted = [a for a in self.aborted if a[0] < replay_from]
                self._scan(seg, limit, on_batch, replay_from)
            else:
                if seg.base_offset < replay_from:
                    self._load_txnidx(seg)
                    self.aborted = [a for a in self.aborted if a[0] < replay_from]
                self._scan(seg, limit, on_batch, replay_from)
            kept.append(seg)
        self.segments = kept
        self.aborted.sort()
        if kept:
            self.log_end_offset = kept[-1].next_offset
        else:
            self.log_end_offset = self.log_start_offset
        if self.log_end_offset < self.log_start_offset:
            self.log_end_offset = self.log_start_offset
        self.durable_offset = self.log_end_offset

    def _drop_dead_segments(self, segs: list[Segment]) -> list[Segment]:
        """Remove segments a newer epoch took over: a segment is dead when a segment of a
        higher epoch starts at or before its base (a deposed leader rolled after the
        takeover, so every byte in it is a late write past the takeover point)."""
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
                    size = _size_of(seg.path)
                    self._note_recovery(seg, "removed", 0, size,
                                        f"superseded: a segment of epoch {top} starts at or before its base",
                                        seg.base_offset)
                    self._remove_segment(seg)
                else:
                    live.append(seg)
            i = j
        return live

    def _load_summary(self, seg: Segment) -> bool:
        idx = seg.path.with_suffix(".idx")
        try:
            data = msgpack.unpackb(idx.read_bytes())
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

    def _scan(self, seg: Segment, limit: int | None, on_batch, replay_from: int) -> None:
        """Verify every batch of ``seg``, rebuild its index, truncate a torn or dead tail."""
        with open(seg.path, "rb") as f:
            data = f.read()
        pos = 0
        expected = seg.base_offset
        seg.index_offsets.clear()
        seg.index_positions.clear()
        seg.bytes_since_index = 0
        seg.max_timestamp = -1
        reason = "incomplete batch (torn write)"
        for pos_, h in wb.iter_headers(data):
            if h.magic != 2:
                reason = f"bad magic byte {h.magic}"
                break
            if h.base_offset < expected or (h.base_offset > expected and not self._gaps_allowed(seg)):
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
                self._note_recovery(seg, "truncated", pos, len(data), reason, expected)
                f.truncate(pos)
            if self.config.fsync:
                # What recovery verified is durable from here on (durable_offset): a
                # SIGKILLed leader's unsynced tail, or the tail of a log failed by an fsync.
                fs.fsync(f.fileno(), point="append.fsync", path=str(seg.path))

    def _gaps_allowed(self, seg: Segment) -> bool:
        """A cleaned segment has offset gaps (removed batches); others are dense."""
        return seg.name in self.cleaner_state.get("cleaned", {})

    def _note_recovery(self, seg: Segment, action: str, start: int, end: int, reason: str,
                       offset: int) -> None:
        """Record one cut recovery made (bytes [start, end) of ``seg``, from ``offset`` on)."""
        self.recoveries.append({
            "time_ms": self.clock(), "segment": seg.name, "action": action,
            "epoch": self.epoch, "from_byte": start, "to_byte": end, "bytes": end - start,
            "from_offset": offset, "reason": reason,
        })

    def _write_recovery_journal(self) -> None:
        """Append this open's cuts to ``recovery.json`` (the last 100 kept), for ``kaas
        inspect log``. The warning log line is the primary record; when this write fails
        (a full disk) the failure is kept in ``recovery_journal_error`` for the caller to
        report, and the open goes on: the cut is already made and logged."""
        if not self.recoveries:
            return
        path = self.path / RECOVERY_FILE
        try:
            old = atomic.read_json(path)
            entries = list(old.get("entries", [])) if old else []
        except CorruptState as exc:
            entries = []
            self.recovery_journal_error = f"{exc} (replaced)"
        entries = (entries + self.recoveries)[-_RECOVERY_KEEP:]
        try:
            atomic.write_json(path, {"format": 1, "entries": entries}, fsync=self.config.fsync)
        except OSError as exc:
            self.recovery_journal_error = f"{path}: {exc}"

    def _remove_segment(self, seg: Segment) -> None:
        self._close_fd(seg)
        trash.discard((seg.path, seg.path.with_suffix(".idx"), seg.path.with_suffix(".txnidx")),
                      self.config.file_delete_delay_ms, self.clock())

    # ------------------------------------------------------------------ write

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    def roll(self) -> Segment:
        """Close the active segment (fsync it, write its summary) and start a new one.

        Raises:
            KaasError: NOT_LEADER_OR_FOLLOWER when the manifest carries another epoch (a
                deposed leader must not write summaries, the snapshot or a new segment).
        """
        self._check_writable()
        if self.segments and self.manifest_epoch() != self.epoch:
            raise KaasError(ErrorCode.not_leader_or_follower,
                            f"{self.path}: epoch {self.epoch} no longer owns the partition")
        if self.segments:
            old = self.active
            if old.next_offset == old.base_offset and old.epoch == self.epoch:
                # An empty segment of our own epoch (a restart at the same epoch): reuse it,
                # opened for appending (recovery leaves segments closed or read-only).
                self._close_fd(old)
                old.fd = os.open(old.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
                old.created_ms = self.clock()
                return old
            if old.fd >= 0 and self.config.fsync:
                self._fsync_segments([old.fd])
            if old.next_offset == old.base_offset and old.base_offset == self.log_end_offset:
                # An empty segment of an older epoch: replace it.
                self._remove_segment(old)
                self.segments.pop()
            else:
                entries = [list(a) for a in self.aborted if old.base_offset <= a[0] < old.next_offset]
                if entries:
                    atomic.write_bytes(old.path.with_suffix(".txnidx"), msgpack.packb(entries),
                                       fsync=self.config.fsync)
                atomic.write_bytes(old.path.with_suffix(".idx"), old.summary(), fsync=self.config.fsync)
                self.write_snapshot()
        seg = Segment(self.log_end_offset, self.epoch, self.path / segment_name(self.log_end_offset, self.epoch))
        seg.next_offset = self.log_end_offset
        seg.created_ms = self.clock()
        seg.fd = os.open(seg.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            seg.size = os.fstat(seg.fd).st_size
            if seg.size:
                raise CorruptState(str(seg.path), "new segment already holds data")
            if self.config.fsync:
                atomic.fsync_dir(self.path)
        except BaseException:
            self._close_fd(seg)  # the empty file stays; the next roll opens it again
            raise
        self.segments.append(seg)
        return seg

    def append(self, records: bytes, header: wb.BatchHeader, *, now_ms: int | None = None) -> AppendResult:
        """Append one validated batch at the log end (offset and epoch patched in).

        Returns:
            where the batch landed.
        """
        self._check_writable()
        seg = self.active
        now = now_ms if now_ms is not None else self.clock()
        if seg.size >= self.config.segment_bytes or (
            seg.size and now - seg.created_ms >= self.config.segment_ms
        ):
            try:
                seg = self.roll()
            except OSError as exc:
                # Nothing of the batch is written: the old segment stays active (a summary
                # written for it is ignored at recovery once the segment grows past it).
                raise KaasError(ErrorCode.kafka_storage_error, f"{self.path}: segment roll failed: {exc}") from None
        base = self.log_end_offset
        # Patch baseOffset and partitionLeaderEpoch (bytes 0-15, outside the CRC) in a small
        # head and write head + the client's bytes with one writev: no copy of the batch.
        head = bytearray(records[:16])
        wb.patch(head, 0, base, self.epoch)
        pos = seg.size
        size = len(records)
        try:
            fs.write_all(seg.fd, (head, memoryview(records)[16:]), point="append.write", path=str(seg.path))
        except OSError as exc:
            self._undo_append(seg, pos, exc)
            raise KaasError(ErrorCode.kafka_storage_error, f"{seg.path}: append failed: {exc}") from None
        if not seg.index_offsets or seg.bytes_since_index >= self.config.index_interval_bytes:
            seg.index_add(base, pos)
        seg.bytes_since_index += size
        seg.size += size
        nxt = base + header.last_offset_delta + 1
        seg.next_offset = nxt
        ts = header.max_timestamp if wr.header_max_trusted(header) else wr.batch_max_timestamp(records, header)
        if ts > seg.max_timestamp:
            seg.max_timestamp = ts
        self.log_end_offset = nxt
        self._dirty.add(seg.fd)
        self._track(header, records, 0, base, now)
        return AppendResult(base, nxt, pos, seg)

    def _check_writable(self) -> None:
        if self.failed is not None:
            raise KaasError(ErrorCode.kafka_storage_error, f"{self.path}: offline until recovered: {self.failed}")

    def _undo_append(self, seg: Segment, pos: int, exc: OSError) -> None:
        """A write failed part-way: cut the segment back to ``pos`` (the end of the last
        good batch) and fsync, so the next batch is never written after torn bytes. When
        that fails too, the log is failed (offline until reopened through recovery)."""
        try:
            os.ftruncate(seg.fd, pos)
            if self.config.fsync:
                fs.fsync(seg.fd, point="append.fsync", path=str(seg.path))
        except OSError as exc2:
            self.fail(f"append failed ({exc}) and truncating back to byte {pos} failed ({exc2})")

    def fail(self, reason: str) -> None:
        """Take the log offline: no append or sync succeeds until it is reopened (the
        bytes past the last successful fsync are of unknown state)."""
        if self.failed is None:
            self.failed = reason

    def take_dirty(self) -> tuple[int, list[int]]:
        """(log end, the fds with unsynced bytes) for a group commit; the fds are no longer
        dirty: the caller fsyncs them with ``fsync_fds`` and on success advances
        ``durable_offset`` to the returned end."""
        self._check_writable()
        fds = list(self._dirty)
        self._dirty.difference_update(fds)
        return self.log_end_offset, fds

    def fsync_fds(self, fds: list[int]) -> None:
        """fsync segments (safe in a worker thread while the owner keeps appending).

        Raises:
            OSError: an fsync failed; the log is now failed (offline until reopened).
        """
        if self.config.fsync and fds:
            self._fsync_segments(fds)

    def _fsync_segments(self, fds: list[int]) -> None:
        try:
            for fd in fds:
                fs.fsync(fd, point="append.fsync", path=str(self.path))
        except OSError as exc:
            self.fail(f"fsync failed: {exc}")
            raise

    def sync(self) -> int:
        """fsync every segment with unsynced bytes. Returns the offset now durable.

        Raises:
            KaasError: KAFKA_STORAGE_ERROR when the log is failed.
            OSError: the fsync failed (and the log is now failed).
        """
        end, fds = self.take_dirty()
        self.fsync_fds(fds)
        self.mark_durable(end)
        return end

    def mark_durable(self, end: int) -> None:
        """Everything below ``end`` is fsynced (a group commit of ``take_dirty``'s fds)."""
        if end > self.durable_offset:
            self.durable_offset = end

    @contextlib.contextmanager
    def cleaning_pass(self) -> Iterator[None]:
        """Hold while the cleaner prepares and swaps this log's segments: retention leaves
        their files alone meanwhile (it removes them on its next pass)."""
        self.cleaning = True
        try:
            yield
        finally:
            self.cleaning = False

    def abandon(self) -> None:
        """Close every file without writing anything (a failed log is given up: its
        summary, snapshot and manifest would describe bytes of unknown state)."""
        self._closed = True
        for seg in self.segments:
            self._close_fd(seg)

    def close(self) -> None:
        """Relinquish: fsync, persist the manifest and the active segment's summary, close."""
        if self._closed:
            return
        if self.failed is not None:
            self.abandon()
            return
        self._closed = True
        try:
            self.sync()
            if self.segments and self.manifest_epoch() == self.epoch:
                act = self.active
                entries = [list(a) for a in self.aborted if act.base_offset <= a[0] < act.next_offset]
                if entries:
                    atomic.write_bytes(act.path.with_suffix(".txnidx"), msgpack.packb(entries),
                                       fsync=self.config.fsync)
                self.write_snapshot()
                self._write_manifest()
        finally:
            for seg in self.segments:
                self._close_fd(seg)

    def _close_fd(self, seg: Segment) -> None:
        if seg.fd >= 0:
            self._dirty.discard(seg.fd)
            os.close(seg.fd)
            seg.fd = -1

    # ------------------------------------------------------------------ read

    def _segment_for(self, offset: int) -> int:
        bases = [s.base_offset for s in self.segments]
        i = bisect.bisect_right(bases, offset) - 1
        return max(i, 0)

    def _fd(self, seg: Segment) -> int:
        if seg.fd < 0:
            seg.fd = os.open(seg.path, os.O_RDONLY)
        return seg.fd

    def read(self, offset: int, max_bytes: int, limit: int, *, min_one: bool = True) -> ReadResult:
        """Whole batches from the one containing ``offset``, up to ``max_bytes``.

        Args:
            offset: the fetch offset (log_start_offset <= offset <= log_end_offset).
            max_bytes: byte budget; the first batch is returned even when larger if min_one.
            limit: exclusive upper bound on batch base offsets (high watermark or LSO).
        """
        if offset >= limit or offset >= self.log_end_offset:
            return ReadResult(b"", offset, offset)
        i = self._segment_for(offset)
        while i < len(self.segments):
            seg = self.segments[i]
            seg_limit = self.segments[i + 1].base_offset if i + 1 < len(self.segments) else None
            res = self._read_segment(seg, offset, max_bytes, min(limit, seg_limit) if seg_limit is not None else limit,
                                     min_one)
            if res is not None:
                return res
            i += 1
        return ReadResult(b"", offset, offset)

    def _read_segment(self, seg: Segment, offset: int, max_bytes: int, limit: int, min_one: bool):
        """Whole batches of one segment from the one holding ``offset``: the batches are
        contiguous on disk, so headers are scanned to find the byte range and the range is
        returned as one slice (no per-batch copies, no join)."""
        fd = self._fd(seg)
        size = seg.size
        pos = seg.lookup(offset)
        start = end = -1
        first = -1
        nxt = offset
        chunk = b""
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
            if seg.next_offset <= offset:
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

    def batches(self, start_offset: int = 0):
        """Yield (header, bytes) for every batch from ``start_offset`` (for tools and tests)."""
        offset = max(start_offset, self.log_start_offset)
        while offset < self.log_end_offset:
            res = self.read(offset, 1 << 20, self.log_end_offset)
            if not res.records:
                return
            recs = bytes(res.records)
            for pos, h in wb.iter_headers(recs):
                yield h, recs[pos:pos + h.size]
            offset = res.next_offset

    # ------------------------------------------------------------------ offsets

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """ListOffsets by time: (offset, timestamp) of the first record at or past the log
        start whose timestamp is at least ``ts``, else None.

        The segments' max timestamps skip whole segments and trusted batch headers skip
        whole batches (``records.header_max_trusted``); the records of a batch that may
        hold the answer are read, so the answer can sit inside a batch. On LogAppendTime
        batches every record carries the batch's max timestamp.
        """
        start = self.log_start_offset
        for seg in self.segments:
            if seg.max_timestamp < ts or seg.next_offset <= start:
                continue
            for h, buf, pos in self._segment_batches(seg):
                if wr.header_max_trusted(h) and h.max_timestamp < ts:
                    continue
                for offset, stamp in self._stamps(h, buf, pos):
                    if stamp >= ts and offset >= start:
                        return offset, stamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """ListOffsets MAX_TIMESTAMP (KIP-734): (offset, timestamp) of the record carrying
        the highest timestamp at or past the log start, the first such record on ties;
        None for an empty log.

        The first segment whose max is the highest gives the batch (the first whose max
        equals it) and that batch's records give the record. When no record there has it
        (the max came from records below the log start, or from an overstated header of a
        batch stored before produce rewrote headers), every record is compared.
        """
        start = self.log_start_offset
        live = [s for s in self.segments if s.next_offset > start and s.next_offset > s.base_offset]
        if not live:
            return None
        top = max(s.max_timestamp for s in live)
        for seg in live:
            if seg.max_timestamp != top:
                continue
            for h, buf, pos in self._segment_batches(seg):
                if wr.header_max_trusted(h) and h.max_timestamp != top:
                    continue
                for offset, stamp in self._stamps(h, buf, pos):
                    if stamp == top and offset >= start:
                        return offset, stamp
        return self._max_timestamp_scan()

    def _max_timestamp_scan(self) -> tuple[int, int] | None:
        best: tuple[int, int] | None = None  # (offset, timestamp)
        start = self.log_start_offset
        for seg in self.segments:
            if seg.next_offset <= start:
                continue
            for h, buf, pos in self._segment_batches(seg):
                for offset, stamp in self._stamps(h, buf, pos):
                    if offset >= start and (best is None or stamp > best[1]):
                        best = (offset, stamp)
        return best

    @staticmethod
    def _stamps(h: wb.BatchHeader, buf, pos: int) -> list[tuple[int, int]]:
        """(offset, timestamp) of every record of the batch at ``buf[pos:]``; a batch whose
        records cannot be read (a codec this broker lacks) stands as its last offset at
        its header's max timestamp."""
        try:
            stamps = wr.timestamps(memoryview(buf)[pos:pos + h.size], h)
        except wr.RecordsError:
            return [(h.last_offset, h.max_timestamp)]
        base = h.base_offset
        return [(base + delta, stamp) for delta, stamp in stamps]

    def _segment_batches(self, seg: Segment):
        """(header, buffer, position in it) of every batch of ``seg`` from the log start."""
        off = max(seg.base_offset, self.log_start_offset)
        while off < seg.next_offset:
            res = self._read_segment(seg, off, 1 << 20, seg.next_offset, True)
            if res is None or not res.records:
                return
            buf = res.records
            for pos, h in wb.iter_headers(buf):
                if h.next_offset > off:
                    yield h, buf, pos
            off = res.next_offset

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= ``epoch``, the start of the next epoch or LEO)."""
        starts: list[tuple[int, int]] = []
        for seg in self.segments:
            if not starts or seg.epoch != starts[-1][0]:
                starts.append((seg.epoch, seg.base_offset))
        found = -1
        end = -1
        for i, (e, _start) in enumerate(starts):
            if e <= epoch:
                found = e
                end = starts[i + 1][1] if i + 1 < len(starts) else self.log_end_offset
        if found < 0:
            return -1, -1
        return found, end

    # ------------------------------------------------------------------ truncation

    def delete_records(self, offset: int) -> int:
        """Advance the log start to ``offset`` (DeleteRecords). Returns the new low watermark."""
        if offset > self.log_start_offset:
            self._check_writable()
            self._write_manifest(log_start_offset=offset)  # the file first: memory never runs ahead
            self.log_start_offset = offset
            self._drop_below_start()
        return self.log_start_offset

    def _drop_below_start(self) -> None:
        if self.cleaning:  # the cleaner is swapping files: retention removes them next pass
            return
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            self._remove_segment(self.segments.pop(0))

    def apply_retention(self, now_ms: int) -> int:
        """Delete whole closed segments past retention.ms or beyond retention.bytes.

        Returns:
            the number of segments deleted.
        """
        if self.failed is not None or not self.config.delete or self.cleaning:
            return 0
        deleted = 0
        cfg = self.config
        total = sum(s.size for s in self.segments)
        while deleted < len(self.segments) - 1:
            seg = self.segments[deleted]
            too_old = cfg.retention_ms >= 0 and now_ms - self._segment_time(seg) > cfg.retention_ms
            too_big = cfg.retention_bytes >= 0 and total - seg.size >= cfg.retention_bytes
            if not (too_old or too_big):
                break
            total -= seg.size
            deleted += 1
        if not deleted:
            return 0
        # The manifest first: a failed write leaves everything as it was; a crash after it
        # leaves segments below the log start, which recovery and reads skip.
        start = max(self.log_start_offset, self.segments[deleted].base_offset)
        self._write_manifest(log_start_offset=start)
        self.log_start_offset = start
        for seg in self.segments[:deleted]:
            self._remove_segment(seg)
        del self.segments[:deleted]
        self.aborted = [a for a in self.aborted if a[0] >= self.segments[0].base_offset]
        return deleted

    def _segment_time(self, seg: Segment) -> int:
        """A closed segment's age reference for retention.ms: its records' max timestamp,
        or, when no record carries one (all below 0), the file's modification time, as
        Apache's LogSegment.largestTimestamp does: such a segment still expires."""
        if seg.max_timestamp >= 0:
            return seg.max_timestamp
        try:
            return os.stat(seg.path).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return seg.max_timestamp

    # ------------------------------------------------------------------ compaction

    def maybe_roll_idle(self, now_ms: int) -> bool:
        """Roll a non-empty active segment older than segment.ms even without appends, so a
        quiet compacted topic's records become cleanable. True when it rolled."""
        seg = self.active
        if self.failed is None and seg.size and now_ms - seg.created_ms >= self.config.segment_ms:
            self.roll()
            return True
        return False

    def dirty_ratio(self, now_ms: int) -> tuple[list[Segment], float, bool]:
        """(the cleanable segments, the dirty ratio among them, whether max.compaction.lag.ms
        forces a pass). Cleanable: closed segments wholly below the last stable offset and
        older than min.compaction.lag.ms; dirty: those from the clean offset on."""
        lso = self.last_stable_offset()
        cfg = self.config
        segs: list[Segment] = []
        for seg in self.segments[:-1]:
            if seg.next_offset > lso:
                break
            if cfg.min_compaction_lag_ms > 0 and seg.max_timestamp > now_ms - cfg.min_compaction_lag_ms:
                break
            segs.append(seg)
        if not segs:
            return segs, 0.0, False
        clean_offset = int(self.cleaner_state.get("clean_offset", 0))
        total = sum(s.size for s in segs) or 1
        dirty = [s for s in segs if s.base_offset >= clean_offset]
        ratio = sum(s.size for s in dirty) / total
        forced = bool(dirty) and cfg.max_compaction_lag_ms < 2**62 and \
            0 <= dirty[0].max_timestamp < now_ms - cfg.max_compaction_lag_ms
        horizon = self.cleaner_state.get("next_horizon_ms")
        if horizon is not None and now_ms >= horizon:
            forced = True  # a kept tombstone or marker may go now (KIP-534's delete horizon)
        return segs, ratio, forced

    def clean_job(self, now_ms: int, max_bytes_per_s: float = 0.0) -> cleaner.Job | None:
        """A cleaning pass to run now, or None (not compacted, nothing dirty enough). Opens
        the fds of the segments in it, so reads keep using the old files until
        ``apply_clean`` swaps the new ones in."""
        if not self.config.compact or self.failed is not None or self._closed or self.cleaning:
            return None
        segs, ratio, forced = self.dirty_ratio(now_ms)
        if not segs or (not forced and (ratio < self.config.min_cleanable_dirty_ratio or ratio == 0.0)):
            return None
        for seg in segs:
            self._fd(seg)
        last_of = {pid: off for pid, off in self.producers.last_batch_offsets().items()}
        return cleaner.Job(
            path=self.path, epoch=self.epoch,
            segments=[cleaner.SegmentCopy(s.name, s.base_offset, s.next_offset, s.size) for s in segs],
            aborted=[a for a in self.aborted if a[0] < segs[-1].next_offset], last_batch_of=last_of,
            now_ms=now_ms, delete_retention_ms=self.config.delete_retention_ms,
            index_interval_bytes=self.config.index_interval_bytes, fsync=self.config.fsync,
            max_bytes_per_s=max_bytes_per_s)

    def next_cleaner_state(self, prepared: cleaner.Prepared) -> dict:
        """What ``cleaner.json`` says once ``prepared`` is swapped in."""
        job = prepared.job
        live = {s.name for s in self.segments}
        cleaned = {n: t for n, t in self.cleaner_state.get("cleaned", {}).items() if n in live}
        for seg in prepared.changed:
            if not seg.remove:
                cleaned[seg.name] = job.now_ms
        return {"format": 1, "epoch": job.epoch, "clean_offset": job.segments[-1].end_offset,
                "last_clean_ms": job.now_ms, "cleaned": cleaned, "next_horizon_ms": prepared.next_horizon_ms,
                "bytes_cleaned": int(self.cleaner_state.get("bytes_cleaned", 0)) + prepared.bytes_read,
                "records_removed": int(self.cleaner_state.get("records_removed", 0)) + prepared.records_removed}

    def apply_clean(self, prepared: cleaner.Prepared, state: dict) -> None:
        """After ``cleaner.commit``: point the in-memory segments at the swapped files."""
        by_name = {s.name: s for s in prepared.changed}
        kept: list[Segment] = []
        for seg in self.segments:
            c = by_name.get(seg.name)
            if c is None:
                kept.append(seg)
                continue
            self._close_fd(seg)  # the old inode; the next read opens the new file
            if c.remove:
                continue
            seg.size = c.new_size
            seg.next_offset = c.next_offset
            seg.max_timestamp = c.max_timestamp
            seg.index_offsets = list(c.index_offsets)
            seg.index_positions = list(c.index_positions)
            kept.append(seg)
        self.segments = kept
        if prepared.dropped_markers:
            self.aborted = [a for a in self.aborted if a[0] not in prepared.dropped_markers]
        self.cleaner_state = state

    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)


def _size_of(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
