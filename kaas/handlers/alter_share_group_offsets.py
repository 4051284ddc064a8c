"""AlterShareGroupOffsets (91, v0): new share-partition start offsets for a share group
with no members (``kafka-share-groups --reset-offsets``, ``kaas groups reset-offsets``),
set by the partitions' leaders at the coordinator's request
(``coord.group.share.offsets``). READ on the group (GROUP_AUTHORIZATION_FAILED) and on
each topic (TOPIC_AUTHORIZATION_FAILED for its partitions), as Apache; a group id no group
has makes an empty share group first (Apache 4.2+, KAFKA-19662: offsets set before the
first consumer joins), GROUP_ID_NOT_FOUND for a group of another type, NON_EMPTY_GROUP
while it has members, UNKNOWN_TOPIC_OR_PARTITION per partition of an unknown topic or
beyond its partitions. The partitions set are then initialized in the group (a member
joining later is assigned them at once and starts at the new offsets)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, TOPIC, Op, authorize

if TYPE_CHECKING:
    from kio.schema.alter_share_group_offsets.v0 import AlterShareGroupOffsetsRequest

    from kaas.handlers.context import Context

API_KEY = 91
VERSIONS = (0, 0)


def _failed(code: ErrorCode, message: str | None = None) -> dict[str, object]:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "responses": []}


async def handle(ctx: Context, req: AlterShareGroupOffsetsRequest) -> dict[str, object]:
    gid = req.group_id
    if not authorize(ctx, Op.READ, GROUP, gid):
        return _failed(ErrorCode.group_authorization_failed)
    refused: list[dict[str, object]] = []
    asked: list[tuple[str, list[tuple[int, int]]]] = []
    for t in req.topics:
        if authorize(ctx, Op.READ, TOPIC, t.topic_name):
            asked.append((t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions]))
        else:
            refused.append({"topic_name": t.topic_name, "topic_id": None, "partitions": [
                {"partition_index": p.partition_index, "error_code": ErrorCode.topic_authorization_failed}
                for p in t.partitions]})
    try:
        done = await ctx.broker.share_offsets.alter(gid, asked)
    except KaasError as exc:
        return _failed(exc.code, exc.message)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "responses": [
        {"topic_name": name, "topic_id": tid, "partitions": [
            {"partition_index": p, "error_code": code, "error_message": message}
            for p, (code, message) in parts.items()]}
        for name, tid, parts in done] + refused}


__all__ = ["API_KEY", "VERSIONS", "handle"]
