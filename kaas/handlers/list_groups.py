"""ListGroups (16): the groups this broker coordinates, with a state filter (v4+)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

API_KEY = 16
VERSIONS = (0, 5)


async def handle(ctx, req) -> dict:
    states = {s.lower() for s in getattr(req, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(req, "types_filter", ()) or ()}
    groups = []
    for g in ctx.broker.groups.list_groups():
        if states and g["group_state"].lower() not in states:
            continue
        if types and "classic" not in types:
            continue
        groups.append({**g, "group_type": "classic"})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": groups}
