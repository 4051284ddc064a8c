"""WriteTxnMarkers (27): a peer's transaction coordinator hands this broker the COMMIT/ABORT
markers of partitions it leads (``kaas.peers``). Answers per partition once the markers
are durable; a partition not led here gets NOT_LEADER_OR_FOLLOWER and the sender queues its
marker on the volume instead. A "topic" ``__kaas_group:<group id>`` carries a transaction's
offset hook for a group this broker coordinates (``TxnCoordinator.apply_marker_request``).

A connection accepted before this broker's write lease last lapsed is closed, not served:
its requests may have been sent before the peers declared this broker dead, and their
sender has queued the same markers since (``peer_link``'s invariants)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas.errors import CloseConnection, KaasError
from kaas.handlers._auth import CLUSTER, Op, authorize
from kaas.handlers._txn_common import coordinator

if TYPE_CHECKING:
    from kio.schema.write_txn_markers.v1 import WriteTxnMarkersRequest

    from kaas.handlers import Context

API_KEY = 27
VERSIONS = (1, 1)


async def handle(ctx: Context, req: WriteTxnMarkersRequest) -> dict[str, object]:
    if ctx.lapses != ctx.broker.cluster.lapses:
        raise CloseConnection("WriteTxnMarkers on a connection accepted before a lease lapse")
    results: list[dict[tuple[str, int], ErrorCode]] | None
    if not authorize(ctx, Op.CLUSTER_ACTION, CLUSTER):  # brokers only (super users or by ACL)
        results = [{(t.name, i): ErrorCode.cluster_authorization_failed for t in m.topics for i in t.partition_indexes}
                   for m in req.markers]
    else:
        results = None
    try:
        if results is None:
            results = await coordinator(ctx.broker).apply_marker_request(req.markers)
    except KaasError as exc:
        results = [{(t.name, i): exc.code for t in m.topics for i in t.partition_indexes} for m in req.markers]
    out: list[dict[str, object]] = []
    for m, codes in zip(req.markers, results, strict=True):
        out.append({"producer_id": m.producer_id, "topics": [
            {"name": t.name, "partitions": [
                {"partition_index": i, "error_code": codes.get((t.name, i), ErrorCode.unknown_server_error)}
                for i in t.partition_indexes]}
            for t in m.topics]})
    return {"markers": out}
