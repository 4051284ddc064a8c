"""FindCoordinator (10): the broker coordinating a group (key type 0) or a transactional
id (key type 1), placed by FNV-1a (design section 4)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.handlers import _auth
from kaas.handlers._auth import Op, authorize

if TYPE_CHECKING:
    from kio.schema.find_coordinator import v0, v1, v2, v3

    from kaas.broker import Broker
    from kaas.handlers import Context

    FindCoordinatorRequest: TypeAlias = (v0.FindCoordinatorRequest | v1.FindCoordinatorRequest
                                         | v2.FindCoordinatorRequest | v3.FindCoordinatorRequest)

API_KEY = 10
VERSIONS = (0, 3)
GROUP, TRANSACTION = 0, 1


def locate(broker: Broker, key: str, key_type: int, listener: str | None = None) -> dict[str, object]:
    if key_type == GROUP:
        owner = broker.group_owner(key)
    elif key_type == TRANSACTION:
        owner = broker.txn_owner(key)
    else:
        return {"error_code": ErrorCode.invalid_request, "error_message": f"key type {key_type}",
                "node_id": -1, "host": "", "port": -1}
    info = broker.broker_info(owner, listener) if owner is not None else None
    if owner is None or info is None or (owner != broker.id and broker.cluster.is_suspected(owner)):
        # none, or one whose process seems to have just exited: the client asks again
        # shortly and meets the new owner once its death is confirmed
        return {"error_code": ErrorCode.coordinator_not_available, "error_message": None,
                "node_id": -1, "host": "", "port": -1}
    return {"error_code": ErrorCode.none, "error_message": None, "node_id": info.node_id,
            "host": info.host, "port": info.port}


async def handle(ctx: Context, req: FindCoordinatorRequest) -> dict[str, object]:
    key_type = getattr(req, "key_type", GROUP)
    if key_type == GROUP and not authorize(ctx, Op.DESCRIBE, _auth.GROUP, req.key):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "error_message": None,
                "node_id": -1, "host": "", "port": -1}
    if key_type == TRANSACTION and not authorize(ctx, Op.DESCRIBE, _auth.TXN_ID, req.key):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed,
                "error_message": None, "node_id": -1, "host": "", "port": -1}
    return {"throttle_time": 0, **locate(ctx.broker, req.key, key_type, ctx.session.listener)}
