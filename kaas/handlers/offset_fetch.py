"""OffsetFetch (9): committed offsets of one group (v1-7) or several (v8+).
With require_stable, partitions with staged transactional offsets answer
UNSTABLE_OFFSET_COMMIT so the client retries once the transaction completes.

v10 (KIP-848) names topics by id: each id asked for is resolved to the topic that has it
now (UNKNOWN_TOPIC_ID when none does), and every answer topic carries its id; asked for
all of a group's offsets, topics that no longer exist are left out (they have no id)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, TypedDict

from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch import v1, v2, v3, v4, v5, v6, v7, v8, v9, v10

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, TOPIC, Op, authorize

if TYPE_CHECKING:
    import uuid
    from collections.abc import Sequence

    from kaas.handlers.context import Context

    OffsetFetchRequest: TypeAlias = (v1.OffsetFetchRequest | v2.OffsetFetchRequest | v3.OffsetFetchRequest
                                     | v4.OffsetFetchRequest | v5.OffsetFetchRequest | v6.OffsetFetchRequest
                                     | v7.OffsetFetchRequest | v8.OffsetFetchRequest | v9.OffsetFetchRequest
                                     | v10.OffsetFetchRequest)



# A topic asked for: (its name, None when its id (v10) names no topic; its id (v10) or
# None; the partitions)
_Asked: TypeAlias = "tuple[str | None, uuid.UUID | None, Sequence[int]]"
# A group asked for: (its id, the member id and epoch (v9+; else None, -1), its topics
# (None: all of the group's offsets))
_Group: TypeAlias = "tuple[str, str | None, int, list[_Asked] | None]"


class _PartitionAnswer(TypedDict):
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int
    metadata: str
    error_code: ErrorCode


class _TopicAnswer(TypedDict):
    name: str
    topic_id: uuid.UUID | None
    partitions: list[_PartitionAnswer]


API_KEY = 9
VERSIONS = (1, 10)
TOPIC_IDS_FROM = 10
# the versions that ask for several groups (v8+)
_GROUPS = (v8.OffsetFetchRequest, v9.OffsetFetchRequest, v10.OffsetFetchRequest)
_NOT_STABLE = (v1.OffsetFetchRequest, v2.OffsetFetchRequest, v3.OffsetFetchRequest, v4.OffsetFetchRequest,
               v5.OffsetFetchRequest, v6.OffsetFetchRequest)  # require_stable: v7+ (KIP-447)


def _groups(ctx: Context, req: OffsetFetchRequest) -> list[_Group]:
    """The groups asked for (one before v8), each with its topics as (name, id,
    partitions): by name (v1-9) or by id (v10)."""
    if isinstance(req, v10.OffsetFetchRequest):
        name_of = ctx.broker.topics.name_of
        return [(g.group_id, g.member_id, g.member_epoch, None if g.topics is None else
                 [(name_of(t.topic_id), t.topic_id, t.partition_indexes) for t in g.topics]) for g in req.groups]
    if isinstance(req, v9.OffsetFetchRequest):
        return [(g.group_id, g.member_id, g.member_epoch, None if g.topics is None else
                 [(t.name, None, t.partition_indexes) for t in g.topics]) for g in req.groups]
    if isinstance(req, v8.OffsetFetchRequest):
        return [(g.group_id, None, -1, None if g.topics is None else
                 [(t.name, None, t.partition_indexes) for t in g.topics]) for g in req.groups]
    return [(req.group_id, None, -1, None if req.topics is None else
             [(t.name, None, t.partition_indexes) for t in req.topics])]


def _blank(partitions: Sequence[int], code: ErrorCode) -> list[_PartitionAnswer]:
    return [{"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
             "error_code": code} for p in partitions]


def _group_error(ctx: Context, code: ErrorCode, asked: list[_Asked] | None) -> tuple[ErrorCode, list[_TopicAnswer]]:
    """A group-level error: alone from v2 on; before (no top-level error field), on each
    partition asked for."""
    if asked is None or ctx.api_version >= 2:
        return code, []
    return code, [{"name": n or "", "topic_id": i, "partitions": _blank(ps, code)} for n, i, ps in asked]


async def _one(ctx: Context, group: _Group, require_stable: bool) -> tuple[ErrorCode, list[_TopicAnswer]]:
    """(group-level error, topics). ``member_id``/``member_epoch`` (v9+) are checked
    against a consumer-protocol group (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID). A group-level
    error (NOT_COORDINATOR, LOAD_IN_PROGRESS, ...) comes with no partitions from v2 on, as in
    Apache: clients then retry the whole request. Partitions each carrying the error would
    reach the application as per-partition errors with no offset, which a consumer can
    mistake for "nothing committed"."""
    group_id, member_id, member_epoch, asked = group
    if not authorize(ctx, Op.DESCRIBE, GROUP, group_id):
        return _group_error(ctx, ErrorCode.group_authorization_failed, asked)
    wanted = None
    denied: set[str] = set()
    if asked is not None:
        denied = {n for n, _, _ in asked if n is not None and not authorize(ctx, Op.DESCRIBE, TOPIC, n)}
        wanted = [(n, p) for n, _, ps in asked for p in ps if n is not None and n not in denied]
    try:
        committed, pending = await ctx.broker.groups.fetch(group_id, wanted, require_stable,
                                                           member_id=member_id, member_epoch=member_epoch)
    except KaasError as exc:
        return _group_error(ctx, exc.code, asked)
    out: list[_TopicAnswer] = []
    by_topic: dict[str, list[_PartitionAnswer]] = {}
    for name, topic_id, ps in asked or ():
        if name is None:  # an id no topic has (v10)
            out.append({"name": "", "topic_id": topic_id, "partitions": _blank(ps, ErrorCode.unknown_topic_id)})
        elif name in denied:
            by_topic[name] = _blank(ps, ErrorCode.topic_authorization_failed)
    for (topic, part), c in committed.items():
        if asked is None and not authorize(ctx, Op.DESCRIBE, TOPIC, topic):
            continue  # all of the group's offsets: only the topics the principal may describe
        entry: _PartitionAnswer = {"partition_index": part, "committed_offset": -1, "committed_leader_epoch": -1,
                                   "metadata": "", "error_code": ErrorCode.none}
        if require_stable and (topic, part) in pending:
            entry["error_code"] = ErrorCode.unstable_offset_commit
        elif c is not None:
            entry["committed_offset"], entry["committed_leader_epoch"] = c.offset, c.leader_epoch
            entry["metadata"] = c.metadata if c.metadata is not None else ""
        by_topic.setdefault(topic, []).append(entry)
    for t, parts in by_topic.items():
        meta = ctx.broker.topics.get(t)
        if ctx.api_version >= TOPIC_IDS_FROM and meta is None:
            continue  # a topic that no longer exists has no id to name it by (v10)
        out.append({"name": t, "topic_id": meta.topic_id if meta is not None else None,
                    "partitions": sorted(parts, key=lambda e: e["partition_index"])})
    return ErrorCode.none, out


async def handle(ctx: Context, req: OffsetFetchRequest) -> dict[str, object]:
    stable = not isinstance(req, _NOT_STABLE) and req.require_stable
    asked = _groups(ctx, req)
    if isinstance(req, _GROUPS):
        groups: list[dict[str, object]] = []
        for g in asked:
            code, topics = await _one(ctx, g, stable)
            groups.append({"group_id": g[0], "topics": topics, "error_code": code})
        return {"throttle_time": 0, "groups": groups}
    code, topics = await _one(ctx, asked[0], stable)
    if ctx.api_version < 2 and code != ErrorCode.none:
        for t in topics:
            for p in t["partitions"]:
                p["error_code"] = code
    return {"throttle_time": 0, "topics": topics, "error_code": code}
