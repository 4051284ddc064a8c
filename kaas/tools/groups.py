"""``kaas groups list|describe|reset-offsets``: consumer groups over the wire protocol, like
Kafka's kafka-consumer-groups tool.

``describe`` asks the group's coordinator (FindCoordinator) for its members
(DescribeGroups) and committed offsets (OffsetFetch) and each partition's leader for the
log end (ListOffsets latest) to compute the lag. ``reset-offsets`` commits new offsets with
OffsetCommit at generation -1, which the coordinator accepts only while the group is
Empty; like Kafka it refuses up front for a group with members, and only plans (prints)
unless ``--execute`` is given.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import TypedDict

import click
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.describe_groups.v5.response import DescribedGroup, DescribeGroupsResponse
from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.list_groups.v5.response import ListGroupsResponse
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_commit.v8.response import OffsetCommitResponse
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest
from kio.schema.offset_fetch.v7.response import OffsetFetchResponse
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64

from kaas.tools._offsets import LATEST, Reset, list_offsets, plan_reset
from kaas.tools._wire import (
    RETRIABLE,
    Cluster,
    RetriableError,
    bootstrap_option,
    code_name,
    command_config_option,
    json_option,
    open_cluster,
    retry,
)
from kaas.tools.modern_groups import ModernMember, describe_consumer_group, member_rows
from kaas.tools.output import emit, table
from kaas.tools.share_groups import describe_share_group, reset_share_offsets, share_group

INACTIVE = ("Empty", "Dead")


class _Partition(TypedDict):
    topic: str
    partition: int


class _Member(TypedDict):
    """A member of ``describe``'s output."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[_Partition] | None


def decode_assignment(data: bytes) -> list[tuple[str, int]] | None:
    """The partitions of a consumer-protocol assignment (ConsumerProtocolAssignment v0-3),
    or None when the bytes are not one."""
    if not data:
        return []
    try:
        pos = 2  # version
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out = []
        for _ in range(max(n, 0)):
            (ln,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = bytes(data[pos:pos + ln]).decode()
            pos += ln
            (k,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for _ in range(max(k, 0)):
                out.append((topic, struct.unpack_from(">i", data, pos)[0]))
                pos += 4
        return sorted(out)
    except (struct.error, UnicodeDecodeError):
        return None


def _describe_group(c: Cluster, group: str) -> tuple[int, DescribedGroup]:
    def attempt() -> tuple[int, DescribedGroup]:
        coord = c.group_coordinator(group)
        r: DescribeGroupsResponse = c.call(coord, DescribeGroupsRequest(groups=(GroupId(group),),
                                                                        include_authorized_operations=False))
        g = r.groups[0]
        if g.error_code in RETRIABLE:
            raise RetriableError(g.error_code, f"DescribeGroups({group})")
        if g.error_code != ErrorCode.none:
            raise click.ClickException(f"DescribeGroups({group}): {code_name(g.error_code)}")
        return coord, g
    return retry(attempt)


def _committed(c: Cluster, coord: int, group: str) -> dict[tuple[str, int], int]:
    def attempt() -> dict[tuple[str, int], int]:
        r: OffsetFetchResponse = c.call(coord, OffsetFetchRequest(group_id=GroupId(group), topics=None,
                                                                  require_stable=False))
        if r.error_code in RETRIABLE:
            raise RetriableError(r.error_code, f"OffsetFetch({group})")
        if r.error_code != ErrorCode.none:
            raise click.ClickException(f"OffsetFetch({group}): {code_name(r.error_code)}")
        out: dict[tuple[str, int], int] = {}
        for t in r.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.none and p.committed_offset >= 0:
                    out[(t.name, p.partition_index)] = p.committed_offset
        return out
    return retry(attempt)


@click.group("groups")
def groups() -> None:
    """List and describe consumer groups, reset their offsets (over the wire protocol)."""


@groups.command("list")
@click.option("--state", "states", multiple=True, help="Only groups in these states (Stable, Empty, ...).")
@click.option("--type", "types", multiple=True, type=click.Choice(["classic", "consumer", "share"]),
              help="Only groups of these types (the group protocol: classic, consumer, share).")
@bootstrap_option
@command_config_option
@json_option
def list_(states: tuple[str, ...], types: tuple[str, ...], bootstrap: str, command_config: Path | None,
          as_json: bool) -> None:
    """Every group of every broker's coordinator (ListGroups on each broker), with its type."""
    rows: dict[str, dict[str, object]] = {}
    with open_cluster(bootstrap, command_config) as c:
        for bid in c.broker_ids():
            def attempt(bid: int = bid) -> ListGroupsResponse:
                r: ListGroupsResponse = c.call(bid, ListGroupsRequest(states_filter=tuple(states),
                                                                               types_filter=tuple(types)))
                if r.error_code in RETRIABLE:
                    raise RetriableError(r.error_code, f"ListGroups at broker {bid}")
                if r.error_code != ErrorCode.none:
                    raise click.ClickException(f"ListGroups at broker {bid}: {code_name(r.error_code)}")
                return r
            for g in retry(attempt).groups:
                rows.setdefault(g.group_id, {"group_id": g.group_id, "type": g.group_type, "state": g.group_state,
                                             "protocol_type": g.protocol_type, "coordinator": bid})
    out = [rows[group_id] for group_id in sorted(rows)]
    emit(out, as_json, lambda: table(out, ["group_id", "type", "state", "protocol_type", "coordinator"]))


@groups.command()
@click.argument("group")
@bootstrap_option
@command_config_option
@json_option
def describe(group: str, bootstrap: str, command_config: Path | None, as_json: bool) -> None:
    """Members, assignment, committed offset, log end and lag per partition of GROUP; for a
    group of the consumer protocol (KIP-848) also the group and member epochs, each member's
    target assignment and the partitions still being revoked; for a share group (KIP-932)
    each share partition's start offset, lag and the records in its window by state."""
    with open_cluster(bootstrap, command_config) as c:
        modern = describe_consumer_group(c, group)
        shared = describe_share_group(c, group) if modern is None else None
        if shared is not None:
            emit(shared[0], as_json, shared[1])
            return
        owner: dict[tuple[str, int], tuple[str, str, str]] = {}  # -> member id, host, client id
        out: dict[str, object]
        members_out: list[ModernMember] | list[_Member]
        if modern is not None:
            coord, cg, mm = modern
            for mem in mm:
                for tp in mem["assignment"]:
                    owner[tp] = (mem["member_id"], mem["client_host"], mem["client_id"])
            state, members_out = cg.group_state, mm
            out = {"group_id": group, "state": state, "group_protocol": "consumer", "protocol_type": "consumer",
                   "protocol": cg.assignor_name, "group_epoch": int(cg.group_epoch),
                   "assignment_epoch": int(cg.assignment_epoch)}
            header = (f"Protocol: consumer (KIP-848), assignor {cg.assignor_name or '-'}\t"
                      f"Group epoch: {cg.group_epoch}\tAssignment epoch: {cg.assignment_epoch}")
            member_table = (member_rows(mm), ["member_id", "group_instance_id", "type", "epoch", "client_id",
                                              "client_host", "partitions", "assignment", "target", "revoking"])
        else:
            coord, g = _describe_group(c, group)
            members: list[_Member] = []
            for m in g.members:
                parts = decode_assignment(m.member_assignment) if g.protocol_type == "consumer" else None
                members.append({"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                "client_id": m.client_id, "client_host": m.client_host,
                                "assignment": None if parts is None else [{"topic": t, "partition": p}
                                                                          for t, p in parts]})
                for tp in parts or ():
                    owner[tp] = (m.member_id, m.client_host, m.client_id)
            state, members_out = g.group_state, members
            out = {"group_id": group, "state": state, "group_protocol": "classic", "protocol_type": g.protocol_type,
                   "protocol": g.protocol_data}
            header = f"Protocol: {g.protocol_type or '-'}/{g.protocol_data or '-'}"
            member_table = ([{**m, "partitions": len(m["assignment"] or []),
                              "assignment": ",".join(f"{a['topic']}-{a['partition']}"
                                                     for a in m["assignment"] or []) or None} for m in members],
                            ["member_id", "group_instance_id", "client_id", "client_host", "partitions",
                             "assignment"])
        committed = _committed(c, coord, group)
        tps = sorted(set(committed) | set(owner))
        log_end = list_offsets(c, tps, LATEST, strict=False)
        addr = c.brokers.get(coord, ("", -1))
    offsets: list[dict[str, object]] = []
    for tp in tps:
        cur, end, who = committed.get(tp), log_end.get(tp), owner.get(tp)
        offsets.append({"group": group, "topic": tp[0], "partition": tp[1], "current_offset": cur,
                        "log_end_offset": end,
                        "lag": end - cur if cur is not None and end is not None else None,
                        "consumer_id": who[0] if who else None, "host": who[1] if who else None,
                        "client_id": who[2] if who else None})
    out.update({"coordinator": {"id": coord, "host": addr[0], "port": addr[1]}, "members": members_out,
                "offsets": offsets})

    def human() -> list[str]:
        lines = [f"Group: {group}\tState: {state}\tCoordinator: {coord} ({addr[0]}:{addr[1]})\t"
                 f"{header}\tMembers: {len(members_out)}"]
        if state == "Dead" and not offsets:
            lines.append(f"Consumer group '{group}' does not exist.")
            return lines
        lines += ["", table(offsets, ["group", "topic", "partition", "current_offset", "log_end_offset", "lag",
                                      "consumer_id", "host", "client_id"])]
        if members_out:
            lines += ["", table(*member_table)]
        return lines

    emit(out, as_json, human)


def _parse_topic(spec: str) -> tuple[str, list[int] | None]:
    """``TOPIC`` or ``TOPIC:P,P,...`` (kafka-consumer-groups syntax)."""
    topic, sep, parts = spec.partition(":")
    if not sep:
        return topic, None
    try:
        return topic, sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise click.BadParameter(f"{spec!r} is not TOPIC or TOPIC:P,P", param_hint="--topic") from None


def _wanted(c: Cluster, topic_specs: tuple[str, ...]) -> set[tuple[str, int]]:
    """The partitions ``--topic`` names (every partition of a topic given without any)."""
    wanted = [_parse_topic(s) for s in topic_specs]
    md = c.metadata(sorted({t for t, _ in wanted}))
    counts: dict[str | None, int] = {}
    for t in md.topics:
        if t.error_code != ErrorCode.none:
            raise click.ClickException(f"topic {t.name}: {code_name(t.error_code)}")
        counts[t.name] = len(t.partitions)
    tps: set[tuple[str, int]] = set()
    for topic, parts in wanted:
        for p in parts if parts is not None else range(counts[topic]):
            if not 0 <= p < counts[topic]:
                raise click.ClickException(f"topic {topic} has no partition {p}")
            tps.add((topic, p))
    return tps


def _commit(c: Cluster, group: str, plan: list[Reset]) -> None:
    """Commit the plan's offsets (OffsetCommit at generation -1: the group must be Empty)."""
    topics: dict[str, list[OffsetCommitRequestPartition]] = {}
    for r in plan:
        topics.setdefault(r["topic"], []).append(OffsetCommitRequestPartition(
            partition_index=i32(r["partition"]), committed_offset=i64(r["new_offset"]),
            committed_leader_epoch=i32(-1), committed_metadata=""))
    req = OffsetCommitRequest(group_id=GroupId(group), generation_id_or_member_epoch=i32(-1), member_id="",
                              group_instance_id=None, topics=tuple(
                                  OffsetCommitRequestTopic(name=TopicName(t), partitions=tuple(ps))
                                  for t, ps in topics.items()))

    def commit() -> dict[tuple[str, int], ErrorCode]:
        node = c.group_coordinator(group)
        r: OffsetCommitResponse = c.call(node, req)
        errors: dict[tuple[str, int], ErrorCode] = {
            (t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions
            if p.error_code != ErrorCode.none}
        if any(code in RETRIABLE for code in errors.values()):
            raise RetriableError(next(iter(errors.values())), f"OffsetCommit({group})")
        return errors
    errors = retry(commit)
    if errors:
        detail = ", ".join(f"{t}-{p}: {code_name(code)}" for (t, p), code in sorted(errors.items()))
        raise click.ClickException(f"OffsetCommit({group}) failed: {detail}")


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", "topic_specs", multiple=True, metavar="TOPIC[:P,P...]",
              help="Topic (optionally some partitions) to reset; repeatable.")
@click.option("--all-topics", is_flag=True, help="Every topic the group has committed offsets for.")
@click.option("--to-earliest", is_flag=True, help="Reset to the log start.")
@click.option("--to-latest", is_flag=True, help="Reset to the log end.")
@click.option("--to-offset", type=int, default=None, help="Reset to this offset (clamped to the log's range).")
@click.option("--shift-by", type=int, default=None, help="Move the committed offset by N (clamped).")
@click.option("--execute", is_flag=True, help="Commit the new offsets (default: only show the plan).")
@click.option("--dry-run", is_flag=True, help="Only show the plan (the default).")
@bootstrap_option
@command_config_option
@json_option
def reset_offsets(group: str, topic_specs: tuple[str, ...], all_topics: bool, to_earliest: bool, to_latest: bool,
                  to_offset: int | None, shift_by: int | None, execute: bool, dry_run: bool, bootstrap: str,
                  command_config: Path | None, as_json: bool) -> None:
    """Reset GROUP's committed offsets (a share group's share-partition start offsets); the
    group must have no members (Empty or Dead)."""
    modes = {"earliest": to_earliest, "latest": to_latest, "offset": to_offset is not None,
             "shift": shift_by is not None}
    chosen = [m for m, on in modes.items() if on]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --shift-by")
    if bool(topic_specs) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")
    if execute and dry_run:
        raise click.UsageError("--execute and --dry-run exclude each other")
    how = chosen[0]
    with open_cluster(bootstrap, command_config) as c:
        sg = share_group(c, group)
        tps = None if all_topics else _wanted(c, topic_specs)
        if sg is not None:  # a share group: its share partitions' start offsets (KIP-932)
            plan = reset_share_offsets(c, group, sg, tps, how, to_offset, execute)
            state = sg["state"]
        else:
            coord, g = _describe_group(c, group)
            if g.group_state not in INACTIVE:
                raise click.ClickException(f"Assignments can only be reset if the group '{group}' is inactive, "
                                           f"but the current state is {g.group_state}.")
            committed = _committed(c, coord, group)
            plan = plan_reset(c, group, committed if tps is None else tps, committed, how, to_offset, shift_by)
            if execute and plan:
                _commit(c, group, plan)
            state = g.group_state
    out = {"group_id": group, "state": state, "group_protocol": "share" if sg is not None else "classic",
           "executed": bool(execute), "offsets": plan}

    def human() -> list[str]:
        lines = [table(plan, ["group", "topic", "partition", "current_offset", "new_offset"])]
        if not execute:
            lines.append("(dry run: nothing committed; add --execute to commit these offsets)")
        return lines

    emit(out, as_json, human)


def _admin_commands() -> None:
    """``delete`` and ``delete-offsets`` live in ``kaas.tools.group_admin``."""
    from kaas.tools.group_admin import delete, delete_offsets

    groups.add_command(delete, "delete")
    groups.add_command(delete_offsets, "delete-offsets")


_admin_commands()
