"""DescribeAcls (29): the ACLs one filter matches, grouped by resource pattern. Needs
DESCRIBE on the cluster; SECURITY_DISABLED with the authoriser off. Answered from this
broker's current snapshot (every broker reloads the file within a second)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.domain.acl import PatternType, ResourceType, acl_filter, invalid_filter, unknown_codes
from kaas.errors import CloseConnection
from kaas.handlers._auth import CLUSTER, Op, authorize, enabled

if TYPE_CHECKING:
    from kio.schema.describe_acls import v1, v2, v3

    from kaas.handlers.context import Context

    DescribeAclsRequest: TypeAlias = v1.DescribeAclsRequest | v2.DescribeAclsRequest | v3.DescribeAclsRequest

API_KEY = 29
VERSIONS = (1, 3)


def _error(code: ErrorCode, message: str | None) -> dict[str, object]:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "resources": []}


async def handle(ctx: Context, req: DescribeAclsRequest) -> dict[str, object]:
    if unknown_codes(req.resource_type_filter, req.pattern_type_filter, req.operation, req.permission_type):
        raise CloseConnection("DescribeAclsRequest contains UNKNOWN elements")  # Apache: refused while parsed
    if not enabled(ctx):
        return _error(ErrorCode.security_disabled, "No Authorizer is configured on the broker")
    if not authorize(ctx, Op.DESCRIBE, CLUSTER):
        return _error(ErrorCode.cluster_authorization_failed, None)
    f = acl_filter(req.resource_type_filter, req.resource_name_filter, req.pattern_type_filter,
                   req.principal_filter, req.host_filter, req.operation, req.permission_type)
    why = invalid_filter(f)
    if why is not None:
        return _error(ErrorCode.invalid_request, why)
    bindings = ctx.broker.acls.bindings
    if bindings is None:
        return _error(ErrorCode.unknown_server_error, "the ACL file is unreadable")
    groups: dict[tuple[ResourceType, str, PatternType], list[dict[str, object]]] = {}
    for b in bindings:
        if f.matches(b):
            groups.setdefault((b.resource_type, b.name, b.pattern_type), []).append(
                {"principal": b.principal, "host": b.host, "operation": int(b.operation),
                 "permission_type": int(b.permission)})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "resources": [
        {"resource_type": int(rt), "resource_name": name, "pattern_type": int(pt), "acls": acls}
        for (rt, name, pt), acls in groups.items()]}
