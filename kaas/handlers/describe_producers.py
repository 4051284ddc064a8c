"""DescribeProducers (61, KIP-664): the producer state of partitions this broker leads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import TOPIC, Op, authorize

if TYPE_CHECKING:
    from kio.schema.describe_producers.v0 import DescribeProducersRequest

    from kaas.handlers import Context

API_KEY = 61
VERSIONS = (0, 0)


async def handle(ctx: Context, req: DescribeProducersRequest) -> dict[str, object]:
    broker = ctx.broker
    topics: list[dict[str, object]] = []
    for t in req.topics:
        parts: list[dict[str, object]] = []
        allowed = authorize(ctx, Op.READ, TOPIC, t.name)
        for index in t.partition_indexes:
            if not allowed:
                parts.append({"partition_index": index, "error_code": ErrorCode.topic_authorization_failed,
                              "error_message": None, "active_producers": []})
                continue
            try:
                part = broker.get_partition(t.name, index)
            except KaasError as exc:
                parts.append({"partition_index": index, "error_code": exc.code, "error_message": exc.message,
                              "active_producers": []})
                continue
            parts.append({"partition_index": index, "error_code": ErrorCode.none, "error_message": None,
                          "active_producers": part.log.producers.describe()})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
