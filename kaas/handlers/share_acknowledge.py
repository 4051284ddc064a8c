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
from kaas.handlers._auth import GROUP, Op, authorize
from kaas.handlers._share import Answers, Key, WireAckBatch, acknowledge_all, bad_ids, session_partitions, topic_names

if TYPE_CHECKING:
    from kio.schema.share_acknowledge import v1, v2

    from kaas.handlers import Context

    ShareAcknowledgeRequest: TypeAlias = v1.ShareAcknowledgeRequest | v2.ShareAcknowledgeRequest

API_KEY = 79
VERSIONS = (1, 2)


async def handle(ctx: Context, req: ShareAcknowledgeRequest) -> dict[str, object]:
    shares = ctx.broker.shares
    group, member, epoch = req.group_id or "", req.member_id or "", req.share_session_epoch
    lock_ms = shares.settings_of(group).limits.record_lock_duration_ms if group else 0

    def answer(code: ErrorCode = ErrorCode.none, message: str | None = None,
               answers: Answers | None = None) -> dict[str, object]:
        return {"throttle_time": 0, "error_code": code, "error_message": message,
                "acquisition_lock_timeout": lock_ms,
                "responses": answers.responses() if answers is not None else [],
                "node_endpoints": answers.node_endpoints() if answers is not None else []}

    if not authorize(ctx, Op.READ, GROUP, group):
        return answer(ErrorCode.group_authorization_failed)
    problem = bad_ids(req.group_id, req.member_id)
    if problem is not None:
        return answer(ErrorCode.invalid_request, problem)
    if not shares.membership.is_member(group, member):
        shares.sessions.close(group, member)
        return answer(ErrorCode.share_session_not_found, "the member is not in the share group")
    code = shares.sessions.acknowledge(group, member, epoch)
    if code != ErrorCode.none:
        return answer(code)
    session = shares.sessions.get(group, member)

    acks: dict[Key, tuple[WireAckBatch, ...]] = {}
    for t in req.topics:
        if t.topic_id is None:
            continue
        for p in t.partitions:
            key = (t.topic_id, int(p.partition_index))
            acks[key] = acks.get(key, ()) + tuple(p.acknowledgement_batches)
    answers = Answers(ctx, topic_names(ctx))
    for key in acks:
        answers.entry(key)
    renew = isinstance(req, ShareAcknowledgeV2) and req.is_renew_ack
    await acknowledge_all(answers, group, member, {k: v for k, v in acks.items() if v}, renew=renew,
                          max_type=4 if ctx.api_version >= 2 else 3, code_field="error_code")
    if epoch == FINAL_EPOCH and session is not None:
        await shares.close_session(group, member, session_partitions(answers, session.partitions))
    return answer(answers=answers)
