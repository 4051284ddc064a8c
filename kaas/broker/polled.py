"""A broker's copy of one controller-written file on the shared volume (the finalized
features, the client quotas): the last good version read, re-read when ``stat`` says the
file changed (``tasks.reload.keep_current`` drives it), and applied at once by the
controller after its own write.

A version that does not parse is reported once (one error line per bad version) and
refused: the broker keeps its last good copy, never resets to "nothing"; ``error`` says
the file as it is now is unreadable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import structlog
import trio

from kaas.errors import CorruptState

log = structlog.get_logger()

T = TypeVar("T")
Signature = tuple[int, int, int, int] | None


class PolledFile(Generic[T]):
    """The last good version of a polled file.

    Args:
        what: the file's name in log lines (``"features"``).
        signature: the file's stat signature now (``atomic.stat_signature``).
        read: the file's content now (blocking).
        summary: what the log line of a newly applied version says of it.
    """

    def __init__(self, what: str, signature: Callable[[], Signature], read: Callable[[], T],
                 summary: Callable[[T], dict[str, object]] = lambda _: {}) -> None:
        self.what = what
        self._summary = summary
        self._stat = signature
        self._read = read
        self.current: T | None = None  # the last good content; None: none read yet
        self.error: str | None = None  # the file as it is now does not parse (or cannot be read)
        self.lock = trio.Lock()  # the controller's read-alter-write, one at a time
        self._signature: Signature = None
        self._bad: Signature = None

    def reload(self, force: bool = False) -> bool:
        """Read the file again when its stat signature changed (or ``force``) and apply it.
        True when the content in force changed. Blocking file work (``broker.run_io``)."""
        sig = self._stat()
        if not force and sig == self._signature and self.current is not None:
            return False
        try:
            content = self._read()
        except (CorruptState, OSError) as exc:
            self.error = str(exc)
            if sig != self._bad:
                self._bad = sig
                log.error(f"{self.what}_unreadable", error=str(exc),
                          kept="last good copy" if self.current is not None else "none")
            return False
        self._signature = sig
        if self._bad is not None:
            log.warning(f"{self.what}_readable_again")
            self._bad = None
        return self.apply(content)

    def apply(self, content: T) -> bool:
        """Make ``content`` the version in force; True when it changed."""
        self.error = None
        if content == self.current:
            return False
        first = self.current is None
        self.current = content
        if not first:
            log.info(f"{self.what}_applied", **self._summary(content))
        return True
