"""``kaas groups describe|reset-offsets`` for KIP-932 share groups, like Kafka's
kafka-share-groups tool.

``describe`` asks the group's coordinator for the members and their assignments
(ShareGroupDescribe, API 77) and each share partition's start offset and lag
(DescribeShareGroupOffsets v1, API 90), and each partition's leader for the records in
its window (ReadShareGroupState, API 84: acquired by a consumer now, available for
redelivery, acknowledged, archived). The last is a broker-to-broker API (CLUSTER_ACTION);
a principal without it sees the counts as unknown.

``reset-offsets`` gives share partitions a new start offset with AlterShareGroupOffsets
(API 91), which the coordinator accepts only while the group has no members; like Kafka
the tool refuses up front for a group with members, and only plans unless ``--execute``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TypedDict

import click
from kio.schema.alter_share_group_offsets.v0 import request as alter
from kio.schema.alter_share_group_offsets.v0.response import AlterShareGroupOffsetsResponse
from kio.schema.describe_share_group_offsets.v1 import request as offsets_req
from kio.schema.describe_share_group_offsets.v1.response import DescribeShareGroupOffsetsResponse
from kio.schema.errors import ErrorCode
from kio.schema.read_share_group_state.v0 import request as state_req
from kio.schema.read_share_group_state.v0.response import ReadShareGroupStateResponse
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_describe.v1.response import DescribedGroup, ShareGroupDescribeResponse
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64

from kaas.tools._offsets import Reset, plan_reset
from kaas.tools._wire import RETRIABLE, Cluster, RetriableError, code_name, retry
from kaas.tools.output import table

__all__ = ["ShareGroup", "describe_share_group", "reset_share_offsets", "share_group"]

TP = tuple[str, int]
# ReadShareGroupState's delivery_state values (Apache's RecordState)
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4


class ShareMember(TypedDict):
    member_id: str
    member_epoch: int
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: list[str]
    assignment: list[tuple[str, int]]


class SharePartitionRow(TypedDict):
    """A share partition of ``describe``: the window is [start_offset, end_offset); the
    counts are offsets of the window in each state (None: the leader could not be asked)."""

    group: str
    topic: str
    partition: int
    start_offset: int | None
    lag: int | None
    in_flight: int | None
    acquired: int | None
    available: int | None
    acknowledged: int | None
    archived: int | None
    members: str | None


class ShareGroup(TypedDict):
    coordinator: int
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[ShareMember]


def _or_fail(code: ErrorCode, what: str, message: str | None = None) -> None:
    if code in RETRIABLE:
        raise RetriableError(code, what)
    if code != ErrorCode.none:
        raise click.ClickException(f"{what}: {code_name(code)}" + (f" ({message})" if message else ""))


def share_group(c: Cluster, group: str) -> ShareGroup | None:
    """The share group's members at its coordinator (ShareGroupDescribe); None when the
    group is not a share group (or does not exist)."""
    def attempt() -> tuple[int, DescribedGroup] | None:
        coord = c.group_coordinator(group)
        r: ShareGroupDescribeResponse = c.call(coord, ShareGroupDescribeRequest(
            group_ids=(GroupId(group),), include_authorized_operations=False))
        g = r.groups[0]
        if g.error_code == ErrorCode.group_id_not_found:
            return None
        _or_fail(g.error_code, f"ShareGroupDescribe({group})", g.error_message)
        return coord, g
    found = retry(attempt)
    if found is None:
        return None
    coord, g = found
    return {"coordinator": coord, "state": g.group_state, "group_epoch": int(g.group_epoch),
            "assignment_epoch": int(g.assignment_epoch), "assignor": g.assignor_name, "members": [
                {"member_id": m.member_id, "member_epoch": int(m.member_epoch), "rack_id": m.rack_id,
                 "client_id": m.client_id, "client_host": m.client_host,
                 "subscribed_topics": sorted(m.subscribed_topic_names),
                 "assignment": sorted((tp.topic_name, int(p)) for tp in m.assignment.topic_partitions
                                      for p in tp.partitions)}
                for m in g.members]}


def _start_offsets(c: Cluster, coord: int, group: str) -> dict[TP, tuple[int, int]]:
    """(start offset, lag) of every share partition of the group (DescribeShareGroupOffsets)."""
    def attempt() -> dict[TP, tuple[int, int]]:
        node = c.group_coordinator(group) if coord < 0 else coord
        r: DescribeShareGroupOffsetsResponse = c.call(node, offsets_req.DescribeShareGroupOffsetsRequest(groups=(
            offsets_req.DescribeShareGroupOffsetsRequestGroup(group_id=GroupId(group), topics=None),)))
        g = r.groups[0]
        _or_fail(g.error_code, f"DescribeShareGroupOffsets({group})", g.error_message)
        return {(t.topic_name, int(p.partition_index)): (int(p.start_offset), int(p.lag))
                for t in g.topics for p in t.partitions if p.error_code == ErrorCode.none and p.start_offset >= 0}
    return retry(attempt)


def _window_counts(c: Cluster, group: str, tps: list[TP]) -> dict[TP, dict[int, int]]:
    """Offsets per delivery state of each partition's window, asked of its leader
    (ReadShareGroupState); a partition left out could not be asked."""
    out: dict[TP, dict[int, int]] = {}
    if not tps:
        return out
    md = c.metadata(sorted({t for t, _ in tps}))
    ids: dict[str, uuid.UUID] = {}
    by_leader: dict[int, dict[uuid.UUID, list[int]]] = {}
    wanted = set(tps)
    for t in md.topics:
        if t.name is None or t.topic_id is None:
            continue
        ids[t.name] = t.topic_id
        for mp in t.partitions:
            if (t.name, mp.partition_index) in wanted and mp.leader_id >= 0:
                by_leader.setdefault(mp.leader_id, {}).setdefault(t.topic_id, []).append(int(mp.partition_index))
    names = {tid: name for name, tid in ids.items()}
    for leader, topics in by_leader.items():
        try:
            r: ReadShareGroupStateResponse = c.call(leader, state_req.ReadShareGroupStateRequest(
                group_id=group, topics=tuple(state_req.ReadStateData(topic_id=tid, partitions=tuple(
                    state_req.PartitionData(partition=i32(p), leader_epoch=i32(-1)) for p in ps))
                    for tid, ps in topics.items())))
        except (click.ClickException, RetriableError):
            continue
        for res in r.results:
            for p in res.partitions:
                if p.error_code != ErrorCode.none or p.start_offset < 0 or res.topic_id not in names:
                    continue  # not asked, or no state yet
                counts = dict.fromkeys((AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED), 0)
                for b in p.state_batches:
                    counts[int(b.delivery_state)] = counts.get(int(b.delivery_state), 0) + \
                        b.last_offset - b.first_offset + 1
                out[(names[res.topic_id], int(p.partition))] = counts
    return out


def describe_share_group(c: Cluster, group: str) -> tuple[dict[str, object], Callable[[], list[str]]] | None:
    """``describe`` 's JSON document and human text for a share group; None when ``group``
    is not one."""
    sg = share_group(c, group)
    if sg is None:
        return None
    coord = sg["coordinator"]
    starts = _start_offsets(c, coord, group)
    assigned: dict[TP, list[str]] = {}
    for m in sg["members"]:
        for tp in m["assignment"]:
            assigned.setdefault(tp, []).append(m["member_id"])
    tps = sorted(set(starts) | set(assigned))
    counts = _window_counts(c, group, tps)
    rows: list[SharePartitionRow] = []
    for tp in tps:
        start, lag = starts.get(tp, (None, None))
        n = counts.get(tp)
        rows.append({"group": group, "topic": tp[0], "partition": tp[1], "start_offset": start, "lag": lag,
                     "in_flight": sum(n.values()) if n is not None else None,
                     "acquired": n[ACQUIRED] if n is not None else None,
                     "available": n[AVAILABLE] if n is not None else None,
                     "acknowledged": n[ACKNOWLEDGED] if n is not None else None,
                     "archived": n[ARCHIVED] if n is not None else None,
                     "members": ",".join(sorted(assigned.get(tp, []))) or None})
    addr = c.brokers.get(coord, ("", -1))
    out: dict[str, object] = {
        "group_id": group, "state": sg["state"], "group_protocol": "share", "protocol_type": "share",
        "protocol": sg["assignor"], "group_epoch": sg["group_epoch"], "assignment_epoch": sg["assignment_epoch"],
        "coordinator": {"id": coord, "host": addr[0], "port": addr[1]}, "members": sg["members"], "offsets": rows}

    def human() -> list[str]:
        lines = [f"Group: {group}\tState: {sg['state']}\tCoordinator: {coord} ({addr[0]}:{addr[1]})\t"
                 f"Protocol: share (KIP-932), assignor {sg['assignor'] or '-'}\tGroup epoch: {sg['group_epoch']}\t"
                 f"Assignment epoch: {sg['assignment_epoch']}\tMembers: {len(sg['members'])}",
                 "", table(rows, ["group", "topic", "partition", "start_offset", "lag", "in_flight", "acquired",
                                  "available", "acknowledged", "archived", "members"])]
        if sg["members"]:
            lines += ["", table([{"member_id": m["member_id"], "epoch": m["member_epoch"], "client_id": m["client_id"],
                                  "client_host": m["client_host"], "partitions": len(m["assignment"]),
                                  "assignment": ",".join(f"{t}-{p}" for t, p in m["assignment"]) or None}
                                 for m in sg["members"]],
                                ["member_id", "epoch", "client_id", "client_host", "partitions", "assignment"])]
        return lines

    return out, human


def reset_share_offsets(c: Cluster, group: str, sg: ShareGroup, tps: set[TP] | None, how: str,
                        to_offset: int | None, execute: bool) -> list[Reset]:
    """``reset-offsets`` for a share group: plan each partition's new start offset (the
    log start, the log end, or ``to_offset`` clamped into the log's range) and, with
    ``execute``, set them (AlterShareGroupOffsets). ``tps`` None: every share partition
    the group has. Returns the plan."""
    if sg["state"] != "Empty":
        raise click.ClickException(f"Share group '{group}' is not empty (state {sg['state']}).")
    if how == "shift":
        raise click.UsageError("--shift-by is for consumer groups; a share group takes --to-earliest, "
                               "--to-latest or --to-offset")
    current = {tp: start for tp, (start, _lag) in _start_offsets(c, sg["coordinator"], group).items()}
    plan = plan_reset(c, group, current if tps is None else tps, current, how, to_offset, None)
    if not execute or not plan:
        return plan
    topics: dict[str, list[alter.AlterShareGroupOffsetsRequestPartition]] = {}
    for row in plan:
        topics.setdefault(row["topic"], []).append(alter.AlterShareGroupOffsetsRequestPartition(
            partition_index=i32(row["partition"]), start_offset=i64(row["new_offset"])))
    req = alter.AlterShareGroupOffsetsRequest(group_id=GroupId(group), topics=tuple(
        alter.AlterShareGroupOffsetsRequestTopic(topic_name=TopicName(t), partitions=tuple(ps))
        for t, ps in topics.items()))

    def commit() -> dict[TP, tuple[ErrorCode, str | None]]:
        r: AlterShareGroupOffsetsResponse = c.call(c.group_coordinator(group), req)
        _or_fail(r.error_code, f"AlterShareGroupOffsets({group})", r.error_message)
        errors: dict[TP, tuple[ErrorCode, str | None]] = {
            (t.topic_name, int(p.partition_index)): (p.error_code, p.error_message)
            for t in r.responses for p in t.partitions if p.error_code != ErrorCode.none}
        for code, _message in errors.values():
            if code in RETRIABLE:
                raise RetriableError(code, f"AlterShareGroupOffsets({group})")
        return errors
    errors = retry(commit)
    if errors:
        detail = ", ".join(f"{t}-{p}: {code_name(code)}" + (f" ({m})" if m else "")
                           for (t, p), (code, m) in sorted(errors.items()))
        raise click.ClickException(f"AlterShareGroupOffsets({group}) failed: {detail}")
    return plan
