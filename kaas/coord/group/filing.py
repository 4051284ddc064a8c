"""How a modern kind's runtime (consumer, share) keeps a group on file after its timers
changed it in memory first: the write of a group that is ahead of its file (``dirty``),
while this broker holds its lease (``save_if_dirty``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog

from kaas.coord.group.kinds import ModernKind
from kaas.coord.group.ports import Coordinator
from kaas.errors import KaasError

__all__ = ["save_if_dirty"]

log = structlog.get_logger()

_NOT_SAVED = {"consumer": "consumer_group_not_saved", "share": "share_group_not_saved"}


async def save_if_dirty(coord: Coordinator, group_id: str, k: ModernKind, save: Callable[[], Awaitable[None]]) -> None:
    """Write the group (``save``) when its kind record ``k`` is ahead of the file and the
    lease is valid, then mark it filed; a write refused or failed (KaasError) is logged as
    ``<kind>_group_not_saved`` and stays due, for the timers' next turn."""
    if not k.dirty or not coord.broker.cluster.lease_valid():
        return
    try:
        await save()
        k.dirty = False
    except KaasError as exc:
        log.warning(_NOT_SAVED[k.name], group=group_id, error=exc.code.name)
