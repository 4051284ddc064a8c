"""Sans-IO length-prefix framing: bytes in, whole frames out.

Invariants:
    - a frame is a 4-byte big-endian size followed by that many bytes;
    - a size above ``max_frame`` or below the smallest request header is a remote error;
    - the frames produced do not depend on how the input bytes were split.
"""

from __future__ import annotations

from collections.abc import Iterator

MIN_FRAME = 8  # api_key i16 + api_version i16 + correlation_id i32


class FramingError(Exception):
    """The remote sent a frame that cannot be accepted; the connection must close."""


class FrameDecoder:
    """Accumulates received bytes and yields complete frame payloads.

    A frame counts as consumed once it is yielded: a caller may stop iterating after any
    frame (``break``, ``return``) and the next ``frames()`` starts after it. The consumed
    prefix is dropped at the next ``feed`` or ``frames`` (one memmove per batch of frames,
    not one per frame).
    """

    __slots__ = ("_buf", "_max", "_pos")

    def __init__(self, max_frame: int) -> None:
        self._buf = bytearray()
        self._max = max_frame
        self._pos = 0  # start of the first unconsumed byte

    def _compact(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0

    def feed(self, data: bytes) -> None:
        self._compact()
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def frames(self) -> Iterator[bytes]:
        """Yield every complete frame buffered so far.

        Raises:
            FramingError: the next size prefix is out of bounds.
        """
        self._compact()
        buf = self._buf
        n = len(buf)
        while n - self._pos >= 4:
            pos = self._pos
            size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
            if size < MIN_FRAME or size > self._max:
                raise FramingError(f"frame size {size} outside [{MIN_FRAME}, {self._max}]")
            if n - pos - 4 < size:
                break
            self._pos = pos + 4 + size
            yield bytes(memoryview(buf)[pos + 4 : pos + 4 + size])  # one copy, not two


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its 4-byte size."""
    return len(payload).to_bytes(4, "big") + payload
