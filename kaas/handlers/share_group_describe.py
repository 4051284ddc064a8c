"""ShareGroupDescribe (77, v1): a KIP-932 share group's members and their assignments.
DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED), and on every topic its assignments
name (else TOPIC_AUTHORIZATION_FAILED without details, as for consumer groups)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, OPS_NOT_ASKED, TOPIC, Op, authorize, authorized_operations

if TYPE_CHECKING:
    from kio.schema.share_group_describe.v1 import ShareGroupDescribeRequest

    from kaas.handlers import Context

API_KEY = 77
VERSIONS = (1, 1)


def _failed(group_id: str, code: ErrorCode, message: str | None = None) -> dict[str, object]:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
            "authorized_operations": OPS_NOT_ASKED}


def _described(ctx: Context, d: dict[str, Any], include_ops: bool) -> dict[str, object]:
    return {
        "error_code": ErrorCode.none, "error_message": None, "group_id": d["group_id"],
        "group_state": d["group_state"], "group_epoch": d["group_epoch"], "assignment_epoch": d["assignment_epoch"],
        "assignor_name": d["assignor_name"],
        "members": [{
            "member_id": m["member_id"], "rack_id": m["rack_id"], "member_epoch": m["member_epoch"],
            "client_id": m["client_id"], "client_host": m["client_host"],
            "subscribed_topic_names": m["subscribed_topic_names"],
            "assignment": {"topic_partitions": [{"topic_id": uuid.UUID(tid), "topic_name": name, "partitions": ps}
                                                for name, (tid, ps) in sorted(m["assignment"].items())]},
        } for m in d["members"]],
        "authorized_operations": authorized_operations(ctx, GROUP, d["group_id"]) if include_ops else OPS_NOT_ASKED,
    }


async def handle(ctx: Context, req: ShareGroupDescribeRequest) -> dict[str, object]:
    out = []
    for gid in req.group_ids:
        if not authorize(ctx, Op.DESCRIBE, GROUP, gid):
            out.append(_failed(gid, ErrorCode.group_authorization_failed))
            continue
        try:
            d = ctx.broker.groups.shares.describe(gid)
        except KaasError as exc:
            out.append(_failed(gid, exc.code, exc.message))
            continue
        if any(not authorize(ctx, Op.DESCRIBE, TOPIC, t) for m in d["members"] for t in m["assignment"]):
            out.append(_failed(gid, ErrorCode.topic_authorization_failed))
            continue
        out.append(_described(ctx, d, req.include_authorized_operations))
    return {"throttle_time": 0, "groups": out}


__all__ = ["API_KEY", "VERSIONS", "handle"]
