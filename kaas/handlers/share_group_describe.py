"""ShareGroupDescribe (77, v1): a KIP-932 share group's members and their assignments.
DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED), and on every topic its assignments
name (else TOPIC_AUTHORIZATION_FAILED without details, as for consumer groups:
``_group_describe``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kaas.handlers._group_describe import assignment, describe_each

if TYPE_CHECKING:
    from kio.schema.share_group_describe.v1 import ShareGroupDescribeRequest

    from kaas.handlers.context import Context

API_KEY = 77
VERSIONS = (1, 1)


def _fields(d: dict[str, Any]) -> dict[str, object]:
    return {
        "group_state": d["group_state"], "group_epoch": d["group_epoch"], "assignment_epoch": d["assignment_epoch"],
        "assignor_name": d["assignor_name"],
        "members": [{
            "member_id": m["member_id"], "rack_id": m["rack_id"], "member_epoch": m["member_epoch"],
            "client_id": m["client_id"], "client_host": m["client_host"],
            "subscribed_topic_names": m["subscribed_topic_names"], "assignment": assignment(m["assignment"]),
        } for m in d["members"]],
    }


async def handle(ctx: Context, req: ShareGroupDescribeRequest) -> dict[str, object]:
    return describe_each(ctx, req.group_ids, req.include_authorized_operations, ctx.broker.groups.shares.describe,
                         lambda d: {name for m in d["members"] for name in m["assignment"]}, _fields)


__all__ = ["API_KEY", "VERSIONS", "handle"]
