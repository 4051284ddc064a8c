"""Fetch (1): whole batches up to the high watermark (read_uncommitted) or the last stable
offset (read_committed), KIP-74 byte caps, long-poll on max_wait/min_bytes. Fetch sessions
are answered with session_id 0 (no session), listing every requested partition.

v13+ names topics by id (KIP-516): an id no topic has answers UNKNOWN_TOPIC_ID. A partition
this broker does not lead answers NOT_LEADER_OR_FOLLOWER with its current leader and epoch
(v12+) and, from v16, that leader's endpoint (KIP-951), so the client need not ask Metadata.
The follower fields (v15's ReplicaState, v17's replica directory id, v18's follower high
watermark) belong to Apache's replication, which the shared volume replaces: a fetch that
names a replica still needs CLUSTER_ACTION, and is answered as a consumer's."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas import counters
from kaas.broker.quota_sensors import FETCH as FETCH_QUOTA
from kaas.errors import KaasError
from kaas.handlers._auth import CLUSTER, TOPIC, Op, authorize
from kaas.wire import batch as wb
from kaas.wire import codec
from kaas.wire.build import build, ms

if TYPE_CHECKING:
    from kio.schema.fetch import v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15, v16, v17, v18

    from kaas.broker import Broker
    from kaas.handlers.context import Context

    FetchRequest: TypeAlias = (v4.FetchRequest | v5.FetchRequest | v6.FetchRequest | v7.FetchRequest
                               | v8.FetchRequest | v9.FetchRequest | v10.FetchRequest | v11.FetchRequest
                               | v12.FetchRequest | v13.FetchRequest | v14.FetchRequest | v15.FetchRequest
                               | v16.FetchRequest | v17.FetchRequest | v18.FetchRequest)

API_KEY = 1
VERSIONS = (4, 18)
TOPIC_IDS_FROM, LEADER_HINT_FROM, ENDPOINTS_FROM = 13, 12, 16

log = structlog.get_logger()


def _leader_hint(broker: Broker, topic: str, index: int, p: dict[str, object], leaders: set[int]) -> None:
    """KIP-951: the partition's current leader in its NOT_LEADER_OR_FOLLOWER answer; the
    leader's id joins ``leaders`` (whose endpoints a v16+ answer carries)."""
    leader, epoch = broker.served_leader(topic, index)
    p["current_leader"] = {"leader_id": leader, "leader_epoch": epoch}
    if leader >= 0:
        leaders.add(leader)


def _follower(req: FetchRequest) -> bool:
    """Does the fetch name a replica (Apache: a follower's, which needs CLUSTER_ACTION and
    is never throttled; kaas brokers send none)?"""
    return max(getattr(req, "replica_id", -1), getattr(getattr(req, "replica_state", None), "replica_id", -1)) >= 0


def _collect(ctx: Context, req: FetchRequest, leaders: set[int],
             cap: int | None) -> tuple[list[dict[str, object]], int, bool]:
    broker = ctx.broker
    read_committed = req.isolation_level == 1
    budget = req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF
    if cap is not None:  # a consumer quota: no more than one quota window's worth at once
        budget = min(budget, max(1, cap))
    total = 0
    errors = False
    out: list[dict[str, object]] = []
    follower = _follower(req)
    by_id = ctx.api_version >= TOPIC_IDS_FROM
    for ft in req.topics:
        parts: list[dict[str, object]] = []
        topic_id = getattr(ft, "topic_id", None)
        name = broker.topics.name_of(topic_id) if by_id else getattr(ft, "topic", None)
        out.append({"topic": name or "", "topic_id": topic_id, "partitions": parts})
        if name is None:  # an id no topic has (v13+)
            parts.extend(_blank(fp.partition, ErrorCode.unknown_topic_id) for fp in ft.partitions)
            errors = True
            continue
        allowed = authorize(ctx, Op.CLUSTER_ACTION, CLUSTER) if follower else authorize(ctx, Op.READ, TOPIC, name)
        for fp in ft.partitions:
            p = _blank(fp.partition, ErrorCode.none)
            parts.append(p)
            if not allowed:
                p["error_code"] = ErrorCode.topic_authorization_failed
                errors = True
                continue
            try:
                part = broker.get_partition(name, fp.partition)
            except KaasError as exc:
                p["error_code"] = exc.code
                if exc.code == ErrorCode.not_leader_or_follower and ctx.api_version >= LEADER_HINT_FROM:
                    _leader_hint(broker, name, fp.partition, p, leaders)
                errors = True
                continue
            epoch_req = getattr(fp, "current_leader_epoch", -1)
            if epoch_req >= 0 and epoch_req != part.epoch:
                p["error_code"] = (ErrorCode.fenced_leader_epoch if epoch_req < part.epoch
                                   else ErrorCode.unknown_leader_epoch)
                errors = True
                continue
            hw = part.high_watermark
            lso = part.last_stable_offset
            p["high_watermark"] = hw
            p["last_stable_offset"] = lso
            p["log_start_offset"] = part.log_start_offset
            if read_committed:
                p["aborted_transactions"] = []
            off = fp.fetch_offset
            if off < part.log_start_offset or off > hw:
                p["error_code"] = ErrorCode.offset_out_of_range
                errors = True
                continue
            limit = lso if read_committed else hw
            remaining = budget - total
            if remaining <= 0 and total:
                continue
            cap = min(fp.partition_max_bytes, remaining) if remaining > 0 else fp.partition_max_bytes
            try:
                res = part.read(off, cap, limit, min_one=(total == 0))
            except OSError as exc:  # a failing disk: the partition's error, not the connection's
                log.error("fetch_read_failed", topic=name, partition=fp.partition, error=str(exc))
                p["error_code"] = ErrorCode.kafka_storage_error
                errors = True
                continue
            if res.records:
                p["records"] = res.records
                total += len(res.records)
                if read_committed:
                    p["aborted_transactions"] = part.aborted_transactions(off, res.next_offset)
    return out, total, errors


def _count_out(responses: list[dict[str, object]]) -> None:
    """Per-topic bytes and records out (``kaas.counters``) of the records answered."""
    for t in responses:
        for p in t["partitions"]:  # type: ignore[attr-defined]
            data = p.get("records")
            if data:
                counters.record_fetched(t["topic"], len(data),  # type: ignore[arg-type]
                                        sum(h.records_count for _, h in wb.iter_headers(data)))


def _blank(index: int, code: ErrorCode) -> dict[str, object]:
    return {"partition_index": index, "error_code": code, "high_watermark": -1, "last_stable_offset": -1,
            "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}


async def handle(ctx: Context, req: FetchRequest) -> dict[str, object] | bytes:
    max_wait = ms(req.max_wait) / 1000
    deadline = trio.current_time() + max(0.0, max_wait)
    leaders: set[int] = set()
    quotas = ctx.broker.quotas
    cap = None if _follower(req) else quotas.fetch_cap(ctx.principal, ctx.client_id)
    while True:
        leaders.clear()
        responses, total, errors = _collect(ctx, req, leaders, cap)
        # Like Apache: min_bytes <= 0 answers at once, even with no data.
        if total >= req.min_bytes or errors or trio.current_time() >= deadline:
            break
        with trio.move_on_at(deadline):
            await ctx.broker.wait_for_data()
        if ctx.broker.draining:
            break
    endpoints = []
    if leaders and ctx.api_version >= ENDPOINTS_FROM:
        infos = (ctx.broker.broker_info(b, ctx.session.listener) for b in sorted(leaders))
        endpoints = [{"node_id": i.node_id, "host": i.host, "port": i.port, "rack": i.rack}
                     for i in infos if i is not None]
    answer = {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": responses,
              "node_endpoints": endpoints}
    if _follower(req) or not quotas.enabled(FETCH_QUOTA):
        _count_out(responses)
        return answer
    return _metered(ctx, answer, responses)


def _metered(ctx: Context, answer: dict[str, object], responses: list[dict[str, object]]) -> dict[str, object] | bytes:
    """The consumer byte rate counts the encoded answer; over the quota the answer is
    empty and its bytes are taken back (Apache), with the throttle time; the topics'
    bytes out count only what is sent."""
    body = codec.encode_body(API_KEY, ctx.api_version, build(codec.response_class(API_KEY, ctx.api_version), answer))
    quotas = ctx.broker.quotas
    throttle = quotas.record(FETCH_QUOTA, ctx.principal, ctx.client_id, len(body))
    if throttle <= 0:
        _count_out(responses)
        return body
    quotas.unrecord(FETCH_QUOTA, ctx.principal, ctx.client_id, len(body))
    ctx.throttle(FETCH_QUOTA, throttle)
    return {"throttle_time": throttle, "error_code": ErrorCode.none, "session_id": 0, "responses": [],
            "node_endpoints": []}
