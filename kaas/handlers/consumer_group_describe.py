"""ConsumerGroupDescribe (69): KIP-848 consumer groups, with each member's current and
target assignment. DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED), and on every topic
the group's assignments name: a group that names one the principal may not describe is
answered TOPIC_AUTHORIZATION_FAILED without its details, as Apache (KAFKA-18813;
``_group_describe``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from kaas.handlers._group_describe import assignment, describe_each

if TYPE_CHECKING:
    from kio.schema.consumer_group_describe import v0, v1

    from kaas.handlers.context import Context

    ConsumerGroupDescribeRequest: TypeAlias = v0.ConsumerGroupDescribeRequest | v1.ConsumerGroupDescribeRequest

API_KEY = 69
VERSIONS = (0, 1)
CONSUMER_MEMBER = 1  # member_type (v1): a member of the consumer protocol
CLASSIC_MEMBER = 0  # one of the classic protocol (during a migration)


def _fields(d: dict[str, Any]) -> dict[str, object]:
    return {
        "group_state": d["state"], "group_epoch": d["group_epoch"], "assignment_epoch": d["assignment_epoch"],
        "assignor_name": d["assignor"],
        "members": [{
            "member_id": m["member_id"], "instance_id": m["instance_id"], "rack_id": m["rack_id"],
            "member_epoch": m["member_epoch"], "client_id": m["client_id"], "client_host": m["client_host"],
            "subscribed_topic_names": m["subscribed_topic_names"],
            "subscribed_topic_regex": m["subscribed_topic_regex"] or "",  # Apache: "" for none
            "assignment": assignment(m["assignment"]), "target_assignment": assignment(m["target_assignment"]),
            "member_type": CLASSIC_MEMBER if m.get("classic") else CONSUMER_MEMBER,
        } for m in d["members"]],
    }


async def handle(ctx: Context, req: ConsumerGroupDescribeRequest) -> dict[str, object]:
    return describe_each(ctx, req.group_ids, req.include_authorized_operations, ctx.broker.groups.consumers.describe,
                         lambda d: {name for m in d["members"] for key in ("assignment", "target_assignment")
                                    for name in m[key]}, _fields)


__all__ = ["API_KEY", "VERSIONS", "handle"]
