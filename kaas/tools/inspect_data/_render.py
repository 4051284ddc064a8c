"""The human renderings of the ``kaas inspect`` views (``--json`` prints the views
themselves): one function per command, a view in, lines out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kaas.storage.cleaner import STATE_FILE as CLEANER_FILE
from kaas.storage.partition_log import RECOVERY_FILE
from kaas.tools.inspect_data._cluster import ClusterView, kv
from kaas.tools.inspect_data._coordinators import SlotsView
from kaas.tools.inspect_data._files import utc
from kaas.tools.inspect_data._log import BatchRow, LogView
from kaas.tools.inspect_data._shares import SharesView
from kaas.tools.output import cell, section, table

Rows = Sequence[Mapping[str, object]]


def _flags(b: BatchRow) -> str:
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


def log_lines(v: LogView, limit: int | None) -> list[str]:
    """``kaas inspect log``: the manifest, the segments, the cleaner's state, every batch
    (``limit``: the --limit that truncated them), deleted files and recovery cuts."""
    manifest, segments, cleaner = v["manifest"], v["segments"], v["cleaner"]
    m = manifest if isinstance(manifest, dict) else {}
    lines = [f"Partition: {v['topic']}-{v['partition']}\tDir: {v['directory']}",
             "Manifest: " + (v["manifest_error"] or (f"epoch {m.get('epoch')}  log_start_offset "
                                                     f"{m.get('log_start_offset')}  high_watermark "
                                                     f"{m.get('high_watermark')}" if manifest else "(none)")),
             f"Snapshot: {cell(v['snapshot'])}", ""]
    lines.append(table(segments, ["file", "epoch", "base_offset", "next_offset", "size", "batches", "bad_crc",
                                  "torn_bytes", "dead", "has_idx", "cleaned"]))
    state, err = cleaner["state"], cleaner["error"]
    if state or err or cleaner["pending_commit"]:
        lines.append(f"Cleaner: clean offset {cleaner['clean_offset']}, dirty ratio {cleaner['dirty_ratio']:.2f} "
                     f"of the closed segments" + (f", last pass {utc(state.get('last_clean_ms'))}"
                                                  if isinstance(state, dict) else "")
                     + (f"; {CLEANER_FILE}: {err}" if err else "")
                     + ("; a committed pass is not swapped in yet (the next takeover completes it)"
                        if cleaner["pending_commit"] else ""))
    for s in segments:
        if s["aborted_txns"]:
            lines.append(f"  {s['file']}: aborted txns " + ", ".join(
                f"pid {a['producer_id']} from {a['first_offset']} (marker {a['marker_offset']})"
                for a in s["aborted_txns"]))
        if s["txnidx_error"]:
            lines.append(f"  {s['file']}: txnidx {s['txnidx_error']}")
    lines.append("")
    rows: Rows = [{**b, "offsets": f"{b['base_offset']}-{b['last_offset']}", "flags": _flags(b),
                   "crc_ok": "ok" if b["crc_ok"] else "MISMATCH"} for b in v["batches"]]
    lines.append(table(rows, ["offsets", "count", "position", "size", "producer_id", "producer_epoch",
                              "base_sequence", "flags", "crc_ok", "partition_leader_epoch", "segment"]))
    if v["truncated"]:
        lines.append(f"(stopped after --limit {limit} batches)")
    if v["pending_deletion"]:
        lines += ["", "Deleted, on the volume until file.delete.delay.ms passed (no reader sees them):",
                  table(v["pending_deletion"], ["file", "size", "due"])]
    if v["recoveries"] or v["recoveries_error"]:
        lines += ["", "Recovery cuts (what takeovers truncated or removed, oldest first):"]
        if v["recoveries_error"]:
            lines.append(f"  {RECOVERY_FILE}: {v['recoveries_error']}")
        rows = [{**r, "when": utc(r.get("time_ms")), "bytes": f"{r.get('from_byte')}-{r.get('to_byte')}"}
                if isinstance(r, dict) else {"reason": f"not an entry: {r!r}"} for r in v["recoveries"]]
        lines.append(table(rows, ["when", "segment", "action", "bytes", "from_offset", "epoch", "reason"]))
    return lines


def slots_lines(v: SlotsView) -> list[str]:
    """``kaas inspect slots``: one line per transactional id, then the corrupt files."""
    rows = [{"slot": e["slot"], **t} for e in v["slots"] for t in e["transactions"]]
    lines = [table(rows, ["slot", "transactional_id", "state", "transaction_version", "producer_id",
                          "producer_epoch", "timeout_ms", "partitions", "groups"])]
    for e in v["slots"]:
        if not e["ok"]:
            lines.append(f"CORRUPT {e['file']}: {e['error']}")
    lines.append(f"({len(v['slots'])} slot files, {len(rows)} transactional ids, {len(v['corrupt'])} corrupt)")
    return lines


def cluster_lines(v: ClusterView) -> list[str]:
    """``kaas inspect cluster``: the assignment and controller, then one table per kind of
    file."""
    a = v["assignment"]
    if a.get("error"):
        head = f"Assignment: CORRUPT {a['error']}"
    elif not a["present"]:
        head = "Assignment: (none)"
    else:
        owners = cell([f"{k}:{n}" for k, n in sorted(a["txn_slot_owners"].items())])
        head = (f"Assignment: version {a['version']}  controller_epoch {a['controller_epoch']}  "
                f"brokers {cell(a['brokers'])}  txn slots per owner {owners}  age {a['age_s']}s")
    blocks: list[tuple[str, Rows, list[str]]] = [
        ("Brokers", v["brokers"], ["broker_id", "counter", "address", "incarnation", "applied_version", "draining",
                                   "controller_epoch", "age_s", "stale", "error"]),
        ("Partitions", v["partitions"], ["topic", "partition", "leader", "leader_epoch", "manifest_epoch",
                                         "high_watermark", "log_start_offset", "segments", "bytes", "error"]),
        ("Topics", [{**t, "configs": kv(t["configs"])} for t in v["topics"]],
         ["name", "topic_id", "partitions", "configs", "error"]),
        ("Marker queues", v["marker_queues"], ["broker_id", "depth", "waiting", "taken", "other_files",
                                               "oldest_age_s"]),
        ("Fence logs", v["fence_logs"], ["broker_id", "bytes", "lines", "partial_tail", "age_s"]),
        ("PID blocks", v["pid_blocks"], ["broker_id", "block_end", "error"]),
        ("Groups", v["groups"], ["group_id", "type", "state", "members", "classic_members", "generation",
                                 "committed_partitions", "pending_producers",
                                 "age_s", "error"]),
        ("Dynamic broker configs (KIP-226)", v["broker_configs"], ["resource", "configs", "error"]),
        ("Group configs (KIP-848, KIP-932)", v["group_configs"], ["resource", "configs", "error"]),
        ("Deleted topics waiting for file.delete.delay.ms", v["deleted_topics"], ["directory", "due"]),
    ]
    c = v["controller"]
    lines = [head, f"Controller: broker {cell(c['broker_id'])} at epoch {cell(c['epoch'])} "
                   f"({len(c['epoch_files'])} epoch files)"]
    for title, rows, cols in blocks:
        lines += ["", section(title, table(rows, cols))]
    return lines


def shares_lines(v: SharesView, show_ranges: bool) -> list[str]:
    """``kaas inspect shares``: one block per share group of the partition."""
    lines = [f"Partition: {v['topic']}-{v['partition']}\tDir: {v['directory']}"]
    if not v["groups"]:
        lines.append("(no share group has state here)")
    for g in v["groups"]:
        lines += ["", f"Group: {g['group']}\tSnapshot: {g['snapshot'] or '(none)'}\t"
                      f"Journals: {', '.join(str(j['file']) for j in g['journals']) or '(none)'}"]
        if g["error"]:
            lines.append(f"CORRUPT: {g['error']}")
            continue
        start, end = g["start"], g["end"]
        if start is None or end is None:
            lines.append("(no state: the next ShareFetch starts where share.auto.offset.reset says)")
            continue
        counts = "  ".join(f"{k.lower()} {n}" for k, n in g["counts"].items())
        lines.append(f"Start offset: {start}\tEnd offset: {end}\tIn flight: {end - start}\t{counts}")
        lines += [f"Torn tail left out: {c}" for c in g["cuts"]]
        if show_ranges and g["ranges"]:
            lines.append(table(g["ranges"], ["first", "last", "state", "delivery_count"]))
    return lines
