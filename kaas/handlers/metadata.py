"""Metadata (3): brokers, controller, topics with leaders and leader epochs; auto-creation.

Each partition lists as many replicas as its topic's replication factor, the leader first,
with the live ones in the ISR and the dead ones in offline_replicas (``kaas.domain.replicas``).
A partition without a live leader answers LEADER_NOT_AVAILABLE and still lists replicas.
v13's top-level error code (KIP-1102: REBOOTSTRAP_REQUIRED, for a client whose brokers all
left the cluster) is always NONE: every kaas broker answers for the whole cluster."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, TypeAlias

import structlog
from kio.schema.errors import ErrorCode
from kio.schema.metadata import v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13

from kaas.handlers._auth import CLUSTER, OPS_NOT_ASKED, TOPIC, Op, authorize, authorized_operations, cluster_operations
from kaas.handlers._partitions import partition_row

if TYPE_CHECKING:
    from kaas.handlers.context import Context

    MetadataRequest: TypeAlias = (v0.MetadataRequest | v1.MetadataRequest | v2.MetadataRequest | v3.MetadataRequest
                                  | v4.MetadataRequest | v5.MetadataRequest | v6.MetadataRequest
                                  | v7.MetadataRequest | v8.MetadataRequest | v9.MetadataRequest
                                  | v10.MetadataRequest | v11.MetadataRequest | v12.MetadataRequest
                                  | v13.MetadataRequest)

API_KEY = 3
VERSIONS = (0, 13)

_WITH_IDS = (v10.MetadataRequest, v11.MetadataRequest, v12.MetadataRequest, v13.MetadataRequest)  # KIP-516
_NO_AUTO_CREATE = (v0.MetadataRequest, v1.MetadataRequest, v2.MetadataRequest, v3.MetadataRequest)  # asked from v4
_TOPIC_OPS = (v8.MetadataRequest, v9.MetadataRequest) + _WITH_IDS  # KIP-430: v8+
_CLUSTER_OPS = (v8.MetadataRequest, v9.MetadataRequest, v10.MetadataRequest)  # KIP-430, until v10 (KIP-700)

log = structlog.get_logger()


def _topics(req: MetadataRequest) -> list[tuple[str | None, uuid.UUID | None]] | None:
    """The topics the request names, as (name, id: v10+, else None); None: every topic."""
    if req.topics is None:
        return None
    if isinstance(req, _WITH_IDS):
        return [(t.name, t.topic_id) for t in req.topics or ()]
    return [(t.name, None) for t in req.topics]


def _asked_id(tid: uuid.UUID | None) -> uuid.UUID | None:
    """The topic id a request topic asks for; None for a name (no id, or the zero id)."""
    return tid if tid is not None and tid.int != 0 else None


async def handle(ctx: Context, req: MetadataRequest) -> dict[str, object]:
    broker = ctx.broker
    asked = _topics(req)
    if ctx.api_version < 12 and any(n is None or _asked_id(tid) is not None for n, tid in asked or ()):
        return _by_id_refused(asked or [])
    broker.topics.refresh()
    listing = asked is None or (ctx.api_version == 0 and not asked)
    names: list[str | uuid.UUID]  # (an id: a topic asked for by an id no topic has, v10+)
    by_name: set[str | None] = set()
    if listing or asked is None:  # every topic: only those the principal may describe (Apache)
        names = [n for n in sorted(broker.topics.topics) if authorize(ctx, Op.DESCRIBE, TOPIC, n)]
        auto = False
    else:
        # a topic asked for by id (v10+, KIP-516: a KIP-848 consumer resolves its assignment
        # so) is named from the topic files, and never auto-created
        # A non-zero id wins over the name, as in Apache: the Java client (4.x, a broker-side
        # regex subscription) sends its ids with the name "" rather than null
        by_id = {m.topic_id: n for n, m in broker.topics.topics.items()}
        names = [(by_id.get(tid, tid) if (tid := _asked_id(t_id)) is not None else name)  # type: ignore[misc]
                 for name, t_id in asked]
        by_name = {name for name, t_id in asked if _asked_id(t_id) is None}
        auto = isinstance(req, _NO_AUTO_CREATE) or req.allow_auto_topic_creation
    topics: list[dict[str, object]] = []
    view = broker.replica_view()
    topic_ops = isinstance(req, _TOPIC_OPS) and req.include_topic_authorized_operations
    for name in names:
        if isinstance(name, uuid.UUID):
            topics.append({"error_code": ErrorCode.unknown_topic_id, "name": None, "topic_id": name,
                           "partitions": []})
            continue
        if not listing and not authorize(ctx, Op.DESCRIBE, TOPIC, name):
            topics.append({"error_code": ErrorCode.topic_authorization_failed, "name": name, "partitions": []})
            continue
        # auto-creation needs CREATE on the cluster or the topic (Apache); without it a
        # missing topic is only reported missing
        create = auto and name in by_name and (authorize(ctx, Op.CREATE, CLUSTER)
                                               or authorize(ctx, Op.CREATE, TOPIC, name))
        try:
            meta = await broker.admin.ensure_topic(name, auto_create=create)
        except OSError as exc:
            # auto-creation could not write the topic file: as Apache answers a topic
            # being auto-created (retriable), and the client asks again
            log.error("topic_write_failed", topic=name, error=str(exc))
            topics.append({"error_code": ErrorCode.leader_not_available, "name": name, "partitions": []})
            continue
        if meta is None:
            from kaas.storage.topics import valid_topic_name
            code = ErrorCode.unknown_topic_or_partition if valid_topic_name(name) else ErrorCode.invalid_topic_exception
            if auto and name in by_name and broker.settings.auto_create_topics and not create:
                code = ErrorCode.topic_authorization_failed  # Apache: creation asked for, CREATE missing
            topics.append({"error_code": code, "name": name, "partitions": []})
            continue
        parts = [partition_row(broker, view, meta, p) for p in range(meta.partitions)]
        topics.append({"error_code": ErrorCode.none, "name": name, "topic_id": meta.topic_id,
                       "is_internal": False, "partitions": parts,
                       "topic_authorized_operations": authorized_operations(ctx, TOPIC, name)
                       if topic_ops else OPS_NOT_ASKED})
    return {
        "throttle_time": 0,
        "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                    for b in broker.brokers(ctx.session.listener)],
        "cluster_id": broker.settings.cluster_id,
        "controller_id": broker.controller_id(ctx.session.listener),
        "topics": topics,
        "error_code": ErrorCode.none,
        "cluster_authorized_operations": cluster_operations(ctx)
        if isinstance(req, _CLUSTER_OPS) and req.include_cluster_authorized_operations else OPS_NOT_ASKED,
    }


def _by_id_refused(asked: list[tuple[str | None, uuid.UUID | None]]) -> dict[str, object]:
    """Versions 10 and 11 carry topic ids but may not use them (names cannot be null
    before v12): as Apache, the whole request is refused, each topic INVALID_REQUEST with
    its name ("" for none) and id echoed, and no brokers."""
    return {"throttle_time": 0, "brokers": [], "cluster_id": None, "controller_id": -1,
            "topics": [{"error_code": ErrorCode.invalid_request, "name": name or "",
                        "topic_id": tid, "is_internal": False, "partitions": [],
                        "topic_authorized_operations": OPS_NOT_ASKED} for name, tid in asked],
            "cluster_authorized_operations": OPS_NOT_ASKED}
