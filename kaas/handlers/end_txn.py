"""EndTxn (26): commit or abort, two-phase (prepare, markers, complete). Answers once
Prepare* is durable, as Apache answers once PrepareCommit/PrepareAbort is written; the
markers and the Complete* transition follow in the coordinator's background task, which
every later request of the same transactional id waits for."""

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
