"""ReadShareGroupState (84, v0): a share group's whole state of partitions this broker
leads: the start offset and every (first, last, state, delivery count) range of the window,
with the records acquired now as ACQUIRED (1). What ``kaas groups describe`` shows as in
flight and archived (``handlers._share_state``). A partition whose state was never
initialised (no share consumer or InitializeShareGroupState yet) is INVALID_REQUEST, as in
Apache."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._share_state import serve

if TYPE_CHECKING:
    from kio.schema.read_share_group_state.v0 import ReadShareGroupStateRequest
    from kio.schema.read_share_group_state.v0.request import PartitionData

    from kaas.handlers.context import Context

API_KEY = 84
VERSIONS = (0, 0)
FAILED: dict[str, object] = {"state_epoch": 0, "start_offset": 0, "state_batches": []}  # Apache's error entry


async def handle(ctx: Context, req: ReadShareGroupStateRequest) -> dict[str, object]:
    async def one(group_id: str, topic: str, p: PartitionData) -> dict[str, object]:
        st = await ctx.broker.share_state.read(group_id, topic, p.partition)
        if st is None:
            raise KaasError(ErrorCode.invalid_request, f"no share state of {topic}-{p.partition} for group {group_id}")
        return {"state_epoch": 0, "start_offset": st.start, "state_batches": [
            {"first_offset": first, "last_offset": last, "delivery_state": state, "delivery_count": count}
            for first, last, state, count in st.ranges]}
    return await serve(ctx, req.group_id, req.topics, one, FAILED)


__all__ = ["API_KEY", "VERSIONS", "handle"]
