"""ConsumerGroupDescribe (69): KIP-848 consumer groups, with each member's current and
target assignment. DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED), and on every topic
the group's assignments name: a group that names one the principal may not describe is
answered TOPIC_AUTHORIZATION_FAILED without its details, as Apache (KAFKA-18813)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, OPS_NOT_ASKED, TOPIC, Op, authorize, authorized_operations

if TYPE_CHECKING:
    from kio.schema.consumer_group_describe import v0, v1

    from kaas.handlers import Context

    ConsumerGroupDescribeRequest: TypeAlias = v0.ConsumerGroupDescribeRequest | v1.ConsumerGroupDescribeRequest

API_KEY = 69
VERSIONS = (0, 1)
CONSUMER_MEMBER = 1  # member_type (v1): a member of the consumer protocol
CLASSIC_MEMBER = 0  # one of the classic protocol (during a migration)


def _failed(group_id: str, code: ErrorCode, message: str | None = None) -> dict[str, object]:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
            "authorized_operations": OPS_NOT_ASKED}


def _assignment(parts: dict[str, tuple[str, list[int]]]) -> dict[str, object]:
    return {"topic_partitions": [{"topic_id": uuid.UUID(tid), "topic_name": name, "partitions": ps}
                                 for name, (tid, ps) in sorted(parts.items())]}


def _described(ctx: Context, d: dict[str, Any], include_ops: bool) -> dict[str, object]:
    return {
        "error_code": ErrorCode.none, "error_message": None, "group_id": d["group_id"], "group_state": d["state"],
        "group_epoch": d["group_epoch"], "assignment_epoch": d["assignment_epoch"], "assignor_name": d["assignor"],
        "members": [{
            "member_id": m["member_id"], "instance_id": m["instance_id"], "rack_id": m["rack_id"],
            "member_epoch": m["member_epoch"], "client_id": m["client_id"], "client_host": m["client_host"],
            "subscribed_topic_names": m["subscribed_topic_names"],
            "subscribed_topic_regex": m["subscribed_topic_regex"],
            "assignment": _assignment(m["assignment"]), "target_assignment": _assignment(m["target_assignment"]),
            "member_type": CLASSIC_MEMBER if m.get("classic") else CONSUMER_MEMBER,
        } for m in d["members"]],
        "authorized_operations": authorized_operations(ctx, GROUP, d["group_id"]) if include_ops else OPS_NOT_ASKED,
    }


async def handle(ctx: Context, req: ConsumerGroupDescribeRequest) -> dict[str, object]:
    out = []
    for gid in req.group_ids:
        if not authorize(ctx, Op.DESCRIBE, GROUP, gid):
            out.append(_failed(gid, ErrorCode.group_authorization_failed))
            continue
        try:
            d = ctx.broker.groups.consumers.describe(gid)
        except KaasError as exc:
            out.append(_failed(gid, exc.code, exc.message))
            continue
        topics = {name for m in d["members"] for key in ("assignment", "target_assignment") for name in m[key]}
        if any(not authorize(ctx, Op.DESCRIBE, TOPIC, t) for t in topics):
            out.append(_failed(gid, ErrorCode.topic_authorization_failed))
            continue
        out.append(_described(ctx, d, req.include_authorized_operations))
    return {"throttle_time": 0, "groups": out}


__all__ = ["API_KEY", "VERSIONS", "handle"]
