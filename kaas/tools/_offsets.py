"""Log offsets over the wire for the group tools: each partition's leader (Metadata) and its
earliest or latest offset (ListOffsets at the leader), with the retries of ``_wire``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypedDict

import click
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.list_offsets.v7.response import ListOffsetsResponse
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from kaas.tools._wire import RETRIABLE, Cluster, RetriableError, retry

__all__ = ["EARLIEST", "LATEST", "Reset", "leaders", "list_offsets", "plan_reset"]

EARLIEST, LATEST = -2, -1


class Reset(TypedDict):
    """A partition of ``reset-offsets``' plan (the current offset: committed, or a share
    partition's start offset)."""

    group: str
    topic: str
    partition: int
    current_offset: int | None
    new_offset: int
    log_start_offset: int
    log_end_offset: int


def leaders(c: Cluster, topics: list[str]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    if not topics:
        return out
    md = c.metadata(sorted(set(topics)))
    for t in md.topics:
        if t.name is None:  # (v12 names every topic asked for by name)
            continue
        for p in t.partitions:
            out[(t.name, p.partition_index)] = p.leader_id
    return out


def list_offsets(c: Cluster, partitions: list[tuple[str, int]], spec: int,
                 strict: bool = True) -> dict[tuple[str, int], int | None]:
    """ListOffsets (earliest -2 or latest -1, read_uncommitted) for each partition at its
    leader. A partition of an unknown topic, or with a non-retriable error, maps to None;
    one still without a leader after the retries fails the command, or maps to None when
    not ``strict``."""
    out: dict[tuple[str, int], int | None] = dict.fromkeys(partitions)
    todo = set(partitions)

    def attempt() -> None:
        led = leaders(c, sorted({t for t, _ in todo}))
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp in sorted(todo):
            leader = led.get(tp, -1)
            if leader is None or leader < 0:
                if tp not in led:
                    todo.discard(tp)  # unknown topic or partition: no log end
                    continue
                raise RetriableError(ErrorCode.leader_not_available, f"{tp[0]}-{tp[1]}")
            by_leader.setdefault(leader, []).append(tp)
        retriable = None
        for leader, tps in by_leader.items():
            topics: dict[str, list[ListOffsetsPartition]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(ListOffsetsPartition(
                    partition_index=i32(p), current_leader_epoch=i32(-1), timestamp=i64(spec)))
            r: ListOffsetsResponse = c.call(leader, ListOffsetsRequest(
                replica_id=BrokerId(-1), isolation_level=i8(0), topics=tuple(
                    ListOffsetsTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in topics.items())))
            for rt in r.topics:
                for rp in rt.partitions:
                    tp = (rt.name, rp.partition_index)
                    if rp.error_code == ErrorCode.none:
                        out[tp] = rp.offset
                        todo.discard(tp)
                    elif rp.error_code in RETRIABLE:
                        retriable = RetriableError(rp.error_code, f"ListOffsets {tp[0]}-{tp[1]}")
                    else:
                        todo.discard(tp)
        if retriable is not None:
            raise retriable
    try:
        retry(attempt, timeout=15.0 if strict else 5.0)
    except click.ClickException:
        if strict:
            raise
    return out


def plan_reset(c: Cluster, group: str, tps: Iterable[tuple[str, int]], current: Mapping[tuple[str, int], int],
               how: str, to_offset: int | None, shift_by: int | None) -> list[Reset]:
    """``reset-offsets``' plan: each partition's new offset, ``how`` = ``earliest`` (the log
    start), ``latest`` (the log end), ``offset`` (``to_offset``) or ``shift`` (``current``
    moved by ``shift_by``), the last two clamped into the log's range."""
    order = sorted(tps)
    earliest, latest = list_offsets(c, order, EARLIEST), list_offsets(c, order, LATEST)
    plan: list[Reset] = []
    for tp in order:
        lo, hi, cur = earliest.get(tp), latest.get(tp), current.get(tp)
        if lo is None or hi is None:
            raise click.ClickException(f"no offsets for {tp[0]}-{tp[1]} (no leader?)")
        if how == "earliest":
            new = lo
        elif how == "latest":
            new = hi
        elif how == "offset" and to_offset is not None:
            new = min(max(to_offset, lo), hi)
        elif how == "shift" and shift_by is not None:
            if cur is None:
                raise click.ClickException(f"--shift-by: {tp[0]}-{tp[1]} has no committed offset")
            new = min(max(cur + shift_by, lo), hi)
        else:
            raise AssertionError(how)
        plan.append({"group": group, "topic": tp[0], "partition": tp[1], "current_offset": cur,
                     "new_offset": new, "log_start_offset": lo, "log_end_offset": hi})
    return plan
