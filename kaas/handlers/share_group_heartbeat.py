"""ShareGroupHeartbeat (76, v1 as librdkafka 2.15+ and Apache 4.1+ use it): KIP-932 share
group membership (``kaas.coord.group.share.runtime``). In Apache 4.4's order: READ on the group;
a member id of 1 to 36 characters (INVALID_REQUEST); DESCRIBE on every subscribed topic
name (else TOPIC_AUTHORIZATION_FAILED, the group untouched); the request's own checks
(``domain.groups.share.group.validate_share_heartbeat``: blank ids and rack, a first request
without topics, INVALID_REQUEST) before any group is looked at.

The failpoint ``share_heartbeat.before_response`` (action ``drop``) handles the heartbeat
and then closes the connection instead of answering: an answer lost on the way, whose
member comes back with the epoch it had (context: ``member_epoch``, the request's, and
``moved``, whether the answer hands out a new epoch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas import failpoints
from kaas.domain.groups.share.group import ShareHeartbeat, validate_share_heartbeat
from kaas.errors import CloseConnection, KaasError
from kaas.handlers._auth import GROUP, TOPIC, Op, authorize, enabled
from kaas.handlers._group_heartbeat import answer, error
from kaas.handlers._share import MAX_MEMBER_ID

if TYPE_CHECKING:
    from kio.schema.share_group_heartbeat.v1 import ShareGroupHeartbeatRequest

    from kaas.handlers.context import Context

API_KEY = 76
VERSIONS = (1, 1)



async def handle(ctx: Context, req: ShareGroupHeartbeatRequest) -> dict[str, object]:
    if not authorize(ctx, Op.READ, GROUP, req.group_id):
        return error(ErrorCode.group_authorization_failed)
    if not req.member_id or len(req.member_id) > MAX_MEMBER_ID:
        return error(ErrorCode.invalid_request, "Invalid member id in the request.")
    names = req.subscribed_topic_names
    if names is not None and enabled(ctx) and any(not authorize(ctx, Op.DESCRIBE, TOPIC, n) for n in set(names)):
        return error(ErrorCode.topic_authorization_failed)
    hb = ShareHeartbeat(req.member_id, req.member_epoch, rack_id=req.rack_id,
                        subscribed_topic_names=None if names is None else tuple(names),
                        client_id=ctx.client_id or "", client_host="/" + ctx.peer.rsplit(":", 1)[0])
    bad = validate_share_heartbeat(hb, req.group_id)
    if bad is not None:
        return answer(bad, 0)
    try:
        reply, interval = await ctx.broker.groups.shares.heartbeat(req.group_id, hb)
    except KaasError as exc:
        return error(exc.code, exc.message)
    if failpoints.ARMED and failpoints.hit("share_heartbeat.before_response", member_epoch=int(req.member_epoch),
                                           moved=reply.member_epoch != req.member_epoch):
        raise CloseConnection("failpoint share_heartbeat.before_response: the answer is dropped")
    return answer(reply, interval)



__all__ = ["API_KEY", "VERSIONS", "handle"]
