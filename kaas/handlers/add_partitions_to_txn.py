"""AddPartitionsToTxn (24), the client form (v0-3): register partitions with the ongoing
transaction on its coordinator. The request-level outcome is copied to every partition;
unknown partitions get UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED
(Apache ``KafkaApis.handleAddPartitionsToTxnRequest``). Stale epochs answer
INVALID_PRODUCER_EPOCH below v2 and PRODUCER_FENCED from v2 (the domain maps them).

The broker form (v4-5, KIP-890 part 1): several transactions per request, each either
added as above or, with VerifyOnly, only checked (each partition in the transaction:
NONE, else TRANSACTION_ABORTABLE from v5 and INVALID_TXN_STATE in v4), the check a
partition leader makes before it appends a transactional batch. kaas's brokers make that
check against the slot file themselves (``coord.txn.verify``) and never send this form;
it is answered for a broker or tool that does, with CLUSTER_ACTION on the cluster needed
as in Apache."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, TypeAlias

from kio.schema.add_partitions_to_txn.v4.request import AddPartitionsToTxnRequest as Batched4
from kio.schema.add_partitions_to_txn.v5.request import AddPartitionsToTxnRequest as Batched5
from kio.schema.errors import ErrorCode

from kaas.errors import KaasError, NotInTransaction
from kaas.handlers._auth import CLUSTER, TOPIC, TXN_ID, Op, authorize
from kaas.handlers._txn_common import coordinator, partition_exists
from kaas.wire import codec
from kaas.wire.build import build

if TYPE_CHECKING:
    from kio.schema.add_partitions_to_txn import v0, v1, v2, v3
    from kio.schema.add_partitions_to_txn.v4.request import AddPartitionsToTxnTransaction as Txn4
    from kio.schema.add_partitions_to_txn.v5.request import AddPartitionsToTxnTransaction as Txn5

    from kaas.handlers.context import Context

    AddPartitionsToTxnRequest: TypeAlias = (v0.AddPartitionsToTxnRequest | v1.AddPartitionsToTxnRequest
                                            | v2.AddPartitionsToTxnRequest | v3.AddPartitionsToTxnRequest)
    BatchedRequest: TypeAlias = Batched4 | Batched5
    Transaction: TypeAlias = Txn4 | Txn5

API_KEY = 24
VERSIONS = (0, 5)
ABORTABLE_FROM = 5  # the broker form's first version answering TRANSACTION_ABORTABLE


async def _add(ctx: Context, transactional_id: str, producer_id: int, producer_epoch: int,
               wanted: list[tuple[str, int]], codes: dict[tuple[str, int], ErrorCode]) -> ErrorCode:
    broker = ctx.broker
    try:
        txn = coordinator(broker)
        txn.owned_slot(transactional_id)
        unknown = {tp for tp in wanted if not partition_exists(broker, *tp)}
        if unknown:
            codes.update({tp: ErrorCode.unknown_topic_or_partition if tp in unknown
                          else ErrorCode.operation_not_attempted for tp in wanted})
            return ErrorCode.none
        return await txn.add_partitions(transactional_id, producer_id, producer_epoch, wanted, ctx.api_version)
    except KaasError as exc:
        return exc.code


async def handle(ctx: Context, req: AddPartitionsToTxnRequest | BatchedRequest) -> dict[str, object] | bytes:
    if isinstance(req, (Batched4, Batched5)):  # v4+: the broker form
        return await _batched(ctx, req)
    return await _client(ctx, req)


async def _client(ctx: Context, req: AddPartitionsToTxnRequest) -> dict[str, object] | bytes:
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
        code = await _add(ctx, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                          req.v3_and_below_producer_epoch, wanted, codes)
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


async def _verify(ctx: Context, t: Transaction, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
    """VerifyOnly: is each partition in the transaction (as the slot file says)?"""
    txn = coordinator(ctx.broker)
    out: dict[tuple[str, int], ErrorCode] = {}
    for topic, p in wanted:
        try:
            await txn.verify_partition(t.transactional_id, t.producer_id, t.producer_epoch, topic, p)
            out[(topic, p)] = ErrorCode.none
        except NotInTransaction:
            out[(topic, p)] = (ErrorCode.transaction_abortable if ctx.api_version >= ABORTABLE_FROM
                               else ErrorCode.invalid_txn_state)
        except KaasError as exc:
            out[(topic, p)] = exc.code
    return out


async def _one(ctx: Context, t: Transaction) -> dict[str, object]:
    wanted: list[tuple[str, int]] = [(str(tp.name), int(p)) for tp in t.topics for p in tp.partitions]
    codes: dict[tuple[str, int], ErrorCode] = {}
    if t.verify_only:
        try:
            codes = await _verify(ctx, t, wanted)
            code = ErrorCode.none
        except KaasError as exc:  # no transaction coordinator on this broker
            code = exc.code
    else:
        code = await _add(ctx, t.transactional_id, t.producer_id, t.producer_epoch, wanted, codes)
    return {"transactional_id": t.transactional_id, "topic_results": [
        {"name": tp.name, "results_by_partition": [
            {"partition_index": p, "partition_error_code": codes.get((tp.name, p), code)} for p in tp.partitions]}
        for tp in t.topics]}


async def _batched(ctx: Context, req: BatchedRequest) -> dict[str, object]:
    if not authorize(ctx, Op.CLUSTER_ACTION, CLUSTER):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "results_by_transaction": []}
    return {"throttle_time": 0, "error_code": ErrorCode.none,
            "results_by_transaction": [await _one(ctx, t) for t in req.transactions]}
