"""ListGroups (16): the groups this broker coordinates, with a state filter (v4+) and a
type filter (v5+: ``classic``, ``consumer``; case-insensitive, as Apache)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode
from kio.schema.list_groups import v0, v1, v2, v3, v4, v5

from kaas.handlers._auth import CLUSTER, GROUP, Op, authorize

if TYPE_CHECKING:
    from kaas.handlers.context import Context

    ListGroupsRequest: TypeAlias = (v0.ListGroupsRequest | v1.ListGroupsRequest | v2.ListGroupsRequest
                                    | v3.ListGroupsRequest | v4.ListGroupsRequest | v5.ListGroupsRequest)

API_KEY = 16
VERSIONS = (0, 5)
_STATES = (v4.ListGroupsRequest, v5.ListGroupsRequest)  # the versions with a state filter


async def handle(ctx: Context, req: ListGroupsRequest) -> dict[str, object]:
    states = {s.lower() for s in req.states_filter} if isinstance(req, _STATES) else set[str]()
    types = {t.lower() for t in req.types_filter} if isinstance(req, v5.ListGroupsRequest) else set[str]()
    groups = []
    everything = authorize(ctx, Op.DESCRIBE, CLUSTER)  # Apache: DESCRIBE on the cluster lists all
    for g in ctx.broker.groups.list_groups():
        if not everything and not authorize(ctx, Op.DESCRIBE, GROUP, g["group_id"]):
            continue
        if states and g["group_state"].lower() not in states:
            continue
        if types and g["group_type"] not in types:
            continue
        groups.append(g)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": groups}
