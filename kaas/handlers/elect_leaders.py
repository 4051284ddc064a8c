"""ElectLeaders (43): preferred (type 0) and unclean (type 1) leader elections, decided by
``domain.elections`` and carried out by the controller (another broker forwards the
request, ``_forward``).

The controller keeps each election's choice (``ClusterView.elections``) and places the
partition there on its next tick, before its own rules would (a preferred broker back from
the dead is otherwise given partitions only after ``membership.placeable``'s hold); the
answer comes once the assignment names the elected leader, bounded by the request's
timeout (REQUEST_TIMED_OUT past it; the election still completes). As in Apache: ALTER on
the cluster is needed; an unknown topic or partition answers UNKNOWN_TOPIC_OR_PARTITION;
asked for every partition (null topics), every topic is listed with only those of its
partitions whose election was needed. An election type other than 0 and 1 answers
INVALID_REQUEST (and each partition's refusal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import structlog
from kio.schema.elect_leaders import v0, v1, v2
from kio.schema.errors import ErrorCode

from kaas.domain import elections
from kaas.handlers import _forward
from kaas.handlers._auth import CLUSTER, Op, authorize
from kaas.wire.build import ms

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from kaas.broker import Broker
    from kaas.handlers.context import Context

    ElectLeadersRequest: TypeAlias = v0.ElectLeadersRequest | v1.ElectLeadersRequest | v2.ElectLeadersRequest

API_KEY = 43
VERSIONS = (0, 2)

log = structlog.get_logger()

_Asked: TypeAlias = "list[tuple[str, list[int]]]"


def _asked(broker: Broker, req: ElectLeadersRequest) -> tuple[_Asked, bool]:
    """(topic, partitions) asked for, and whether that is every partition (null topics)."""
    if req.topic_partitions is None:
        return [(n, list(range(m.partitions))) for n, m in sorted(broker.topics.topics.items())], True
    return [(str(t.topic), [int(p) for p in t.partitions]) for t in req.topic_partitions], False


def _everywhere(asked: _Asked, code: ErrorCode, message: str | None) -> list[dict[str, object]]:
    return [{"topic": t, "partition_result": [{"partition_id": p, "error_code": code, "error_message": message}
                                              for p in ps]} for t, ps in asked]


def _decide(broker: Broker, election_type: int, topic: str, index: int) -> elections.Decision:
    meta = broker.topics.get(topic)
    if meta is None:
        return elections.Decision("unknown_topic_or_partition", f"No such topic as {topic}")
    if not 0 <= index < meta.partitions:
        return elections.Decision("unknown_topic_or_partition", f"No such partition as {topic}-{index}")
    leader, _epoch = broker.leader(topic, index)
    return elections.decide(election_type, leader, meta.replica_assignment.get(index), broker.alive_brokers())


async def handle(ctx: Context, req: ElectLeadersRequest) -> dict[str, object] | ResponsePayload:
    broker = ctx.broker
    election_type = elections.PREFERRED if isinstance(req, v0.ElectLeadersRequest) else req.election_type
    if not authorize(ctx, Op.ALTER, CLUSTER):
        asked: _Asked = [(str(t.topic), [int(p) for p in t.partitions]) for t in req.topic_partitions or ()]
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "replica_election_results": _everywhere(asked, ErrorCode.cluster_authorization_failed, None)}
    timeout = ms(req.timeout) / 1000
    try:
        fwd = await _forward.to_controller(ctx, req, timeout)
    except _forward.NotForwarded as exc:
        asked, _ = _asked(broker, req)
        return {"throttle_time": 0, "error_code": ErrorCode.none,
                "replica_election_results": _everywhere(asked, ErrorCode.not_controller, str(exc))}
    if fwd is not None:
        return fwd
    broker.topics.refresh()
    asked, every = _asked(broker, req)
    decided: dict[tuple[str, int], elections.Decision] = {}
    for topic, ps in asked:
        for p in ps:
            d = decided[(topic, p)] = _decide(broker, election_type, topic, p)
            if d.error == elections.ELECT:
                broker.cluster.elections[(topic, p)] = d.leader
    pending = {key: d.leader for key, d in decided.items() if d.error == elections.ELECT}
    if pending:
        log.info("leaders_elected", election_type=election_type, partitions=len(pending))
        await broker.admin.wait_served(
            lambda: all(broker.served_leader(t, p)[0] == b for (t, p), b in pending.items()), timeout)
    results: list[dict[str, Any]] = []
    for topic, ps in asked:
        rows = []
        for p in ps:
            d = decided[(topic, p)]
            if every and d.error == elections.NOT_NEEDED:
                continue
            code, message = ErrorCode[d.error], d.message
            if d.error == elections.ELECT and broker.served_leader(topic, p)[0] != d.leader:
                code, message = ErrorCode.request_timed_out, f"broker {d.leader} elected; not yet leading"
            rows.append({"partition_id": p, "error_code": code, "error_message": message})
        results.append({"topic": topic, "partition_result": rows})
    code = ErrorCode.none if election_type in (elections.PREFERRED, elections.UNCLEAN) else ErrorCode.invalid_request
    return {"throttle_time": 0, "error_code": code, "replica_election_results": results}


__all__ = ["API_KEY", "VERSIONS", "handle"]
