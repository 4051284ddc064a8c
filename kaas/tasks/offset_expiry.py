"""Offset retention: every ``offsets.retention.check.interval.ms`` the group coordinator
removes the expired committed offsets of the groups it coordinates, and the empty groups
left with none (``kaas.coord.group.expiry``, the rule ``kaas.domain.groups.offset_expiry``)."""

from __future__ import annotations

import trio

from kaas.broker import Broker
from kaas.coord.group.expiry import expire_offsets

__all__ = ["serve_offset_expiry"]


async def serve_offset_expiry(broker: Broker, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Sleep the check interval (read anew each pass), then run one expiry pass; forever."""
    task_status.started()
    while True:
        await trio.sleep(broker.settings.offsets_retention_check_interval_ms / 1000)
        await expire_offsets(broker.groups)
