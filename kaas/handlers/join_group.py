"""JoinGroup (11): parked until the rebalance completes; KIP-394 from v4.

v8's Reason (KIP-800) is logged. From v9 (KIP-814) a static leader that rejoins a Stable
group unchanged is told it leads, with the members, and SkipAssignment: it keeps watching
metadata as a leader without sending a new assignment; before v9 it is told the old
leader's id and no members."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import structlog
from kio.schema.errors import ErrorCode
from kio.schema.join_group import v0, v1, v2, v3, v4, v5, v6, v7, v8, v9

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, Op, authorize
from kaas.wire.build import ms

if TYPE_CHECKING:
    from kaas.handlers.context import Context

    JoinGroupRequest: TypeAlias = (v0.JoinGroupRequest | v1.JoinGroupRequest | v2.JoinGroupRequest
                                   | v3.JoinGroupRequest | v4.JoinGroupRequest | v5.JoinGroupRequest
                                   | v6.JoinGroupRequest | v7.JoinGroupRequest | v8.JoinGroupRequest
                                   | v9.JoinGroupRequest)

API_KEY = 11
VERSIONS = (0, 9)
SKIP_ASSIGNMENT_FROM = 9
_NO_INSTANCE = (v0.JoinGroupRequest, v1.JoinGroupRequest, v2.JoinGroupRequest, v3.JoinGroupRequest,
                v4.JoinGroupRequest)  # group_instance_id: v5+ (KIP-345)

log = structlog.get_logger()


async def handle(ctx: Context, req: JoinGroupRequest) -> dict[str, object]:
    session = ms(req.session_timeout)
    rebalance = session if isinstance(req, v0.JoinGroupRequest) else ms(req.rebalance_timeout)
    if rebalance < 0:
        rebalance = session
    if not authorize(ctx, Op.READ, GROUP, req.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "generation_id": -1,
                "protocol_name": None if ctx.api_version >= 7 else "", "leader": "", "member_id": req.member_id or "",
                "members": []}
    if not req.group_id:  # before the coordinator check, as Apache's group coordinator service
        return {"throttle_time": 0, "error_code": ErrorCode.invalid_group_id, "generation_id": -1,
                "protocol_name": None if ctx.api_version >= 7 else "", "leader": "", "member_id": req.member_id or "",
                "members": []}
    reason = req.reason if isinstance(req, (v8.JoinGroupRequest, v9.JoinGroupRequest)) else None
    if reason:
        log.info("join_group_reason", group=req.group_id, member=req.member_id, reason=reason)
    try:
        r = await ctx.broker.groups.join(
            req.group_id, member_id=req.member_id or "",
            group_instance_id=None if isinstance(req, _NO_INSTANCE) else req.group_instance_id,
            client_id=ctx.client_id or "", client_host="/" + ctx.peer.rsplit(":", 1)[0],
            session_timeout_ms=session, rebalance_timeout_ms=rebalance, protocol_type=req.protocol_type,
            protocols=[(p.name, p.metadata) for p in req.protocols], require_known_member=ctx.api_version >= 4,
            skip_assignment_ok=ctx.api_version >= SKIP_ASSIGNMENT_FROM)
    except KaasError as exc:
        return {"throttle_time": 0, "error_code": exc.code, "generation_id": -1, "protocol_name": "",
                "leader": "", "member_id": req.member_id or "", "members": []}
    return {
        "throttle_time": 0, "error_code": r.error_code, "generation_id": r.generation_id,
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol_name if (r.protocol_name is not None or ctx.api_version >= 7) else "",
        "leader": r.leader, "member_id": r.member_id, "skip_assignment": r.skip_assignment,
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
                    for m in r.members],
    }


__all__ = ["API_KEY", "VERSIONS", "handle"]
