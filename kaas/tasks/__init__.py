"""Every trio loop of a broker process, started by ``net.server`` through ``serve_broker``:
the membership tick and its doorbell (``membership``), presence connections
(``presence``), retention (``retention``), the group and share-partition timers
(``group_timers``), offset retention (``offset_expiry``), the
transaction coordinator's marker watcher, queue doorbell, fence watcher and sweeps
(``txn``), the log cleaner (``log_cleaner``), the SCRAM credentials reload
(``credentials``), the ACL reload (``acls``, with the authoriser on), the dynamic broker
configs and group configs reloads (``broker_configs``, ``group_configs``), the feature levels
and client quotas reload (``features``) and the failpoint reload."""

from __future__ import annotations

import trio

from kaas import failpoints
from kaas.broker import Broker
from kaas.coord.txn import TxnCoordinator
from kaas.tasks.acls import serve_acls
from kaas.tasks.broker_configs import serve_broker_configs
from kaas.tasks.credentials import serve_credentials
from kaas.tasks.features import serve_features
from kaas.tasks.flush import serve_flush
from kaas.tasks.group_configs import serve_group_configs
from kaas.tasks.group_timers import serve_timers
from kaas.tasks.log_cleaner import serve_log_cleaner
from kaas.tasks.membership import Membership
from kaas.tasks.offset_expiry import serve_offset_expiry
from kaas.tasks.presence import serve_presence
from kaas.tasks.retention import serve_retention
from kaas.tasks.trash import serve_trash
from kaas.tasks.txn import serve_txn

FAILPOINT_RELOAD_S = 0.2


async def serve_failpoints() -> None:
    """Re-read the failpoint file (``run/failpoints-<id>.json``) five times a second."""
    while True:
        await trio.sleep(FAILPOINT_RELOAD_S)
        failpoints.reload()


async def serve_broker(broker: Broker, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Join the cluster and run the broker's loops until cancelled: heartbeats, controller
    election, assignment (partitions this broker is assigned are taken over by the
    membership tick), then everything that serves on top of them."""
    async with trio.open_nursery() as nursery:
        broker.nursery = nursery
        broker.topics.refresh()
        failpoints.configure(broker.layout.run, broker.id)
        nursery.start_soon(serve_failpoints)
        await nursery.start(serve_credentials, broker)
        if broker.acls.enabled:  # before anything serves: requests meet the file's ACLs
            await nursery.start(serve_acls, broker)
        await nursery.start(serve_broker_configs, broker)
        await nursery.start(serve_group_configs, broker)
        await nursery.start(serve_features, broker)  # feature levels, client quotas
        await nursery.start(Membership(broker).serve)
        await nursery.start(serve_presence, broker.cluster, broker.peer_links)
        await nursery.start(serve_retention, broker)
        await nursery.start(serve_trash, broker)
        await nursery.start(serve_flush, broker)
        await nursery.start(serve_timers, broker.groups)
        await nursery.start(serve_timers, broker.shares)
        await nursery.start(serve_offset_expiry, broker)
        if broker.txn is None:
            broker.txn = TxnCoordinator(broker)
        nursery.start_soon(serve_txn, broker.txn)
        await nursery.start(serve_log_cleaner, broker)
        task_status.started()
