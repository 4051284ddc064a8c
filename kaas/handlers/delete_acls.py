"""DeleteAcls (31): remove every ACL a filter matches and answer the matches per filter.
Needs ALTER on the cluster; SECURITY_DISABLED with the authoriser off; INVALID_REQUEST for
a filter with UNKNOWN parts. Written by the controller, forwarded by the other brokers."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import structlog
from kio.schema.errors import ErrorCode

from kaas.broker.acls import AclFileUnusable
from kaas.domain.acl import AclFilter, acl_filter, invalid_filter, unknown_codes
from kaas.errors import CloseConnection
from kaas.handlers import _forward
from kaas.handlers._auth import CLUSTER, Op, authorize, enabled

if TYPE_CHECKING:
    from kio.schema.delete_acls import v1, v2, v3
    from kio.static.protocol import ResponsePayload

    from kaas.handlers.context import Context

    DeleteAclsRequest: TypeAlias = v1.DeleteAclsRequest | v2.DeleteAclsRequest | v3.DeleteAclsRequest

API_KEY = 31
VERSIONS = (1, 3)
FORWARD_TIMEOUT_S = 30.0

log = structlog.get_logger()


def _all(req: DeleteAclsRequest, code: ErrorCode, message: str | None) -> dict[str, object]:
    return {"throttle_time": 0, "filter_results": [
        {"error_code": code, "error_message": message, "matching_acls": []} for _ in req.filters]}


async def handle(ctx: Context, req: DeleteAclsRequest) -> dict[str, object] | ResponsePayload:
    if any(unknown_codes(f.resource_type_filter, f.pattern_type_filter, f.operation, f.permission_type)
           for f in req.filters):
        raise CloseConnection("DeleteAclsRequest filters contain UNKNOWN elements")  # Apache: refused while parsed
    if not enabled(ctx):
        return _all(req, ErrorCode.security_disabled, "No Authorizer is configured on the broker")
    if not authorize(ctx, Op.ALTER, CLUSTER):
        return _all(req, ErrorCode.cluster_authorization_failed, None)
    filters = [acl_filter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                          f.principal_filter, f.host_filter, f.operation, f.permission_type) for f in req.filters]
    results: list[dict[str, object]] = [{"error_code": ErrorCode.none, "error_message": None, "matching_acls": []}
                                         for _ in filters]
    valid: list[tuple[AclFilter, dict[str, object]]] = []
    for f, out in zip(filters, results):
        why = invalid_filter(f)
        if why is not None:
            out.update(error_code=ErrorCode.invalid_request, error_message=why)
        else:
            valid.append((f, out))
    if not valid:
        return {"throttle_time": 0, "filter_results": results}
    fwd = await _forward.to_controller_or(ctx, req, FORWARD_TIMEOUT_S,
                                          lambda why: _all(req, ErrorCode.not_controller, why))
    if fwd is not None:
        return fwd
    try:
        matched = await ctx.broker.acls.delete([f for f, _ in valid])
    except (AclFileUnusable, OSError) as exc:
        log.error("acl_file_write_refused", error=str(exc))
        for _f, out in valid:
            out.update(error_code=ErrorCode.unknown_server_error, error_message=f"ACL file not written: {exc}")
        return {"throttle_time": 0, "filter_results": results}
    for (_f, out), found in zip(valid, matched):
        out["matching_acls"] = [
            {"error_code": ErrorCode.none, "error_message": None, "resource_type": int(b.resource_type),
             "resource_name": b.name, "pattern_type": int(b.pattern_type), "principal": b.principal,
             "host": b.host, "operation": int(b.operation), "permission_type": int(b.permission)}
            for b in found]
    log.info("acls_deleted", principal=ctx.principal, acls=sum(len(m) for m in matched))
    return {"throttle_time": 0, "filter_results": results}
