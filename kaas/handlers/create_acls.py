"""CreateAcls (30): add ACLs. Needs ALTER on the cluster; SECURITY_DISABLED with the
authoriser off; UNKNOWN_SERVER_ERROR for every creation, nothing created, when one holds
a filter-only value (resource type ANY, pattern ANY or MATCH, operation or permission
ANY), as Apache; else INVALID_REQUEST per creation that is not a valid ACL (a cluster
named other than ``kafka-cluster``, a principal not ``TYPE:NAME``, ...); a code 0 (UNKNOWN)
closes the connection. The controller writes the file (``broker.acls``); another broker
forwards the request to it (``_forward``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import structlog
from kio.schema.errors import ErrorCode

from kaas.broker.acls import AclFileUnusable
from kaas.domain.acl import AclBinding, binding, filter_only, invalid_binding, unknown_codes
from kaas.errors import CloseConnection
from kaas.handlers import _forward
from kaas.handlers._auth import CLUSTER, Op, authorize, enabled

if TYPE_CHECKING:
    from kio.schema.create_acls import v1, v2, v3
    from kio.static.protocol import ResponsePayload

    from kaas.handlers.context import Context

    CreateAclsRequest: TypeAlias = v1.CreateAclsRequest | v2.CreateAclsRequest | v3.CreateAclsRequest

API_KEY = 30
VERSIONS = (1, 3)
FORWARD_TIMEOUT_S = 30.0

log = structlog.get_logger()


def _all(req: CreateAclsRequest, code: ErrorCode, message: str | None) -> dict[str, object]:
    return {"throttle_time": 0, "results": [{"error_code": code, "error_message": message} for _ in req.creations]}


async def handle(ctx: Context, req: CreateAclsRequest) -> dict[str, object] | ResponsePayload:
    if any(unknown_codes(c.resource_type, c.resource_pattern_type, c.operation, c.permission_type)
           for c in req.creations):
        raise CloseConnection("CreateAclsRequest creations contain UNKNOWN elements")  # Apache: refused while parsed
    if not enabled(ctx):
        return _all(req, ErrorCode.security_disabled, "No Authorizer is configured on the broker")
    if not authorize(ctx, Op.ALTER, CLUSTER):
        return _all(req, ErrorCode.cluster_authorization_failed, None)
    bindings = [binding(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                        c.operation, c.permission_type) for c in req.creations]
    why_not = next((w for w in map(filter_only, bindings) if w is not None), None)
    if why_not is not None:  # Apache: the request fails as a whole, nothing created
        return _all(req, ErrorCode.unknown_server_error, why_not)
    results: list[dict[str, object]] = [{"error_code": ErrorCode.none, "error_message": None} for _ in bindings]
    valid: list[AclBinding] = []
    for b, out in zip(bindings, results):
        why = invalid_binding(b)
        if why is not None:
            out.update(error_code=ErrorCode.invalid_request, error_message=why)
        else:
            valid.append(b)
    if not valid:
        return {"throttle_time": 0, "results": results}
    fwd = await _forward.to_controller_or(ctx, req, FORWARD_TIMEOUT_S,
                                          lambda why: _all(req, ErrorCode.not_controller, why))
    if fwd is not None:
        return fwd
    try:
        await ctx.broker.acls.create(valid)
    except (AclFileUnusable, OSError) as exc:
        log.error("acl_file_write_refused", error=str(exc))
        for b, out in zip(bindings, results):
            if out["error_code"] == ErrorCode.none:
                out.update(error_code=ErrorCode.unknown_server_error, error_message=f"ACL file not written: {exc}")
        return {"throttle_time": 0, "results": results}
    log.info("acls_created", principal=ctx.principal, acls=len(valid))
    return {"throttle_time": 0, "results": results}
