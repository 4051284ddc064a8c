"""DeleteGroups (42): only Empty groups; removes the offsets file."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, Op, authorize

if TYPE_CHECKING:
    from kio.schema.delete_groups import v0, v1, v2

    from kaas.handlers.context import Context

    DeleteGroupsRequest: TypeAlias = v0.DeleteGroupsRequest | v1.DeleteGroupsRequest | v2.DeleteGroupsRequest

API_KEY = 42
VERSIONS = (0, 2)


async def handle(ctx: Context, req: DeleteGroupsRequest) -> dict[str, object]:
    out = []
    for gid in req.groups_names:
        if not authorize(ctx, Op.DELETE, GROUP, gid):
            out.append({"group_id": gid, "error_code": ErrorCode.group_authorization_failed})
            continue
        try:
            code = await ctx.broker.groups.delete(gid)
        except KaasError as exc:
            code = exc.code
        out.append({"group_id": gid, "error_code": code})
    return {"throttle_time": 0, "results": out}
