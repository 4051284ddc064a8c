"""The timer loop of the group coordinator (``kaas.coord.group``: session expiry and
rebalance deadlines fire when due, and the membership of owned groups is kept on file)
and of the share partitions (``kaas.coord.share_partitions``: acquisition locks end when due)."""

from __future__ import annotations

from typing import Protocol

import trio

from kaas.aio import Wakeup

__all__ = ["TIMER_POLL_S", "Timers", "serve_timers"]

TIMER_POLL_S = 1.0  # the longest wait between two looks at the timers


class Timers(Protocol):
    """What the loop drives: ``GroupCoordinator`` and ``ShareRuntime``."""

    @property
    def timer_wakeup(self) -> Wakeup:
        """Set when a deadline may have moved closer (the loop looks again at once)."""

    def timer_wait_s(self, longest: float) -> float:
        """Seconds until the earliest deadline, at most ``longest``."""

    async def fire_timers(self) -> None:
        """Act on every deadline that passed."""


async def serve_timers(timers: Timers, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Wait for the earliest deadline (at most ``TIMER_POLL_S``, less when ``timer_wakeup``
    is set), then ``fire_timers``; forever."""
    task_status.started()
    while True:
        wait = timers.timer_wait_s(TIMER_POLL_S)
        wake = timers.timer_wakeup.rearm()
        with trio.move_on_after(wait):
            await wake.wait()
        await timers.fire_timers()
