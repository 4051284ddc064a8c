"""Hot reload of the controller-written cluster files of KIP-584 and KIP-546: the finalized
feature levels (``__cluster/features.json``) and the client quotas
(``__cluster/client_quotas.json``). Every broker stats each five times a second, reads it
again when it changed, and once a second regardless (``tasks.reload``); the controller
creates the features file with the new-cluster levels when it finds none (its one
writer: exclusive create, so a deposed controller racing a new one cannot write twice)."""

from __future__ import annotations

import structlog
import trio

from kaas.broker import Broker
from kaas.tasks.reload import keep_current

log = structlog.get_logger()


async def serve_features(broker: Broker, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Load the features and the client quotas, report ready, then keep them current."""
    features, quotas = broker.features, broker.client_quotas

    def bootstrap() -> None:
        if broker.cluster.is_controller and broker.cluster.lease_valid() and not features.file.exists():
            if features.file.create():
                log.info("features_created", levels=features.file.read().levels)

    async def reload(force: bool) -> None:
        try:
            await broker.run_io(bootstrap)
        except OSError as exc:
            log.error("features_create_failed", error=str(exc))
        await broker.run_io(features.reload, force)
        await broker.run_io(quotas.reload, force)

    await keep_current(reload, broker.layout.cluster, inotify=broker.settings.inotify, task_status=task_status)
