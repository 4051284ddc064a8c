"""WriteTxnMarkers (27): a peer's transaction coordinator hands this broker the COMMIT/ABORT
markers of partitions it leads (``kaas.peers``). Answers per partition once the markers
are durable; a partition not led here gets NOT_LEADER_OR_FOLLOWER and the sender queues its
marker on the volume instead. A "topic" ``__kaas_group:<group id>`` carries a transaction's
offset hook for a group this broker coordinates (``TxnCoordinator.apply_marker_request``).

A connection accepted before this broker's write lease last lapsed is closed, not served:
its requests may have been sent before the peers declared this broker dead, and their
sender has queued the same markers since (``peer_link``'s invariants)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kaas.errors import CloseConnection, KaasError
from kaas.handlers._auth import CLUSTER, Op, authorize
from kaas.handlers._txn_common import coordinator
from kaas.wire import codec
from kaas.wire.build import build

if TYPE_CHECKING:
    from kio.schema.write_txn_markers.v1 import WriteTxnMarkersRequest

    from kaas.handlers.context import Context

API_KEY = 27
VERSIONS = (1, 1)


async def handle(ctx: Context, req: WriteTxnMarkersRequest) -> bytes:
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
    key = tuple((m.producer_id, tuple((t.name, tuple((i, codes.get((t.name, i), ErrorCode.unknown_server_error))
                                                      for i in t.partition_indexes))
                                      for t in m.topics))
                for m, codes in zip(req.markers, results, strict=True))
    body = _answers.get(key)
    if body is None:
        body = codec.encode_body(API_KEY, ctx.api_version, build(codec.response_class(API_KEY, ctx.api_version), {
            "markers": [{"producer_id": pid, "topics": [
                {"name": name, "partitions": [{"partition_index": i, "error_code": code} for i, code in parts]}
                for name, parts in topics]} for pid, topics in key]}))
        if len(_answers) >= ANSWERS_KEPT:
            _answers.clear()
        _answers[key] = body
    return body


ANSWERS_KEPT = 4096  # encoded answers kept (then the cache starts over)
# (producer id, ((topic, ((partition, code), ...)), ...)) of each marker -> the encoded answer:
# a producer's transactions over the same partitions are answered with the same bytes
_answers: dict[tuple[Any, ...], bytes] = {}
