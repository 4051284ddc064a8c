"""ListPartitionReassignments (46): the reassignments not carried out yet.

A reassignment (AlterPartitionReassignments) writes the partition's new replica list to
its topic file at once and moves no data (the bytes are one copy on the shared volume); it
is ongoing only until the controller leads the partition from a broker of the new list
(``domain.reassignment.ongoing``): then the replicas are the new list and the leader still
outside it, the adding replicas the new list, the removing one that leader. Any broker
answers, from the topic files and the assignment it applied. DESCRIBE on the cluster is
needed, as in Apache; a topic or partition that does not exist is left out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas.domain import reassignment
from kaas.handlers._auth import CLUSTER, Op, authorize

if TYPE_CHECKING:
    from kio.schema.list_partition_reassignments.v0 import ListPartitionReassignmentsRequest

    from kaas.handlers.context import Context

API_KEY = 46
VERSIONS = (0, 0)


async def handle(ctx: Context, req: ListPartitionReassignmentsRequest) -> dict[str, object]:
    broker = ctx.broker
    if not authorize(ctx, Op.DESCRIBE, CLUSTER):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None,
                "topics": []}
    broker.topics.refresh()
    topics = broker.topics.topics
    if req.topics is None:
        asked = [(name, list(range(meta.partitions))) for name, meta in sorted(topics.items())]
    else:
        asked = [(str(t.name), [int(p) for p in t.partition_indexes]) for t in req.topics]
    alive = broker.alive_brokers()
    out: list[dict[str, object]] = []
    for name, indexes in asked:
        meta = topics.get(name)
        if meta is None:
            continue
        rows = []
        for p in indexes:
            if not 0 <= p < meta.partitions:
                continue
            o = reassignment.ongoing(meta.replica_assignment.get(p), broker.leader(name, p)[0], alive)
            if o is not None:
                rows.append({"partition_index": p, "replicas": o.replicas, "adding_replicas": o.adding,
                             "removing_replicas": o.removing})
        if rows:
            out.append({"name": name, "partitions": rows})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "topics": out}


__all__ = ["API_KEY", "VERSIONS", "handle"]
