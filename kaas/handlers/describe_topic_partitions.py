"""DescribeTopicPartitions (75, KIP-966): the partitions of topics with leaders, replicas, ISR
and offline replicas, paged by a cursor (Java's AdminClient describeTopics since 3.7,
kafka-python's describe_topic_partitions).

As Apache's ``DescribeTopicPartitionsRequestHandler``: no topics = every topic; topics are
answered in name order from the cursor's topic on (its partitions from the cursor's index),
at most ``response_partition_limit`` partitions (capped at 2000, Apache's
max.request.partition.size.limit) per response, and ``next_cursor`` names where the next
page starts. A cursor whose topic is not among the requested ones, or whose partition is
negative, is INVALID_REQUEST for every requested topic. A requested topic that does not
exist is UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an invalid name); when
describing every topic, no such entry appears. Never auto-creates. Replicas as Metadata
reports them (``kaas.domain.replicas``); ELR lists are empty: every live replica is in sync.
Each topic the principal may describe, found or not, carries its authorized operations on
it (always, as Apache: ``kafka-topics --describe`` shows them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas.handlers._auth import TOPIC, Op, authorize, authorized_operations
from kaas.handlers._partitions import partition_row
from kaas.storage.topics import valid_topic_name

if TYPE_CHECKING:
    from kio.schema.describe_topic_partitions.v0 import DescribeTopicPartitionsRequest

    from kaas.handlers.context import Context

API_KEY = 75
VERSIONS = (0, 0)

MAX_PARTITIONS = 2000  # Apache's max.request.partition.size.limit default


def _error_response(names: Sequence[str], code: ErrorCode) -> dict[str, object]:
    return {"throttle_time": 0, "next_cursor": None,
            "topics": [{"error_code": code, "name": n, "topic_id": None, "is_internal": False, "partitions": []}
                       for n in names]}


async def handle(ctx: Context, req: DescribeTopicPartitionsRequest) -> dict[str, object]:
    broker = ctx.broker
    broker.topics.refresh()
    requested = [t.name for t in req.topics]
    fetch_all = not requested
    cursor = req.cursor
    if cursor is not None and ((not fetch_all and cursor.topic_name not in requested) or cursor.partition_index < 0):
        return _error_response(requested, ErrorCode.invalid_request)
    names = sorted(broker.topics.topics) if fetch_all else sorted(set(requested))
    if fetch_all:  # Apache: only the topics the principal may describe are listed
        names = [n for n in names if authorize(ctx, Op.DESCRIBE, TOPIC, n)]
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    remaining = max(0, min(req.response_partition_limit, MAX_PARTITIONS))
    view = broker.replica_view()
    topics: list[dict[str, object]] = []
    next_cursor = None
    for name in names:
        if remaining == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        meta = broker.topics.get(name)
        if not fetch_all and not authorize(ctx, Op.DESCRIBE, TOPIC, name):
            topics.append({"error_code": ErrorCode.topic_authorization_failed, "name": name, "topic_id": None,
                           "is_internal": False, "partitions": []})
            continue
        if meta is None:
            if not fetch_all:
                code = (ErrorCode.unknown_topic_or_partition if valid_topic_name(name)
                        else ErrorCode.invalid_topic_exception)
                topics.append({"error_code": code, "name": name, "topic_id": None, "is_internal": False,
                               "partitions": [],
                               "topic_authorized_operations": authorized_operations(ctx, TOPIC, name)})
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        end = min(meta.partitions, start + remaining)
        parts = [{**partition_row(broker, view, meta, p), "eligible_leader_replicas": (), "last_known_elr": ()}
                 for p in range(start, end)]
        topics.append({"error_code": ErrorCode.none, "name": name, "topic_id": meta.topic_id,
                       "is_internal": meta.internal, "partitions": parts,
                       "topic_authorized_operations": authorized_operations(ctx, TOPIC, name)})
        if end < meta.partitions:
            next_cursor = {"topic_name": name, "partition_index": end}
            break
        remaining -= len(parts)
    return {"throttle_time": 0, "topics": topics, "next_cursor": next_cursor}
