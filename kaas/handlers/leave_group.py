"""LeaveGroup (13): one member (v0-2) or a batch (v3+)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, Op, authorize

API_KEY = 13
VERSIONS = (0, 5)


async def handle(ctx, req) -> dict:
    if not authorize(ctx, Op.READ, GROUP, req.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "members": []}
    if ctx.api_version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in req.members]
    else:
        members = [(req.member_id, None)]
    try:
        res = ctx.broker.groups.leave(req.group_id, members)
    except KaasError as exc:
        return {"throttle_time": 0, "error_code": exc.code, "members": []}
    code = res.error_code
    if ctx.api_version < 3 and code == ErrorCode.none and res.members:
        code = res.members[0].error_code
    return {"throttle_time": 0, "error_code": code,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "error_code": m.error_code} for m in res.members]}
