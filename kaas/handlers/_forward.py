"""Topic edits go through the controller (design section 3: after its exclusive create, a
topic file has one writer, the controller). A broker that receives CreatePartitions,
DeleteTopics, AlterConfigs or IncrementalAlterConfigs while another broker is the
controller forwards the request, as decoded, to the controller over a peer connection and
answers with the controller's response. A request that came from a peer is never
forwarded again (no ping-pong while the controller moves); one that cannot reach a live
controller is answered NOT_CONTROLLER, which admin clients retry after a Metadata refresh.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import structlog
from kio.schema.errors import ErrorCode

from kaas.errors import PeerUnavailable
from kaas.wire.codec import PEER_CLIENT_PREFIX

if TYPE_CHECKING:
    from kio.schema.alter_configs import v0 as ac0
    from kio.schema.alter_configs import v1 as ac1
    from kio.schema.alter_configs import v2 as ac2
    from kio.schema.incremental_alter_configs import v0 as iac0
    from kio.schema.incremental_alter_configs import v1 as iac1
    from kio.static.protocol import RequestPayload, ResponsePayload

    from kaas.handlers.context import Context

    ConfigsRequest: TypeAlias = (ac0.AlterConfigsRequest | ac1.AlterConfigsRequest | ac2.AlterConfigsRequest
                                 | iac0.IncrementalAlterConfigsRequest | iac1.IncrementalAlterConfigsRequest)

R = TypeVar("R")

log = structlog.get_logger()

ALTER_CONFIGS_TIMEOUT_S = 30.0  # (Alter)Configs requests carry no timeout of their own
FORWARD_MARGIN_S = 1.0  # on top of the request's own timeout: the controller answers first


class NotForwarded(Exception):
    """No live controller could be asked: answer NOT_CONTROLLER."""


async def to_controller(ctx: Context, req: RequestPayload, timeout: float) -> ResponsePayload | None:
    """The controller's response to ``req`` (the kio response of the request's key and
    version, decoded), or None when this broker handles it itself (it is the controller, or
    ``req`` was forwarded to it by a peer).

    Raises:
        NotForwarded: the controller is unknown, dead, or did not answer.
    """
    broker = ctx.broker
    cluster = broker.cluster
    if cluster.is_controller or (ctx.client_id or "").startswith(PEER_CLIENT_PREFIX):
        return None
    cid = cluster.controller_id
    if cid is None or cid == broker.id or not cluster.is_alive_any(cid):
        raise NotForwarded("no live controller")
    try:
        answer: ResponsePayload = await broker.peer_links.forward(cid, ctx.api_key, ctx.api_version, req,
                                                                  max(0.0, timeout) + FORWARD_MARGIN_S)
        return answer
    except PeerUnavailable as exc:
        log.warning("forward_to_controller_failed", api_key=ctx.api_key, controller=cid, error=str(exc))
        raise NotForwarded(str(exc)) from None


async def to_controller_or(ctx: Context, req: RequestPayload, timeout: float,
                           refused: Callable[[str], R]) -> ResponsePayload | R | None:
    """``to_controller``, with NotForwarded answered by ``refused(reason)`` (the request's
    NOT_CONTROLLER response): the controller's response, that one, or None (handle here)."""
    try:
        return await to_controller(ctx, req, timeout)
    except NotForwarded as exc:
        return refused(str(exc))


async def configs_to_controller(ctx: Context, req: ConfigsRequest) -> ResponsePayload | dict[str, object] | None:
    """``to_controller_or`` for AlterConfigs and IncrementalAlterConfigs (the same response
    shape)."""
    return await to_controller_or(ctx, req, ALTER_CONFIGS_TIMEOUT_S, lambda why: {"throttle_time": 0, "responses": [
        {"error_code": ErrorCode.not_controller, "error_message": why, "resource_type": r.resource_type,
         "resource_name": r.resource_name} for r in req.resources]})
