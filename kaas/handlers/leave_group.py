"""LeaveGroup (13): one member (v0-2) or a batch (v3+)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode
from kio.schema.leave_group import v3, v4, v5

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, Op, authorize

if TYPE_CHECKING:
    from kio.schema.leave_group import v0, v1, v2

    from kaas.handlers.context import Context

    LeaveGroupRequest: TypeAlias = (v0.LeaveGroupRequest | v1.LeaveGroupRequest | v2.LeaveGroupRequest
                                    | v3.LeaveGroupRequest | v4.LeaveGroupRequest | v5.LeaveGroupRequest)

API_KEY = 13
VERSIONS = (0, 5)
_BATCH = (v3.LeaveGroupRequest, v4.LeaveGroupRequest, v5.LeaveGroupRequest)  # a batch of members (v3+)


async def handle(ctx: Context, req: LeaveGroupRequest) -> dict[str, object]:
    if not authorize(ctx, Op.READ, GROUP, req.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "members": []}
    members: list[tuple[str, str | None]]
    if isinstance(req, _BATCH):
        members = [(m.member_id, m.group_instance_id) for m in req.members]
    else:
        members = [(req.member_id, None)]
    try:
        res = await ctx.broker.groups.leave(req.group_id, members)
    except KaasError as exc:
        return {"throttle_time": 0, "error_code": exc.code, "members": []}
    code = res.error_code
    if ctx.api_version < 3 and code == ErrorCode.none and res.members:
        code = res.members[0].error_code
    return {"throttle_time": 0, "error_code": code,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "error_code": m.error_code} for m in res.members]}
