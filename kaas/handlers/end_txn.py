"""EndTxn (26): commit or abort, two-phase (prepare, markers, complete). Answers once
Prepare* is durable, as Apache answers once PrepareCommit/PrepareAbort is written; the
markers and the Complete* transition follow in the coordinator's background task, which
every later request of the same transactional id waits for.

v4 only lets the coordinator answer TRANSACTION_ABORTABLE (KIP-890 part 1), which kaas's
never does. v5 is transaction.version 2 (KIP-890 part 2): the epoch is bumped at every
end and the answer carries the producer id and epoch the client continues with
(``domain.txn_tv2``). As in Apache 4.4, the request's version decides, not the finalized
level: Apache's client sends v5 only while transaction.version 2 is finalized, and keeps
the version a transaction began with to its end."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import TXN_ID, Op, authorize
from kaas.handlers._txn_common import coordinator
from kaas.wire import codec

if TYPE_CHECKING:
    from kio.schema.end_txn import v0, v1, v2, v3, v4, v5

    from kaas.handlers.context import Context

    EndTxnRequest: TypeAlias = (v0.EndTxnRequest | v1.EndTxnRequest | v2.EndTxnRequest | v3.EndTxnRequest
                                 | v4.EndTxnRequest | v5.EndTxnRequest)

API_KEY = 26
VERSIONS = (0, 5)
PAIR_FROM = 5  # the first version whose answer carries ProducerId and ProducerEpoch


async def handle(ctx: Context, req: EndTxnRequest) -> bytes | dict[str, object]:
    if not authorize(ctx, Op.WRITE, TXN_ID, req.transactional_id):
        code, pid, epoch = ErrorCode.transactional_id_authorization_failed, -1, -1
    else:
        try:
            code, pid, epoch = await coordinator(ctx.broker).end_transaction(
                req.transactional_id, req.producer_id, req.producer_epoch, req.committed, ctx.api_version)
        except KaasError as exc:
            code, pid, epoch = exc.code, -1, -1
    if ctx.api_version < PAIR_FROM:
        return codec.error_body(API_KEY, ctx.api_version, code)
    return {"throttle_time": 0, "error_code": code, "producer_id": pid, "producer_epoch": epoch}
