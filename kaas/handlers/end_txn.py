"""EndTxn (26): commit or abort, two-phase (prepare, markers, complete). Answers once
Prepare* is durable, as Apache answers once PrepareCommit/PrepareAbort is written; the
markers and the Complete* transition follow in the coordinator's background task, which
every later request of the same transactional id waits for.

v4 only lets the coordinator answer TRANSACTION_ABORTABLE (KIP-890 part 1), which kaas's
never does. v5 is transaction.version 2 (KIP-890 part 2: the epoch bumped at every
transaction end, the new producer id and epoch in the answer); Apache's client sends it
only when transaction.version 2 is finalized, and kaas implements version 1 only."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import TXN_ID, Op, authorize
from kaas.handlers._txn_common import coordinator
from kaas.wire import codec

if TYPE_CHECKING:
    from kio.schema.end_txn import v0, v1, v2, v3, v4

    from kaas.handlers import Context

    EndTxnRequest: TypeAlias = (v0.EndTxnRequest | v1.EndTxnRequest | v2.EndTxnRequest | v3.EndTxnRequest
                                 | v4.EndTxnRequest)

API_KEY = 26
VERSIONS = (0, 4)


async def handle(ctx: Context, req: EndTxnRequest) -> bytes:
    if not authorize(ctx, Op.WRITE, TXN_ID, req.transactional_id):
        return codec.error_body(API_KEY, ctx.api_version, ErrorCode.transactional_id_authorization_failed)
    try:
        code = await coordinator(ctx.broker).end_txn(req.transactional_id, req.producer_id, req.producer_epoch,
                                                     req.committed, ctx.api_version)
    except KaasError as exc:
        code = exc.code
    return codec.error_body(API_KEY, ctx.api_version, code)

