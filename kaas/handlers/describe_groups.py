"""DescribeGroups (15): classic groups. A group that does not exist, was deleted, or is
not a classic group (a consumer or share group) answers state Dead; from v6 (KIP-1043)
with GROUP_ID_NOT_FOUND and Apache's message, before v6 with no error."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.describe_groups import v0, v1, v2, v3, v4, v5, v6
from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, OPS_NOT_ASKED, Op, authorize, authorized_operations

if TYPE_CHECKING:
    from kaas.handlers.context import Context

    DescribeGroupsRequest: TypeAlias = (v0.DescribeGroupsRequest | v1.DescribeGroupsRequest
                                        | v2.DescribeGroupsRequest | v3.DescribeGroupsRequest
                                        | v4.DescribeGroupsRequest | v5.DescribeGroupsRequest
                                        | v6.DescribeGroupsRequest)

API_KEY = 15
VERSIONS = (0, 6)
_NO_OPERATIONS = (v0.DescribeGroupsRequest, v1.DescribeGroupsRequest, v2.DescribeGroupsRequest)  # asked from v3
NOT_FOUND_FROM = 6  # the first version that answers GROUP_ID_NOT_FOUND (KIP-1043)


async def handle(ctx: Context, req: DescribeGroupsRequest) -> dict[str, object]:
    asked = not isinstance(req, _NO_OPERATIONS) and req.include_authorized_operations
    out = []
    for gid in req.groups:
        if not authorize(ctx, Op.DESCRIBE, GROUP, gid):
            out.append({"error_code": ErrorCode.group_authorization_failed, "group_id": gid, "group_state": "",
                        "protocol_type": "", "protocol_data": "", "members": [],
                        "authorized_operations": OPS_NOT_ASKED})
            continue
        try:
            d = ctx.broker.groups.describe(gid)
        except KaasError as exc:
            out.append({"error_code": exc.code, "group_id": gid, "group_state": "", "protocol_type": "",
                        "protocol_data": "", "members": []})
            continue
        if "not_found" in d and ctx.api_version >= NOT_FOUND_FROM:
            out.append({"error_code": ErrorCode.group_id_not_found, "error_message": d["not_found"],
                        "group_id": gid, "group_state": "Dead", "protocol_type": "", "protocol_data": "",
                        "members": [], "authorized_operations": OPS_NOT_ASKED})
            continue
        out.append({
            "error_code": ErrorCode.none, "group_id": gid, "group_state": d["state"],
            "protocol_type": d["protocol_type"], "protocol_data": d["protocol"],
            "members": [{"member_id": m["member_id"], "group_instance_id": m["group_instance_id"],
                         "client_id": m["client_id"], "client_host": m["client_host"],
                         "member_metadata": m["metadata"], "member_assignment": m["assignment"]}
                        for m in d["members"]],
            "authorized_operations": authorized_operations(ctx, GROUP, gid)
            if asked else OPS_NOT_ASKED,
        })
    return {"throttle_time": 0, "groups": out}
