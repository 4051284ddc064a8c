"""CreatePartitions (37): grow a topic's partition count."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

API_KEY = 37
VERSIONS = (0, 3)


async def handle(ctx, req) -> dict:
    out = []
    for t in req.topics:
        if t.assignments:
            out.append({"name": t.name, "error_code": ErrorCode.invalid_request,
                        "error_message": "manual replica assignment is not supported"})
            continue
        code, msg = await ctx.broker.add_partitions(t.name, t.count, validate_only=req.validate_only)
        out.append({"name": t.name, "error_code": code, "error_message": msg})
    return {"throttle_time": 0, "results": out}
