"""AlterPartitionReassignments (45): new replica lists for partitions, kept on the volume.

A partition's bytes are one copy on the shared volume, so a reassignment moves no data: its
new list replaces the partition's manual replica list in the topic file, and the controller
then leads the partition from the list's first live broker (``domain.reassignment``). The
request is handled by the controller (the topic file's one writer; another broker forwards
it, ``_forward``), and answered once the leaders are in their new lists, or when the
request's timeout runs out (the reassignment is then listed as ongoing until they are).

Checked as Apache does: ALTER on the cluster; an unknown topic or partition; an empty list,
an unregistered or repeated broker, a list without a live broker (INVALID_REPLICA_ASSIGNMENT);
from v1 a changed replication factor without ``allow_replication_factor_change``
(INVALID_REPLICATION_FACTOR, KIP-860). A cancellation (null replicas) of a partition not
being reassigned answers NO_REASSIGNMENT_IN_PROGRESS; one of a reassignment still ongoing
cannot restore the old list, which the volume no longer holds, and answers
INVALID_REPLICA_ASSIGNMENT saying so (Apache reverts it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import structlog
import trio
from kio.schema.alter_partition_reassignments import v0, v1
from kio.schema.errors import ErrorCode

from kaas.domain import reassignment
from kaas.handlers import _forward
from kaas.handlers._auth import CLUSTER, Op, authorize
from kaas.wire.build import ms

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from kaas.broker import Broker
    from kaas.handlers.context import Context

    AlterPartitionReassignmentsRequest: TypeAlias = (v0.AlterPartitionReassignmentsRequest
                                                     | v1.AlterPartitionReassignmentsRequest)

API_KEY = 45
VERSIONS = (0, 1)

log = structlog.get_logger()

_Result: TypeAlias = "tuple[ErrorCode, str | None]"


def _everywhere(req: AlterPartitionReassignmentsRequest, code: ErrorCode, message: str | None) -> list[dict[str, Any]]:
    return [{"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code,
                                             "error_message": message} for p in t.partitions]} for t in req.topics]


def _check(broker: Broker, topic: str, index: int, target: tuple[int, ...] | None,
           allow_factor_change: bool) -> tuple[tuple[int, ...] | None, _Result]:
    """(the partition's new list, NONE), or (None, the error to answer)."""
    meta = broker.topics.get(topic)
    if meta is None or not 0 <= index < meta.partitions:
        return None, (ErrorCode.unknown_topic_or_partition, None)
    manual = meta.replica_assignment.get(index)
    alive = broker.alive_brokers()
    if target is None:
        if reassignment.ongoing(manual, broker.leader(topic, index)[0], alive) is None:
            return None, (ErrorCode.no_reassignment_in_progress, None)
        return None, (ErrorCode.invalid_replica_assignment,
                      f"The reassignment of {topic}-{index} cannot be cancelled: its new replica list is written "
                      "already and its leader is moving; reassign the partition again instead.")
    factor = len(manual) if manual is not None else meta.replication_factor
    err = reassignment.check_target(index, target, factor, broker.registered_brokers(), alive, allow_factor_change)
    if err is not None:
        return None, (ErrorCode[err.error], err.message)
    return target, (ErrorCode.none, None)


async def handle(ctx: Context, req: AlterPartitionReassignmentsRequest) -> dict[str, object] | ResponsePayload:
    broker = ctx.broker
    if not authorize(ctx, Op.ALTER, CLUSTER):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None,
                "responses": _everywhere(req, ErrorCode.cluster_authorization_failed, None)}
    timeout = ms(req.timeout) / 1000
    try:
        fwd = await _forward.to_controller(ctx, req, timeout)
    except _forward.NotForwarded as exc:
        return {"throttle_time": 0, "error_code": ErrorCode.not_controller, "error_message": str(exc),
                "responses": _everywhere(req, ErrorCode.not_controller, str(exc))}
    if fwd is not None:
        return fwd
    broker.topics.refresh()
    allow = isinstance(req, v0.AlterPartitionReassignmentsRequest) or req.allow_replication_factor_change
    deadline = trio.current_time() + timeout
    results: dict[tuple[str, int], _Result] = {}
    for t in req.topics:
        lists: dict[int, tuple[int, ...]] = {}
        for p in t.partitions:
            target = tuple(int(b) for b in p.replicas) if p.replicas is not None else None
            checked, error = _check(broker, t.name, p.partition_index, target, allow)
            if checked is None:
                results[(t.name, p.partition_index)] = error
            else:
                lists[p.partition_index] = checked
        if not lists:
            continue
        try:
            await broker.admin.reassign(t.name, lists, deadline - trio.current_time())
            outcome: _Result = (ErrorCode.none, None)
        except OSError as exc:  # the topic file was not written: nothing changed
            log.error("topic_write_failed", topic=t.name, error=str(exc))
            outcome = (ErrorCode.kafka_storage_error, f"topic file not written: {exc.strerror}")
        results.update({(t.name, p): outcome for p in lists})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
            "allow_replication_factor_change": allow, "responses": [
                {"name": t.name, "partitions": [
                    {"partition_index": p.partition_index, "error_code": results[(t.name, p.partition_index)][0],
                     "error_message": results[(t.name, p.partition_index)][1]} for p in t.partitions]}
                for t in req.topics]}


__all__ = ["API_KEY", "VERSIONS", "handle"]
