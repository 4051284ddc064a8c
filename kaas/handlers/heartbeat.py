"""Heartbeat (12)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode
from kio.schema.heartbeat import v0, v1, v2, v3, v4

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, Op, authorize
from kaas.wire import codec

if TYPE_CHECKING:
    from kaas.handlers.context import Context

    HeartbeatRequest: TypeAlias = (v0.HeartbeatRequest | v1.HeartbeatRequest | v2.HeartbeatRequest
                                   | v3.HeartbeatRequest | v4.HeartbeatRequest)

API_KEY = 12
VERSIONS = (0, 4)
_NO_INSTANCE = (v0.HeartbeatRequest, v1.HeartbeatRequest, v2.HeartbeatRequest)  # group_instance_id: v3+


async def handle(ctx: Context, req: HeartbeatRequest) -> bytes:
    if not authorize(ctx, Op.READ, GROUP, req.group_id):
        code = ErrorCode.group_authorization_failed
    elif not req.group_id:  # before the coordinator check, as Apache's group coordinator service
        code = ErrorCode.invalid_group_id
    else:
        try:
            instance = None if isinstance(req, _NO_INSTANCE) else req.group_instance_id
            code = ctx.broker.groups.heartbeat(req.group_id, req.member_id, instance, req.generation_id)
        except KaasError as exc:
            # A coordinator still loading the group answers as if the heartbeat were
            # fine, as Apache does: clients (aiokafka, kafka-python) do not expect
            # COORDINATOR_LOAD_IN_PROGRESS here and fail the consumer on it.
            code = ErrorCode.none if exc.code == ErrorCode.coordinator_load_in_progress else exc.code
    return codec.error_body(API_KEY, ctx.api_version, code)
