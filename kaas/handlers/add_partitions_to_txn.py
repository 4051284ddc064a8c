"""AddPartitionsToTxn (24), the client form (v0-3): register partitions with the ongoing
transaction on its coordinator. The request-level outcome is copied to every partition;
unknown partitions get UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED
(Apache ``KafkaApis.handleAddPartitionsToTxnRequest``). Stale epochs answer
INVALID_PRODUCER_EPOCH below v2 and PRODUCER_FENCED from v2 (the domain maps them)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import TOPIC, TXN_ID, Op, authorize
from kaas.handlers._txn_common import coordinator, partition_exists

API_KEY = 24
VERSIONS = (0, 3)


async def _add(ctx, req, wanted, codes) -> ErrorCode:
    broker = ctx.broker
    try:
        txn = coordinator(broker)
        txn.owned_slot(req.v3_and_below_transactional_id)
        unknown = {tp for tp in wanted if not partition_exists(broker, *tp)}
        if unknown:
            codes.update({tp: ErrorCode.unknown_topic_or_partition if tp in unknown
                          else ErrorCode.operation_not_attempted for tp in wanted})
            return ErrorCode.none
        return await txn.add_partitions(req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                        req.v3_and_below_producer_epoch, wanted, ctx.api_version)
    except KaasError as exc:
        return exc.code


async def handle(ctx, req) -> dict:
    topics = req.v3_and_below_topics
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    codes: dict[tuple[str, int], ErrorCode] = {}
    denied = {t.name for t in topics if not authorize(ctx, Op.WRITE, TOPIC, t.name)}
    if not authorize(ctx, Op.WRITE, TXN_ID, req.v3_and_below_transactional_id):
        code = ErrorCode.transactional_id_authorization_failed
    elif denied:  # Apache: the denied ones say so, the others were not attempted
        codes = {tp: ErrorCode.topic_authorization_failed if tp[0] in denied else ErrorCode.operation_not_attempted
                 for tp in wanted}
        code = ErrorCode.none
    else:
        code = await _add(ctx, req, wanted, codes)
    return {
        "throttle_time": 0,
        "results_by_topic_v3_and_below": [
            {"name": t.name,
             "results_by_partition": [{"partition_index": p, "partition_error_code": codes.get((t.name, p), code)}
                                      for p in t.partitions]}
            for t in topics
        ],
    }
