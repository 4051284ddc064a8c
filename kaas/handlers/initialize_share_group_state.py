"""InitializeShareGroupState (83, v0): give a share group's state of partitions this broker
leads a new start offset, nothing in flight (-1: no state, so ``share.auto.offset.reset``
applies). Sent by the group's coordinator for AlterShareGroupOffsets
(``handlers._share_state``); kaas keeps no state epochs (the leader epoch fences a deposed
writer), so ``state_epoch`` is not looked at."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kaas.handlers._share_state import serve

if TYPE_CHECKING:
    from kio.schema.initialize_share_group_state.v0 import InitializeShareGroupStateRequest
    from kio.schema.initialize_share_group_state.v0.request import PartitionData

    from kaas.handlers.context import Context

API_KEY = 83
VERSIONS = (0, 0)


async def handle(ctx: Context, req: InitializeShareGroupStateRequest) -> dict[str, object]:
    async def one(group_id: str, topic: str, p: PartitionData) -> dict[str, object]:
        await ctx.broker.share_state.initialize(group_id, topic, p.partition, p.start_offset)
        return {}
    return await serve(ctx, req.group_id, req.topics, one, {})


__all__ = ["API_KEY", "VERSIONS", "handle"]
