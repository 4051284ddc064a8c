"""CreatePartitions (37): grow a topic's partition count."""

from __future__ import annotations

import structlog
from kio.schema.errors import ErrorCode

API_KEY = 37
VERSIONS = (0, 3)

log = structlog.get_logger()


async def handle(ctx, req) -> dict:
    out = []
    for t in req.topics:
        if t.assignments:
            out.append({"name": t.name, "error_code": ErrorCode.invalid_request,
                        "error_message": "manual replica assignment is not supported"})
            continue
        try:
            code, msg = await ctx.broker.add_partitions(t.name, t.count, validate_only=req.validate_only)
        except OSError as exc:  # the topic file could not be written: the count is unchanged
            log.error("topic_write_failed", topic=t.name, error=str(exc))
            code, msg = ErrorCode.kafka_storage_error, f"topic file not written: {exc.strerror}"
        out.append({"name": t.name, "error_code": code, "error_message": msg})
    return {"throttle_time": 0, "results": out}
