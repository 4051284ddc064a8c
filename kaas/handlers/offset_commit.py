"""OffsetCommit (8): validated against the group's generation, then persisted."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, TOPIC, Op, authorize
from kaas.storage.offset_store import Committed

API_KEY = 8
VERSIONS = (2, 9)


def partition_offsets(topics, now: int) -> dict:
    return {(t.name, p.partition_index): Committed(p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                                   p.committed_metadata, now)
            for t in topics for p in t.partitions}


def answer(topics, code) -> list[dict]:
    return [{"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                            for p in t.partitions]} for t in topics]


async def handle(ctx, req) -> dict:
    generation = getattr(req, "generation_id_or_member_epoch", None)
    if generation is None:
        generation = req.generation_id
    known = ctx.broker.topics
    if not authorize(ctx, Op.READ, GROUP, req.group_id):
        return {"throttle_time": 0, "topics": answer(req.topics, ErrorCode.group_authorization_failed)}
    denied = {t.name for t in req.topics if not authorize(ctx, Op.READ, TOPIC, t.name)}
    try:
        code = await ctx.broker.groups.commit(
            req.group_id, member_id=req.member_id or "", group_instance_id=getattr(req, "group_instance_id", None),
            generation_id=generation,
            offsets={tp: c for tp, c in partition_offsets(req.topics, ctx.broker.clock.wall_ms()).items()
                     if known.get(tp[0]) is not None and tp[0] not in denied})
    except KaasError as exc:
        code = exc.code
    out = answer(req.topics, code)
    for t in out:
        if t["name"] in denied:
            for p in t["partitions"]:
                p["error_code"] = ErrorCode.topic_authorization_failed
        elif code == ErrorCode.none and known.get(t["name"]) is None:
            for p in t["partitions"]:
                p["error_code"] = ErrorCode.unknown_topic_or_partition
    return {"throttle_time": 0, "topics": out}
