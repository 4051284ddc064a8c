"""One partition's log on the data directory: appends, group-commit fsyncs, reads in
whole batches, rolls, retention, and the compaction glue, over its parts:

- ``storage.segment``: the segment files (``.log``, ``.idx`` summary, ``.txnidx``);
- ``storage.manifest``: ``manifest.json`` (the owning epoch, log start, high watermark);
- ``storage.producer_snapshot``: ``producer-state.snapshot`` (the idempotence window);
- ``storage.recovery``: what a takeover verifies, cuts and replays (``recovery.json``);
- ``storage.timestamps``: ListOffsets by time, record by record.

The partition's current leader is the only writer of its directory.

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from kaas.clock import wall_ms
from kaas.domain import retention
from kaas.domain.producer_state import ProducerStateTable
from kaas.errors import CorruptState, KaasError
from kaas.storage import atomic, cleaner, fs, manifest, producer_snapshot, segment, timestamps, trash
from kaas.storage.recovery import RECOVERY_FILE, Cut, Recovery, write_journal
from kaas.storage.segment import AbortedTxn, LogConfig, ReadResult, Segment, epoch_end, segment_name, write_closed
from kaas.wire import batch as wb
from kaas.wire import records as wr

__all__ = ["RECOVERY_FILE", "AppendResult", "LogConfig", "PartitionLog", "ReadResult", "Segment", "segment_name"]


class AppendResult(NamedTuple):
    """Where an appended batch landed (a named tuple: one per append)."""

    base_offset: int
    next_offset: int
    position: int
    segment: Segment


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
        self.unflushed_since_ms: int | None = None  # the first append not yet durable (flush.ms)
        self._dirty: set[int] = set()  # fds with unsynced bytes
        self._closed = False
        self.producers = ProducerStateTable()
        # aborted transactions: (marker offset, producer id, first offset), sorted by marker
        self.aborted: list[AbortedTxn] = []
        self.snapshot_error: str | None = None
        self.failed: str | None = None  # why the log refuses writes until reopened
        self.recoveries: list[Cut] = []  # what this open's recovery cut, for the caller to log
        self.recovery_journal_error: str | None = None
        self.open_notes: list[str] = []  # e.g. a cleaning pass completed at takeover
        self.cleaning = False  # a cleaner pass is under way: retention leaves segment files alone
        self.cleaner_state: cleaner.CleanerState = {}  # cleaner.json: clean_offset, cleaned segments
        self._manifest = manifest.EpochWatch(self.path)  # stat'ed before every ack
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
        found = manifest.read(self.path)
        prev_epoch = found["epoch"] if found else -1
        self.log_start_offset = found["log_start_offset"] if found else 0
        if epoch is None:
            epoch = prev_epoch + 1
        if epoch < prev_epoch:
            raise CorruptState(str(self.path / "manifest.json"),
                               f"asked to open at epoch {epoch} below the manifest's {prev_epoch}")
        self.epoch = epoch
        self._write_manifest(high_watermark=found.get("high_watermark", 0) if found else 0)
        fs.crash_point("takeover.after_manifest")
        self.open_notes = cleaner.finish(self.path, self.config.fsync)
        self.cleaner_state = cleaner.read_state(self.path)
        self._open_ms = self.clock()
        replay_from = self._load_snapshot()
        self._recover(replay_from)
        if replay_from > self.log_end_offset:
            # The tail the snapshot covers is gone (torn or lost after the snapshot): its
            # dedupe ring would echo batches the log no longer holds. Rebuild from the log.
            self.snapshot_error = (f"{self.path / producer_snapshot.NAME}: offset {replay_from}"
                                   f" past the recovered log end {self.log_end_offset}")
            self.producers = ProducerStateTable()
            self.aborted = []
            self._recover(0)
        self.recovery_journal_error = write_journal(self.path, self.recoveries, fsync=self.config.fsync)
        self.roll()
        return epoch

    def _recover(self, replay_from: int) -> None:
        """Recover the segments (``storage.recovery``), replaying the batches from
        ``replay_from`` into the producer state and the aborted index."""
        rec = Recovery(self.path, self.config, epoch=self.epoch, clock=self.clock,
                       cleaned=set(self.cleaner_state.get("cleaned", {})), remove=self._remove_segment)
        done = rec.run(self.aborted, self._replay, replay_from, self.log_start_offset)
        self.recoveries += rec.cuts
        self.open_notes += rec.notes
        self.segments = done.segments
        self.log_end_offset = self.durable_offset = done.log_end_offset

    def _load_snapshot(self) -> int:
        """Load producer-state.snapshot; returns the offset replay must start from (0, with
        ``snapshot_error`` set, when the snapshot cannot be used: the whole log is replayed)."""
        try:
            loaded = producer_snapshot.load(self.path, now_ms=self._open_ms)
        except producer_snapshot.SnapshotError as exc:
            self.snapshot_error = str(exc)
            self.producers = ProducerStateTable()
            return 0
        if loaded is None:
            return 0
        self.producers, offset = loaded
        self.aborted = []
        return offset

    def _replay(self, h: wb.BatchHeader, buf: bytes, pos: int) -> None:
        # When the previous leader appended a replayed batch is unknown (a batch's
        # timestamps are the client's, Sarama's MaxTimestamp is -1): its producer counts
        # as active at this open, so a takeover never expires state at once; it expires
        # one producer.id.expiration.ms after the takeover at the latest.
        self._track(h, buf, pos, h.base_offset, self._open_ms)

    def _track(self, h: wb.BatchHeader, buf: bytes | memoryview, pos: int, base_offset: int, now_ms: int) -> None:
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
        producer_snapshot.write(self.path, self.log_end_offset, self.producers, fsync=self.config.fsync)

    def aborted_in(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer_id, first_offset) of aborted transactions whose marker is at or after
        ``start`` and whose first offset is below ``end``, sorted by first offset."""
        i = bisect.bisect_left(self.aborted, (start, -(2**63), -(2**63)))
        out = [(pid, first) for marker, pid, first in self.aborted[i:] if first < end]
        out.sort(key=lambda e: e[1])
        return out

    def last_stable_offset(self) -> int:
        """The first offset of an open transaction, or the log end; never below the log
        start (retention deletes by time regardless of open transactions, as Apache does)."""
        first = self.producers.first_unstable_offset()
        return self.log_end_offset if first is None else max(self.log_start_offset, min(first, self.log_end_offset))

    @staticmethod
    def read_manifest(path: Path) -> manifest.Manifest | None:
        return manifest.read(path)

    def manifest_epoch(self) -> int:
        """The epoch in manifest.json as on the volume now (a stat, and a read only when the
        file changed: the check-before-ack runs on every acks=all produce)."""
        return self._manifest.epoch()

    def _write_manifest(self, *, high_watermark: int | None = None, log_start_offset: int | None = None) -> None:
        manifest.write(self.path, epoch=self.epoch,
                       log_start_offset=self.log_start_offset if log_start_offset is None else log_start_offset,
                       high_watermark=self.log_end_offset if high_watermark is None else high_watermark,
                       fsync=self.config.fsync)

    def _remove_segment(self, seg: Segment) -> None:
        self._close_fd(seg)
        trash.discard(seg.files, self.config.file_delete_delay_ms, self.clock())

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
                write_closed(old, self.aborted, fsync=self.config.fsync)
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
            fs.write_all(seg.fd, (head, memoryview(records)[16:]), point="append.write", path=seg.path)
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
        if self.unflushed_since_ms is None:
            self.unflushed_since_ms = now
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
                fs.fsync(seg.fd, point="append.fsync", path=seg.path)
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
                fs.fsync(fd, point="append.fsync", path=self.path)
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
        if self.durable_offset >= self.log_end_offset:
            self.unflushed_since_ms = None

    def flush_due(self, now_ms: int) -> bool:
        """flush.messages or flush.ms asks for an fsync now: that many offsets, or an append
        that long ago, are not yet durable."""
        cfg = self.config
        pending = self.log_end_offset - self.durable_offset
        if pending <= 0:
            return False
        if pending >= cfg.flush_messages:
            return True
        since = self.unflushed_since_ms
        return since is not None and now_ms - since >= cfg.flush_ms

    @contextlib.contextmanager
    def cleaning_pass(self) -> Iterator[None]:
        """Hold while the cleaner prepares and swaps this log's segments: retention leaves
        their files alone meanwhile (it removes them on its next pass)."""
        self.cleaning = True
        try:
            yield
        finally:
            self.cleaning = False

    @property
    def closed(self) -> bool:
        """Whether the log was closed or abandoned (it serves nothing more)."""
        return self._closed

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
                write_closed(self.active, self.aborted, fsync=self.config.fsync, summary=False)
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
        return max(bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1, 0)

    def read(self, offset: int, max_bytes: int, limit: int, *, min_one: bool = True) -> ReadResult:
        """Whole batches from the one containing ``offset``, up to ``max_bytes``.

        Args:
            offset: the fetch offset (log_start_offset <= offset <= log_end_offset).
            max_bytes: byte budget; the first batch is returned even when larger if min_one.
            limit: exclusive upper bound on batch base offsets (high watermark or LSO).
        """
        if offset >= limit or offset >= self.log_end_offset:
            return ReadResult(b"", offset, offset)
        segs = self.segments
        for i in range(self._segment_for(offset), len(segs)):
            res = segs[i].read(offset, max_bytes, min(limit, segs[i + 1].base_offset) if i + 1 < len(segs) else limit,
                               min_one)
            if res is not None:
                return res
        return ReadResult(b"", offset, offset)

    def read_span(self, offset: int, max_bytes: int, limit: int, *, min_one: bool, span_min: int) -> segment.SpanRead:
        """``read`` for a Fetch answer: ``segment.read_spans``."""
        if offset >= limit or offset >= self.log_end_offset:
            return segment.SpanRead(b"", offset, offset, 0)
        return segment.read_spans(self.segments, self._segment_for(offset), offset, max_bytes, limit, min_one, span_min)

    def batches(self, start_offset: int = 0) -> Iterator[tuple[wb.BatchHeader, bytes]]:
        """Yield (header, bytes) for every batch from ``start_offset`` (for tools and tests)."""
        offset = max(start_offset, self.log_start_offset)
        while offset < self.log_end_offset:
            res = self.read(offset, 1 << 20, self.log_end_offset)
            if not res.records:
                return
            for pos, h in wb.iter_headers(recs := bytes(res.records)):
                yield h, recs[pos:pos + h.size]
            offset = res.next_offset

    # ------------------------------------------------------------------ offsets

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """ListOffsets by time: (offset, timestamp) of the first record at or past the log
        start whose timestamp is at least ``ts``, else None (``storage.timestamps``)."""
        return timestamps.first_at_or_after(self.segments, self.log_start_offset, ts, self._segment_batches)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """ListOffsets MAX_TIMESTAMP (KIP-734): the first record carrying the highest
        timestamp at or past the log start, None for an empty log (``storage.timestamps``)."""
        return timestamps.max_record(self.segments, self.log_start_offset, self._segment_batches)

    def _segment_batches(self, seg: Segment) -> Iterator[tuple[wb.BatchHeader, bytes | memoryview, int]]:
        return seg.batches_from(self.log_start_offset)

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= ``epoch``, the start of the next epoch or LEO)."""
        return epoch_end(self.segments, epoch, self.log_end_offset)

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

    def retention_due(self, now_ms: int, *, high_watermark: int | None = None) -> int:
        """How many oldest segments retention deletes now (``domain.retention``) up to
        ``high_watermark``, by default the durable offset (closed segments: a roll fsyncs them)."""
        if self.failed is not None or not self.config.delete or self.cleaning:
            return 0
        views = [retention.SegmentView(s.base_offset, s.size, s.age_reference()) for s in self.segments]
        hw = max(self.durable_offset, self.active.base_offset) if high_watermark is None else high_watermark
        return retention.deletable(views, log_end=self.log_end_offset, high_watermark=hw, now_ms=now_ms,
                                   retention_ms=self.config.retention_ms, retention_bytes=self.config.retention_bytes)

    def apply_retention(self, now_ms: int) -> int:
        """Delete ``retention_due`` segments; returns how many. When that is all of them, an
        empty segment is rolled at the log end first: the log start moves to the log end
        and appends continue there (the roll raises KaasError if another epoch owns it)."""
        deleted = self.retention_due(now_ms)
        if not deleted:
            return 0
        if deleted == len(self.segments):
            self.roll()
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
        """(the cleanable segments, their dirty ratio, whether a pass is forced):
        ``cleaner.dirtiness`` of this log."""
        return cleaner.dirtiness(self.segments, self.last_stable_offset(), self.config, self.cleaner_state, now_ms)

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
            seg.open_fd()
        return cleaner.job(self.path, self.epoch, segs, self.aborted, self.producers.last_batch_offsets(),
                           self.config, now_ms, max_bytes_per_s)

    def next_cleaner_state(self, prepared: cleaner.Prepared) -> cleaner.CleanerState:
        """What ``cleaner.json`` says once ``prepared`` is swapped in."""
        return cleaner.next_state(self.cleaner_state, {s.name for s in self.segments}, prepared)

    def apply_clean(self, prepared: cleaner.Prepared, state: cleaner.CleanerState) -> None:
        """After ``cleaner.commit``: point the in-memory segments at the swapped files."""
        self.segments = cleaner.swap_in(self.segments, prepared, self._close_fd)
        if prepared.dropped_markers:
            self.aborted = [a for a in self.aborted if a[0] not in prepared.dropped_markers]
        self.cleaner_state = state

    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)
