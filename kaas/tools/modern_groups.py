"""``kaas groups describe`` for groups of Kafka 4's consumer protocol (KIP-848): the group
and member epochs, each member's current assignment against its target, and what is still
to be revoked or handed out. Asked of the group's coordinator with ConsumerGroupDescribe
(API 69), which answers GROUP_ID_NOT_FOUND for a classic group; ``describe`` then falls
back to DescribeGroups.
"""

from __future__ import annotations

from typing import TypedDict

import click
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_describe.v1.response import (
    Assignment,
    ConsumerGroupDescribeResponse,
    DescribedGroup,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import GroupId

from kaas.tools._wire import RETRIABLE, Cluster, RetriableError, code_name, retry

__all__ = ["ModernMember", "describe_consumer_group", "member_rows", "partitions_of"]

# ConsumerGroupDescribe's member_type: which protocol the member speaks
MEMBER_TYPES = {0: "classic", 1: "consumer"}


class ModernMember(TypedDict):
    """A member of a consumer-protocol group, as ``describe --json`` shows it."""

    member_id: str
    group_instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    member_epoch: int
    member_type: str
    subscribed_topics: list[str]
    subscribed_regex: str | None
    assignment: list[tuple[str, int]]
    target_assignment: list[tuple[str, int]]
    pending_revocation: list[tuple[str, int]]  # owned now, not in the target: being revoked
    pending_assignment: list[tuple[str, int]]  # in the target, not owned yet: waits on a revocation


def partitions_of(a: Assignment) -> list[tuple[str, int]]:
    return sorted((tp.topic_name, int(p)) for tp in a.topic_partitions for p in tp.partitions)


def _member(m: object) -> ModernMember:
    from kio.schema.consumer_group_describe.v1.response import Member

    assert isinstance(m, Member)
    current, target = partitions_of(m.assignment), partitions_of(m.target_assignment)
    return {"member_id": m.member_id, "group_instance_id": m.instance_id, "rack_id": m.rack_id,
            "client_id": m.client_id, "client_host": m.client_host, "member_epoch": int(m.member_epoch),
            "member_type": MEMBER_TYPES.get(int(m.member_type), "unknown"),
            "subscribed_topics": sorted(m.subscribed_topic_names), "subscribed_regex": m.subscribed_topic_regex,
            "assignment": current, "target_assignment": target,
            "pending_revocation": sorted(set(current) - set(target)),
            "pending_assignment": sorted(set(target) - set(current))}


def describe_consumer_group(c: Cluster, group: str) -> tuple[int, DescribedGroup, list[ModernMember]] | None:
    """(coordinator, the group, its members) for a consumer-protocol group; None for a
    classic one (or a group no one knows: DescribeGroups says which)."""
    def attempt() -> tuple[int, DescribedGroup] | None:
        coord = c.group_coordinator(group)
        r: ConsumerGroupDescribeResponse = c.call(coord, ConsumerGroupDescribeRequest(
            group_ids=(GroupId(group),), include_authorized_operations=False))
        g = r.groups[0]
        if g.error_code in RETRIABLE:
            raise RetriableError(g.error_code, f"ConsumerGroupDescribe({group})")
        if g.error_code == ErrorCode.group_id_not_found:
            return None
        if g.error_code != ErrorCode.none:
            raise click.ClickException(f"ConsumerGroupDescribe({group}): {code_name(g.error_code)}"
                                       + (f" ({g.error_message})" if g.error_message else ""))
        return coord, g
    found = retry(attempt)
    if found is None:
        return None
    coord, g = found
    return coord, g, [_member(m) for m in g.members]


def member_rows(members: list[ModernMember]) -> list[dict[str, object]]:
    """``describe``'s human member table for a consumer-protocol group."""
    def fmt(tps: list[tuple[str, int]]) -> str | None:
        return ",".join(f"{t}-{p}" for t, p in tps) or None
    return [{"member_id": m["member_id"], "group_instance_id": m["group_instance_id"],
             "type": m["member_type"], "epoch": m["member_epoch"], "client_id": m["client_id"],
             "client_host": m["client_host"], "partitions": len(m["assignment"]),
             "assignment": fmt(m["assignment"]), "target": fmt(m["target_assignment"]),
             "revoking": fmt(m["pending_revocation"])} for m in members]
