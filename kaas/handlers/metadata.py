"""Metadata (3): brokers, controller, topics with leaders and leader epochs; auto-creation.

Each partition lists as many replicas as its topic's replication factor, the leader first,
with the live ones in the ISR and the dead ones in offline_replicas (``kaas.domain.replicas``).
A partition without a live leader answers LEADER_NOT_AVAILABLE and still lists replicas."""

from __future__ import annotations

import structlog
from kio.schema.errors import ErrorCode

from kaas.handlers._partitions import partition_row

API_KEY = 3
VERSIONS = (0, 12)

log = structlog.get_logger()


async def handle(ctx, req) -> dict:
    broker = ctx.broker
    broker.topics.refresh()
    if req.topics is None or (ctx.api_version == 0 and not req.topics):
        names = sorted(broker.topics.topics)
        auto = False
    else:
        names = [t.name for t in req.topics]
        auto = getattr(req, "allow_auto_topic_creation", True)
    topics = []
    view = broker.replica_view()
    for name in names:
        if name is None:
            topics.append({"error_code": ErrorCode.unknown_topic_id, "name": None, "partitions": []})
            continue
        try:
            meta = await broker.admin.ensure_topic(name, auto_create=auto)
        except OSError as exc:
            # auto-creation could not write the topic file: as Apache answers a topic
            # being auto-created (retriable), and the client asks again
            log.error("topic_write_failed", topic=name, error=str(exc))
            topics.append({"error_code": ErrorCode.leader_not_available, "name": name, "partitions": []})
            continue
        if meta is None:
            from kaas.storage.topics import valid_topic_name
            code = ErrorCode.unknown_topic_or_partition if valid_topic_name(name) else ErrorCode.invalid_topic_exception
            topics.append({"error_code": code, "name": name, "partitions": []})
            continue
        parts = [partition_row(broker, view, meta, p) for p in range(meta.partitions)]
        topics.append({"error_code": ErrorCode.none, "name": name, "topic_id": meta.topic_id,
                       "is_internal": False, "partitions": parts})
    return {
        "throttle_time": 0,
        "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                    for b in broker.brokers(ctx.session.listener)],
        "cluster_id": broker.settings.cluster_id,
        "controller_id": broker.controller_id(ctx.session.listener),
        "topics": topics,
        "cluster_authorized_operations": -2147483648,
    }
