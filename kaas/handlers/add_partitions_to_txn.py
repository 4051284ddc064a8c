"""AddPartitionsToTxn (24), the client form (v0-3): register partitions with the ongoing
transaction on its coordinator. The request-level outcome is copied to every partition;
unknown partitions get UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED
(Apache ``KafkaApis.handleAddPartitionsToTxnRequest``). Stale epochs answer
INVALID_PRODUCER_EPOCH below v2 and PRODUCER_FENCED from v2 (the domain maps them)."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import TOPIC, TXN_ID, Op, authorize
from kaas.handlers._txn_common import coordinator, partition_exists
from kaas.wire import codec
from kaas.wire.build import build

if TYPE_CHECKING:
    from kio.schema.add_partitions_to_txn import v0, v1, v2, v3

    from kaas.handlers import Context

    AddPartitionsToTxnRequest: TypeAlias = (v0.AddPartitionsToTxnRequest | v1.AddPartitionsToTxnRequest
                                            | v2.AddPartitionsToTxnRequest | v3.AddPartitionsToTxnRequest)

API_KEY = 24
VERSIONS = (0, 3)


async def _add(ctx: Context, req: AddPartitionsToTxnRequest, wanted: list[tuple[str, int]],
               codes: dict[tuple[str, int], ErrorCode]) -> ErrorCode:
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


async def handle(ctx: Context, req: AddPartitionsToTxnRequest) -> dict[str, object] | bytes:
    topics = req.v3_and_below_topics
    wanted: list[tuple[str, int]] = [(t.name, p) for t in topics for p in t.partitions]
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
    named = tuple((t.name, tuple(t.partitions)) for t in topics)
    if not codes:  # one code for every partition: the answer repeats from one transaction to the next
        return _uniform(ctx.api_version, code, named)
    return _response(named, lambda name, p: codes.get((name, p), code))


def _response(topics: tuple[tuple[str, tuple[int, ...]], ...],
              code_of: Callable[[str, int], ErrorCode]) -> dict[str, object]:
    return {
        "throttle_time": 0,
        "results_by_topic_v3_and_below": [
            {"name": name, "results_by_partition": [{"partition_index": p, "partition_error_code": code_of(name, p)}
                                                    for p in partitions]}
            for name, partitions in topics
        ],
    }


@lru_cache(maxsize=1024)
def _uniform(version: int, code: ErrorCode, topics: tuple[tuple[str, tuple[int, ...]], ...]) -> bytes:
    """The encoded answer giving ``code`` to every partition of ``topics``, once per
    version, code and partitions (a producer's next transaction usually names the same)."""
    body = build(codec.response_class(API_KEY, version), _response(topics, lambda _name, _p: code))
    return codec.encode_body(API_KEY, version, body)
