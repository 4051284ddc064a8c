"""Small trio helpers for the request path.

A trio checkpoint is a pass through the scheduler (an epoll poll and a task switch): on a
busy broker about 20 us, more than most of what a transactional request does on tmpfs.
These helpers skip it where nothing has to wait.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import structlog
import trio

from kaas.spans import FileSpan, SpanShrank

Piece = bytes | bytearray | memoryview | FileSpan

__all__ = ["SCRATCH", "Lock", "SocketReader", "Turn", "Turns", "Wakeup", "acquire", "held", "send_now", "send_parts"]

# One receive buffer for every connection of the process (plain and TLS, clients and peer
# links): each reader fills it and copies the bytes out with no await in between, so no
# other task of this trio run touches it meanwhile.
SCRATCH = memoryview(bytearray(256 * 1024))


class Lock:
    """A mutex for one trio run, taken without a checkpoint when it is free and handed to
    the longest waiter on release (as ``trio.Lock``).

    ``trio.Lock`` also records its owner, so that a task that exits holding it breaks the
    lock for its waiters, and refuses a release by another task; that bookkeeping (a
    parking-lot breaker added and removed per acquisition) was half of what a
    transactional request spent on its eight acquisitions. Holders here only ever take
    the lock in ``async with held(lock)``, which releases it on every exit.
    """

    __slots__ = ("_held", "_lot", "_waiting")

    def __init__(self) -> None:
        self._held = False
        self._waiting = 0
        self._lot = trio.lowlevel.ParkingLot()

    def locked(self) -> bool:
        return self._held

    def acquire_nowait(self) -> None:
        """Take the lock if it is free.

        Raises:
            trio.WouldBlock: it is held.
        """
        if self._held:
            raise trio.WouldBlock
        self._held = True

    async def acquire(self) -> None:
        """Take the lock: at once when it is free (no checkpoint), else when it is handed
        over (cancellable while waiting)."""
        if not self._held:
            self._held = True
            return
        self._waiting += 1
        try:
            await self._lot.park()  # ``release`` hands the lock over: it stays held
        finally:
            self._waiting -= 1

    def release(self) -> None:
        """Hand the lock to the longest waiter, or free it.

        Raises:
            RuntimeError: it is not held.
        """
        if not self._held:
            raise RuntimeError("release of a lock that is not held")
        if self._waiting and self._lot.unpark():
            return
        self._held = False


async def acquire(lock: Lock) -> None:
    """Take ``lock``: without a checkpoint when it is free, else wait for it."""
    await lock.acquire()


class held:
    """``async with held(lock)``: hold ``lock``; take it without a checkpoint when it is free.

    A class rather than an ``asynccontextmanager`` generator: entering and leaving cost half
    as much (0.9 against 1.9 us here), and a transaction takes a lock about 16 times."""

    __slots__ = ("lock",)

    def __init__(self, lock: Lock) -> None:
        self.lock = lock

    async def __aenter__(self) -> None:
        await self.lock.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.lock.release()


async def send_now(stream: trio.abc.Stream, fd: int | None, data: bytes | bytearray | memoryview) -> None:
    """Send ``data`` on ``stream``: straight to its socket ``fd`` when the socket takes all
    of it (a response or a peer request is normally far smaller than the send buffer),
    through trio for what it does not take. A stream that is not a plain socket (``fd``
    None: TLS, a test's memory stream) is sent to through trio alone.

    Trio's ``send_all`` ends even a send that completed at once with a checkpoint, a pass
    through the scheduler that costs more than the send. The caller must be the stream's
    only sender meanwhile (hold its send lock).

    Raises:
        trio.BrokenResourceError: the socket refused the bytes.
    """
    if fd is None:
        await stream.send_all(data)
        return
    try:
        sent = os.write(fd, data)
    except BlockingIOError:
        sent = 0
    except OSError as exc:
        raise trio.BrokenResourceError(f"send failed: {exc}") from exc
    if sent < len(data):
        await stream.send_all(memoryview(data)[sent:])


IOV_MAX = 1024  # the most buffers one writev takes (Linux's UIO_MAXIOV)


async def send_parts(stream: trio.abc.Stream, fd: int | None, parts: Sequence[Piece]) -> None:
    """Send ``parts`` one after the other as one byte stream on the socket ``fd``: each run
    of buffers in one ``writev`` (the kernel copies them straight into the socket, so a
    fetch's records are never joined into one buffer first), each ``FileSpan`` with
    ``sendfile`` (from the page cache, never through the broker's memory), waiting for room
    with trio when the socket is full. A stream that is not a plain socket (``fd`` None)
    gets them joined, the spans read. Each span is closed once sent. The caller must be the
    stream's only sender meanwhile (hold its send lock).

    Raises:
        trio.BrokenResourceError: the socket refused the bytes, or a span's file no longer
            holds them (then the frame cannot be finished: the connection must close).
    """
    try:
        if fd is None:
            await stream.send_all(b"".join(p.read() if isinstance(p, FileSpan) else p for p in parts))
        else:
            await _send_parts(fd, [p for p in parts if len(p)])
    except OSError as exc:
        if isinstance(exc, SpanShrank):
            structlog.get_logger().warning("fetch_answer_cut", reason=str(exc))
        raise trio.BrokenResourceError(f"send failed: {exc}") from exc
    finally:
        for p in parts:
            if isinstance(p, FileSpan):
                p.close()


async def _send_parts(fd: int, todo: list[Piece]) -> None:
    i = 0
    while i < len(todo):
        piece = todo[i]
        try:
            if isinstance(piece, FileSpan):
                sent = os.sendfile(fd, piece.fd, piece.position, piece.size)
                if sent == 0:
                    raise SpanShrank(f"segment shrank under a fetch: {piece.size} bytes missing at {piece.position}")
                piece.advance(sent)
                if not piece.size:
                    i += 1
                continue
            j = i + 1
            while j < len(todo) and j - i < IOV_MAX and not isinstance(todo[j], FileSpan):
                j += 1
            sent = os.writev(fd, todo[i:j])  # type: ignore[arg-type]
        except BlockingIOError:
            await trio.lowlevel.wait_writable(fd)
            continue
        while sent:
            n = len(todo[i])
            if sent < n:
                todo[i] = memoryview(todo[i])[sent:]  # type: ignore[arg-type]
                break
            sent -= n
            i += 1


class SocketReader:
    """Receiving on a plain TCP connection with the socket calls themselves: ``readv`` into
    a buffer, and trio's ``wait_readable`` only when nothing is there.

    trio's ``SocketStream.receive_some(n)`` allocates ``n`` bytes per call (256 KiB for a
    50-byte Heartbeat) and ends even a receive that found data with a checkpoint. Here the
    bytes land in one buffer shared by every connection (filled and copied out with no
    await in between), and a connection whose client keeps the socket full yields to the
    scheduler after ``YIELD_EVERY`` receives in a row that did not wait, so it cannot hold
    the loop (nor escape cancellation) for long."""

    __slots__ = ("fd", "_streak")

    YIELD_EVERY = 16

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._streak = 0

    async def _read(self, view: memoryview) -> int:
        while True:
            try:
                return os.readv(self.fd, (view,))
            except BlockingIOError:
                self._streak = 0
                await trio.lowlevel.wait_readable(self.fd)
            except OSError as exc:
                raise trio.BrokenResourceError(f"receive failed: {exc}") from exc

    async def _pace(self) -> None:
        self._streak += 1
        if self._streak >= self.YIELD_EVERY:
            self._streak = 0
            await trio.lowlevel.checkpoint()

    async def receive_into(self, view: memoryview) -> int:
        """Receive at least one byte into ``view``; 0: the peer closed."""
        n = await self._read(view)
        await self._pace()
        return n

    async def receive(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` (b"": the peer closed)."""
        scratch = SCRATCH[: min(max_bytes, len(SCRATCH))]
        n = await self._read(scratch)
        data = bytes(scratch[:n])  # before any await: the buffer is every connection's
        await self._pace()
        return data


class Wakeup:
    """``set()`` ends the current wait of the loop that took the event from ``rearm()``
    (a set before the re-arm is forgotten: the loop is about to look anyway). The loops
    of ``kaas.tasks`` re-arm one before each wait; anyone may set it."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        self._event.set()

    def rearm(self) -> trio.Event:
        """A fresh event, the one ``set`` sets from now on."""
        self._event = trio.Event()
        return self._event


class Turn:
    """One request's place in its connection's order (``Turns.take``): ``wait`` returns
    once every earlier turn is ``done``."""

    __slots__ = ("_before", "_done")

    def __init__(self, before: trio.Event | None) -> None:
        self._before = before
        self._done = trio.Event()

    async def wait(self) -> None:
        before = self._before
        if before is not None and not before.is_set():
            await before.wait()
        self._before = None

    def done(self) -> None:
        """This turn's ordered part is over (idempotent); the next may go."""
        self._done.set()


class Turns:
    """Turns handed out in the order ``take`` is called: the order requests arrived on a
    connection, whatever order trio runs their tasks in (it varies the order of tasks that
    are ready together, on purpose)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: trio.Event | None = None

    def take(self) -> Turn:
        turn = Turn(self._last)
        self._last = turn._done
        return turn
