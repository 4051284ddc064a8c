"""EndTxn (26): commit or abort, two-phase (prepare, markers, complete). Answers once the
markers are durable (self-led) or queued (peer-led); COORDINATOR_NOT_AVAILABLE leaves the
transaction prepared for the producer's retry or the reconcile."""

from __future__ import annotations

from kaas.errors import KaasError
from kaas.handlers._txn_common import coordinator

API_KEY = 26
VERSIONS = (0, 3)


async def handle(ctx, req) -> dict:
    try:
        code = await coordinator(ctx.broker).end_txn(req.transactional_id, req.producer_id, req.producer_epoch,
                                                     req.committed, ctx.api_version)
    except KaasError as exc:
        code = exc.code
    return {"throttle_time": 0, "error_code": code}
