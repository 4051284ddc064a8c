"""The partition view of ``kaas inspect log``: every batch of a partition's segments with
its CRC check, the segments as recovery sees them, the manifest, the producer snapshot,
the cleaner's state, the recovery journal and the files waiting for deletion."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

import click

from kaas.storage import trash
from kaas.storage.cleaner import COMMIT_FILE
from kaas.storage.cleaner import STATE_FILE as CLEANER_FILE
from kaas.storage.partition_log import RECOVERY_FILE
from kaas.storage.paths import Layout
from kaas.tools.inspect_data._files import listdir, read_json, size_of, utc
from kaas.tools.inspect_data._segments import AbortedTxn, End, iter_batches, read_snapshot, read_txnidx, segments
from kaas.wire import batch as wb

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CONTROL_NAMES = {wb.CONTROL_ABORT: "ABORT", wb.CONTROL_COMMIT: "COMMIT"}


class SegmentRow(TypedDict):
    """A segment file: recovery's view (``_segments.SegmentFile``) and what a walk found.

    ``recoverable_bytes`` is where a takeover's recovery would cut it."""

    file: str
    base_offset: int
    epoch: int
    dead: bool
    limit: int | None
    size: int
    has_idx: bool
    aborted_txns: list[AbortedTxn] | None
    txnidx_error: str | None
    batches: int
    bad_crc: int
    next_offset: int
    torn_bytes: int
    recoverable_bytes: int | None
    cleaned: bool


class BatchRow(TypedDict):
    base_offset: int
    last_offset: int
    count: int
    position: int
    size: int
    segment: str
    segment_epoch: int
    partition_leader_epoch: int
    magic: int
    attributes: int
    codec: str
    transactional: bool
    control: bool
    control_type: str | None
    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_timestamp: int
    max_timestamp: int
    crc: str
    crc_ok: bool
    dead: bool


class CleanerView(TypedDict):
    state: object  # cleaner.json as parsed, not validated
    error: str | None
    clean_offset: int
    dirty_ratio: float
    pending_commit: bool


class PendingFile(TypedDict):
    file: str
    size: int
    due: str
    due_ms: int


class LogView(TypedDict):
    """What ``kaas inspect log --json`` prints."""

    topic: str
    partition: int
    directory: str
    manifest: object  # manifest.json as parsed, not validated
    pending_deletion: list[PendingFile]
    manifest_error: str | None
    snapshot: dict[str, object] | None
    segments: list[SegmentRow]
    batches: list[BatchRow]
    truncated: bool
    recoveries: list[object]  # the entries of recovery.json as parsed
    recoveries_error: str | None
    cleaner: CleanerView


def _batch_row(seg: SegmentRow, pos: int, h: wb.BatchHeader, body: bytes, ok: bool, dead: bool) -> BatchRow:
    try:
        ctype = wb.control_type(body, 0, h) if h.is_control else None
    except (IndexError, ValueError):
        ctype = -1
    return BatchRow(
        base_offset=h.base_offset, last_offset=h.last_offset, count=h.records_count,
        position=pos, size=h.size, segment=seg["file"], segment_epoch=seg["epoch"],
        partition_leader_epoch=h.leader_epoch, magic=h.magic, attributes=h.attributes,
        codec=CODECS.get(h.codec, str(h.codec)), transactional=h.is_transactional,
        control=h.is_control,
        control_type=CONTROL_NAMES.get(ctype, "UNKNOWN") if ctype is not None else None,
        producer_id=h.producer_id, producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence, base_timestamp=h.base_timestamp,
        max_timestamp=h.max_timestamp, crc=f"{h.crc:08x}", crc_ok=ok, dead=dead,
    )


def log_view(data: Path, topic: str, partition: int, start_offset: int, limit: int | None) -> LogView:
    """Every batch of TOPIC PARTITION that ends at or past ``start_offset`` (at most
    ``limit`` of them), with the state of the partition directory.

    Raises:
        click.ClickException: there is no such partition directory.
        OSError: a segment file could not be read.
    """
    layout = Layout(data)
    pdir = layout.partition_dir(topic, partition)
    if not pdir.is_dir():
        known = [f"{t}/{p}" for t in listdir(layout.data) for p in listdir(layout.data / t)
                 if not t.startswith(".")]
        raise click.ClickException(f"no partition directory {pdir} (present: {', '.join(known) or 'none'})")
    manifest, manifest_err = read_json(pdir / "manifest.json")
    rows: list[SegmentRow] = []
    batches: list[BatchRow] = []
    truncated = False
    for sf in segments(pdir):
        path = pdir / sf.file
        aborted, txnidx_err = read_txnidx(pdir / (sf.file[:-4] + ".txnidx"))
        seg = SegmentRow(file=sf.file, base_offset=sf.base_offset, epoch=sf.epoch, dead=sf.dead, limit=sf.limit,
                         size=size_of(path), has_idx=(pdir / (sf.file[:-4] + ".idx")).exists(),
                         aborted_txns=aborted, txnidx_error=txnidx_err, batches=0, bad_crc=0,
                         next_offset=sf.base_offset, torn_bytes=0, recoverable_bytes=None, cleaned=False)
        rows.append(seg)
        expected = seg["base_offset"]
        for item in iter_batches(path):
            if isinstance(item, End):
                seg["torn_bytes"] = item.size - item.position
                if seg["recoverable_bytes"] is None:
                    seg["recoverable_bytes"] = item.position
                break
            pos, h, body = item
            ok = wb.crc_ok(body, 0, h)
            dead = seg["dead"] or (seg["limit"] is not None and h.base_offset >= seg["limit"])
            if seg["recoverable_bytes"] is None and (h.magic != 2 or h.base_offset != expected or not ok or dead):
                seg["recoverable_bytes"] = pos  # where a takeover's recovery would cut
            expected = h.next_offset
            seg["batches"] += 1
            seg["bad_crc"] += 0 if ok else 1
            seg["next_offset"] = h.next_offset
            if h.last_offset < start_offset or truncated:
                continue
            if limit is not None and len(batches) >= limit:
                truncated = True
                continue
            batches.append(_batch_row(seg, pos, h, body, ok, dead))
    cleaner_state, cleaner_err = read_json(pdir / CLEANER_FILE)
    cleaned = cleaner_state.get("cleaned", {}) if isinstance(cleaner_state, dict) else {}
    clean_offset = int(cleaner_state.get("clean_offset", 0)) if isinstance(cleaner_state, dict) else 0
    for seg in rows:
        seg["cleaned"] = seg["file"] in cleaned
    closed = [s for s in rows[:-1] if not s["dead"]]
    closed_bytes = sum(s["size"] for s in closed)
    dirty_bytes = sum(s["size"] for s in closed if s["base_offset"] >= clean_offset)
    cleaner = CleanerView(state=cleaner_state, error=cleaner_err, clean_offset=clean_offset,
                          dirty_ratio=round(dirty_bytes / closed_bytes, 4) if closed_bytes else 0.0,
                          pending_commit=(pdir / COMMIT_FILE).exists())
    journal, journal_err = read_json(pdir / RECOVERY_FILE)
    recoveries: list[object] = list(journal.get("entries", [])) if isinstance(journal, dict) else []
    pending = [PendingFile(file=name, size=size_of(pdir / name), due=utc(due), due_ms=due)
               for name, due in trash.pending(pdir)]
    return LogView(topic=topic, partition=partition, directory=str(pdir), manifest=manifest,
                   pending_deletion=pending, manifest_error=manifest_err,
                   snapshot=read_snapshot(pdir / "producer-state.snapshot"), segments=rows, batches=batches,
                   truncated=truncated, recoveries=recoveries, recoveries_error=journal_err, cleaner=cleaner)
