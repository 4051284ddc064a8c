"""AddOffsetsToTxn (25): record that the transaction will commit offsets of a group, so
that EndTxn's offset hook commits or discards that group's staged offsets (KIP-447)."""

from __future__ import annotations

from kaas.errors import KaasError
from kaas.handlers._txn_common import coordinator

API_KEY = 25
VERSIONS = (0, 3)


async def handle(ctx, req) -> dict:
    try:
        code = await coordinator(ctx.broker).add_offsets(req.transactional_id, req.producer_id, req.producer_epoch,
                                                         req.group_id, ctx.api_version)
    except KaasError as exc:
        code = exc.code
    return {"throttle_time": 0, "error_code": code}
