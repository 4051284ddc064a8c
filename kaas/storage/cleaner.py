"""The log cleaner's file work for one compacted partition: read the cleanable segments,
plan with ``domain.compaction``, write cleaned copies beside them, and swap them in as one
set (crash-safe and NFS-safe). Only the partition's leader cleans.

Files in the partition directory:

    <segment>.log.cleaned, .idx.cleaned, .txnidx.cleaned   a pass's new copies (not yet live)
    clean-commit.json    {format, epoch, replace: [names], remove: [names]}: the commit point
    cleaner.json         {format, epoch, clean_offset, cleaned: {segment: time_ms}, ...}

A pass: (1) write every ``.cleaned`` copy and fsync it; (2) check the manifest still
carries the leader's epoch, write ``cleaner.json`` (it names the cleaned segments, whose
offsets may have gaps) and then ``clean-commit.json`` (tmp + fsync + rename): from here the
pass is decided; (3) rename each copy over its segment (removing emptied segments);
(4) delete ``clean-commit.json``. Recovery (``finish``, run by
every takeover before the segments are listed) rolls a pass forward when its commit file
exists and back (deletes the copies) when it does not, so a SIGKILL at any step leaves the
old set or the new set of segments, never a mix.

Invariants:
    - offsets never change: a cleaned segment keeps its name (base offset, epoch) and every
      kept batch its base offset and offset range;
    - the active segment and everything at or past the last stable offset are never read
      for cleaning, let alone changed;
    - an aborted transaction's entry leaves the aborted index only with its marker, in the
      same swap (a reader told about an aborted range always finds its marker).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypedDict, cast

import msgpack

from kaas.clock import SYSTEM
from kaas.domain import compaction as plan_mod
from kaas.errors import CorruptState
from kaas.storage import atomic, fs, trash
from kaas.storage.segment import LogConfig, Segment
from kaas.wire import batch as wb
from kaas.wire import records as wr

COMMIT_FILE = "clean-commit.json"
STATE_FILE = "cleaner.json"


class CleanerState(TypedDict, total=False):
    """``cleaner.json``, format 1 (empty: the partition was never cleaned)."""

    format: int
    epoch: int
    clean_offset: int
    last_clean_ms: int
    cleaned: dict[str, int]
    """The segments a pass rewrote (they may have offset gaps), with when."""
    next_horizon_ms: int | None
    bytes_cleaned: int
    records_removed: int


class CommitFile(TypedDict):
    """``clean-commit.json``, format 1: the commit point of a pass (``finish`` rolls it forward)."""

    format: int
    epoch: int
    replace: list[str]
    remove: list[str]
SUFFIX = ".cleaned"
_EXTS = (".log", ".idx", ".txnidx")

__all__ = ["Job", "Prepared", "prepare", "commit", "finish", "read_state", "discard"]


@dataclass(slots=True)
class SegmentCopy:
    """One segment of a job: where it is and what cleaning made of it."""

    name: str  # the .log file name
    base_offset: int
    end_offset: int  # the segment's next offset before cleaning (its range is [base, end))
    size: int  # bytes read (the segment is closed: this is all of it)
    remove: bool = False
    changed: bool = False
    new_size: int = 0
    next_offset: int = 0
    max_timestamp: int = -1
    index_offsets: list[int] = field(default_factory=list)
    index_positions: list[int] = field(default_factory=list)
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # kept entries, marker in here


@dataclass(slots=True)
class Job:
    """What the leader hands the worker thread: a snapshot, no live objects."""

    path: Path
    epoch: int
    segments: list[SegmentCopy]
    aborted: list[tuple[int, int, int]]
    last_batch_of: dict[int, int]
    now_ms: int
    delete_retention_ms: int
    index_interval_bytes: int
    fsync: bool
    max_bytes_per_s: float = 0.0  # 0: no bound


@dataclass(slots=True)
class Prepared:
    job: Job
    dropped_markers: set[int] = field(default_factory=set)  # abort markers removed (offsets)
    next_horizon_ms: int | None = None  # when a kept tombstone or marker may go: clean again then
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0

    @property
    def changed(self) -> list[SegmentCopy]:
        return [s for s in self.job.segments if s.changed]


def read_state(path: Path) -> CleanerState:
    """``cleaner.json`` of a partition directory ({} when it was never cleaned).

    Raises:
        CorruptState: the file exists but does not parse.
    """
    return cast(CleanerState, atomic.read_json(Path(path) / STATE_FILE) or {})


_Item = tuple[int, wb.BatchHeader, plan_mod.Decision, plan_mod.BatchInfo]  # position, header, decision, batch


def prepare(job: Job) -> Prepared:
    """Read, plan and write the cleaned copies (in a worker thread). Nothing live changes.

    Raises:
        OSError: reading or writing failed (the copies written so far are removed).
        CorruptState: a segment holds a batch whose records cannot be read.
    """
    out = Prepared(job)
    t0 = SYSTEM.monotonic()  # the throttle's: real time, in a worker thread
    batches, located, data = _read(job, out, t0)
    decisions = plan_mod.plan(batches, job.aborted, job.last_batch_of, job.now_ms, job.delete_retention_ms)
    per_segment = _by_segment(job, out, located, decisions, batches)
    written: list[Path] = []
    try:
        for si, seg in enumerate(job.segments):
            _write_segment(job, out, seg, per_segment.get(si, []), data[si], written, t0)
    except BaseException:
        for p in written:
            _unlink(p)
        raise
    return out


def _read(job: Job, out: Prepared, t0: float
          ) -> tuple[list[plan_mod.BatchInfo], list[tuple[int, int, wb.BatchHeader]], list[bytes]]:
    """Every batch of the job's segments: what the plan needs of it, where it is (segment
    index, position, header), and each segment's bytes."""
    batches: list[plan_mod.BatchInfo] = []
    located: list[tuple[int, int, wb.BatchHeader]] = []  # (segment index, position, header)
    data: list[bytes] = []
    for si, seg in enumerate(job.segments):
        with open(job.path / seg.name, "rb", buffering=0) as f:
            buf = f.read(seg.size)
        data.append(buf)
        out.bytes_read += len(buf)
        for pos, h in wb.iter_headers(buf):
            if h.is_control:
                kind = wb.control_type(buf, pos, h)
                batches.append(plan_mod.BatchInfo(h.base_offset, h.producer_id, True,
                                                  kind if kind is not None else 1, h.max_timestamp))
            else:
                try:
                    recs = wr.records(memoryview(buf)[pos:pos + h.size], h)
                except wr.RecordsError as exc:
                    raise CorruptState(str(job.path / seg.name), f"batch at {h.base_offset}: {exc}") from None
                batches.append(plan_mod.BatchInfo(
                    h.base_offset, h.producer_id, h.is_transactional, None, h.max_timestamp,
                    tuple(plan_mod.RecordInfo(h.base_offset + r.offset_delta, r.key, r.tombstone) for r in recs)))
            located.append((si, pos, h))
        _throttle(job, out.bytes_read, t0)
    return batches, located, data


def _by_segment(job: Job, out: Prepared, located: list[tuple[int, int, wb.BatchHeader]],
                decisions: list[plan_mod.Decision], batches: list[plan_mod.BatchInfo]) -> dict[int, list[_Item]]:
    """The decisions grouped by segment; notes the dropped ABORT markers and the next time
    a kept tombstone or marker falls due (``out``)."""
    per_segment: dict[int, list[_Item]] = {}
    for (si, pos, h), d, b in zip(located, decisions, batches):
        per_segment.setdefault(si, []).append((pos, h, d, b))
        if isinstance(d, plan_mod.Drop) and b.control == wb.CONTROL_ABORT:
            out.dropped_markers.add(b.base_offset)
        if not isinstance(d, plan_mod.Drop):
            kept_records = (b.records if isinstance(d, plan_mod.Keep)
                            else [r for r in b.records if r.offset in d.offsets])
            if b.control is not None or any(r.tombstone for r in kept_records):
                due = b.max_timestamp + job.delete_retention_ms + 1
                if due > job.now_ms and (out.next_horizon_ms is None or due < out.next_horizon_ms):
                    out.next_horizon_ms = due
    return per_segment


def _write_segment(job: Job, out: Prepared, seg: SegmentCopy, items: list[_Item], data: bytes,
                   written: list[Path], t0: float) -> None:
    """The cleaned copy of one segment (its log, index and aborted list), unless every batch
    is kept; ``written`` collects the files made."""
    seg.aborted = [a for a in job.aborted
                   if seg.base_offset <= a[0] < seg.end_offset and a[0] not in out.dropped_markers]
    if all(isinstance(d, plan_mod.Keep) for _, _, d, _ in items):
        return
    seg.changed = True
    body = bytearray()
    for pos, h, d, b in items:
        raw = memoryview(data)[pos:pos + h.size]
        if isinstance(d, plan_mod.Drop):
            out.records_removed += max(len(b.records), 1)
            continue
        if isinstance(d, plan_mod.Filter):
            kept = set(d.offsets)
            recs = wr.records(raw, h)
            keep = [r for r in recs if h.base_offset + r.offset_delta in kept]
            out.records_removed += len(recs) - len(keep)
            raw = memoryview(wr.rebuild(raw, h, keep))
        if not seg.index_offsets or len(body) - seg.index_positions[-1] >= job.index_interval_bytes:
            seg.index_offsets.append(h.base_offset)
            seg.index_positions.append(len(body))
        body += raw
        seg.next_offset = h.next_offset
        seg.max_timestamp = max(seg.max_timestamp, wr.batch_max_timestamp(raw, wb.parse_header(raw)))
    seg.new_size = len(body)
    if not body:
        seg.remove = True
        return
    fs.crash_point("cleaner.before_copy", path=seg.name)
    stem = job.path / seg.name[:-4]
    copy = Path(f"{stem}.log{SUFFIX}")
    written.append(copy)
    _write_file(copy, bytes(body), job.fsync)
    written.append(Path(f"{stem}.idx{SUFFIX}"))
    _write_file(written[-1], _summary(seg), job.fsync)
    if seg.aborted:
        written.append(Path(f"{stem}.txnidx{SUFFIX}"))
        _write_file(written[-1], msgpack.packb([list(a) for a in seg.aborted]), job.fsync)
    out.bytes_written += len(body)
    _throttle(job, out.bytes_read + out.bytes_written, t0)


class SwappedLog(Protocol):
    """What ``commit`` reads of the log whose segments it swaps (a ``PartitionLog``)."""

    @property
    def closed(self) -> bool: ...
    @property
    def failed(self) -> str | None: ...
    @property
    def config(self) -> LogConfig: ...
    @property
    def clock(self) -> Callable[[], int]: ...
    def manifest_epoch(self) -> int: ...


def commit(log: SwappedLog, prepared: Prepared, state: CleanerState) -> None:
    """Swap the prepared copies in (steps 2-4 of a pass). The caller then updates its
    in-memory segments with ``PartitionLog.apply_clean``.

    Raises:
        KaasError: NOT_LEADER_OR_FOLLOWER when the manifest no longer carries our epoch.
        OSError: a write failed before the commit point (the pass is discarded) or after
            it (the next takeover's ``finish`` completes it).
    """
    job = prepared.job
    if log.manifest_epoch() != job.epoch or log.closed or log.failed:
        discard(prepared)
        from kio.schema.errors import ErrorCode

        from kaas.errors import KaasError
        raise KaasError(ErrorCode.not_leader_or_follower, f"{job.path}: no longer the leader: clean discarded")
    replace = [s.name for s in prepared.changed if not s.remove]
    remove = [s.name for s in prepared.changed if s.remove]
    try:
        # The state first: it names the segments that may have offset gaps (recovery must
        # not cut a cleaned segment at a gap); naming one that is never swapped is harmless.
        atomic.write_json(job.path / STATE_FILE, state, fsync=job.fsync)
        point: CommitFile = {"format": 1, "epoch": job.epoch, "replace": replace, "remove": remove}
        atomic.write_json(job.path / COMMIT_FILE, point, fsync=job.fsync)
    except OSError:
        discard(prepared)
        raise
    fs.crash_point("cleaner.after_commit_file")
    _roll_forward(job.path, replace, remove, job.fsync, log.config.file_delete_delay_ms, log.clock())
    fs.crash_point("cleaner.after_swap")
    _unlink(job.path / COMMIT_FILE)


def discard(prepared: Prepared) -> None:
    """Remove a pass's copies (it will not be committed)."""
    for seg in prepared.job.segments:
        stem = prepared.job.path / seg.name[:-4]
        for ext in _EXTS:
            _unlink(Path(f"{stem}{ext}{SUFFIX}"))


def finish(path: Path, fsync: bool = True) -> list[str]:
    """At takeover, before the segments are listed: complete a committed pass, or drop the
    copies of one that never reached its commit point. Returns what it did (for the log).

    Raises:
        CorruptState: the commit file exists but does not parse.
    """
    path = Path(path)
    done: list[str] = []
    obj = cast("CommitFile | None", atomic.read_json(path / COMMIT_FILE))
    if obj is not None:
        try:
            replace, remove = list(obj["replace"]), list(obj["remove"])
        except (KeyError, TypeError) as exc:
            raise CorruptState(str(path / COMMIT_FILE), str(exc)) from None
        _roll_forward(path, replace, remove, fsync)
        _unlink(path / COMMIT_FILE)
        done.append(f"completed a committed cleaning pass (epoch {obj.get('epoch')}): "
                    f"{len(replace)} segments replaced, {len(remove)} removed")
    stray = [n for n in os.listdir(path) if n.endswith(SUFFIX)]
    for n in stray:
        _unlink(path / n)
    if stray:
        done.append(f"dropped {len(stray)} copies of an uncommitted cleaning pass")
    return done


def _roll_forward(path: Path, replace: list[str], remove: list[str], fsync: bool,
                  delay_ms: int = 0, now_ms: int = 0) -> None:
    """Swap the copies in. With a ``file.delete.delay.ms`` (``delay_ms``) the replaced and
    removed files wait as ``*.deleted`` (``storage.trash``); a takeover completing a pass
    (``finish``) deletes them at once, as Apache deletes leftovers when it loads a log."""
    for name in replace:
        stem = path / name[:-4]
        if not Path(f"{stem}.log{SUFFIX}").exists():
            continue  # already swapped (a pass completed twice is the same pass)
        for ext in _EXTS:
            trash.keep(Path(f"{stem}{ext}"), delay_ms, now_ms)
        txn_copy = Path(f"{stem}.txnidx{SUFFIX}")
        if txn_copy.exists():
            fs.replace(str(txn_copy), f"{stem}.txnidx")
        else:
            _unlink(Path(f"{stem}.txnidx"))  # its abort markers all went
        idx_copy = Path(f"{stem}.idx{SUFFIX}")
        if idx_copy.exists():
            fs.replace(str(idx_copy), f"{stem}.idx")
        else:
            _unlink(Path(f"{stem}.idx"))  # recovery rescans
        fs.replace(f"{stem}.log{SUFFIX}", f"{stem}.log")
    for name in remove:
        stem = path / name[:-4]
        trash.discard([Path(f"{stem}{ext}") for ext in (".idx", ".txnidx", ".log")], delay_ms, now_ms)
    if fsync:
        atomic.fsync_dir(path)


def _summary(seg: SegmentCopy) -> bytes:
    packed: bytes = msgpack.packb({"format": 1, "size": seg.new_size, "next_offset": seg.next_offset,
                                   "max_timestamp": seg.max_timestamp, "offsets": seg.index_offsets,
                                   "positions": seg.index_positions, "cleaned": True, "ts": "records"})
    return packed


def _write_file(path: Path, data: bytes, fsync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        fs.write_all(fd, (data,), point="state.write", path=str(path))
        if fsync:
            fs.fsync(fd, point="state.fsync", path=str(path))
    finally:
        os.close(fd)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _throttle(job: Job, done_bytes: int, t0: float) -> None:
    if job.max_bytes_per_s > 0:
        ahead = done_bytes / job.max_bytes_per_s - (SYSTEM.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)


def dirtiness(segments: list[Segment], lso: int, config: LogConfig, state: CleanerState,
              now_ms: int) -> tuple[list[Segment], float, bool]:
    """(the cleanable segments, the dirty ratio among them, whether max.compaction.lag.ms
    or a delete horizon forces a pass). Cleanable: closed segments (all but the last of
    ``segments``) wholly below the last stable offset ``lso`` and older than
    min.compaction.lag.ms; dirty: those from the clean offset of ``state`` on."""
    segs: list[Segment] = []
    for seg in segments[:-1]:
        if seg.next_offset > lso:
            break
        if config.min_compaction_lag_ms > 0 and seg.max_timestamp > now_ms - config.min_compaction_lag_ms:
            break
        segs.append(seg)
    if not segs:
        return segs, 0.0, False
    clean_offset = int(state.get("clean_offset", 0))
    total = sum(s.size for s in segs) or 1
    dirty = [s for s in segs if s.base_offset >= clean_offset]
    ratio = sum(s.size for s in dirty) / total
    forced = bool(dirty) and config.max_compaction_lag_ms < 2**62 and \
        0 <= dirty[0].max_timestamp < now_ms - config.max_compaction_lag_ms
    horizon = state.get("next_horizon_ms")
    if horizon is not None and now_ms >= horizon:
        forced = True  # a kept tombstone or marker may go now (KIP-534's delete horizon)
    return segs, ratio, forced


def next_state(state: CleanerState, live: set[str], prepared: Prepared) -> CleanerState:
    """What ``cleaner.json`` says once ``prepared`` is swapped in (``live``: the names of
    the log's segments now)."""
    job = prepared.job
    cleaned = {n: t for n, t in state.get("cleaned", {}).items() if n in live}
    for seg in prepared.changed:
        if not seg.remove:
            cleaned[seg.name] = job.now_ms
    return {"format": 1, "epoch": job.epoch, "clean_offset": job.segments[-1].end_offset,
            "last_clean_ms": job.now_ms, "cleaned": cleaned, "next_horizon_ms": prepared.next_horizon_ms,
            "bytes_cleaned": int(state.get("bytes_cleaned", 0)) + prepared.bytes_read,
            "records_removed": int(state.get("records_removed", 0)) + prepared.records_removed}


def job(path: Path, epoch: int, segments: list[Segment], aborted: list[tuple[int, int, int]],
        last_batch_of: dict[int, int], config: LogConfig, now_ms: int, max_bytes_per_s: float) -> Job:
    """A pass over ``segments`` (the cleanable ones, ``dirtiness``) of the log at ``path``."""
    return Job(
        path=path, epoch=epoch,
        segments=[SegmentCopy(s.name, s.base_offset, s.next_offset, s.size) for s in segments],
        aborted=[a for a in aborted if a[0] < segments[-1].next_offset], last_batch_of=dict(last_batch_of),
        now_ms=now_ms, delete_retention_ms=config.delete_retention_ms,
        index_interval_bytes=config.index_interval_bytes, fsync=config.fsync, max_bytes_per_s=max_bytes_per_s)


def swap_in(segments: list[Segment], prepared: Prepared, close: Callable[[Segment], None]) -> list[Segment]:
    """``segments`` as they are once ``prepared`` is committed: a rewritten segment takes
    its new size, end, max timestamp and index, a removed one is gone; ``close`` gives up
    the fd of each (the old inode: the next read opens the new file)."""
    by_name = {s.name: s for s in prepared.changed}
    kept: list[Segment] = []
    for seg in segments:
        c = by_name.get(seg.name)
        if c is None:
            kept.append(seg)
            continue
        close(seg)
        if c.remove:
            continue
        seg.size = c.new_size
        seg.next_offset = c.next_offset
        seg.max_timestamp = c.max_timestamp
        seg.index_offsets = list(c.index_offsets)
        seg.index_positions = list(c.index_positions)
        kept.append(seg)
    return kept
