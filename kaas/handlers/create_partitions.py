"""CreatePartitions (37): grow a topic's partition count; answered once every live broker
serves the new partitions (up to the request's timeout, then REQUEST_TIMED_OUT). Handled by
the controller: another broker forwards it (``_forward``). Manual ``assignments`` for the new
partitions are checked as Apache does and kept as their replica lists (``replicas.check_add``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas.handlers import _forward
from kaas.handlers._auth import TOPIC, Op, authorize, merge, without
from kaas.handlers._mutation_quota import REFUSED, Mutations

if TYPE_CHECKING:
    from kio.schema.create_partitions import v0, v1, v2, v3
    from kio.static.protocol import ResponsePayload

    from kaas.handlers.context import Context

    CreatePartitionsRequest: TypeAlias = (v0.CreatePartitionsRequest | v1.CreatePartitionsRequest
                                          | v2.CreatePartitionsRequest | v3.CreatePartitionsRequest)

API_KEY = 37
VERSIONS = (0, 3)

log = structlog.get_logger()


async def handle(ctx: Context, req: CreatePartitionsRequest) -> dict[str, object] | ResponsePayload:
    # the ACL is checked before forwarding (the controller checks the forwarding broker
    # again), then KIP-599's quota charges each topic the partitions it would add
    denied: list[dict[str, object]] = [
        {"name": t.name, "error_code": ErrorCode.topic_authorization_failed, "error_message": None}
        for t in req.topics if not authorize(ctx, Op.ALTER, TOPIC, t.name)]
    mutations = Mutations(ctx)
    topics = ctx.broker.topics
    keep = []
    for t in req.topics:
        if not authorize(ctx, Op.ALTER, TOPIC, t.name):
            continue
        meta = topics.get(t.name)
        if meta is None or mutations.admit(t.name, t.count - meta.partitions):
            keep.append(t)
        else:
            denied.append({"name": t.name, **REFUSED})
    if not keep:
        mutations.settle([])
        return {"throttle_time": 0, "results": denied}
    answer = await _create(ctx, req if len(keep) == len(req.topics) else without(req, "topics", tuple(keep)))
    mutations.settle_answer(answer, "results")
    return merge(answer, "results", denied)


async def _create(ctx: Context, req: CreatePartitionsRequest) -> dict[str, object] | ResponsePayload:
    try:
        fwd = await _forward.to_controller(ctx, req, req.timeout.total_seconds())
    except _forward.NotForwarded as exc:
        return {"throttle_time": 0, "results": [
            {"name": t.name, "error_code": ErrorCode.not_controller, "error_message": str(exc)} for t in req.topics]}
    if fwd is not None:
        return fwd
    deadline = trio.current_time() + req.timeout.total_seconds()
    out: list[dict[str, object]] = []
    for t in req.topics:
        manual: list[tuple[int, ...]] | None = [tuple(a.broker_ids) for a in t.assignments] if t.assignments else None
        try:
            code, msg = await ctx.broker.admin.add_partitions(t.name, t.count, validate_only=req.validate_only,
                                                              assignments=manual,
                                                              timeout=deadline - trio.current_time())
        except OSError as exc:  # the topic file could not be written: the count is unchanged
            log.error("topic_write_failed", topic=t.name, error=str(exc))
            code, msg = ErrorCode.kafka_storage_error, f"topic file not written: {exc.strerror}"
        out.append({"name": t.name, "error_code": code, "error_message": msg})
    return {"throttle_time": 0, "results": out}
