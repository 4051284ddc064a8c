"""CreateTopics (19): exclusive create of each topic file; the answer waits (up to the
request's timeout) until every live broker serves the topics: leaders opened, assignment
applied everywhere. Every topic file is written first and the wait is for all of them
together, so that a request for many topics takes one placement by the controller, not
one per topic.

The replication factor is -1 (the default, 1, as Apache's default.replication.factor) or
1..N where N is the number of registered brokers; above N is INVALID_REPLICATION_FACTOR
with Apache's message. It is kept in the topic file and says how many brokers Metadata
names as replicas (``kaas.domain.replicas``); the bytes are one copy on the shared volume.

A manual assignment (``assignments``, with num_partitions and replication_factor -1) is
checked as Apache's controller checks it (``replicas.check_create``: INVALID_REQUEST or
INVALID_REPLICA_ASSIGNMENT with Apache's messages) and kept in the topic file as the
partitions' replica lists; the controller makes the first live broker of each list its
leader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas import broker_configs, configs
from kaas.domain import replicas
from kaas.handlers._auth import CLUSTER, TOPIC, Op, authorize
from kaas.handlers._mutation_quota import REFUSED, Mutations

if TYPE_CHECKING:
    from kio.schema.create_topics import v2, v3, v4, v5, v6, v7

    from kaas.handlers.context import Context
    from kaas.storage.topics import TopicMeta

    CreateTopicsRequest: TypeAlias = (v2.CreateTopicsRequest | v3.CreateTopicsRequest | v4.CreateTopicsRequest
                                      | v5.CreateTopicsRequest | v6.CreateTopicsRequest | v7.CreateTopicsRequest)
    CreatableTopic: TypeAlias = (v2.request.CreatableTopic | v3.request.CreatableTopic | v4.request.CreatableTopic
                                 | v5.request.CreatableTopic | v6.request.CreatableTopic | v7.request.CreatableTopic)

API_KEY = 19
VERSIONS = (2, 7)
DEFAULT_REPLICATION_FACTOR = 1

log = structlog.get_logger()


def _described(ctx: Context, name: str, meta: TopicMeta | None, num_partitions: int, rf: int,
               topic_configs: dict[str, str]) -> dict[str, object]:
    """A created (or validated) topic's layout and configs, for a principal that may
    describe its configs; for another, TOPIC_AUTHORIZATION_FAILED in their place (Apache)."""
    broker = ctx.broker
    if not authorize(ctx, Op.DESCRIBE_CONFIGS, TOPIC, name):
        return {"topic_config_error_code": int(ErrorCode.topic_authorization_failed)}
    asked = num_partitions if num_partitions > 0 else broker.settings.num_partitions
    dyn = broker.dynamic
    return {"num_partitions": meta.partitions if meta else asked,
            "replication_factor": meta.replication_factor if meta else rf,
            "configs": [{"name": k, "value": v, "read_only": False, "is_sensitive": False,
                         "config_source": broker_configs.topic_source(dyn.static, dyn.default, dyn.mine, k)[0]
                         if is_default else broker_configs.SOURCE_TOPIC}
                        for k, (v, is_default) in configs.effective(broker.settings, topic_configs).items()]}


async def handle(ctx: Context, req: CreateTopicsRequest) -> dict[str, object]:
    broker = ctx.broker
    # answered once every live broker serves the new topics, within the request's timeout
    # (REQUEST_TIMED_OUT past it; 0: answered as soon as the topic files exist)
    deadline = trio.current_time() + req.timeout.total_seconds()
    out: list[dict[str, object]] = []
    created: list[tuple[dict[str, object], TopicMeta]] = []  # waited for once all exist
    seen: dict[str, int] = {}
    mutations = Mutations(ctx)
    for t in req.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    for t in req.topics:
        if seen[t.name] == 0:
            continue  # a name named more than once is answered once (Apache)
        res: dict[str, object] = {"name": t.name, "topic_id": None, "error_code": ErrorCode.none, "error_message": None,
                                  "num_partitions": -1, "replication_factor": -1, "configs": []}
        out.append(res)
        if seen[t.name] > 1:
            seen[t.name] = 0
            res["error_code"] = ErrorCode.invalid_request
            res["error_message"] = "Duplicate topic name."
            continue
        if not (authorize(ctx, Op.CREATE, CLUSTER) or authorize(ctx, Op.CREATE, TOPIC, t.name)):
            res["error_code"] = ErrorCode.topic_authorization_failed
            continue
        plan = _plan(ctx, t, res)
        if plan is None:
            continue
        num_partitions = plan[0]
        if not mutations.admit(t.name, num_partitions if num_partitions > 0 else broker.settings.num_partitions):
            res.update(REFUSED)  # KIP-599: the client's controller mutation quota is spent
            continue
        meta = await _create(ctx, t.name, plan, req.validate_only, res)
        if meta is not None:
            created.append((res, meta))
    mutations.settle([(t, c) for t, c in ((str(r["name"]), r["error_code"]) for r in out)
                      if isinstance(c, ErrorCode) and c != ErrorCode.throttling_quota_exceeded])
    for res, meta in created:
        if req.timeout.total_seconds() > 0 and \
                not await broker.admin.ensure_partitions(meta, deadline - trio.current_time()):
            # the topic exists and comes into service anyway, as with Apache
            res.update(error_code=ErrorCode.request_timed_out, topic_id=None, num_partitions=-1,
                       replication_factor=-1, configs=[],
                       error_message=f"topic {meta.name} created; not yet served by every broker")
    return {"throttle_time": 0, "topics": out}


Plan: TypeAlias = "tuple[int, int, dict[int, tuple[int, ...]], dict[str, str]]"
"""(partitions asked, replication factor, manual assignment, configs) of a valid topic."""


def _plan(ctx: Context, t: CreatableTopic, res: dict[str, object]) -> Plan | None:
    """The topic's checked parameters, or None with the refusal in ``res``."""
    broker = ctx.broker
    manual: dict[int, tuple[int, ...]] = {}
    num_partitions: int = t.num_partitions
    if t.assignments:
        lists = replicas.check_create([(a.partition_index, a.broker_ids) for a in t.assignments],
                                      t.num_partitions, t.replication_factor, broker.registered_brokers(),
                                      broker.alive_brokers())
        if isinstance(lists, replicas.AssignmentError):
            res["error_code"] = ErrorCode[lists.error]
            res["error_message"] = lists.message
            return None
        manual = dict(enumerate(lists))
        num_partitions = len(lists)
    rf = len(manual[0]) if manual else \
        DEFAULT_REPLICATION_FACTOR if t.replication_factor == -1 else t.replication_factor
    registered = len(broker.registered_brokers())
    if rf <= 0:
        res["error_code"] = ErrorCode.invalid_replication_factor
        res["error_message"] = "Replication factor must be larger than 0, or -1 to use the default value."
        return None
    if rf > registered:
        res["error_code"] = ErrorCode.invalid_replication_factor
        res["error_message"] = (f"Unable to replicate the partition {rf} time(s): The target replication factor "
                                f"of {rf} cannot be reached because only {registered} broker(s) are registered.")
        return None
    topic_configs = {c.name: c.value for c in t.configs if c.value is not None}
    isr_error = replicas.min_insync_replicas_error(topic_configs.get("min.insync.replicas"))
    if isr_error is not None:
        res["error_code"] = ErrorCode.invalid_config
        res["error_message"] = isr_error
        return None
    return num_partitions, rf, manual, topic_configs


async def _create(ctx: Context, name: str, plan: Plan, validate_only: bool, res: dict[str, object]) -> TopicMeta | None:
    """Create (or validate) the topic; its answer into ``res``. The topic's metadata when
    a file was written (the answer then waits for every broker to serve it)."""
    broker = ctx.broker
    num_partitions, rf, manual, topic_configs = plan
    try:
        meta, (code, msg) = await broker.admin.create_topic(
            name, num_partitions, topic_configs, validate_only=validate_only, replication_factor=rf,
            replica_assignment=manual, timeout=0)
    except OSError as exc:  # the topic file could not be written: no topic was created
        log.error("topic_write_failed", topic=name, error=str(exc))
        meta, code, msg = None, ErrorCode.kafka_storage_error, f"topic file not written: {exc.strerror}"
    res["error_code"] = code
    res["error_message"] = msg
    if code != ErrorCode.none:
        return None
    if meta is not None:
        res["topic_id"] = meta.topic_id
    res.update(_described(ctx, name, meta, num_partitions, rf, topic_configs))
    return meta
