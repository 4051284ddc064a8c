"""ShareGroupHeartbeat (76, v1 as librdkafka 2.15+ and Apache 4.1+ use it): KIP-932 share
group membership (``kaas.coord.group.share``). READ on the group, and DESCRIBE on every
subscribed topic name (else TOPIC_AUTHORIZATION_FAILED, the group untouched)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas.domain.share_group import ShareHeartbeat
from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, TOPIC, Op, authorize, enabled
from kaas.handlers._group_heartbeat import answer, error

if TYPE_CHECKING:
    from kio.schema.share_group_heartbeat.v1 import ShareGroupHeartbeatRequest

    from kaas.handlers import Context

API_KEY = 76
VERSIONS = (1, 1)



async def handle(ctx: Context, req: ShareGroupHeartbeatRequest) -> dict[str, object]:
    if not authorize(ctx, Op.READ, GROUP, req.group_id):
        return error(ErrorCode.group_authorization_failed)
    names = req.subscribed_topic_names
    if names is not None and enabled(ctx) and any(not authorize(ctx, Op.DESCRIBE, TOPIC, n) for n in set(names)):
        return error(ErrorCode.topic_authorization_failed)
    hb = ShareHeartbeat(req.member_id, req.member_epoch, rack_id=req.rack_id,
                        subscribed_topic_names=None if names is None else tuple(names),
                        client_id=ctx.client_id or "", client_host="/" + ctx.peer.rsplit(":", 1)[0])
    try:
        reply, interval = await ctx.broker.groups.shares.heartbeat(req.group_id, hb)
    except KaasError as exc:
        return error(exc.code, exc.message)
    return answer(reply, interval)



__all__ = ["API_KEY", "VERSIONS", "handle"]
