"""AddOffsetsToTxn (25): record that the transaction will commit offsets of a group, so
that EndTxn's offset hook commits or discards that group's staged offsets (KIP-447).
v4 only allows the answer TRANSACTION_ABORTABLE (KIP-890), which kaas never gives here."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.domain import txn as dtxn
from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, TXN_ID, Op, authorize
from kaas.handlers._txn_common import coordinator
from kaas.wire import codec
from kaas.wire.codec import PEER_CLIENT_PREFIX

if TYPE_CHECKING:
    from kio.schema.add_offsets_to_txn import v0, v1, v2, v3, v4

    from kaas.handlers.context import Context

    AddOffsetsToTxnRequest: TypeAlias = (v0.AddOffsetsToTxnRequest | v1.AddOffsetsToTxnRequest
                                         | v2.AddOffsetsToTxnRequest | v3.AddOffsetsToTxnRequest
                                         | v4.AddOffsetsToTxnRequest)

API_KEY = 25
VERSIONS = (0, 4)


async def handle(ctx: Context, req: AddOffsetsToTxnRequest) -> bytes:
    if not authorize(ctx, Op.WRITE, TXN_ID, req.transactional_id):
        return codec.error_body(API_KEY, ctx.api_version, ErrorCode.transactional_id_authorization_failed)
    if not authorize(ctx, Op.READ, GROUP, req.group_id):
        return codec.error_body(API_KEY, ctx.api_version, ErrorCode.group_authorization_failed)
    # a peer broker's add is the implicit one of a TxnOffsetCommit v5 (kaas.coord.txn.adder):
    # the transaction it begins runs under transaction.version 2
    peer = (ctx.client_id or "").startswith(PEER_CLIENT_PREFIX)
    try:
        code = await coordinator(ctx.broker).add_offsets(req.transactional_id, req.producer_id, req.producer_epoch,
                                                         req.group_id, ctx.api_version,
                                                         txn_version=dtxn.TV2 if peer else dtxn.TV1)
    except KaasError as exc:
        code = exc.code
    return codec.error_body(API_KEY, ctx.api_version, code)

