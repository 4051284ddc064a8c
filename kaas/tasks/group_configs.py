"""Hot reload of the group configs (``__cluster/group_configs.json``, KIP-848/KIP-932): every
broker stats the file five times a second, reads it again when it changed, and once a second
regardless (NFS may cache attributes); an inotify doorbell on ``__cluster/``, where the data
directory is local, wakes the loop at once. A file that does not parse is logged and the
last good copy stays in force (never reset to none)."""

from __future__ import annotations

import trio

from kaas.broker import Broker
from kaas.tasks.reload import keep_current


async def serve_group_configs(broker: Broker, *,
                              task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Load the group configs, report ready, then keep them current until cancelled."""
    store = broker.group_configs

    async def reload(force: bool) -> None:
        await broker.run_io(store.reload, force)

    await keep_current(reload, broker.layout.cluster, inotify=broker.settings.inotify, task_status=task_status)
