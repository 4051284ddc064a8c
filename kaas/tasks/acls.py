"""Hot reload of the ACL file (``__cluster/security/acls.json``): every broker stats it
five times a second and reads it again when it changed, and once a second regardless (a
network file system may cache attributes); an inotify doorbell on the directory, where the
data directory is local, wakes the loop at once. Started by ``serve_broker`` when the
authoriser is on."""

from __future__ import annotations

import trio

from kaas import dirwatch
from kaas.broker import Broker

POLL_S = 0.2  # stat period
FORCE_S = 1.0  # a read at least this often, whatever stat says


async def serve_acls(broker: Broker, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Load the ACLs (a corrupt file at start: deny all but super users until it is good),
    report ready, then keep them current until cancelled."""
    acls = broker.acls
    await broker.run_io(acls.reload, True)
    watch = dirwatch.open_watch(acls.file.path.parent) if broker.settings.inotify else None
    task_status.started()
    last_read = trio.current_time()
    try:
        while True:
            with trio.move_on_after(POLL_S):
                if watch is not None:
                    await watch.wait()
                    await trio.sleep(0.01)  # let a rename's events land together
                else:
                    await trio.sleep_forever()
            force = trio.current_time() - last_read >= FORCE_S
            if force:
                last_read = trio.current_time()
            await broker.run_io(acls.reload, force)  # inline on tmpfs, a thread on a disk or NFS
    finally:
        if watch is not None:
            watch.close()
