"""OffsetCommit (8): validated against the group's generation (a consumer-protocol
group's member epoch, v9+), then persisted."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, TOPIC, Op, authorize
from kaas.storage.offset_store import Committed

if TYPE_CHECKING:
    from kio.schema.offset_commit import v2, v3, v4, v5, v6, v7, v8, v9

    from kaas.handlers import Context

    OffsetCommitRequest: TypeAlias = (v2.OffsetCommitRequest | v3.OffsetCommitRequest | v4.OffsetCommitRequest
                                      | v5.OffsetCommitRequest | v6.OffsetCommitRequest | v7.OffsetCommitRequest
                                      | v8.OffsetCommitRequest | v9.OffsetCommitRequest)

API_KEY = 8
VERSIONS = (2, 9)


def partition_offsets(req: OffsetCommitRequest, now: int) -> dict[tuple[str, int], Committed]:
    """The request's offsets, committed at ``now``; v2-v4's ``retention_time_ms`` other than
    -1 (the default) gives them an expiry time of their own, ``now`` + it, as Apache does."""
    retention = getattr(req, "retention_time", None)
    retention_ms = -1 if retention is None else round(retention.total_seconds() * 1000)
    expire = now + retention_ms if retention_ms != -1 else -1
    return {(t.name, p.partition_index): Committed(p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                                   p.committed_metadata, now, expire)
            for t in req.topics for p in t.partitions}


def answer(req: OffsetCommitRequest, code: ErrorCode) -> list[dict[str, object]]:
    return [{"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                            for p in t.partitions]} for t in req.topics]


async def handle(ctx: Context, req: OffsetCommitRequest) -> dict[str, object]:
    generation = req.generation_id_or_member_epoch
    known = ctx.broker.topics
    if not authorize(ctx, Op.READ, GROUP, req.group_id):
        return {"throttle_time": 0, "topics": answer(req, ErrorCode.group_authorization_failed)}
    denied = {t.name for t in req.topics if not authorize(ctx, Op.READ, TOPIC, t.name)}
    try:
        code = await ctx.broker.groups.commit(
            req.group_id, member_id=req.member_id or "", group_instance_id=getattr(req, "group_instance_id", None),
            generation_id=generation, api_version=ctx.api_version,
            offsets={tp: c for tp, c in partition_offsets(req, ctx.broker.clock.wall_ms()).items()
                     if known.get(tp[0]) is not None and tp[0] not in denied})
    except KaasError as exc:
        code = exc.code
    out: list[dict[str, object]] = []
    for t in req.topics:
        if t.name in denied:
            topic_code = ErrorCode.topic_authorization_failed
        elif code == ErrorCode.none and known.get(t.name) is None:
            topic_code = ErrorCode.unknown_topic_or_partition
        else:
            topic_code = code
        out.append({"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": topic_code}
                                                   for p in t.partitions]})
    return {"throttle_time": 0, "topics": out}
