"""DeleteGroups (42): only Empty groups; removes the offsets file."""

from __future__ import annotations

from kaas.errors import KaasError

API_KEY = 42
VERSIONS = (0, 2)


async def handle(ctx, req) -> dict:
    out = []
    for gid in req.groups_names:
        try:
            code = await ctx.broker.groups.delete(gid)
        except KaasError as exc:
            code = exc.code
        out.append({"group_id": gid, "error_code": code})
    return {"throttle_time": 0, "results": out}
