"""DescribeShareGroupOffsets (90, v0-1): each share partition's start offset and leader
epoch, and from v1 its lag (KIP-1226), asked of the partitions' leaders by the group's
coordinator (``coord.group.share.offsets``). DESCRIBE on the group
(GROUP_AUTHORIZATION_FAILED for the group); topics the principal may not DESCRIBE are
answered TOPIC_AUTHORIZATION_FAILED per partition, or left out of an all-topics answer,
as Apache. Unknown topics and partitions without state are described with -1s."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, TOPIC, Op, authorize

if TYPE_CHECKING:
    from kio.schema.describe_share_group_offsets.v0 import request as v0
    from kio.schema.describe_share_group_offsets.v1 import request as v1

    from kaas.handlers.context import Context

    DescribeShareGroupOffsetsRequest: TypeAlias = (v0.DescribeShareGroupOffsetsRequest
                                                   | v1.DescribeShareGroupOffsetsRequest)
    RequestGroup: TypeAlias = v0.DescribeShareGroupOffsetsRequestGroup | v1.DescribeShareGroupOffsetsRequestGroup

API_KEY = 90
VERSIONS = (0, 1)


def _group(group_id: str, code: ErrorCode, message: str | None = None,
           topics: list[dict[str, object]] | None = None) -> dict[str, object]:
    return {"group_id": group_id, "error_code": code, "error_message": message, "topics": topics or []}


async def _describe(ctx: Context, g: RequestGroup) -> dict[str, object]:
    gid = g.group_id
    if not authorize(ctx, Op.DESCRIBE, GROUP, gid):
        return _group(gid, ErrorCode.group_authorization_failed)
    refused: list[dict[str, object]] = []
    asked: list[tuple[str, list[int]]] | None = None
    if g.topics is not None:
        asked = []
        for t in g.topics:
            if authorize(ctx, Op.DESCRIBE, TOPIC, t.topic_name):
                asked.append((t.topic_name, list(t.partitions)))
            else:
                refused.append({"topic_name": t.topic_name, "topic_id": None, "partitions": [
                    {"partition_index": p, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                     "error_code": ErrorCode.topic_authorization_failed} for p in t.partitions]})
        if not g.topics:
            return _group(gid, ErrorCode.none)
    try:
        found = await ctx.broker.share_offsets.describe(gid, asked)
    except KaasError as exc:
        return _group(gid, exc.code, exc.message)
    topics: list[dict[str, object]] = [
        {"topic_name": name, "topic_id": tid, "partitions": [
            {"partition_index": p, "start_offset": d.start_offset, "leader_epoch": d.leader_epoch, "lag": d.lag,
             "error_code": ErrorCode.none} for p, d in parts.items()]}
        for name, tid, parts in found if asked is not None or authorize(ctx, Op.DESCRIBE, TOPIC, name)]
    return _group(gid, ErrorCode.none, topics=topics + refused)


async def handle(ctx: Context, req: DescribeShareGroupOffsetsRequest) -> dict[str, object]:
    return {"throttle_time": 0, "groups": [await _describe(ctx, g) for g in req.groups]}


__all__ = ["API_KEY", "VERSIONS", "handle"]
