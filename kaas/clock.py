"""Time, as one seam: nothing in the broker reads the system's clocks but this module.

A broker has one ``Clock`` (``Broker.clock``), handed to everything that needs the time:
the cluster view and the membership tick (liveness, the lease), the coordinators (session
and transaction timeouts), the partition logs (append and retention times), the loops. Two
readings:

- ``wall_ms()``: milliseconds since the Unix epoch, for what is stored or compared with
  another host's or a client's times (record timestamps, retention, expiry, offsets'
  commit times);
- ``monotonic()``: seconds on a clock that never goes back, for durations this process
  measures itself (heartbeat silence, the lease). Never compared across hosts.

``SystemClock`` reads the operating system. ``TrioClock`` follows a trio clock (a test's
``trio.testing.MockClock``): its monotonic time is that clock's, and its wall time starts
at a given instant and advances with it, so a component test that sleeps through a session
timeout on an autojumping MockClock takes no real time at all. Code that needs a trio
deadline sleeps for a duration (``trio.sleep``, ``move_on_after``) rather than comparing a
``monotonic()`` reading with ``trio.current_time()``: under ``SystemClock`` the two have
different origins (trio adds a random offset to its clock, so that code mixing them fails
fast).

``make lint`` bans ``time.time`` and ``time.monotonic`` everywhere in ``kaas`` but here.
"""

from __future__ import annotations

import time
from typing import Protocol

import trio

__all__ = ["Clock", "SYSTEM", "SystemClock", "TrioClock", "wall_ms"]


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch."""

    def monotonic(self) -> float:
        """Seconds since an arbitrary origin; never goes back."""


class SystemClock:
    """The operating system's clocks."""

    __slots__ = ()

    def wall_ms(self) -> int:
        return int(time.time() * 1000)

    # the C function itself, no Python frame: the lease is checked ~25 times a transaction
    monotonic = staticmethod(time.monotonic)


class TrioClock:
    """The time of a trio clock (a test's ``MockClock``), with a wall time that starts at
    ``wall_start_ms`` and moves with it. Its methods may be called from any thread."""

    __slots__ = ("_clock", "_origin", "_wall_start_ms")

    def __init__(self, clock: trio.abc.Clock, wall_start_ms: int = 1_700_000_000_000) -> None:
        self._clock = clock
        self._origin = clock.current_time()
        self._wall_start_ms = wall_start_ms

    def wall_ms(self) -> int:
        return self._wall_start_ms + int((self._clock.current_time() - self._origin) * 1000)

    def monotonic(self) -> float:
        return self._clock.current_time()


SYSTEM: Clock = SystemClock()


def wall_ms() -> int:
    """The system's wall clock in ms: for operator tools and defaults outside a broker (a
    broker's own code reads ``Broker.clock``)."""
    return SYSTEM.wall_ms()
