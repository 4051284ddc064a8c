"""Hot reload of the dynamic broker configs (``__cluster/broker_configs.json``, KIP-226):
every broker stats the file five times a second, reads it again when it changed, and once
a second regardless (NFS may cache attributes); an inotify doorbell on ``__cluster/``, where
the data directory is local, wakes the loop at once. A file that does not parse is logged
and the last good layers stay in force (never reset to none)."""

from __future__ import annotations

import structlog
import trio

from kaas.broker import Broker
from kaas.errors import CorruptState
from kaas.tasks.reload import keep_current

log = structlog.get_logger()


async def reload(broker: Broker, force: bool) -> None:
    """Read the file if it changed (or ``force``) and apply it."""
    dyn = broker.dynamic
    try:
        configs = await broker.run_io(dyn.read_if_changed, force)
    except (CorruptState, OSError) as exc:
        if dyn.error != str(exc):
            log.error("broker_configs_unreadable", error=str(exc))
        dyn.error = str(exc)
        return
    if configs is not None:
        dyn.apply(configs)


async def serve_broker_configs(broker: Broker, *,
                               task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Load the dynamic configs, report ready, then keep them current until cancelled."""

    async def reload_it(force: bool) -> None:
        await reload(broker, force)

    await keep_current(reload_it, broker.layout.cluster, inotify=broker.settings.inotify, task_status=task_status)
