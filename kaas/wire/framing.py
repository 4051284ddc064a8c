"""Sans-IO length-prefix framing: bytes in, whole frames out.

Invariants:
    - a frame is a 4-byte big-endian size followed by that many bytes;
    - a size above ``max_frame`` or below ``min_frame`` (by default the smallest request
      header) is a remote error;
    - the frames produced do not depend on how the input bytes were split.
"""

from __future__ import annotations

from collections.abc import Iterator

MIN_FRAME = 8  # api_key i16 + api_version i16 + correlation_id i32
MIN_RESPONSE = 4  # a response: its correlation_id i32 (an empty v0 header's body may be 0 bytes)
LARGE_FRAME = 64 * 1024  # frames from this size on are received into a buffer of their own


class FramingError(Exception):
    """The remote sent a frame that cannot be accepted; the connection must close."""


class FrameDecoder:
    """Accumulates received bytes and yields complete frame payloads.

    A frame counts as consumed once it is yielded: a caller may stop iterating after any
    frame (``break``, ``return``) and the next ``frames()`` starts after it. The consumed
    prefix is dropped at the next ``feed`` or ``frames`` (one memmove per batch of frames,
    not one per frame).

    Large frames (``large`` bytes or more, by default ``LARGE_FRAME``: in practice produce
    requests) take another path: once the size prefix of one has arrived, its bytes so far
    move into a buffer of the frame's exact size, and ``room()`` offers the rest of that
    buffer for the caller to receive straight into (``recv_into``, then ``received(n)``).
    One receive can then take the whole remainder instead of a 256 KiB piece at a time, and
    the payload is copied neither into the accumulation buffer nor out of it. Such a frame
    is yielded as a read-only ``memoryview`` of its own buffer (a new one per frame, so
    nothing later overwrites it); small frames are yielded as ``bytes``.
    """

    __slots__ = ("_buf", "_max", "_min", "_pos", "_large", "_fill", "_large_at")

    def __init__(self, max_frame: int, min_frame: int = MIN_FRAME, large: int = LARGE_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame
        self._min = min_frame
        self._large_at = large
        self._pos = 0  # start of the first unconsumed byte
        self._large: bytearray | None = None  # payload of the large frame being received
        self._fill = 0  # bytes of it received so far

    @property
    def max_frame(self) -> int:
        return self._max

    @max_frame.setter
    def max_frame(self, value: int) -> None:
        """Change the bound for the frames not yet cut (a connection raises it once its
        client has authenticated)."""
        self._max = value

    @property
    def min_frame(self) -> int:
        return self._min

    @min_frame.setter
    def min_frame(self, value: int) -> None:
        """Change the lower bound for the frames not yet cut (the raw SASL tokens after a
        SaslHandshake v0 are no requests, and may be shorter than a request header)."""
        self._min = value

    def _compact(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0

    def feed(self, data: bytes | bytearray) -> None:
        large = self._large
        if large is not None:
            take = min(len(large) - self._fill, len(data))
            large[self._fill : self._fill + take] = data[:take]
            self._fill += take
            if take == len(data):
                return
            data = data[take:]
        self._compact()
        self._buf += data

    def room(self) -> memoryview | None:
        """Where the rest of the large frame being received goes, or None (receive and
        ``feed`` as usual). Receive into it, then call ``received`` with the count."""
        large = self._large
        if large is None or self._fill == len(large):
            return None
        return memoryview(large)[self._fill :]

    def received(self, n: int) -> None:
        """``n`` bytes were received into the view ``room()`` returned."""
        assert self._large is not None and 0 <= n <= len(self._large) - self._fill
        self._fill += n

    @property
    def buffered(self) -> int:
        """Bytes received and not yet yielded as a frame (size prefixes included)."""
        pending = len(self._buf) - self._pos
        return pending + 4 + self._fill if self._large is not None else pending

    def frames(self) -> Iterator[bytes | memoryview]:
        """Yield every complete frame buffered so far.

        Raises:
            FramingError: the next size prefix is out of bounds.
        """
        large = self._large
        if large is not None:
            if self._fill < len(large):
                return
            self._large = None
            self._fill = 0
            yield memoryview(large).toreadonly()
        self._compact()
        buf = self._buf
        n = len(buf)
        while n - self._pos >= 4:
            pos = self._pos
            size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
            if size < self._min or size > self._max:
                raise FramingError(f"frame size {size} outside [{self._min}, {self._max}]")
            if n - pos - 4 < size:
                if size >= self._large_at:
                    # the frame's own buffer: what has arrived moves in, the rest is received into it
                    large = bytearray(size)
                    have = n - pos - 4
                    large[:have] = memoryview(buf)[pos + 4 : n]
                    self._large, self._fill = large, have
                    self._pos = n
                break
            self._pos = pos + 4 + size
            yield bytes(memoryview(buf)[pos + 4 : pos + 4 + size])  # one copy, not two


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its 4-byte size."""
    return len(payload).to_bytes(4, "big") + payload
