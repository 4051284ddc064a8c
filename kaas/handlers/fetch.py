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
from kio.schema.fetch import v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15, v16, v17, v18

from kaas import counters
from kaas.broker.quota_sensors import FETCH as FETCH_QUOTA
from kaas.errors import KaasError
from kaas.handlers._auth import CLUSTER, TOPIC, Op, authorize
from kaas.wire import codec
from kaas.wire.build import build, ms

if TYPE_CHECKING:
    import uuid

    from kaas.broker import Broker
    from kaas.handlers.context import Context

    FetchRequest: TypeAlias = (v4.FetchRequest | v5.FetchRequest | v6.FetchRequest | v7.FetchRequest
                               | v8.FetchRequest | v9.FetchRequest | v10.FetchRequest | v11.FetchRequest
                               | v12.FetchRequest | v13.FetchRequest | v14.FetchRequest | v15.FetchRequest
                               | v16.FetchRequest | v17.FetchRequest | v18.FetchRequest)

API_KEY = 1
VERSIONS = (4, 18)
LEADER_HINT_FROM, ENDPOINTS_FROM = 12, 16
_BY_ID = (v13.FetchRequest, v14.FetchRequest, v15.FetchRequest, v16.FetchRequest, v17.FetchRequest,
          v18.FetchRequest)  # topics named by id (KIP-516)
_REPLICA_STATE = (v15.FetchRequest, v16.FetchRequest, v17.FetchRequest, v18.FetchRequest)  # KIP-903: v15+
_NO_LEADER_EPOCH = (v4.FetchRequest, v5.FetchRequest, v6.FetchRequest, v7.FetchRequest,
                    v8.FetchRequest)  # current_leader_epoch: v9+ (KIP-320)
# A partition asked for: (index, the leader epoch the client knows (-1 before v9), the
# offset to read from, its byte cap)
_Asked: TypeAlias = tuple[int, int, int, int]

# A partition's records of this many bytes or more go out as a span of the segment file,
# with sendfile (``kaas.spans``); fewer are read into the answer (a descriptor duplicated,
# sent from and closed costs more than copying a few KiB).
SPAN_MIN = 64 * 1024
NO_SPANS = 1 << 62

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
    if isinstance(req, _REPLICA_STATE):
        return req.replica_state.replica_id >= 0
    return req.replica_id >= 0


def _asked(ctx: Context, req: FetchRequest) -> list[tuple[str | None, uuid.UUID | None, list[_Asked]]]:
    """Each topic asked for: (its name, None for an id no topic has (v13+); its id (v13+)
    or None; its partitions)."""
    if isinstance(req, _BY_ID):
        name_of = ctx.broker.topics.name_of
        return [(name_of(t.topic_id), t.topic_id,
                 [(p.partition, p.current_leader_epoch, p.fetch_offset, p.partition_max_bytes) for p in t.partitions])
                for t in req.topics]
    if isinstance(req, _NO_LEADER_EPOCH):
        return [(t.topic, None, [(p.partition, -1, p.fetch_offset, p.partition_max_bytes) for p in t.partitions])
                for t in req.topics]
    return [(t.topic, None,
             [(p.partition, p.current_leader_epoch, p.fetch_offset, p.partition_max_bytes) for p in t.partitions])
            for t in req.topics]


def _collect(ctx: Context, req: FetchRequest, leaders: set[int], cap: int | None,
             span_min: int) -> tuple[list[dict[str, object]], int, bool, list[tuple[str, int, int]]]:
    """The answer's topics, the bytes of records in it, whether a partition has an error,
    and (topic, bytes, records) of each partition with records, for ``kaas.counters``."""
    read_committed = req.isolation_level == 1
    budget = req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF
    if cap is not None:  # a consumer quota: no more than one quota window's worth at once
        budget = min(budget, max(1, cap))
    total = 0
    errors = False
    out: list[dict[str, object]] = []
    fetched: list[tuple[str, int, int]] = []
    follower = _follower(req)
    for name, topic_id, asked in _asked(ctx, req):
        parts: list[dict[str, object]] = []
        out.append({"topic": name or "", "topic_id": topic_id, "partitions": parts})
        if name is None:  # an id no topic has (v13+)
            parts.extend(_blank(a[0], ErrorCode.unknown_topic_id) for a in asked)
            errors = True
            continue
        allowed = authorize(ctx, Op.CLUSTER_ACTION, CLUSTER) if follower else authorize(ctx, Op.READ, TOPIC, name)
        for a in asked:
            if not allowed:
                parts.append(_blank(a[0], ErrorCode.topic_authorization_failed))
                errors = True
                continue
            p, read, count = _read(ctx, name, a, read_committed, budget - total, leaders, total == 0, span_min)
            parts.append(p)
            total += read
            if read:
                fetched.append((name, read, count))
            errors = errors or p["error_code"] != ErrorCode.none
    return out, total, errors, fetched


def _read(ctx: Context, name: str, asked: _Asked, read_committed: bool, remaining: int, leaders: set[int],
          first: bool, span_min: int) -> tuple[dict[str, object], int, int]:
    """One partition's answer, and the bytes and count of the records it carries
    (``remaining`` of the fetch's byte budget left; the first records of a fetch are
    answered whatever their size; ``span_min`` bytes or more of them go as a span of the
    segment file)."""
    broker = ctx.broker
    index, epoch_req, off, max_bytes = asked
    p = _blank(index, ErrorCode.none)
    try:
        part = broker.get_partition(name, index)
    except KaasError as exc:
        p["error_code"] = exc.code
        if exc.code == ErrorCode.not_leader_or_follower and ctx.api_version >= LEADER_HINT_FROM:
            _leader_hint(broker, name, index, p, leaders)
        return p, 0, 0
    if epoch_req >= 0 and epoch_req != part.epoch:
        p["error_code"] = ErrorCode.fenced_leader_epoch if epoch_req < part.epoch else ErrorCode.unknown_leader_epoch
        return p, 0, 0
    hw = part.high_watermark
    lso = part.last_stable_offset
    p["high_watermark"] = hw
    p["last_stable_offset"] = lso
    p["log_start_offset"] = part.log_start_offset
    if read_committed:
        p["aborted_transactions"] = []
    if off < part.log_start_offset or off > hw:
        p["error_code"] = ErrorCode.offset_out_of_range
        return p, 0, 0
    limit = lso if read_committed else hw
    if remaining <= 0 and not first:
        return p, 0, 0
    cap = min(max_bytes, remaining) if remaining > 0 else max_bytes
    try:
        res = part.read_span(off, cap, limit, first, span_min)
    except OSError as exc:  # a failing disk: the partition's error, not the connection's
        log.error("fetch_read_failed", topic=name, partition=index, error=str(exc))
        p["error_code"] = ErrorCode.kafka_storage_error
        return p, 0, 0
    if not res.records:
        return p, 0, 0
    p["records"] = res.records
    if read_committed:
        p["aborted_transactions"] = part.aborted_transactions(off, res.next_offset)
    return p, len(res.records), res.records_count


def _count_out(fetched: list[tuple[str, int, int]]) -> None:
    """Per-topic bytes and records out (``kaas.counters``) of the records answered."""
    for topic, size, count in fetched:
        counters.record_fetched(topic, size, count)


def _blank(index: int, code: ErrorCode) -> dict[str, object]:
    return {"partition_index": index, "error_code": code, "high_watermark": -1, "last_stable_offset": -1,
            "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}


async def handle(ctx: Context, req: FetchRequest) -> dict[str, object] | bytes:
    max_wait = ms(req.max_wait) / 1000
    deadline = trio.current_time() + max(0.0, max_wait)
    leaders: set[int] = set()
    quotas = ctx.broker.quotas
    cap = None if _follower(req) else quotas.fetch_cap(ctx.principal, ctx.client_id)
    metered = not _follower(req) and quotas.enabled(FETCH_QUOTA)
    # a metered answer is encoded here to be measured (``_metered``): records as bytes then
    span_min = NO_SPANS if metered else SPAN_MIN
    while True:
        leaders.clear()
        responses, total, errors, fetched = _collect(ctx, req, leaders, cap, span_min)
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
    if not metered:
        _count_out(fetched)
        return answer
    return _metered(ctx, answer, fetched)


def _metered(ctx: Context, answer: dict[str, object], fetched: list[tuple[str, int, int]]) -> dict[str, object] | bytes:
    """The consumer byte rate counts the encoded answer; over the quota the answer is
    empty and its bytes are taken back (Apache), with the throttle time; the topics'
    bytes out count only what is sent."""
    body = codec.encode_body(API_KEY, ctx.api_version, build(codec.response_class(API_KEY, ctx.api_version), answer))
    quotas = ctx.broker.quotas
    throttle = quotas.record(FETCH_QUOTA, ctx.principal, ctx.client_id, len(body))
    if throttle <= 0:
        _count_out(fetched)
        return body
    quotas.unrecord(FETCH_QUOTA, ctx.principal, ctx.client_id, len(body))
    ctx.throttle(FETCH_QUOTA, throttle)
    return {"throttle_time": throttle, "error_code": ErrorCode.none, "session_id": 0, "responses": [],
            "node_endpoints": []}
