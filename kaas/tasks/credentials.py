"""Keep ``broker.credentials`` current: stat the SCRAM credentials file four times a
second and re-read it when it changed, so that a user added or removed on the controller
takes effect on every broker within a second. A corrupt file is logged once (and every
authentication fails until a good file replaces it, ``storage.credentials``)."""

from __future__ import annotations

import structlog
import trio

from kaas.broker import Broker

RELOAD_S = 0.25

log = structlog.get_logger()


def _reload(broker: Broker) -> None:
    store = broker.credentials
    if store.refresh():
        if store.error is not None:
            log.error("scram_credentials_corrupt", path=str(store.path), error=store.error,
                      note="SASL/SCRAM and PLAIN logins fail until the file is repaired")
        else:
            log.info("scram_credentials_loaded", users=len(store.users))


async def serve_credentials(broker: Broker, *,
                            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Load the file, report ready, then poll it until cancelled (the stat and any read
    through ``broker.run_io``: inline on tmpfs, a worker thread on a disk or NFS)."""
    await broker.run_io(_reload, broker)
    task_status.started()
    while True:
        await trio.sleep(RELOAD_S)
        await broker.run_io(_reload, broker)
