"""DescribeProducers (61, KIP-664): the producer state of partitions this broker leads.

Apache answers on every replica of a partition, followers included, and
``kafka-transactions find-hanging --broker-id N`` asks broker N about every partition it
holds a replica of. A kaas replica that does not lead the partition has no producer state
of its own (the leader's, in its memory, is the only one): it asks the leader over a peer
connection, as a follower would have copied it. A request from a peer, or about a
partition this broker is not a replica of, is answered NOT_LEADER_OR_FOLLOWER, as Apache.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import structlog
from kio.schema.describe_producers.v0 import request as dp
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32

from kaas.errors import KaasError, PeerUnavailable
from kaas.handlers._auth import TOPIC, Op, authorize
from kaas.wire.codec import PEER_CLIENT_PREFIX

if TYPE_CHECKING:
    from kio.schema.describe_producers.v0 import DescribeProducersRequest

    from kaas.handlers.context import Context

API_KEY = 61
VERSIONS = (0, 0)
PEER_TIMEOUT_S = 10.0

log = structlog.get_logger()

Row = dict[str, object]
Producer = Mapping[str, object]


def _row(index: int, code: ErrorCode, message: str | None = None, producers: Sequence[Producer] | None = None) -> Row:
    return {"partition_index": index, "error_code": code, "error_message": message,
            "active_producers": list(producers or ())}


def _replica_leader(ctx: Context, topic: str, index: int) -> int | None:
    """The partition's live leader when this broker is one of its other replicas (and the
    request is not a peer's), else None."""
    broker = ctx.broker
    meta = broker.topics.get(topic)
    if meta is None or (ctx.client_id or "").startswith(PEER_CLIENT_PREFIX):
        return None
    leader, _ = broker.leader(topic, index)
    if leader < 0 or leader == broker.id:
        return None
    return leader if broker.id in broker.replicas(broker.replica_view(), meta, index, leader).replicas else None


async def _ask_leader(ctx: Context, leader: int, keys: list[tuple[str, int]]) -> dict[tuple[str, int], Row]:
    topics: dict[str, list[int]] = {}
    for t, p in keys:
        topics.setdefault(t, []).append(p)
    req = dp.DescribeProducersRequest(topics=tuple(
        dp.TopicRequest(name=TopicName(t), partition_indexes=tuple(i32(p) for p in ps)) for t, ps in topics.items()))
    try:
        resp = await ctx.broker.peer_links.forward(leader, API_KEY, 0, req, PEER_TIMEOUT_S)
    except PeerUnavailable as exc:
        log.warning("describe_producers_leader_unavailable", leader=leader, error=str(exc))
        return {}
    return {(t.name, p.partition_index): _row(p.partition_index, p.error_code, p.error_message, [
        {"producer_id": a.producer_id, "producer_epoch": a.producer_epoch, "last_sequence": a.last_sequence,
         "last_timestamp": a.last_timestamp, "coordinator_epoch": a.coordinator_epoch,
         "current_txn_start_offset": a.current_txn_start_offset} for a in p.active_producers])
        for t in resp.topics for p in t.partitions}


async def handle(ctx: Context, req: DescribeProducersRequest) -> dict[str, object]:
    broker = ctx.broker
    rows: dict[tuple[str, int], Row] = {}
    remote: dict[int, list[tuple[str, int]]] = {}
    for t in req.topics:
        allowed = authorize(ctx, Op.READ, TOPIC, t.name)
        for index in t.partition_indexes:
            if not allowed:
                rows[(t.name, index)] = _row(index, ErrorCode.topic_authorization_failed)
                continue
            try:
                part = broker.get_partition(t.name, index)
            except KaasError as exc:
                rows[(t.name, index)] = _row(index, exc.code, exc.message)
                leader = _replica_leader(ctx, t.name, index) if exc.code == ErrorCode.not_leader_or_follower else None
                if leader is not None:
                    remote.setdefault(leader, []).append((t.name, index))
                continue
            rows[(t.name, index)] = _row(index, ErrorCode.none, None, part.log.producers.describe())
    for leader, keys in remote.items():
        rows.update({k: v for k, v in (await _ask_leader(ctx, leader, keys)).items() if k in rows})
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [rows[(t.name, i)] for i in t.partition_indexes]} for t in req.topics]}
