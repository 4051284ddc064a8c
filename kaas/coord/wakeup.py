"""A wake-up a loop in ``kaas.tasks`` re-arms before each wait and anyone may set."""

from __future__ import annotations

import trio

__all__ = ["Wakeup"]


class Wakeup:
    """``set()`` ends the current wait of the loop that took the event from ``rearm()``
    (a set before the re-arm is forgotten: the loop is about to look anyway)."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        self._event.set()

    def rearm(self) -> trio.Event:
        """A fresh event, the one ``set`` sets from now on."""
        self._event = trio.Event()
        return self._event
