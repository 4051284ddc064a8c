"""DescribeTransactions (65): the coordinator's view of each transactional id, from the
slot files this broker owns (others answer NOT_COORDINATOR)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import TOPIC, TXN_ID, Op, authorize
from kaas.handlers._txn_common import coordinator

if TYPE_CHECKING:
    from kio.schema.describe_transactions.v0 import DescribeTransactionsRequest

    from kaas.coord.txn.coordinator import Described
    from kaas.domain.txn import TxnDescription
    from kaas.handlers.context import Context

API_KEY = 65
VERSIONS = (0, 0)


def _row(txn_id: str, code: ErrorCode, d: TxnDescription | None,
         describable: Callable[[str], bool] = lambda _topic: True) -> dict[str, object]:
    if d is None:
        # refused before the coordinator: Apache's schema defaults (0), else the coordinator's -1
        none = 0 if code == ErrorCode.transactional_id_authorization_failed else -1
        return {"error_code": code, "transactional_id": txn_id, "transaction_state": "", "transaction_timeout": 0,
                "transaction_start_time": none, "producer_id": none, "producer_epoch": none, "topics": []}
    return {"error_code": code, "transactional_id": txn_id, "transaction_state": d.state,
            "transaction_timeout": d.timeout_ms, "transaction_start_time": d.start_time_ms,
            "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
            "topics": [{"topic": t, "partitions": list(ps)} for t, ps in d.topics if describable(t)]}


async def handle(ctx: Context, req: DescribeTransactionsRequest) -> dict[str, object]:
    allowed = [t for t in req.transactional_ids if authorize(ctx, Op.DESCRIBE, TXN_ID, t)]
    rows: list[Described]
    try:
        rows = await coordinator(ctx.broker).describe(allowed) if allowed else []
    except KaasError as exc:
        rows = [(txn_id, exc.code, None) for txn_id in allowed]
    found = {r[0]: r for r in rows}
    rows = [found.get(t) or (t, ErrorCode.transactional_id_authorization_failed, None) for t in req.transactional_ids]
    def describable(topic: str) -> bool:  # Apache lists only the topics the principal may describe
        return authorize(ctx, Op.DESCRIBE, TOPIC, topic)

    return {"throttle_time": 0, "transaction_states": [_row(t, code, d, describable) for t, code, d in rows]}
