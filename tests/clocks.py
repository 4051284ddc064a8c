"""Clocks for tests that hand a broker its time (``Broker(settings, clock=...)``)."""

from __future__ import annotations

from kaas.clock import SYSTEM


class SteppedWall:
    """A wall clock the test sets by hand (``clock.now_ms = ...``); the monotonic clock is
    the system's, so the broker's loops (the membership tick, the lease) run as usual."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def wall_ms(self) -> int:
        return self.now_ms

    def monotonic(self) -> float:
        return SYSTEM.monotonic()
