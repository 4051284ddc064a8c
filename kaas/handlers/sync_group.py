"""SyncGroup (14): the leader's assignments; followers park until they arrive."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode
from kio.schema.sync_group import v0, v1, v2, v3, v4, v5

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, Op, authorize

if TYPE_CHECKING:
    from kaas.handlers.context import Context

    SyncGroupRequest: TypeAlias = (v0.SyncGroupRequest | v1.SyncGroupRequest | v2.SyncGroupRequest
                                   | v3.SyncGroupRequest | v4.SyncGroupRequest | v5.SyncGroupRequest)

API_KEY = 14
VERSIONS = (0, 5)
_NO_INSTANCE = (v0.SyncGroupRequest, v1.SyncGroupRequest, v2.SyncGroupRequest)  # group_instance_id: v3+


async def handle(ctx: Context, req: SyncGroupRequest) -> dict[str, object]:
    if not authorize(ctx, Op.READ, GROUP, req.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "assignment": b""}
    protocol = (req.protocol_type, req.protocol_name) if isinstance(req, v5.SyncGroupRequest) else (None, None)
    try:
        r = await ctx.broker.groups.sync(
            req.group_id, member_id=req.member_id,
            group_instance_id=None if isinstance(req, _NO_INSTANCE) else req.group_instance_id,
            generation_id=req.generation_id, assignments=[(a.member_id, a.assignment) for a in req.assignments],
            protocol_type=protocol[0], protocol_name=protocol[1])
    except KaasError as exc:
        # A loading coordinator sends the member back to JoinGroup, as Apache does: older
        # clients do not expect COORDINATOR_LOAD_IN_PROGRESS from SyncGroup.
        code = (ErrorCode.rebalance_in_progress if exc.code == ErrorCode.coordinator_load_in_progress
                else exc.code)
        return {"throttle_time": 0, "error_code": code, "assignment": b""}
    return {"throttle_time": 0, "error_code": r.error_code, "protocol_type": r.protocol_type,
            "protocol_name": r.protocol_name, "assignment": r.assignment}
