"""OffsetCommit (8): validated against the group's generation (a consumer-protocol
group's member epoch, v9+), then persisted.

v10 (KIP-848) names topics by id instead of name: each id is resolved to the topic that
has it now, offsets are kept by name as for every other version (so OffsetFetch of any
version reads them), and an id no topic has answers UNKNOWN_TOPIC_ID. The answer names
each topic as the request did."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode
from kio.schema.offset_commit import v2, v3, v4, v5, v6, v7, v8, v9, v10

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, TOPIC, Op, authorize
from kaas.storage.offset_store import Committed

if TYPE_CHECKING:
    import uuid

    from kaas.handlers.context import Context
    from kaas.storage.topics import TopicStore

    OffsetCommitRequest: TypeAlias = (v2.OffsetCommitRequest | v3.OffsetCommitRequest | v4.OffsetCommitRequest
                                      | v5.OffsetCommitRequest | v6.OffsetCommitRequest | v7.OffsetCommitRequest
                                      | v8.OffsetCommitRequest | v9.OffsetCommitRequest | v10.OffsetCommitRequest)

API_KEY = 8
VERSIONS = (2, 10)
_RETENTION = (v2.OffsetCommitRequest, v3.OffsetCommitRequest, v4.OffsetCommitRequest)  # retention_time_ms: v2-v4
_NO_LEADER_EPOCH = (v2.OffsetCommitRequest, v3.OffsetCommitRequest, v4.OffsetCommitRequest,
                    v5.OffsetCommitRequest)  # committed_leader_epoch: v6+
_NO_INSTANCE = _NO_LEADER_EPOCH + (v6.OffsetCommitRequest,)  # group_instance_id: v7+ (KIP-345)


def topic_names(req: OffsetCommitRequest, topics: TopicStore) -> list[str | None]:
    """Each request topic's name, in order: its name (v2-9), or the name of the topic with
    its id (v10; None when no topic has it)."""
    if isinstance(req, v10.OffsetCommitRequest):
        return [topics.name_of(t.topic_id) for t in req.topics]
    return [t.name for t in req.topics]


def _named(req: OffsetCommitRequest) -> list[tuple[str, uuid.UUID | None]]:
    """How the request names each topic, as its answer names it: by name (v2-9), by id (v10)."""
    if isinstance(req, v10.OffsetCommitRequest):
        return [("", t.topic_id) for t in req.topics]
    return [(t.name, None) for t in req.topics]


def _partitions(req: OffsetCommitRequest) -> list[list[tuple[int, int, int, str | None]]]:
    """Each topic's partitions, in request order: (index, offset, leader epoch (-1 before
    v6), metadata)."""
    if isinstance(req, _NO_LEADER_EPOCH):
        return [[(p.partition_index, p.committed_offset, -1, p.committed_metadata) for p in t.partitions]
                for t in req.topics]
    return [[(p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
             for p in t.partitions] for t in req.topics]


def partition_offsets(req: OffsetCommitRequest, names: list[str | None], now: int) -> dict[tuple[str, int], Committed]:
    """The request's offsets, committed at ``now``; v2-v4's ``retention_time_ms`` other than
    -1 (the default) gives them an expiry time of their own, ``now`` + it, as Apache does."""
    retention_ms = round(req.retention_time.total_seconds() * 1000) if isinstance(req, _RETENTION) else -1
    expire = now + retention_ms if retention_ms != -1 else -1
    return {(name, index): Committed(offset, epoch, metadata, now, expire)
            for name, partitions in zip(names, _partitions(req), strict=True) if name is not None
            for index, offset, epoch, metadata in partitions}


def _topic(named: tuple[str, uuid.UUID | None], partitions: list[dict[str, object]]) -> dict[str, object]:
    """An answer topic named as the request named it (name, or id from v10)."""
    return {"name": named[0], "topic_id": named[1], "partitions": partitions}


def answer(req: OffsetCommitRequest, code: ErrorCode) -> list[dict[str, object]]:
    return [_topic(named, [{"partition_index": p[0], "error_code": code} for p in partitions])
            for named, partitions in zip(_named(req), _partitions(req), strict=True)]


async def handle(ctx: Context, req: OffsetCommitRequest) -> dict[str, object]:
    generation = req.generation_id_or_member_epoch
    known = ctx.broker.topics
    if not authorize(ctx, Op.READ, GROUP, req.group_id):
        return {"throttle_time": 0, "topics": answer(req, ErrorCode.group_authorization_failed)}
    names = topic_names(req, known)
    denied = {n for n in names if n is not None and not authorize(ctx, Op.READ, TOPIC, n)}
    try:
        code = await ctx.broker.groups.commit(
            req.group_id, member_id=req.member_id or "",
            group_instance_id=None if isinstance(req, _NO_INSTANCE) else req.group_instance_id,
            generation_id=generation, api_version=ctx.api_version,
            offsets={tp: c for tp, c in partition_offsets(req, names, ctx.broker.clock.wall_ms()).items()
                     if known.get(tp[0]) is not None and tp[0] not in denied})
    except KaasError as exc:
        code = exc.code
    out: list[dict[str, object]] = []
    for name, named, partitions in zip(names, _named(req), _partitions(req), strict=True):
        if name is None:
            topic_code = ErrorCode.unknown_topic_id
        elif name in denied:
            topic_code = ErrorCode.topic_authorization_failed
        elif code == ErrorCode.none and known.get(name) is None:
            topic_code = ErrorCode.unknown_topic_or_partition
        else:
            topic_code = code
        out.append(_topic(named, [{"partition_index": p[0], "error_code": topic_code} for p in partitions]))
    return {"throttle_time": 0, "topics": out}
