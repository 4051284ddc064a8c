"""The time a trio task spends running (not waiting): what a request costs the broker's one
thread, for the request quota (Apache's ``request_percentage`` counts the time a request
holds a request-handler thread, not the time it waits in purgatory).

A trio instrument adds up the steps of the tasks being watched. It is installed the first
time a request quota applies, so a broker without one pays nothing per task step.
"""

from __future__ import annotations

from time import perf_counter

import trio

__all__ = ["TaskTimes"]


class TaskTimes(trio.abc.Instrument):
    """Running time of watched tasks: ``start`` in the task, ``stop`` in the same task."""

    def __init__(self) -> None:
        self.installed = False
        self._spent: dict[trio.lowlevel.Task, float] = {}
        self._since: dict[trio.lowlevel.Task, float] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task in self._spent:
            self._since[task] = perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        t0 = self._since.pop(task, None)
        if t0 is not None:
            self._spent[task] += perf_counter() - t0

    def start(self) -> None:
        """Watch the calling task from now (installs the instrument on first use)."""
        if not self.installed:
            trio.lowlevel.add_instrument(self)
            self.installed = True
        task = trio.lowlevel.current_task()
        self._spent[task] = 0.0
        self._since[task] = perf_counter()

    def stop(self) -> float:
        """Seconds the calling task ran since ``start``; it is no longer watched."""
        task = trio.lowlevel.current_task()
        spent = self._spent.pop(task, 0.0)
        t0 = self._since.pop(task, None)
        return spent + (perf_counter() - t0 if t0 is not None else 0.0)
