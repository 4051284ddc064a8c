"""ListTransactions (66): the transactions of the slots this broker coordinates, filtered by
state (v0), producer id (v0), minimum running time (v1) and id pattern (v2, a full-match
regular expression)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode
from kio.schema.list_transactions import v0, v1, v2

from kaas.errors import KaasError
from kaas.handlers._auth import TXN_ID, Op, authorize
from kaas.handlers._txn_common import coordinator

if TYPE_CHECKING:
    from kaas.handlers.context import Context

    ListTransactionsRequest: TypeAlias = (v0.ListTransactionsRequest | v1.ListTransactionsRequest
                                          | v2.ListTransactionsRequest)

API_KEY = 66
VERSIONS = (0, 2)


async def handle(ctx: Context, req: ListTransactionsRequest) -> dict[str, object]:
    pattern = req.transactional_id_pattern if isinstance(req, v2.ListTransactionsRequest) else None
    if pattern:
        try:
            re.compile(pattern)
        except re.error:
            return {"throttle_time": 0, "error_code": ErrorCode.invalid_regular_expression,
                    "unknown_state_filters": [], "transaction_states": []}
    try:
        unknown, rows = await coordinator(ctx.broker).list_transactions(
            req.state_filters, req.producer_id_filters,
            -1 if isinstance(req, v0.ListTransactionsRequest) else req.duration_filter, pattern)
    except KaasError as exc:
        return {"throttle_time": 0, "error_code": exc.code, "unknown_state_filters": [], "transaction_states": []}
    return {"throttle_time": 0, "error_code": ErrorCode.none, "unknown_state_filters": unknown,
            "transaction_states": [{"transactional_id": d.transactional_id, "producer_id": d.producer_id,
                                    "transaction_state": d.state} for d in rows
                                   if authorize(ctx, Op.DESCRIBE, TXN_ID, d.transactional_id)]}
