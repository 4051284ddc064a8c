"""OffsetDelete (47): drop committed offsets of partitions the group no longer consumes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, TOPIC, Op, authorize

if TYPE_CHECKING:
    from kio.schema.offset_delete.v0 import OffsetDeleteRequest

    from kaas.handlers.context import Context

API_KEY = 47
VERSIONS = (0, 0)


async def handle(ctx: Context, req: OffsetDeleteRequest) -> dict[str, object]:
    if not authorize(ctx, Op.DELETE, GROUP, req.group_id):
        return {"error_code": ErrorCode.group_authorization_failed, "throttle_time": 0, "topics": []}
    denied = {t.name for t in req.topics if not authorize(ctx, Op.READ, TOPIC, t.name)}
    wanted: list[tuple[str, int]] = [(t.name, p.partition_index) for t in req.topics for p in t.partitions
                                     if t.name not in denied]
    try:
        code, results = await ctx.broker.groups.delete_offsets(req.group_id, wanted)
    except KaasError as exc:
        return {"error_code": exc.code, "throttle_time": 0, "topics": []}
    results = {**results, **{(t.name, p.partition_index): ErrorCode.topic_authorization_failed
                             for t in req.topics if t.name in denied for p in t.partitions}}
    return {"error_code": code, "throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": results.get((t.name, p.partition_index), ErrorCode.none)}
                                        for p in t.partitions]} for t in req.topics]}
