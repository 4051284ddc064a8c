"""ReadShareGroupState (84, v0): a share group's whole state of partitions this broker
leads: the start offset and every (first, last, state, delivery count) range of the window,
with the records acquired now as ACQUIRED (1). What ``kaas groups describe`` shows as in
flight and archived (``handlers._share_state``); a partition without state has start
offset -1 and no ranges."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kaas.handlers._share_state import serve

if TYPE_CHECKING:
    from kio.schema.read_share_group_state.v0 import ReadShareGroupStateRequest

    from kaas.handlers import Context

API_KEY = 84
VERSIONS = (0, 0)
NONE: dict[str, object] = {"state_epoch": 0, "start_offset": -1, "state_batches": []}


async def handle(ctx: Context, req: ReadShareGroupStateRequest) -> dict[str, object]:
    async def one(group_id: str, topic: str, p: Any) -> dict[str, object]:
        st = await ctx.broker.share_state.read(group_id, topic, p.partition)
        if st is None:
            return NONE
        return {"state_epoch": 0, "start_offset": st.start, "state_batches": [
            {"first_offset": first, "last_offset": last, "delivery_state": state, "delivery_count": count}
            for first, last, state, count in st.ranges]}
    return await serve(ctx, req.group_id, req.topics, one, NONE)


__all__ = ["API_KEY", "VERSIONS", "handle"]
