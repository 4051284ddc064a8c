"""ShareAcknowledge (79, versions 1-2; librdkafka 2.15 sends 1, Apache 4.2 serves 1-2): a
share consumer acknowledges records it acquired (KIP-932), each partition's outcome in its
``error_code``; the answer leaves once the acknowledgements are durable.

The share session must exist (SHARE_SESSION_NOT_FOUND) at the request's epoch
(INVALID_SHARE_SESSION_EPOCH; 0 is never valid here); -1 is the member's last request:
after its acknowledgements, its other acquired records are released and the session
ends. v2 (KIP-1222): ``is_renew_ack`` allows RENEW (4) acknowledgements.

Not advertised in ApiVersions until ShareGroupHeartbeat (76) exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode
from kio.schema.share_acknowledge.v2.request import ShareAcknowledgeRequest as ShareAcknowledgeV2

from kaas.domain.share_sessions import FINAL_EPOCH
from kaas.handlers._share import Call

if TYPE_CHECKING:
    from kio.schema.share_acknowledge import v1, v2

    from kaas.handlers.context import Context

    ShareAcknowledgeRequest: TypeAlias = v1.ShareAcknowledgeRequest | v2.ShareAcknowledgeRequest

API_KEY = 79
VERSIONS = (1, 2)


async def handle(ctx: Context, req: ShareAcknowledgeRequest) -> dict[str, object]:
    call = Call.open(ctx, req, renew=isinstance(req, ShareAcknowledgeV2) and req.is_renew_ack)
    if not isinstance(call, Call):
        return call
    shares = ctx.broker.shares
    code = shares.sessions.acknowledge(call.group, call.member, call.epoch, shares.now_ms())
    if code != ErrorCode.none:
        return call.reply(code)
    session = shares.sessions.get(call.group, call.member)
    for key in call.requested:
        call.answers.entry(key)
    await call.acknowledge("error_code")
    if call.epoch == FINAL_EPOCH and session is not None:
        call.close(session.partitions)
    return call.reply()
