"""DescribeLogDirs (35): the shared data directory as each broker's one log directory.

kaas keeps every partition once, on the shared volume (docs/design.rst section 1), so each
broker reports the same directory (``--data``, absolute) with the size and free space of
its file system, and in it the partitions it leads now, each with the bytes of its
segments: asked of every broker (as Apache's admin client asks), each partition is counted
once. A follower replica holds no bytes of its own here, so none is listed; the offset lag
is 0 (the leader is the only copy) and nothing is a future replica (no
AlterReplicaLogDirs). As in Apache: DESCRIBE on the cluster is needed (v3+: a top-level
CLUSTER_AUTHORIZATION_FAILED; before v3 no directory is listed), and a directory whose file
system cannot be examined answers KAFKA_STORAGE_ERROR."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import structlog
from kio.schema.errors import ErrorCode

from kaas.handlers._auth import CLUSTER, Op, authorize
from kaas.storage.paths import volume_bytes

if TYPE_CHECKING:
    from kio.schema.describe_log_dirs import v1, v2, v3, v4, v5

    from kaas.handlers.context import Context

    DescribeLogDirsRequest: TypeAlias = (v1.DescribeLogDirsRequest | v2.DescribeLogDirsRequest
                                         | v3.DescribeLogDirsRequest | v4.DescribeLogDirsRequest
                                         | v5.DescribeLogDirsRequest)

API_KEY = 35
VERSIONS = (1, 5)

log = structlog.get_logger()


async def handle(ctx: Context, req: DescribeLogDirsRequest) -> dict[str, object]:
    broker = ctx.broker
    if not authorize(ctx, Op.DESCRIBE, CLUSTER):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "results": []}
    wanted: dict[str, set[int]] | None = None
    if req.topics is not None:
        wanted = {}
        for t in req.topics:
            wanted.setdefault(t.topic, set()).update(t.partitions)
    by_topic: dict[str, list[dict[str, object]]] = {}
    for (topic, index), part in sorted(broker.partitions.items()):
        if part.closed or (wanted is not None and index not in wanted.get(topic, ())):
            continue
        by_topic.setdefault(topic, []).append({"partition_index": index, "partition_size": part.log.size_bytes(),
                                               "offset_lag": 0, "is_future_key": False})
    log_dir = str(broker.settings.data.resolve())
    try:
        total, usable = await broker.run_io(volume_bytes, broker.settings.data)
    except OSError as exc:
        log.error("log_dir_unreadable", log_dir=log_dir, error=str(exc))
        return {"throttle_time": 0, "error_code": ErrorCode.none, "results": [
            {"error_code": ErrorCode.kafka_storage_error, "log_dir": log_dir, "topics": []}]}
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results": [
        {"error_code": ErrorCode.none, "log_dir": log_dir, "total_bytes": total, "usable_bytes": usable,
         "is_cordoned": False,
         "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}]}


__all__ = ["API_KEY", "VERSIONS", "handle"]
