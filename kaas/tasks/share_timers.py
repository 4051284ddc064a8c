"""The share-partition runtime's timer loop (``kaas.coord.share``): acquisition locks are
released when their deadline passes, and share partitions of partitions no longer led
here are forgotten."""

from __future__ import annotations

import trio

from kaas.coord.share import ShareRuntime

__all__ = ["serve_share_timers"]

TIMER_POLL_S = 1.0  # the longest wait between two looks at the locks


async def serve_share_timers(shares: ShareRuntime, *,
                             task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Wait for the earliest lock deadline (at most ``TIMER_POLL_S``; a new acquisition
    wakes the wait to look again), then ``fire_timers``; forever."""
    task_status.started()
    while True:
        wait = shares.timer_wait_s(TIMER_POLL_S)
        wake = shares.timer_wakeup = trio.Event()
        with trio.move_on_after(wait):
            await wake.wait()
        await shares.fire_timers()
