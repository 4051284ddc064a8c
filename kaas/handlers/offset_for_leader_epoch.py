"""OffsetForLeaderEpoch (23): the largest epoch <= the asked one and where it ended, read off
the epoch-stamped segment names."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import TOPIC, Op, authorize

if TYPE_CHECKING:
    from kio.schema.offset_for_leader_epoch import v2, v3, v4

    from kaas.handlers.context import Context

    OffsetForLeaderEpochRequest: TypeAlias = (v2.OffsetForLeaderEpochRequest | v3.OffsetForLeaderEpochRequest
                                              | v4.OffsetForLeaderEpochRequest)

API_KEY = 23
VERSIONS = (2, 4)


async def handle(ctx: Context, req: OffsetForLeaderEpochRequest) -> dict[str, object]:
    topics: list[dict[str, object]] = []
    for t in req.topics:
        parts: list[dict[str, object]] = []
        topics.append({"topic": t.topic, "partitions": parts})
        allowed = authorize(ctx, Op.DESCRIBE, TOPIC, t.topic)
        for p in t.partitions:
            out: dict[str, object] = {"error_code": ErrorCode.none, "partition": p.partition, "leader_epoch": -1,
                                      "end_offset": -1}
            parts.append(out)
            if not allowed:
                out["error_code"] = ErrorCode.topic_authorization_failed
                continue
            try:
                part = ctx.broker.get_partition(t.topic, p.partition)
            except KaasError as exc:
                out["error_code"] = exc.code
                continue
            cur = p.current_leader_epoch
            if cur >= 0 and cur != part.epoch:
                out["error_code"] = (ErrorCode.fenced_leader_epoch if cur < part.epoch
                                     else ErrorCode.unknown_leader_epoch)
                continue
            if p.leader_epoch > part.epoch:
                continue
            out["leader_epoch"], out["end_offset"] = part.log.epoch_end_offset(p.leader_epoch)
    return {"throttle_time": 0, "topics": topics}
