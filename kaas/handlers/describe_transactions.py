"""DescribeTransactions (65): the coordinator's view of each transactional id, from the
slot files this broker owns (others answer NOT_COORDINATOR)."""

from __future__ import annotations

from kaas.errors import KaasError
from kaas.handlers._txn_common import coordinator

API_KEY = 65
VERSIONS = (0, 0)


def _row(txn_id: str, code, d) -> dict:
    if d is None:
        return {"error_code": code, "transactional_id": txn_id, "transaction_state": "", "transaction_timeout": 0,
                "transaction_start_time": -1, "producer_id": -1, "producer_epoch": -1, "topics": []}
    return {"error_code": code, "transactional_id": txn_id, "transaction_state": d.state,
            "transaction_timeout": d.timeout_ms, "transaction_start_time": d.start_time_ms,
            "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
            "topics": [{"topic": t, "partitions": list(ps)} for t, ps in d.topics]}


async def handle(ctx, req) -> dict:
    try:
        rows = await coordinator(ctx.broker).describe(req.transactional_ids)
    except KaasError as exc:
        rows = [(txn_id, exc.code, None) for txn_id in req.transactional_ids]
    return {"throttle_time": 0, "transaction_states": [_row(*r) for r in rows]}
