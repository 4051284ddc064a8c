"""ShareGroupHeartbeat (76, v1 as librdkafka 2.15+ and Apache 4.1+ use it): KIP-932 share
group membership (``kaas.coord.group.share``). READ on the group, and DESCRIBE on every
subscribed topic name (else TOPIC_AUTHORIZATION_FAILED, the group untouched)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas.domain.share_group import ShareHeartbeat, ShareReply
from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, TOPIC, Op, authorize, enabled

if TYPE_CHECKING:
    from kio.schema.share_group_heartbeat.v1 import ShareGroupHeartbeatRequest

    from kaas.handlers import Context

API_KEY = 76
VERSIONS = (1, 1)


def _error(code: ErrorCode, message: str | None = None) -> dict[str, object]:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}


async def handle(ctx: Context, req: ShareGroupHeartbeatRequest) -> dict[str, object]:
    if not authorize(ctx, Op.READ, GROUP, req.group_id):
        return _error(ErrorCode.group_authorization_failed)
    names = req.subscribed_topic_names
    if names is not None and enabled(ctx) and any(not authorize(ctx, Op.DESCRIBE, TOPIC, n) for n in set(names)):
        return _error(ErrorCode.topic_authorization_failed)
    hb = ShareHeartbeat(req.member_id, req.member_epoch, rack_id=req.rack_id,
                        subscribed_topic_names=None if names is None else tuple(names),
                        client_id=ctx.client_id or "", client_host="/" + ctx.peer.rsplit(":", 1)[0])
    try:
        reply, interval = await ctx.broker.groups.shares.heartbeat(req.group_id, hb)
    except KaasError as exc:
        return _error(exc.code, exc.message)
    return answer(reply, interval)


def answer(reply: ShareReply, interval_ms: int) -> dict[str, object]:
    if reply.error_code != ErrorCode.none:
        return _error(reply.error_code, reply.error_message)
    assignment = None
    if reply.assignment is not None:
        assignment = {"topic_partitions": [{"topic_id": uuid.UUID(tid), "partitions": sorted(ps)}
                                           for tid, ps in sorted(reply.assignment.items())]}
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "member_id": reply.member_id,
            "member_epoch": reply.member_epoch, "heartbeat_interval": interval_ms, "assignment": assignment}


__all__ = ["API_KEY", "VERSIONS", "handle"]
