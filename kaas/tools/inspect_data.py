"""``kaas inspect log|slots|cluster``: offline inspectors of a data directory, like Kafka's
kafka-dump-log. They read ``--data DIR`` directly (a stopped cluster, or a live one: every
state file is replaced by rename, so a read sees an old or a new version).

Invariants:
    - nothing under ``--data`` is ever written, created, renamed, truncated or deleted:
      files are opened ``O_RDONLY`` and read with ``pread``; no storage class that writes
      (``PartitionLog.open`` writes the manifest) is instantiated;
    - a file that does not parse is reported as such (``error``), never skipped silently
      and never "repaired".
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import msgpack

from kaas.domain.assignment import Assignment
from kaas.domain.txn import SlotState
from kaas.errors import CorruptState
from kaas.storage import trash
from kaas.storage.broker_configs import BrokerConfigFile, broker_configs_path
from kaas.storage.cleaner import COMMIT_FILE
from kaas.storage.cleaner import STATE_FILE as CLEANER_FILE
from kaas.storage.partition_log import RECOVERY_FILE
from kaas.storage.paths import Layout, decode_name, is_digest_name
from kaas.storage.topics import TopicMeta
from kaas.tools.output import cell, emit, section, table
from kaas.wire import batch as wb

SEGMENT_RE = re.compile(r"^(\d{20})-e(\d+)\.log$")
SLOT_RE = re.compile(r"^slot-(\d+)\.json$")
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CONTROL_NAMES = {wb.CONTROL_ABORT: "ABORT", wb.CONTROL_COMMIT: "COMMIT"}


# ------------------------------------------------------------------ read-only file access


def read_bytes(path: Path) -> bytes | None:
    """The whole file, opened read-only; None when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        chunks = []
        pos = 0
        while True:
            chunk = os.pread(fd, 1 << 20, pos)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            pos += len(chunk)
    finally:
        os.close(fd)


def read_json(path: Path) -> tuple[Any, str | None]:
    """(parsed object, None), (None, None) when absent, or (None, error text)."""
    try:
        data = read_bytes(path)
    except OSError as exc:
        return None, f"unreadable: {exc}"
    if data is None:
        return None, None
    try:
        return json.loads(data), None
    except ValueError as exc:
        return None, f"invalid JSON: {exc}"


def listdir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def size_of(path: Path) -> int:
    st = stat(path)
    return st.st_size if st else 0


def _utc(ms: Any) -> str:
    if not isinstance(ms, int):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + "Z"


def _data_option(f):
    return click.option("--data", required=True, type=click.Path(path_type=Path, exists=True, file_okay=False),
                        help="The data directory (read only, never written).")(f)


def _json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout, for scripts.")(f)


@click.group("inspect")
def inspect() -> None:
    """Read a data directory offline (never writes it): logs, txn slots, cluster state."""


# ------------------------------------------------------------------ log


def iter_batches(path: Path, *, bodies: bool = True
                 ) -> Iterator[tuple[int, wb.BatchHeader, bytes] | tuple[str, int, int]]:
    """Yield ``(position, header, batch bytes)`` for each whole batch of a segment file
    (``bodies=False``: the bytes are the header only, nothing more is read), then
    ``("end", position, file size)``: bytes from ``position`` on are a torn tail."""
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
            yield pos, h, body
            pos += h.size
        yield "end", pos, size
    finally:
        os.close(fd)


def _segments(pdir: Path) -> list[dict]:
    """Segment files of a partition with recovery's view of them: a segment is dead when a
    segment of a higher epoch starts at or before its base; a live segment's bytes at or
    past the next live segment's base are dead (late writes of a deposed leader)."""
    segs = []
    for name in listdir(pdir):
        m = SEGMENT_RE.match(name)
        if m:
            segs.append({"file": name, "base_offset": int(m.group(1)), "epoch": int(m.group(2))})
    segs.sort(key=lambda s: (s["base_offset"], s["epoch"]))
    top = -1
    i = 0
    while i < len(segs):
        j = i
        while j < len(segs) and segs[j]["base_offset"] == segs[i]["base_offset"]:
            j += 1
        top = max(top, segs[j - 1]["epoch"])
        for s in segs[i:j]:
            s["dead"] = s["epoch"] < top
        i = j
    live = [s for s in segs if not s["dead"]]
    for k, s in enumerate(live):
        s["limit"] = live[k + 1]["base_offset"] if k + 1 < len(live) else None
    for s in segs:
        s.setdefault("limit", None)
    return segs


def _txnidx(path: Path) -> tuple[list | None, str | None]:
    data = read_bytes(path)
    if data is None:
        return None, None
    try:
        return [{"marker_offset": a, "producer_id": b, "first_offset": c} for a, b, c in msgpack.unpackb(data)], None
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        return None, f"corrupt: {exc}"


def _snapshot(path: Path) -> dict | None:
    data = read_bytes(path)
    if data is None:
        return None
    try:
        obj = msgpack.unpackb(data, strict_map_key=False)
        return {"offset": obj["offset"], "producers": len(obj["producers"]), "format": obj.get("format")}
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
        return {"error": f"corrupt: {exc}"}


def _flags(b: dict) -> str:
    out = []
    if b["transactional"]:
        out.append("TXN")
    if b["control"]:
        out.append(f"CONTROL:{b['control_type'] or '?'}")
    if b["codec"] != "none":
        out.append(b["codec"])
    if b["dead"]:
        out.append("DEAD")
    return " ".join(out)


@inspect.command("log")
@click.argument("topic")
@click.argument("partition", type=int)
@_data_option
@click.option("--start-offset", type=int, default=0, show_default=True,
              help="Skip batches that end before this offset.")
@click.option("--limit", type=int, default=None, help="Show at most this many batches.")
@_json_option
def log_(topic: str, partition: int, data: Path, start_offset: int, limit: int | None, as_json: bool) -> None:
    """Every record batch of TOPIC PARTITION: offsets, position, size, producer, sequence,
    transactional/control flags (COMMIT/ABORT), CRC check, segment and its epoch."""
    layout = Layout(data)
    pdir = layout.partition_dir(topic, partition)
    if not pdir.is_dir():
        known = [f"{t}/{p}" for t in listdir(layout.data) for p in listdir(layout.data / t)
                 if not t.startswith(".")]
        raise click.ClickException(f"no partition directory {pdir} (present: {', '.join(known) or 'none'})")
    manifest, manifest_err = read_json(pdir / "manifest.json")
    segments = _segments(pdir)
    batches: list[dict] = []
    truncated = False
    for seg in segments:
        path = pdir / seg["file"]
        seg["size"] = size_of(path)
        seg["has_idx"] = (pdir / (seg["file"][:-4] + ".idx")).exists()
        seg["aborted_txns"], seg["txnidx_error"] = _txnidx(pdir / (seg["file"][:-4] + ".txnidx"))
        seg.update(batches=0, bad_crc=0, next_offset=seg["base_offset"], torn_bytes=0, recoverable_bytes=None)
        expected = seg["base_offset"]
        for item in iter_batches(path):
            if item[0] == "end":
                _, pos, size = item
                seg["torn_bytes"] = size - pos
                if seg["recoverable_bytes"] is None:
                    seg["recoverable_bytes"] = pos
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
            try:
                ctype = wb.control_type(body, 0, h) if h.is_control else None
            except (IndexError, ValueError):
                ctype = -1
            batches.append({
                "base_offset": h.base_offset, "last_offset": h.last_offset, "count": h.records_count,
                "position": pos, "size": h.size, "segment": seg["file"], "segment_epoch": seg["epoch"],
                "partition_leader_epoch": h.leader_epoch, "magic": h.magic, "attributes": h.attributes,
                "codec": CODECS.get(h.codec, str(h.codec)), "transactional": h.is_transactional,
                "control": h.is_control,
                "control_type": CONTROL_NAMES.get(ctype, "UNKNOWN") if ctype is not None else None,
                "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
                "base_sequence": h.base_sequence, "base_timestamp": h.base_timestamp,
                "max_timestamp": h.max_timestamp, "crc": f"{h.crc:08x}", "crc_ok": ok, "dead": dead,
            })
    cleaner_state, cleaner_err = read_json(pdir / CLEANER_FILE)
    cleaned = (cleaner_state or {}).get("cleaned", {}) if isinstance(cleaner_state, dict) else {}
    clean_offset = int((cleaner_state or {}).get("clean_offset", 0)) if isinstance(cleaner_state, dict) else 0
    for seg in segments:
        seg["cleaned"] = seg["file"] in cleaned
    closed = [s for s in segments[:-1] if not s["dead"]]
    closed_bytes = sum(s["size"] for s in closed)
    dirty_bytes = sum(s["size"] for s in closed if s["base_offset"] >= clean_offset)
    cleaner_view = {"state": cleaner_state, "error": cleaner_err, "clean_offset": clean_offset,
                    "dirty_ratio": round(dirty_bytes / closed_bytes, 4) if closed_bytes else 0.0,
                    "pending_commit": (pdir / COMMIT_FILE).exists()}
    journal, journal_err = read_json(pdir / RECOVERY_FILE)
    recoveries = list(journal.get("entries", [])) if isinstance(journal, dict) else []
    pending = [{"file": name, "size": size_of(pdir / name), "due": _utc(due), "due_ms": due}
               for name, due in trash.pending(pdir)]
    out = {"topic": topic, "partition": partition, "directory": str(pdir), "manifest": manifest,
           "pending_deletion": pending,
           "manifest_error": manifest_err, "snapshot": _snapshot(pdir / "producer-state.snapshot"),
           "segments": segments, "batches": batches, "truncated": truncated,
           "recoveries": recoveries, "recoveries_error": journal_err, "cleaner": cleaner_view}

    def human() -> list[str]:
        m = manifest or {}
        lines = [f"Partition: {topic}-{partition}\tDir: {pdir}",
                 "Manifest: " + (manifest_err or (f"epoch {m.get('epoch')}  log_start_offset "
                                                   f"{m.get('log_start_offset')}  high_watermark "
                                                   f"{m.get('high_watermark')}" if manifest else "(none)")),
                 f"Snapshot: {cell(out['snapshot'])}", ""]
        lines.append(table(segments, ["file", "epoch", "base_offset", "next_offset", "size", "batches", "bad_crc",
                                      "torn_bytes", "dead", "has_idx", "cleaned"]))
        if cleaner_state or cleaner_err or cleaned or cleaner_view["pending_commit"]:
            lines.append(f"Cleaner: clean offset {clean_offset}, dirty ratio {cleaner_view['dirty_ratio']:.2f} "
                         f"of the closed segments" + (f", last pass {_utc(cleaner_state.get('last_clean_ms'))}"
                                                      if isinstance(cleaner_state, dict) else "")
                         + (f"; {CLEANER_FILE}: {cleaner_err}" if cleaner_err else "")
                         + ("; a committed pass is not swapped in yet (the next takeover completes it)"
                            if cleaner_view["pending_commit"] else ""))
        for s in segments:
            if s["aborted_txns"]:
                lines.append(f"  {s['file']}: aborted txns " + ", ".join(
                    f"pid {a['producer_id']} from {a['first_offset']} (marker {a['marker_offset']})"
                    for a in s["aborted_txns"]))
            if s["txnidx_error"]:
                lines.append(f"  {s['file']}: txnidx {s['txnidx_error']}")
        lines.append("")
        rows = [{**b, "offsets": f"{b['base_offset']}-{b['last_offset']}", "flags": _flags(b),
                 "crc_ok": "ok" if b["crc_ok"] else "MISMATCH"} for b in batches]
        lines.append(table(rows, ["offsets", "count", "position", "size", "producer_id", "producer_epoch",
                                  "base_sequence", "flags", "crc_ok", "partition_leader_epoch", "segment"]))
        if truncated:
            lines.append(f"(stopped after --limit {limit} batches)")
        if pending:
            lines += ["", "Deleted, on the volume until file.delete.delay.ms passed (no reader sees them):",
                      table(pending, ["file", "size", "due"])]
        if recoveries or journal_err:
            lines += ["", "Recovery cuts (what takeovers truncated or removed, oldest first):"]
            if journal_err:
                lines.append(f"  {RECOVERY_FILE}: {journal_err}")
            rows = [{**r, "when": _utc(r.get("time_ms")), "bytes": f"{r.get('from_byte')}-{r.get('to_byte')}"}
                    for r in recoveries]
            lines.append(table(rows, ["when", "segment", "action", "bytes", "from_offset", "epoch", "reason"]))
        return lines

    emit(out, as_json, human)


# ------------------------------------------------------------------ slots


@inspect.command("slots")
@_data_option
@click.option("--state", "states", multiple=True, help="Only transactions in these states.")
@_json_option
def slots(data: Path, states: tuple[str, ...], as_json: bool) -> None:
    """Every transaction slot file: transactional ids, state, producer id and epoch,
    partitions. Files that do not parse are reported as corrupt."""
    layout = Layout(data)
    files = []
    stray = []
    for name in listdir(layout.txn_state):
        m = SLOT_RE.match(name)
        if not m:
            stray.append(name)
            continue
        path = layout.txn_state / name
        st = stat(path)
        entry: dict[str, Any] = {"slot": int(m.group(1)), "file": name, "size": st.st_size if st else None,
                                 "age_s": round(time.time() - st.st_mtime, 1) if st else None,
                                 "ok": True, "error": None, "transactions": []}
        obj, err = read_json(path)
        if err is None and obj is None:
            continue  # vanished between listing and reading
        if err is None:
            try:
                state = SlotState.from_json(obj)
            except ValueError as exc:
                err = str(exc)
        if err is not None:
            entry.update(ok=False, error=err)
        else:
            for tid, meta in sorted(state.entries.items()):
                if states and meta.state.value not in states:
                    continue
                entry["transactions"].append({
                    "transactional_id": tid, "state": meta.state.value, "producer_id": meta.producer_id,
                    "producer_epoch": meta.producer_epoch, "last_producer_id": meta.last_producer_id,
                    "last_producer_epoch": meta.last_producer_epoch, "timeout_ms": meta.timeout_ms,
                    "partitions": [f"{t}-{p}" for t, p in sorted(meta.partitions)], "groups": sorted(meta.groups),
                    "ongoing_since_ms": meta.ongoing_since_ms, "last_update_ms": meta.last_update_ms,
                    "txn_seq": meta.txn_seq})
        files.append(entry)
    files.sort(key=lambda e: e["slot"])
    out = {"directory": str(layout.txn_state), "slots": files, "other_files": stray,
           "corrupt": [e["file"] for e in files if not e["ok"]]}

    def human() -> list[str]:
        rows = [{"slot": e["slot"], **t} for e in files for t in e["transactions"]]
        lines = [table(rows, ["slot", "transactional_id", "state", "producer_id", "producer_epoch", "timeout_ms",
                              "partitions", "groups"])]
        for e in files:
            if not e["ok"]:
                lines.append(f"CORRUPT {e['file']}: {e['error']}")
        lines.append(f"({len(files)} slot files, {len(rows)} transactional ids, {len(out['corrupt'])} corrupt)")
        return lines

    emit(out, as_json, human)


# ------------------------------------------------------------------ cluster


class _Ages:
    """File ages against one "now" taken when the command starts."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self, path: Path) -> float | None:
        st = stat(path)
        return round(self.now - st.st_mtime, 1) if st else None


def _named(directory: Path, prefix: str, suffix: str) -> list[tuple[str, str]]:
    """(file name, middle part) of the files ``<prefix><middle><suffix>`` of a directory."""
    return [(n, n[len(prefix):len(n) - len(suffix)]) for n in listdir(directory)
            if n.startswith(prefix) and n.endswith(suffix) and len(n) > len(prefix) + len(suffix)]


def _as_int(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def _assignment(layout: Layout, age: _Ages) -> tuple[dict, Assignment | None]:
    obj, err = read_json(layout.assignment)
    out: dict[str, Any] = {"present": obj is not None or err is not None, "error": err}
    if obj is None:
        return out, None
    try:
        asg = Assignment.from_json(obj)
    except ValueError as exc:
        out["error"] = str(exc)
        return out, None
    owners: dict[str, int] = {}
    for owner in asg.txn_slots.values():
        owners[str(owner)] = owners.get(str(owner), 0) + 1
    out.update(version=asg.version, controller_epoch=asg.controller_epoch, brokers=list(asg.brokers),
               age_s=age(layout.assignment), txn_slot_owners=owners,
               partitions={t: [{"leader": p.leader, "epoch": p.epoch} for p in row]
                           for t, row in sorted(asg.partitions.items())})
    return out, asg


def _controllers(layout: Layout, age: _Ages) -> list[dict]:
    out = []
    for name, n in _named(layout.controller, "epoch-", ""):
        if not n.isdigit():
            continue
        obj, err = read_json(layout.controller / name)
        out.append({"epoch": int(n), "file": name, "age_s": age(layout.controller / name),
                    "broker_id": obj.get("broker_id") if isinstance(obj, dict) else None, "error": err})
    return sorted(out, key=lambda c: c["epoch"])


def _heartbeats(layout: Layout, age: _Ages, session_timeout_ms: int) -> list[dict]:
    out = []
    for name, _ in _named(layout.brokers, "kaas-", ".json"):
        path = layout.brokers / name
        obj, err = read_json(path)
        a = age(path)
        row = {"file": name, "broker_id": None, "counter": None, "address": None, "pid": None,
               "applied_version": None, "draining": None, "controller_epoch": None, "age_s": a,
               "stale": a is not None and a * 1000 > session_timeout_ms, "error": err}
        if isinstance(obj, dict):
            row.update(broker_id=obj.get("broker_id"), counter=obj.get("counter"),
                       address=f"{obj.get('host')}:{obj.get('port')}", pid=obj.get("pid"),
                       applied_version=obj.get("applied_version"), draining=obj.get("draining"),
                       controller_epoch=obj.get("controller_epoch"))
        out.append(row)
    return sorted(out, key=lambda r: (not isinstance(r["broker_id"], int), r["broker_id"] or 0, r["file"]))


def _queue_parts(name: str) -> tuple[str, str] | None:
    """(base, tag) of a marker queue entry name (``storage.markers`` naming), else None."""
    if name.startswith(".") or not name.endswith(".json"):
        return None
    base, _, tag = name[:-5].partition(".")
    if base.count("-") < 2:
        return None
    return base, tag


def _marker_queues(layout: Layout, age: _Ages) -> list[dict]:
    out = []
    for name, b in _named(layout.marker_queue, "to-", ""):
        qdir = layout.marker_queue / name
        waiting = taken = other = 0
        ages = []
        for f in listdir(qdir):
            parts = _queue_parts(f)
            if parts is None:
                other += 1
                continue
            if parts[1].startswith("w"):
                taken += 1
            else:
                waiting += 1
            ages.append(age(qdir / f) or 0.0)
        out.append({"broker_id": _as_int(b), "depth": waiting + taken, "waiting": waiting, "taken": taken,
                    "other_files": other, "oldest_age_s": max(ages, default=None)})
    return out


def _fence_logs(layout: Layout, age: _Ages) -> list[dict]:
    out = []
    for name, b in _named(layout.producer_fences, "kaas-", ".log"):
        raw = read_bytes(layout.producer_fences / name) or b""
        out.append({"file": name, "broker_id": _as_int(b), "bytes": len(raw), "lines": raw.count(b"\n"),
                    "partial_tail": bool(raw) and not raw.endswith(b"\n"),
                    "age_s": age(layout.producer_fences / name)})
    return out


def _pid_blocks(layout: Layout) -> list[dict]:
    out = []
    for name, b in _named(layout.producer_ids, "kaas-", ".json"):
        obj, err = read_json(layout.producer_ids / name)
        ok = isinstance(obj, dict)
        out.append({"file": name, "broker_id": obj.get("broker_id", _as_int(b)) if ok else _as_int(b),
                    "block_end": obj.get("block_end") if ok else None, "error": err})
    return out


def _topics(layout: Layout) -> list[dict]:
    out = []
    for name, topic in _named(layout.topics, "", ".json"):
        if name.startswith("."):
            continue
        obj, err = read_json(layout.topics / name)
        row: dict[str, Any] = {"name": topic, "topic_id": None, "partitions": None, "configs": None, "error": err}
        if obj is not None:
            try:
                meta = TopicMeta.from_json(obj, str(layout.topics / name))
                row.update(topic_id=str(meta.topic_id), partitions=meta.partitions, configs=meta.configs)
            except (CorruptState, AttributeError) as exc:
                row["error"] = str(exc)
        out.append(row)
    return out


def _log_end(pdir: Path) -> int | None:
    """The log end offset of a partition from its segment files: what its high watermark is
    while a leader serves it (kaas's high watermark is the log end), live even while a
    broker appends. The last live segment's ``.idx`` summary gives it when it covers the
    whole file (a segment closed by a roll or a hand-over); else a walk of that segment's
    batch headers only (no CRC check: ``kaas inspect log`` does that), ending where
    recovery would cut (a torn tail, a wrong base offset). None when there is no segment.

    Raises:
        OSError: a segment file could not be read.
    """
    live = [s for s in _segments(pdir) if not s["dead"]]
    if not live:
        return None
    last = live[-1]
    path = pdir / last["file"]
    raw = read_bytes(path.with_suffix(".idx"))
    try:
        summary = msgpack.unpackb(raw) if raw else None
    except (ValueError, msgpack.UnpackException):
        summary = None  # walked instead, as recovery rescans a segment whose summary is bad
    size = size_of(path)
    if isinstance(summary, dict) and summary.get("size") == size and isinstance(summary.get("next_offset"), int):
        return summary["next_offset"]
    expected = last["base_offset"]
    for item in iter_batches(path, bodies=False):
        if item[0] == "end" or item[1].magic != 2 or item[1].base_offset < expected:
            break
        expected = item[1].next_offset  # (a cleaned segment may skip offsets)
    return expected


def _partitions(layout: Layout, asg: Assignment | None, topics: list[dict]) -> list[dict]:
    """Every partition named by the assignment or present on disk, with its manifest and
    its high watermark read from its segments (the manifest's copy is written only at a
    hand-over: ``manifest_high_watermark``)."""
    out = []
    names = {t for t in listdir(layout.data) if not t.startswith(".")} | {r["name"] for r in topics}
    names |= set(asg.partitions) if asg else set()
    for t in sorted(names):
        nums = {int(p) for p in listdir(layout.data / t) if p.isdigit()}
        if asg and t in asg.partitions:
            nums |= set(range(len(asg.partitions[t])))
        for p in sorted(nums):
            pdir = layout.partition_dir(t, p)
            leader = asg.leader_of(t, p) if asg else None
            m, err = read_json(pdir / "manifest.json")
            m = m if isinstance(m, dict) else {}
            segs = [f for f in listdir(pdir) if SEGMENT_RE.match(f)]
            try:
                end = _log_end(pdir)
            except OSError as exc:
                end, err = None, err or f"segment unreadable: {exc}"
            out.append({"topic": t, "partition": p, "leader": leader.leader if leader else None,
                        "leader_epoch": leader.epoch if leader else None, "manifest_epoch": m.get("epoch"),
                        "high_watermark": end, "manifest_high_watermark": m.get("high_watermark"),
                        "log_start_offset": m.get("log_start_offset"),
                        "segments": len(segs), "bytes": sum(size_of(pdir / f) for f in segs), "error": err})
    return out


def _groups(layout: Layout, age: _Ages) -> list[dict]:
    out = []
    for name, enc in _named(layout.consumer_offsets, "", ".json"):
        if name.startswith("."):
            continue
        obj, err = read_json(layout.consumer_offsets / name)
        row = {"group_id": None if is_digest_name(enc) else decode_name(enc), "file": name, "generation": None,
               "committed_partitions": None, "pending_producers": None, "error": err,
               "age_s": age(layout.consumer_offsets / name)}
        if isinstance(obj, dict):
            try:
                row.update(group_id=obj["group_id"], generation=obj.get("generation"),
                           committed_partitions=sum(len(v) for v in obj.get("offsets", {}).values()),
                           pending_producers=len(obj.get("pending", {})))
            except (KeyError, TypeError, AttributeError) as exc:
                row["error"] = f"bad offsets file: {exc!r}"
        out.append(row)
    return out


def _kv(d: Any) -> str | None:
    if not isinstance(d, dict) or not d:
        return None
    return ",".join(f"{k}={v}" for k, v in sorted(d.items()))


def _broker_configs(layout: Layout) -> list[dict]:
    """The dynamic broker configs file: one row per layer (``<default>`` or a broker id)."""
    try:
        bc = BrokerConfigFile(broker_configs_path(layout.cluster)).read()
    except (CorruptState, OSError) as exc:
        return [{"resource": "-", "configs": None, "error": str(exc)}]
    rows = [{"resource": "<default>", "configs": _kv(bc.default), "error": None}] if bc.default else []
    rows += [{"resource": str(b), "configs": _kv(layer), "error": None} for b, layer in sorted(bc.brokers.items())]
    return rows


@inspect.command("cluster")
@_data_option
@click.option("--session-timeout-ms", type=int, default=3000, show_default=True,
              help="A heartbeat file older than this is shown as stale.")
@_json_option
def cluster(data: Path, session_timeout_ms: int, as_json: bool) -> None:
    """Assignment (version, controller epoch, leader per partition), controller epoch files,
    broker heartbeats, marker queue depths, fence logs, PID blocks, topics and groups.
    A partition's high watermark is its log end read from its segments, live while a broker
    writes (the manifest's copy, written only at a hand-over, is in --json)."""
    layout = Layout(data)
    age = _Ages()
    assignment, asg = _assignment(layout, age)
    controllers = _controllers(layout, age)
    current = controllers[-1] if controllers else {"epoch": None, "broker_id": None}
    topics = _topics(layout)
    out = {"directory": str(data), "assignment": assignment,
           "controller": {"epoch": current["epoch"], "broker_id": current["broker_id"], "epoch_files": controllers},
           "brokers": _heartbeats(layout, age, session_timeout_ms), "marker_queues": _marker_queues(layout, age),
           "fence_logs": _fence_logs(layout, age), "pid_blocks": _pid_blocks(layout), "topics": topics,
           "partitions": _partitions(layout, asg, topics), "groups": _groups(layout, age),
           "deleted_topics": [{"directory": name, "due": _utc(due) if due else "now", "due_ms": due}
                              for name, due in trash.pending_topics(layout.data)],
           "broker_configs": _broker_configs(layout)}

    def human() -> list[str]:
        a = assignment
        if a.get("error"):
            head = f"Assignment: CORRUPT {a['error']}"
        elif not a["present"]:
            head = "Assignment: (none)"
        else:
            owners = cell([f"{k}:{v}" for k, v in sorted(a["txn_slot_owners"].items())])
            head = (f"Assignment: version {a['version']}  controller_epoch {a['controller_epoch']}  "
                    f"brokers {cell(a['brokers'])}  txn slots per owner {owners}  age {a['age_s']}s")
        blocks = [
            ("Brokers", out["brokers"], ["broker_id", "counter", "address", "pid", "applied_version", "draining",
                                         "controller_epoch", "age_s", "stale", "error"]),
            ("Partitions", out["partitions"], ["topic", "partition", "leader", "leader_epoch", "manifest_epoch",
                                               "high_watermark", "log_start_offset", "segments", "bytes", "error"]),
            ("Topics", [{**t, "configs": _kv(t["configs"])} for t in topics],
             ["name", "topic_id", "partitions", "configs", "error"]),
            ("Marker queues", out["marker_queues"], ["broker_id", "depth", "waiting", "taken", "other_files",
                                                     "oldest_age_s"]),
            ("Fence logs", out["fence_logs"], ["broker_id", "bytes", "lines", "partial_tail", "age_s"]),
            ("PID blocks", out["pid_blocks"], ["broker_id", "block_end", "error"]),
            ("Groups", out["groups"], ["group_id", "generation", "committed_partitions", "pending_producers",
                                       "age_s", "error"]),
            ("Dynamic broker configs (KIP-226)", out["broker_configs"], ["resource", "configs", "error"]),
            ("Deleted topics waiting for file.delete.delay.ms", out["deleted_topics"], ["directory", "due"]),
        ]
        lines = [head, f"Controller: broker {cell(current['broker_id'])} at epoch {cell(current['epoch'])} "
                       f"({len(controllers)} epoch files)"]
        for title, rows, cols in blocks:
            lines += ["", section(title, table(rows, cols))]
        return lines

    emit(out, as_json, human)
