"""The group coordinator's timer loop (``kaas.coord.group``): session expiry and rebalance
deadlines fire when due, and the membership of owned groups is kept on file."""

from __future__ import annotations

import trio

from kaas.coord.group import GroupCoordinator

__all__ = ["TIMER_POLL_S", "serve_timers"]

TIMER_POLL_S = 1.0  # the longest wait between two looks at the timers


async def serve_timers(groups: GroupCoordinator, *,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Wait for the earliest deadline of a loaded group (at most ``TIMER_POLL_S``, less
    when a parked request is answered), then ``fire_timers``; forever."""
    task_status.started()
    while True:
        wait = groups.timer_wait_s(TIMER_POLL_S)
        wake = groups.timer_wakeup.rearm()
        with trio.move_on_after(wait):
            await wake.wait()
        await groups.fire_timers()
