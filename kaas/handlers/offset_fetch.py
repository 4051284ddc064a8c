"""OffsetFetch (9): committed offsets of one group (v1-7) or several (v8+).
With require_stable, partitions with staged transactional offsets answer
UNSTABLE_OFFSET_COMMIT so the client retries once the transaction completes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeAlias, TypedDict

from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch import v8, v9

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, TOPIC, Op, authorize

if TYPE_CHECKING:
    from collections.abc import Sequence

    from kio.schema.offset_fetch import v1, v2, v3, v4, v5, v6, v7

    from kaas.handlers import Context

    OffsetFetchRequest: TypeAlias = (v1.OffsetFetchRequest | v2.OffsetFetchRequest | v3.OffsetFetchRequest
                                     | v4.OffsetFetchRequest | v5.OffsetFetchRequest | v6.OffsetFetchRequest
                                     | v7.OffsetFetchRequest | v8.OffsetFetchRequest | v9.OffsetFetchRequest)



class _Topic(Protocol):
    """A topic of the request, of any version (``OffsetFetchRequestTopic(s)``)."""

    @property
    def name(self) -> str: ...
    @property
    def partition_indexes(self) -> Sequence[int]: ...


class _PartitionAnswer(TypedDict):
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int
    metadata: str
    error_code: ErrorCode


class _TopicAnswer(TypedDict):
    name: str
    partitions: list[_PartitionAnswer]


API_KEY = 9
VERSIONS = (1, 9)
_GROUPS = (v8.OffsetFetchRequest, v9.OffsetFetchRequest)  # the versions that ask for several groups (v8+)


async def _one(ctx: Context, group_id: str, topics: Sequence[_Topic] | None,
               require_stable: bool, member_id: str | None = None,
               member_epoch: int = -1) -> tuple[ErrorCode, list[_TopicAnswer]]:
    """(group-level error, topics). ``member_id``/``member_epoch`` (v9+) are checked
    against a consumer-protocol group (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID). A group-level
    error (NOT_COORDINATOR, LOAD_IN_PROGRESS, ...) comes with no partitions from v2 on, as in
    Apache: clients then retry the whole request. Partitions each carrying the error would
    reach the application as per-partition errors with no offset, which a consumer can
    mistake for "nothing committed"."""
    if not authorize(ctx, Op.DESCRIBE, GROUP, group_id):
        return ErrorCode.group_authorization_failed, []
    wanted = None
    denied: set[str] = set()
    if topics is not None:
        denied = {t.name for t in topics if not authorize(ctx, Op.DESCRIBE, TOPIC, t.name)}
        wanted = [(t.name, p) for t in topics for p in t.partition_indexes if t.name not in denied]
    try:
        committed, pending = await ctx.broker.groups.fetch(group_id, wanted, require_stable,
                                                           member_id=member_id, member_epoch=member_epoch)
    except KaasError as exc:
        if topics is None or ctx.api_version >= 2:
            return exc.code, []
        return exc.code, [{"name": t.name, "partitions": [
            {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
             "error_code": exc.code} for p in t.partition_indexes]} for t in topics]
    by_topic: dict[str, list[_PartitionAnswer]] = {}
    for t in topics or ():
        if t.name in denied:
            by_topic[t.name] = [{"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                                 "metadata": "", "error_code": ErrorCode.topic_authorization_failed}
                                for p in t.partition_indexes]
    for (topic, part), c in committed.items():
        if topics is None and not authorize(ctx, Op.DESCRIBE, TOPIC, topic):
            continue  # all of the group's offsets: only the topics the principal may describe
        entry: _PartitionAnswer = {"partition_index": part, "committed_offset": -1, "committed_leader_epoch": -1,
                                   "metadata": "", "error_code": ErrorCode.none}
        if require_stable and (topic, part) in pending:
            entry["error_code"] = ErrorCode.unstable_offset_commit
        elif c is not None:
            entry["committed_offset"], entry["committed_leader_epoch"] = c.offset, c.leader_epoch
            entry["metadata"] = c.metadata if c.metadata is not None else ""
        by_topic.setdefault(topic, []).append(entry)
    return ErrorCode.none, [{"name": t, "partitions": sorted(ps, key=lambda e: e["partition_index"])}
                            for t, ps in by_topic.items()]


async def handle(ctx: Context, req: OffsetFetchRequest) -> dict[str, object]:
    stable = getattr(req, "require_stable", False)
    if isinstance(req, _GROUPS):
        groups: list[dict[str, object]] = []
        for g in req.groups:
            code, topics = await _one(ctx, g.group_id, g.topics, stable, getattr(g, "member_id", None),
                                      getattr(g, "member_epoch", -1))
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": code})
        return {"throttle_time": 0, "groups": groups}
    code, topics = await _one(ctx, req.group_id, req.topics, stable)
    if ctx.api_version < 2 and code != ErrorCode.none:
        for t in topics:
            for p in t["partitions"]:
                p["error_code"] = code
    return {"throttle_time": 0, "topics": topics, "error_code": code}
