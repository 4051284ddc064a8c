"""ReadShareGroupStateSummary (87, v0-1): a share group's start offset of partitions this
broker leads, with its leader epoch and, from v1, how many offsets past the start are done
(KIP-1226's delivery-complete count, for the lag). Asked by the group's coordinator for
DescribeShareGroupOffsets (``handlers._share_state``); a partition without state has start
offset -1."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kaas.handlers._share_state import serve

if TYPE_CHECKING:
    from kio.schema.read_share_group_state_summary import v0, v1

    from kaas.handlers._share_state import Partition
    from kaas.handlers.context import Context

    ReadShareGroupStateSummaryRequest: TypeAlias = (v0.ReadShareGroupStateSummaryRequest
                                                    | v1.ReadShareGroupStateSummaryRequest)

API_KEY = 87
VERSIONS = (0, 1)
NONE: dict[str, object] = {"state_epoch": 0, "leader_epoch": -1, "start_offset": -1, "delivery_complete_count": -1}
DENIED: dict[str, object] = {"state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "delivery_complete_count": -1}


async def handle(ctx: Context, req: ReadShareGroupStateSummaryRequest) -> dict[str, object]:
    async def one(group_id: str, topic: str, p: Partition) -> dict[str, object]:
        st = await ctx.broker.share_state.read(group_id, topic, p.partition)
        if st is None:
            return NONE
        return {"state_epoch": 0, "leader_epoch": st.leader_epoch, "start_offset": st.start,
                "delivery_complete_count": st.delivery_complete}
    return await serve(ctx, req.group_id, req.topics, one, NONE, DENIED)


__all__ = ["API_KEY", "VERSIONS", "handle"]
