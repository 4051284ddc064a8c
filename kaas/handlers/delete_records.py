"""DeleteRecords (21): advance a partition's log start offset (-1 = the high watermark)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import structlog
from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import TOPIC, Op, authorize

if TYPE_CHECKING:
    from kio.schema.delete_records import v0, v1, v2

    from kaas.handlers.context import Context

    DeleteRecordsRequest: TypeAlias = v0.DeleteRecordsRequest | v1.DeleteRecordsRequest | v2.DeleteRecordsRequest

API_KEY = 21
VERSIONS = (0, 2)

log = structlog.get_logger()


async def handle(ctx: Context, req: DeleteRecordsRequest) -> dict[str, object]:
    topics: list[dict[str, object]] = []
    for t in req.topics:
        parts: list[dict[str, object]] = []
        topics.append({"name": t.name, "partitions": parts})
        allowed = authorize(ctx, Op.DELETE, TOPIC, t.name)
        for p in t.partitions:
            out: dict[str, object] = {"partition_index": p.partition_index, "low_watermark": -1,
                                      "error_code": ErrorCode.none}
            parts.append(out)
            if not allowed:
                out["error_code"] = ErrorCode.topic_authorization_failed
                continue
            try:
                part = ctx.broker.get_partition(t.name, p.partition_index)
            except KaasError as exc:
                out["error_code"] = exc.code
                continue
            offset = part.high_watermark if p.offset == -1 else p.offset
            if offset < 0 or offset > part.high_watermark:
                out["error_code"] = ErrorCode.offset_out_of_range
                continue
            try:
                out["low_watermark"] = part.log.delete_records(offset)
            except KaasError as exc:
                out["error_code"] = exc.code
            except OSError as exc:  # the manifest write failed: nothing changed
                out["error_code"] = ErrorCode.kafka_storage_error
                log.error("delete_records_failed", topic=t.name, partition=p.partition_index, error=str(exc))
    return {"throttle_time": 0, "topics": topics}
