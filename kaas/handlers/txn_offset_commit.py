"""TxnOffsetCommit (28), on the *group* coordinator: stage offsets under the producer id,
invisible to OffsetFetch until the transaction's offset hook commits them.

KIP-890 part 1 verification against the transactional id's slot file (read from the shared
volume whichever broker coordinates it), as Apache 4.4 verifies versions below 5: a stale or
replaced producer answers INVALID_PRODUCER_EPOCH (47) (librdkafka treats 90 here as merely
abortable); a transaction that is not Ongoing with the group added by AddOffsetsToTxn
answers INVALID_TXN_STATE (48) and stages nothing.

v4 only allows the answer TRANSACTION_ABORTABLE (KIP-890 part 1): from v4 a transaction
that is not Ongoing with the group added answers TRANSACTION_ABORTABLE (90), as Apache's does.

v5 is transaction.version 2 (KIP-890 part 2): the client sends no AddOffsetsToTxn, and the
group coordinator adds the group to the transaction itself, through the transactional id's
coordinator (``coord.txn.adder``), before it stages the offsets; the add's errors answer
as Apache's group coordinator answers them (``domain.txn_add.group_answer``: a fenced
producer INVALID_PRODUCER_EPOCH, a coordinator that could not be asked
COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS while the last transaction's markers
are written). v6 (topics by id, KIP-1319) is beyond kio 0.6.5."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode
from kio.schema.txn_offset_commit import v0, v1, v2, v3, v4, v5

from kaas.domain import txn_add
from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, TOPIC, TXN_ID, Op, authorize
from kaas.handlers._txn_common import partition_exists
from kaas.storage.offset_store import Committed

if TYPE_CHECKING:
    from kaas.handlers.context import Context

    TxnOffsetCommitRequest: TypeAlias = (v0.TxnOffsetCommitRequest | v1.TxnOffsetCommitRequest
                                         | v2.TxnOffsetCommitRequest | v3.TxnOffsetCommitRequest
                                         | v4.TxnOffsetCommitRequest | v5.TxnOffsetCommitRequest)

API_KEY = 28
VERSIONS = (0, 5)
ABORTABLE_FROM = 4  # the first version told TRANSACTION_ABORTABLE instead of INVALID_TXN_STATE
_BEFORE_MEMBERS = (v0.TxnOffsetCommitRequest, v1.TxnOffsetCommitRequest,
                   v2.TxnOffsetCommitRequest)  # the member, its generation and instance id: v3+ (KIP-447)


def _partitions(req: TxnOffsetCommitRequest) -> list[tuple[str, int, int, int, str | None]]:
    """Each partition: (topic, index, offset, leader epoch (-1 before v2), metadata)."""
    if isinstance(req, (v0.TxnOffsetCommitRequest, v1.TxnOffsetCommitRequest)):
        return [(t.name, p.partition_index, p.committed_offset, -1, p.committed_metadata)
                for t in req.topics for p in t.partitions]
    return [(t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
            for t in req.topics for p in t.partitions]


def _everywhere(req: TxnOffsetCommitRequest, code: ErrorCode) -> dict[str, object]:
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                        for p in t.partitions]} for t in req.topics]}


async def handle(ctx: Context, req: TxnOffsetCommitRequest) -> dict[str, object]:
    broker = ctx.broker
    now = broker.clock.wall_ms()
    offsets: dict[tuple[str, int], Committed] = {}
    unknown: set[tuple[str, int]] = set()
    denied: set[tuple[str, int]] = set()
    if not authorize(ctx, Op.WRITE, TXN_ID, req.transactional_id):
        return _everywhere(req, ErrorCode.transactional_id_authorization_failed)
    if not authorize(ctx, Op.READ, GROUP, req.group_id):
        return _everywhere(req, ErrorCode.group_authorization_failed)
    for topic, index, offset, epoch, metadata in _partitions(req):
        tp = (topic, index)
        if not authorize(ctx, Op.READ, TOPIC, topic):
            denied.add(tp)
            continue
        if not partition_exists(broker, *tp):
            unknown.add(tp)
            continue
        offsets[tp] = Committed(offset, epoch, metadata, now)
    code = ErrorCode.none
    if not broker.owns_group(req.group_id):
        code = ErrorCode.not_coordinator
    elif txn_add.txn_offset_commit_operation(ctx.api_version).adds:
        code = txn_add.group_answer(await broker.txn_adder.add_offsets(
            req.transactional_id, req.producer_id, req.producer_epoch, req.group_id))
    elif broker.txn is not None:
        code = await broker.txn.check_txn_offset_commit(req.transactional_id, req.producer_id, req.producer_epoch,
                                                       req.group_id)
        if code == ErrorCode.invalid_txn_state and ctx.api_version >= ABORTABLE_FROM:
            code = ErrorCode.transaction_abortable
    if code == ErrorCode.none and offsets:
        member = ("", None, -1) if isinstance(req, _BEFORE_MEMBERS) else (
            req.member_id or "", req.group_instance_id, req.generation_id)
        try:
            code = await broker.groups.txn_commit(
                req.group_id, producer_id=req.producer_id, member_id=member[0], group_instance_id=member[1],
                generation_id=member[2], offsets=offsets, api_version=ctx.api_version)
        except KaasError as exc:
            code = exc.code
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index,
             "error_code": (ErrorCode.topic_authorization_failed if (t.name, p.partition_index) in denied
                            else ErrorCode.unknown_topic_or_partition
                            if code == ErrorCode.none and (t.name, p.partition_index) in unknown else code)}
            for p in t.partitions]}
        for t in req.topics]}
