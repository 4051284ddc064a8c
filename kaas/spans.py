"""A run of bytes of a log segment that a Fetch answer carries without reading it: the
connection hands it to the socket with ``sendfile``, so the records go from the page cache
to the socket and never through the broker's memory (as Apache's FileRecords do).

A ``FileSpan`` holds its own duplicate of the segment's descriptor, so the segment may be
closed, rolled, cleaned or deleted while the answer waits for the socket: the bytes stay
those of the file it was read from. The duplicate is closed once the span is sent, or
when the answer is dropped unsent. At most ``MAX_OPEN`` spans are open in the process at
once; past that a read copies its bytes instead (``available``), so a burst of fetches
over many partitions cannot run the process out of descriptors.
"""

from __future__ import annotations

import os

__all__ = ["MAX_OPEN", "FileSpan", "SpanShrank", "available", "open_count"]

MAX_OPEN = 256
_open = 0


def available() -> bool:
    """May another span be opened now?"""
    return _open < MAX_OPEN


def open_count() -> int:
    """Spans open in the process (not yet sent or dropped)."""
    return _open


class SpanShrank(OSError):
    """The file no longer holds a span's bytes (truncated since it was read)."""


class FileSpan:
    """``size`` bytes of the file behind ``fd`` from ``position`` (a duplicate of ``fd``,
    taken here). ``len`` is the bytes still to send; ``advance`` moves past sent ones."""

    __slots__ = ("fd", "position", "size")

    def __init__(self, fd: int, position: int, size: int) -> None:
        global _open
        self.fd = -1
        self.fd = os.dup(fd)
        _open += 1
        self.position = position
        self.size = size

    def __len__(self) -> int:
        return self.size

    def advance(self, n: int) -> None:
        """``n`` bytes of the span were sent."""
        self.position += n
        self.size -= n

    def read(self) -> bytes:
        """The bytes of the span (for a stream that is not a socket).

        Raises:
            SpanShrank: the file no longer holds them all.
        """
        data = os.pread(self.fd, self.size, self.position)
        if len(data) < self.size:
            raise SpanShrank(f"segment shrank under a fetch: {len(data)} of {self.size} bytes at {self.position}")
        return data

    def __bytes__(self) -> bytes:
        return self.read()

    def close(self) -> None:
        global _open
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            _open -= 1

    def __del__(self) -> None:
        self.close()
