"""ConsumerGroupHeartbeat (68): the KIP-848 consumer group protocol
(``kaas.coord.group.consumer.runtime``). READ on the group, and DESCRIBE on every subscribed topic
name (else TOPIC_AUTHORIZATION_FAILED, the group untouched); a regular expression resolves
only to the topics the member's principal may describe, as Apache."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.consumer_group_heartbeat import v0, v1
from kio.schema.errors import ErrorCode

from kaas.domain.groups.consumer.heartbeat import Heartbeat
from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, TOPIC, Op, authorize, enabled
from kaas.handlers._group_heartbeat import answer, error
from kaas.wire.build import ms

if TYPE_CHECKING:
    from kaas.handlers.context import Context

    ConsumerGroupHeartbeatRequest: TypeAlias = v0.ConsumerGroupHeartbeatRequest | v1.ConsumerGroupHeartbeatRequest

API_KEY = 68
VERSIONS = (0, 1)



async def handle(ctx: Context, req: ConsumerGroupHeartbeatRequest) -> dict[str, object]:
    if not authorize(ctx, Op.READ, GROUP, req.group_id):
        return error(ErrorCode.group_authorization_failed)
    names = req.subscribed_topic_names
    if names is not None and enabled(ctx) and any(not authorize(ctx, Op.DESCRIBE, TOPIC, n) for n in set(names)):
        return error(ErrorCode.topic_authorization_failed)
    regex = req.subscribed_topic_regex if isinstance(req, v1.ConsumerGroupHeartbeatRequest) else None  # KIP-848 v1
    owned = None
    if req.topic_partitions is not None:
        owned = tuple((str(tp.topic_id), tuple(tp.partitions)) for tp in req.topic_partitions)
    hb = Heartbeat(req.member_id, req.member_epoch, instance_id=req.instance_id, rack_id=req.rack_id,
                   rebalance_timeout_ms=ms(req.rebalance_timeout),
                   subscribed_topic_names=None if names is None else tuple(names),
                   subscribed_topic_regex=regex,
                   server_assignor=req.server_assignor, owned=owned, client_id=ctx.client_id or "",
                   client_host="/" + ctx.peer.rsplit(":", 1)[0])
    visible = (lambda t: authorize(ctx, Op.DESCRIBE, TOPIC, t)) if enabled(ctx) else None
    try:
        reply, interval = await ctx.broker.groups.consumers.heartbeat(
            req.group_id, hb, api_version=ctx.api_version, topic_visible=visible)
    except KaasError as exc:
        return error(exc.code, exc.message)
    return answer(reply, interval)



__all__ = ["API_KEY", "VERSIONS", "handle"]
