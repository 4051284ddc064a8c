"""Hot reload of the ACL file (``__cluster/security/acls.json``): every broker stats it
five times a second and reads it again when it changed, and once a second regardless (a
network file system may cache attributes); an inotify doorbell on the directory, where the
data directory is local, wakes the loop at once. Started by ``serve_broker`` when the
authoriser is on."""

from __future__ import annotations

import trio

from kaas.broker import Broker
from kaas.tasks.reload import keep_current


async def serve_acls(broker: Broker, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Load the ACLs (a corrupt file at start: deny all but super users until it is good),
    report ready, then keep them current until cancelled."""
    acls = broker.acls

    async def reload(force: bool) -> None:
        await broker.run_io(acls.reload, force)  # inline on tmpfs, a thread on a disk or NFS

    await keep_current(reload, acls.file.path.parent, inotify=broker.settings.inotify, task_status=task_status)
