"""The coordinators' files: transaction slots (``kaas inspect slots``), and for
``kaas inspect cluster`` the marker queues, producer fence logs, PID blocks and the
groups' offset files."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

from kaas.domain.txn import SlotState
from kaas.storage.paths import Layout, decode_name, is_digest_name
from kaas.tools.inspect_data._files import Ages, as_int, listdir, named, read_bytes, read_json, stat

if TYPE_CHECKING:
    from kaas.storage.offset_store import GroupFile

SLOT_RE = re.compile(r"^slot-(\d+)\.json$")


# ------------------------------------------------------------------ transaction slots


class TxnRow(TypedDict):
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    last_producer_id: int
    last_producer_epoch: int
    timeout_ms: int
    partitions: list[str]
    groups: list[str]
    ongoing_since_ms: int
    last_update_ms: int
    txn_seq: int
    transaction_version: int  # 1 or 2 (KIP-890 part 2); files without it read as 1
    next_producer_id: int  # a rotating TV2 end's next id, else -1


class SlotFile(TypedDict):
    slot: int
    file: str
    size: int | None
    age_s: float | None
    ok: bool
    error: str | None
    transactions: list[TxnRow]


class SlotsView(TypedDict):
    """What ``kaas inspect slots --json`` prints."""

    directory: str
    slots: list[SlotFile]
    other_files: list[str]
    corrupt: list[str]


def _slot_state(obj: object) -> SlotState:
    """
    Raises:
        ValueError: ``obj`` is not a slot file's document.
    """
    if not isinstance(obj, Mapping):
        raise ValueError(f"slot file is not an object: {obj!r}")
    return SlotState.from_json(obj)


def slots_view(data: Path, states: tuple[str, ...]) -> SlotsView:
    """Every transaction slot file with its transactions (only those in ``states`` when
    any is given); a file that does not parse is listed as corrupt."""
    layout = Layout(data)
    now = time.time()
    files: list[SlotFile] = []
    stray: list[str] = []
    for name in listdir(layout.txn_state):
        m = SLOT_RE.match(name)
        if not m:
            stray.append(name)
            continue
        path = layout.txn_state / name
        st = stat(path)
        entry = SlotFile(slot=int(m.group(1)), file=name, size=st.st_size if st else None,
                         age_s=round(now - st.st_mtime, 1) if st else None, ok=True, error=None, transactions=[])
        obj, err = read_json(path)
        if err is None and obj is None:
            continue  # vanished between listing and reading
        state: SlotState | None = None
        if err is None:
            try:
                state = _slot_state(obj)
            except ValueError as exc:
                err = str(exc)
        if state is None:
            entry.update({"ok": False, "error": err})
        else:
            for tid, meta in sorted(state.entries.items()):
                if states and meta.state.value not in states:
                    continue
                entry["transactions"].append(TxnRow(
                    transactional_id=tid, state=meta.state.value, producer_id=meta.producer_id,
                    producer_epoch=meta.producer_epoch, last_producer_id=meta.last_producer_id,
                    last_producer_epoch=meta.last_producer_epoch, timeout_ms=meta.timeout_ms,
                    partitions=[f"{t}-{p}" for t, p in sorted(meta.partitions)], groups=sorted(meta.groups),
                    ongoing_since_ms=meta.ongoing_since_ms, last_update_ms=meta.last_update_ms,
                    txn_seq=meta.txn_seq, transaction_version=meta.txn_version,
                    next_producer_id=meta.next_producer_id))
        files.append(entry)
    files.sort(key=lambda e: e["slot"])
    return SlotsView(directory=str(layout.txn_state), slots=files, other_files=stray,
                     corrupt=[e["file"] for e in files if not e["ok"]])


# ------------------------------------------------------------------ for kaas inspect cluster


class MarkerQueueRow(TypedDict):
    broker_id: int | str
    depth: int
    waiting: int
    taken: int
    other_files: int
    oldest_age_s: float | None


class FenceLogRow(TypedDict):
    file: str
    broker_id: int | str
    bytes: int
    lines: int
    partial_tail: bool
    age_s: float | None


class PidBlockRow(TypedDict):
    file: str
    broker_id: object  # as the file says, else from its name
    block_end: object
    error: str | None


class GroupRow(TypedDict):
    group_id: object  # None for a name kept only as a digest, until the file is read
    file: str
    type: str | None  # classic | consumer (KIP-848: the file's ``consumer`` state)
    state: object  # the classic membership's state, or the consumer group's epochs
    generation: object
    members: int | None
    classic_members: int | None  # of a consumer group: members still on the classic protocol
    committed_partitions: int | None
    pending_producers: int | None
    error: str | None
    age_s: float | None


def _queue_parts(name: str) -> tuple[str, str] | None:
    """(base, tag) of a marker queue entry name (``storage.markers`` naming), else None."""
    if name.startswith(".") or not name.endswith(".json"):
        return None
    base, _, tag = name[:-5].partition(".")
    if base.count("-") < 2:
        return None
    return base, tag


def marker_queues(layout: Layout, age: Ages) -> list[MarkerQueueRow]:
    """Per broker, the entries of its marker queue: waiting, and taken by a worker."""
    out = []
    for name, b in named(layout.marker_queue, "to-", ""):
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
        out.append(MarkerQueueRow(broker_id=as_int(b), depth=waiting + taken, waiting=waiting, taken=taken,
                                  other_files=other, oldest_age_s=max(ages, default=None)))
    return out


def fence_logs(layout: Layout, age: Ages) -> list[FenceLogRow]:
    out = []
    for name, b in named(layout.producer_fences, "kaas-", ".log"):
        raw = read_bytes(layout.producer_fences / name) or b""
        out.append(FenceLogRow(file=name, broker_id=as_int(b), bytes=len(raw), lines=raw.count(b"\n"),
                               partial_tail=bool(raw) and not raw.endswith(b"\n"),
                               age_s=age(layout.producer_fences / name)))
    return out


def pid_blocks(layout: Layout) -> list[PidBlockRow]:
    out = []
    for name, b in named(layout.producer_ids, "kaas-", ".json"):
        obj, err = read_json(layout.producer_ids / name)
        if isinstance(obj, dict):
            out.append(PidBlockRow(file=name, broker_id=obj.get("broker_id", as_int(b)),
                                   block_end=obj.get("block_end"), error=err))
        else:
            out.append(PidBlockRow(file=name, broker_id=as_int(b), block_end=None, error=err))
    return out


def _membership(obj: GroupFile, row: GroupRow) -> None:
    """The type, state and members of a group file's membership: a consumer group's
    (``consumer``: group and assignment epochs, members, the classic ones among them during
    a migration) or a classic group's (``membership``: state and generation). ``obj`` is
    the file's, typed by its record only: checked here as far as it is read."""
    cg = obj.get("consumer")
    if isinstance(cg, dict):
        members = cg.get("members") or []
        row["type"] = "consumer"
        row["state"] = f"epoch {cg.get('group_epoch')}/assignment {cg.get('assignment_epoch')}"
        row["members"] = len(members)
        row["classic_members"] = sum(1 for m in members if isinstance(m, dict) and m.get("protocol") == "classic")
        return
    ms = obj.get("membership")
    row["type"] = "classic"
    row["state"] = ms.get("state") if isinstance(ms, dict) else "Empty"
    row["members"] = len(ms.get("members") or []) if isinstance(ms, dict) else 0


def groups(layout: Layout, age: Ages) -> list[GroupRow]:
    """The groups' files: type (classic or KIP-848 consumer), state, members, generation,
    committed partitions, pending transactional offset commits."""
    out = []
    for name, enc in named(layout.consumer_offsets, "", ".json"):
        if name.startswith("."):
            continue
        obj, err = read_json(layout.consumer_offsets / name)
        row = GroupRow(group_id=None if is_digest_name(enc) else decode_name(enc), file=name, type=None,
                       state=None, generation=None, members=None, classic_members=None,
                       committed_partitions=None, pending_producers=None, error=err,
                       age_s=age(layout.consumer_offsets / name))
        if isinstance(obj, dict):
            try:  # the file's shape is checked by what fails here
                row.update({"group_id": obj["group_id"], "generation": obj.get("generation"),
                            "committed_partitions": sum(len(v) for v in obj.get("offsets", {}).values()),
                            "pending_producers": len(obj.get("pending", {}))})
                _membership(cast("GroupFile", obj), row)
            except (KeyError, TypeError, AttributeError) as exc:
                row["error"] = f"bad offsets file: {exc!r}"
        out.append(row)
    return out
