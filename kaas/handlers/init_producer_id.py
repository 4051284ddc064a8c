"""InitProducerId (22): a fresh PID at epoch 0 for idempotent producers; transactional ids
go to the transaction coordinator.

v5 only lets the broker answer TRANSACTION_ABORTABLE (KIP-890), which kaas never does
here. v6 (KIP-939 two-phase commit: Enable2Pc, KeepPreparedTxn, the ongoing transaction's
producer id and epoch in the answer) is marked unstable in Apache 4.4, whose brokers do
not advertise it, and kaas has no prepared-transaction recovery: not served."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import structlog
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id import v0, v1, v2, v3, v4, v5

from kaas.errors import KaasError
from kaas.handlers._auth import CLUSTER, TOPIC, TXN_ID, Op, authorize, authorize_any
from kaas.wire.build import ms

if TYPE_CHECKING:
    from kaas.handlers.context import Context

    InitProducerIdRequest: TypeAlias = (v0.InitProducerIdRequest | v1.InitProducerIdRequest
                                        | v2.InitProducerIdRequest | v3.InitProducerIdRequest
                                        | v4.InitProducerIdRequest | v5.InitProducerIdRequest)

API_KEY = 22
VERSIONS = (0, 5)


def _producer(req: InitProducerIdRequest) -> tuple[int, int]:
    """The producer id and epoch the client has (KIP-360, v3+), or (-1, -1)."""
    if isinstance(req, (v0.InitProducerIdRequest, v1.InitProducerIdRequest, v2.InitProducerIdRequest)):
        return -1, -1
    return req.producer_id, req.producer_epoch

log = structlog.get_logger()


async def handle(ctx: Context, req: InitProducerIdRequest) -> dict[str, object]:
    broker = ctx.broker
    if req.transactional_id is None and not (authorize(ctx, Op.IDEMPOTENT_WRITE, CLUSTER)
                                             or authorize_any(ctx, Op.WRITE, TOPIC)):
        # Apache 3.x: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE
        # on some topic
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "producer_id": -1, "producer_epoch": -1}
    if req.transactional_id is not None and not authorize(ctx, Op.WRITE, TXN_ID, req.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed,
                "producer_id": -1, "producer_epoch": -1}
    if req.transactional_id is None:
        # Apache: a null transactional id always gets a fresh PID at epoch 0, ignoring any
        # pid/epoch sent (kafka-python's KIP-360 bump relies on that).
        try:
            pid = broker.allocate_pid()
        except OSError as exc:  # the PID block file could not be written: nothing changed
            log.error("pid_block_write_failed", error=str(exc))
            # Apache answers this when no PID block is available yet; clients retry it
            return {"throttle_time": 0, "error_code": ErrorCode.coordinator_load_in_progress,
                    "producer_id": -1, "producer_epoch": -1}
        return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": pid, "producer_epoch": 0}
    coordinator = broker.txn
    if coordinator is None:
        return {"throttle_time": 0, "error_code": ErrorCode.coordinator_not_available,
                "producer_id": -1, "producer_epoch": -1}
    try:
        pid, epoch = await coordinator.init_producer_id(
            req.transactional_id, ms(req.transaction_timeout),
            *_producer(req), ctx.api_version)
    except KaasError as exc:
        return {"throttle_time": 0, "error_code": exc.code, "producer_id": -1, "producer_epoch": -1}
    return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": pid, "producer_epoch": epoch}
