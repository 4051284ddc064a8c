"""DeleteShareGroupState (86, v0): remove a share group's state of partitions this broker
leads (none is no error). Sent by the group's coordinator for DeleteShareGroupOffsets and
DeleteGroups (``handlers._share_state``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kaas.handlers._share_state import serve

if TYPE_CHECKING:
    from kio.schema.delete_share_group_state.v0 import DeleteShareGroupStateRequest
    from kio.schema.delete_share_group_state.v0.request import PartitionData

    from kaas.handlers.context import Context

API_KEY = 86
VERSIONS = (0, 0)


async def handle(ctx: Context, req: DeleteShareGroupStateRequest) -> dict[str, object]:
    async def one(group_id: str, topic: str, p: PartitionData) -> dict[str, object]:
        await ctx.broker.share_state.delete(group_id, topic, p.partition)
        return {}
    return await serve(ctx, req.group_id, req.topics, one, {})


__all__ = ["API_KEY", "VERSIONS", "handle"]
