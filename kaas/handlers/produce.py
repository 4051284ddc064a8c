"""Produce (0): validate each partition's batch, append, and for acks=all wait for the
group-commit fsync. acks=0 returns None (no response is sent).

acks=all needs ``min(min.insync.replicas, replicas)`` in-sync replicas (as Metadata reports
them, ``kaas.domain.replicas``), else NOT_ENOUGH_REPLICAS before anything is appended. Each batch is
validated and normalised first (``wire.validate``, Apache's LogValidator rules: the table in
docs/validation.rst), with the topic's rules gathered once per topic (``_policy``). On a
``message.timestamp.type=LogAppendTime`` topic each batch is stamped with the broker's clock
and the response carries that time (-1 otherwise).

A request that carries a transactional batch but no transactional id is refused whole
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition, nothing appended), as Apache
refuses it before looking at any partition.

A transactional batch for a partition its transaction does not hold answers
INVALID_TXN_STATE, and TRANSACTION_ABORTABLE from v11 (KIP-890 part 1's new code). From
v12 (a transaction.version 2 producer, KIP-890 part 2) the leader adds such a partition to
the transaction itself, through the coordinator, before it appends (``_produce_txn``). v13
names topics by id (an unknown one: UNKNOWN_TOPIC_ID), and so does its answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

import structlog
import trio
from kio.schema.errors import ErrorCode
from kio.schema.produce import v13
from kio.schema.produce.v13 import request as r13

from kaas import configs, counters
from kaas.broker.quota_sensors import PRODUCE as PRODUCE_QUOTA
from kaas.domain import replicas
from kaas.errors import KaasError, NotInTransaction
from kaas.handlers import _produce_txn
from kaas.handlers._auth import TOPIC, TXN_ID, Op, authorize
from kaas.wire import batch as wb
from kaas.wire import validate as wv
from kaas.wire.compress import CODECS
from kaas.wire.produce_answer import PartitionAnswer, TopicAnswer, produce_body

if TYPE_CHECKING:
    from kio.schema.produce import v3, v4, v5, v6, v7, v8, v9, v10, v11, v12

    from kaas.broker import Broker
    from kaas.broker.partition import Partition
    from kaas.domain.replicas import View
    from kaas.handlers.context import Context
    from kaas.settings import Settings
    from kaas.storage.topics import TopicMeta

    ProduceRequest: TypeAlias = (v3.ProduceRequest | v4.ProduceRequest | v5.ProduceRequest | v6.ProduceRequest
                                 | v7.ProduceRequest | v8.ProduceRequest | v9.ProduceRequest | v10.ProduceRequest
                                 | v11.ProduceRequest | v12.ProduceRequest | v13.ProduceRequest)
    from kio.schema.produce.v3 import request as r3
    from kio.schema.produce.v4 import request as r4
    from kio.schema.produce.v5 import request as r5
    from kio.schema.produce.v6 import request as r6
    from kio.schema.produce.v7 import request as r7
    from kio.schema.produce.v8 import request as r8
    from kio.schema.produce.v9 import request as r9
    from kio.schema.produce.v10 import request as r10
    from kio.schema.produce.v11 import request as r11
    from kio.schema.produce.v12 import request as r12

    TopicProduceData: TypeAlias = (
        r3.TopicProduceData | r4.TopicProduceData | r5.TopicProduceData | r6.TopicProduceData
        | r7.TopicProduceData | r8.TopicProduceData | r9.TopicProduceData | r10.TopicProduceData | r11.TopicProduceData
        | r12.TopicProduceData | r13.TopicProduceData)
    PartitionProduceData: TypeAlias = (
        r3.PartitionProduceData | r4.PartitionProduceData | r5.PartitionProduceData | r6.PartitionProduceData
        | r7.PartitionProduceData | r8.PartitionProduceData | r9.PartitionProduceData | r10.PartitionProduceData
        | r11.PartitionProduceData | r12.PartitionProduceData | r13.PartitionProduceData)

API_KEY = 0
VERSIONS = (3, 13)
ABORTABLE_FROM = 11  # the first version told TRANSACTION_ABORTABLE (KIP-890)

log = structlog.get_logger()

TIMESTAMP_TYPE = "message.timestamp.type"
MIN_ISR = "min.insync.replicas"
BEFORE_MAX = "message.timestamp.before.max.ms"
AFTER_MAX = "message.timestamp.after.max.ms"
COMPRESSION = "compression.type"
LEVEL_OF = {1: "compression.gzip.level", 3: "compression.lz4.level", 4: "compression.zstd.level"}


def _topic_config(broker: Broker, meta: TopicMeta | None, name: str) -> str:
    """The topic's effective value of ``name`` (its override, else the broker default):
    ``configs.effective(...)[name]`` without building the whole table per request."""
    value = meta.configs.get(name) if meta is not None else None
    return configs.default(broker.settings, name) if value is None else value


def _min_isr(broker: Broker, meta: TopicMeta | None) -> int:
    try:
        return int(_topic_config(broker, meta, MIN_ISR))
    except ValueError:  # validated at create/alter; a hand-edited file counts as the default
        return 1


def _policy(broker: Broker, meta: TopicMeta | None, log_append_time: bool) -> wv.Policy:
    """The topic's batch rules, read once per topic and request (a config validated at
    create/alter; a hand-edited file that does not parse counts as the default)."""
    def number(name: str) -> int:
        try:
            return int(_topic_config(broker, meta, name))
        except ValueError:
            return int(configs.default(broker.settings, name))

    codec = CODECS.get(_topic_config(broker, meta, COMPRESSION), -1)
    return wv.Policy(
        max_size=configs.max_message_bytes(broker.settings, meta),
        log_append_time=log_append_time,
        compact="compact" in _topic_config(broker, meta, "cleanup.policy").split(","),
        before_max_ms=number(BEFORE_MAX), after_max_ms=number(AFTER_MAX),
        codec=codec, level=number(LEVEL_OF[codec]) if codec in LEVEL_OF else None)


_RULES_MAX = 10_000  # topics whose rules are kept (then the cache starts over)
_rules: dict[str, tuple[TopicMeta | None, Settings, bool, wv.Policy, int]] = {}


def _topic_rules(broker: Broker, name: str, meta: TopicMeta | None) -> tuple[bool, wv.Policy, int]:
    """(log_append_time, the batch policy, min.insync.replicas) of a topic: made once per
    version of its configs and of the broker's (a topic's ``TopicMeta`` and the broker's
    ``Settings`` are replaced, never changed in place, when configs are altered), rather
    than read from both per request."""
    settings = broker.settings
    cached = _rules.get(name)
    if cached is not None and cached[0] is meta and cached[1] is settings:
        return cached[2], cached[3], cached[4]
    log_append_time = _topic_config(broker, meta, TIMESTAMP_TYPE) == "LogAppendTime"
    policy = _policy(broker, meta, log_append_time)
    min_isr = _min_isr(broker, meta)
    if len(_rules) >= _RULES_MAX:
        _rules.clear()
    _rules[name] = (meta, settings, log_append_time, policy, min_isr)
    return log_append_time, policy, min_isr


def _has_transactional_batch(req: ProduceRequest) -> bool:
    """Does any partition carry a transactional batch (attributes bit 4, byte 22)?"""
    for td in req.topic_data:
        for pd in td.partition_data:
            r = pd.records
            if r is not None and len(r) > 22 and r[22] & wb.ATTR_TRANSACTIONAL:
                return True
    return False


@dataclass
class _Appends:
    """One Produce request's appends: what every partition shares, and the partitions an
    acks=all answer waits on."""

    ctx: Context
    transactional_id: str | None
    acks: int
    txn_denied: bool
    now: int = 0
    refused: dict[tuple[str, int], _produce_txn.Refusal] = field(default_factory=dict)  # before any append
    view: View | None = None  # the cluster snapshot for min.insync.replicas, taken once when needed
    waits: list[tuple[Partition, int, PartitionAnswer]] = field(default_factory=list)


async def handle(ctx: Context, req: ProduceRequest) -> dict[str, object] | bytes | None:
    run = _Appends(ctx, req.transactional_id, req.acks, _txn_denied(ctx, req))
    topics_out: list[TopicAnswer] = []
    # Pipelined Produce requests of one connection append in the order they arrived (as
    # Apache handles a connection's requests one at a time): this one's appends wait for
    # the earlier ones', which may have parked (a transactional batch's KIP-890 check
    # reads the slot file in a worker thread). The wait for durability is not ordered.
    turn = ctx.turn
    try:
        if turn is not None:
            await turn.wait()
        names = _topic_names(ctx, req)
        topic_data: tuple[TopicProduceData, ...] = req.topic_data
        if not run.txn_denied:
            run.refused = await _produce_txn.before_appends(ctx, req.transactional_id, [
                (name, [(pd.index, pd.records) for pd in td.partition_data])
                for name, td in zip(names, topic_data, strict=True)])
        run.now = ctx.broker.clock.wall_ms()
        for name, td in zip(names, topic_data, strict=True):
            topics_out.append(await _append_topic(run, td, name))
    finally:
        if turn is not None:
            turn.done()
    await _wait_durable(ctx.broker, run.waits)
    # the producer byte rate counts the request's bytes, acks=0 or not (Apache); an acks=0
    # producer over its quota gets no answer but a muted connection all the same
    ctx.throttle(PRODUCE_QUOTA, ctx.broker.quotas.record(PRODUCE_QUOTA, ctx.principal, ctx.client_id,
                                                         ctx.request_size))
    if req.acks == 0:
        return None
    body = produce_body(ctx.api_version, topics_out)  # the answer's template, patched
    return body if body is not None else {"responses": topics_out, "throttle_time": 0}


def _topic_names(ctx: Context, req: ProduceRequest) -> list[str | None]:
    """Each topic's name: as named, or from v13 by its id (None: no topic has that id)."""
    if not isinstance(req, v13.ProduceRequest):
        return [td.name for td in req.topic_data]
    topics = ctx.broker.topics
    return [topics.name_of(td.topic_id) for td in req.topic_data]


def _txn_denied(ctx: Context, req: ProduceRequest) -> bool:
    """Is every batch refused for the transactional id (a transactional batch without one,
    or no WRITE on it)?"""
    if req.transactional_id is not None:
        return not authorize(ctx, Op.WRITE, TXN_ID, req.transactional_id)
    if _has_transactional_batch(req):
        log.warning("produce_batch_rejected", peer=ctx.peer, reason="transactional batch without a transactional id")
        return True
    return False


def _answer(index: int, error_code: ErrorCode = ErrorCode.none) -> PartitionAnswer:
    return {"index": index, "error_code": error_code, "base_offset": -1, "log_append_time": -1,
            "log_start_offset": -1, "record_errors": []}


def _named(name: str, td: TopicProduceData, parts: list[PartitionAnswer]) -> TopicAnswer:
    """A topic's answer, named as the request named it (its id from v13)."""
    if isinstance(td, r13.TopicProduceData) and td.topic_id is not None:
        return {"name": name, "topic_id": td.topic_id, "partition_responses": parts}
    return {"name": name, "partition_responses": parts}


async def _append_topic(run: _Appends, td: TopicProduceData, name: str | None) -> TopicAnswer:
    """Authorise, create if need be, and append each partition's batch of one topic."""
    ctx, broker = run.ctx, run.ctx.broker
    if name is None:  # v13: no topic has that id
        return _named("", td, [_answer(pd.index, ErrorCode.unknown_topic_id) for pd in td.partition_data])
    denied = (ErrorCode.transactional_id_authorization_failed if run.txn_denied
              else None if authorize(ctx, Op.WRITE, TOPIC, name) else ErrorCode.topic_authorization_failed)
    if denied is not None:
        return _named(name, td, [_answer(pd.index, denied) for pd in td.partition_data])
    meta = broker.topics.get(name)
    create_error = None
    if meta is None:
        try:  # only Metadata creates topics (as in Apache): a missing one is UNKNOWN_TOPIC_OR_PARTITION
            meta = await broker.admin.ensure_topic(name, auto_create=False)
        except OSError as exc:  # the topic files could not be read
            log.error("topic_read_failed", topic=name, error=str(exc))
            create_error = ErrorCode.kafka_storage_error
    log_append_time, policy, min_isr = _topic_rules(broker, name, meta)
    if run.acks != -1:
        min_isr = 1
    parts_out: list[PartitionAnswer] = []
    for pd in td.partition_data:
        if run.acks not in (-1, 0, 1):
            parts_out.append(_answer(pd.index, ErrorCode.invalid_required_acks))
        elif create_error is not None:
            parts_out.append(_answer(pd.index, create_error))
        elif (name, pd.index) in run.refused:
            code, message = run.refused[(name, pd.index)]
            parts_out.append(_answer(pd.index, code))
            if message is not None:
                parts_out[-1]["error_message"] = message
        else:
            parts_out.append(await _append_partition(run, name, meta, pd, log_append_time, policy, min_isr))
    return _named(name, td, parts_out)


async def _append_partition(run: _Appends, topic: str, meta: TopicMeta | None, pd: PartitionProduceData,
                            log_append_time: bool, policy: wv.Policy, min_isr: int) -> PartitionAnswer:
    """Check min.insync.replicas, validate and append one partition's batch; its answer
    (an acks=all one joins ``run.waits``)."""
    ctx, broker = run.ctx, run.ctx.broker
    out = _answer(pd.index)
    try:
        part = broker.get_partition(topic, pd.index)
        if min_isr > 1:
            assert meta is not None  # (get_partition found the topic)
            run.view = run.view or broker.replica_view()
            rs = broker.replicas(run.view, meta, pd.index, broker.id)
            if not replicas.enough_in_sync(rs, min_isr):
                raise KaasError(ErrorCode.not_enough_replicas,
                                f"The size of the current ISR : {len(rs.isr)} is insufficient to satisfy "
                                f"the min.isr requirement of {min_isr} for partition {topic}-{pd.index}, "
                                f"live replica(s) broker.id are : {list(rs.isr)}")
        records = pd.records or b""
        if ctx.api_version < 7 and len(records) > 22 and records[22] & wb.ATTR_CODEC_MASK == 4:
            raise KaasError(ErrorCode.unsupported_compression_type)
        records, header = wv.validate(records, policy, run.now)
        result = await part.produce(records, header, run.transactional_id, log_append_time=log_append_time)
        if not result.duplicate:
            counters.record_produced(topic, len(records), header.records_count)
    except KaasError as exc:
        out["error_code"] = (ErrorCode.transaction_abortable
                             if isinstance(exc, NotInTransaction) and ctx.api_version >= ABORTABLE_FROM else exc.code)
        out["error_message"] = exc.message
        return out
    except wb.BatchError as exc:
        log.warning("produce_batch_rejected", peer=ctx.peer, topic=topic, partition=pd.index, reason=exc.reason)
        out["error_code"] = ErrorCode(exc.code)
        out["error_message"] = exc.reason
        if isinstance(exc, wv.Rejected):
            out["record_errors"] = [{"batch_index": i, "batch_index_error_message": m}
                                    for i, m in exc.record_errors]
        return out
    out["base_offset"] = result.base_offset
    out["log_append_time"] = result.log_append_time
    out["log_start_offset"] = part.log_start_offset
    if run.acks == -1:
        run.waits.append((part, result.next_offset, out))
    return out


async def _wait_durable(broker: Broker, waits: list[tuple[Partition, int, PartitionAnswer]]) -> None:
    """acks=all: wait for each appended batch's group-commit fsync; a failure turns that
    partition's answer into the error."""
    async def wait_one(part: Partition, offset: int, out: PartitionAnswer) -> None:
        try:
            await part.wait_durable(offset)
        except KaasError as exc:
            out["error_code"] = exc.code
            out["base_offset"] = -1
            out["log_append_time"] = -1

    if len(waits) <= 1 or broker.memory_backed:
        # On tmpfs the fsync runs inline (no thread, nothing to overlap): one task per
        # partition would only add scheduling, which dominates at 1,000 partitions.
        for w in waits:
            await wait_one(*w)
    else:
        async with trio.open_nursery() as nursery:
            for w in waits:
                nursery.start_soon(wait_one, *w)
