"""The transaction coordinator's loops (``kaas.coord.txn``), started by ``serve_txn``:

* the marker watcher (own queue every 2 s, on a wake, or when a 50 ms stat of the queue
  directory shows a change; claims the queues of dead brokers), with the inotify doorbell
  of the queue;
* the fence watcher (500 ms);
* the 10 s timeout reaper + marker reconcile, both gated on slot ownership
  (``$KAAS_TXN_SWEEP_MS`` overrides the tick).

Each loop calls the coordinator's one-shot operations (``apply_queue``, ``poll_fences``,
``sweep``).
"""

from __future__ import annotations

import os

import structlog
import trio

from kaas import dirwatch
from kaas.coord.txn import TxnCoordinator
from kaas.errors import CorruptState

__all__ = [
    "FENCE_POLL_S",
    "MARKER_POLL_S",
    "MARKER_STAT_S",
    "SWEEP_INTERVAL_MS",
    "serve_fences",
    "serve_markers",
    "serve_queue_doorbell",
    "serve_sweeps",
    "serve_txn",
    "sweep_interval_ms",
]

log = structlog.get_logger()

SWEEP_INTERVAL_MS = 10_000
"""Reaper + reconcile tick (Apache transaction.abort.timed.out.transaction.cleanup.interval.ms)."""
SWEEP_ENV = "KAAS_TXN_SWEEP_MS"
RETRY_SWEEP_S = 0.02  # the first retry of a sweep that left a prepared or timed-out transaction unfinished
MARKER_POLL_S = 2.0
MARKER_STAT_S = 0.05
FENCE_POLL_S = 0.5


def sweep_interval_ms() -> int:
    """The reaper/reconcile tick: ``SWEEP_INTERVAL_MS``, or ``$KAAS_TXN_SWEEP_MS`` (tests)."""
    raw = os.environ.get(SWEEP_ENV)
    if raw:
        try:
            value = int(raw)
        except ValueError:
            log.warning("txn_sweep_env_ignored", value=raw)
        else:
            if value > 0:
                return value
    return SWEEP_INTERVAL_MS


async def serve_txn(coord: TxnCoordinator, *,
                   task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Run the marker watcher, the fence watcher and the reaper/reconcile forever; their
    nursery also runs the background halves of early-answered EndTxns."""
    async with trio.open_nursery() as nursery:
        coord.finisher.nursery = nursery
        await nursery.start(serve_fences, coord)
        nursery.start_soon(serve_markers, coord)
        nursery.start_soon(serve_sweeps, coord)
        nursery.start_soon(serve_queue_doorbell, coord)
        task_status.started()


async def serve_queue_doorbell(coord: TxnCoordinator, *,
                               task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Wake the marker watcher as soon as an entry lands in ``to-<self>/`` (inotify on a
    local data directory; on NFS this sees nothing and the stat poll does the work).
    A commit touching a peer-led partition then costs the peer a millisecond, not a poll
    interval, before the producer's next transaction may begin."""
    broker = coord.broker
    watch = dirwatch.open_watch(broker.layout.marker_dir(broker.id)) if broker.settings.inotify else None
    task_status.started()
    if watch is None:
        return
    coord.doorbell_live = True
    try:
        while True:
            await watch.wait()
            coord.wake_markers()
    finally:
        coord.doorbell_live = False
        watch.close()


async def serve_markers(coord: TxnCoordinator, *,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Apply this broker's marker queue: a full pass (claims included) at least every
    ``MARKER_POLL_S`` (2 s, docs/transactions.rst), at once when woken, and as soon as a cheap stat of
    the queue directory (every ``MARKER_STAT_S``) shows a change. The faster path keeps a
    peer-led commit off the 2 s interval: the producer's next transaction waits for
    these markers (CONCURRENT_TRANSACTIONS until they are applied).

    On tmpfs with the inotify doorbell open there is no stat poll: every writer of the
    queue is a process of this host, so the doorbell sees each entry (the stat poll is
    for NFS, where inotify misses other hosts' writes). That is 20 wake-ups a second
    fewer on an idle broker."""
    task_status.started()
    while True:
        wake = coord.marker_wakeup.rearm()
        stamp = await coord.queue_stamp()
        try:
            await coord.apply_queue()
        except (OSError, CorruptState) as exc:
            log.warning("txn_marker_queue_failed", error=str(exc))
        with trio.move_on_after(MARKER_POLL_S):
            while True:
                if coord.doorbell_live and coord.broker.memory_backed:
                    await wake.wait()
                    break
                with trio.move_on_after(MARKER_STAT_S):
                    await wake.wait()
                if wake.is_set() or await coord.queue_stamp() != stamp:
                    break


async def serve_fences(coord: TxnCoordinator, *,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Read every fence log, then poll the other brokers' every 500 ms (``poll_fences``)."""
    await coord.load_fences()
    task_status.started()
    while True:
        await coord.poll_fences()
        await trio.sleep(FENCE_POLL_S)


async def serve_sweeps(coord: TxnCoordinator, *,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """The timeout reaper and the marker reconcile (``sweep``): once at start (a crash may
    have left prepared entries), then every ``sweep_interval_ms()``, and at once when slots
    move to this broker (``wake_sweeps``: a transaction its previous coordinator prepared
    is finished now, as Apache's coordinator does when it loads a partition, rather than at
    the next sweep while the producer's EndTxn retries meet CONCURRENT_TRANSACTIONS)."""
    sweep_ms = sweep_interval_ms()
    task_status.started()
    retry = RETRY_SWEEP_S
    while True:
        wake = coord.sweep_wakeup.rearm()
        again_soon = await coord.sweep()
        # a transaction left unfinished (e.g. a partition between leaders for a moment,
        # right after a failover) is tried again shortly, not a whole sweep later; the
        # pause doubles while it stays unfinished
        pause = sweep_ms / 1000
        if again_soon:
            pause, retry = min(pause, retry), retry * 2
        else:
            retry = RETRY_SWEEP_S
        with trio.move_on_after(pause):
            await wake.wait()
