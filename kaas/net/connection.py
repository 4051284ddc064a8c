"""One client connection: receive bytes, cut frames, run requests concurrently, send the
responses back in request order.

Slow requests (acks=all produce, long-poll fetch) run in the connection's nursery, so a
pipelining client is not serialised behind them, and other connections never are.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import structlog
import trio

from kaas.aio import Lock, SocketReader, Turns, acquire, held, send_now, send_parts
from kaas.broker import Broker
from kaas.dispatch import CloseConnection, Prepared, execute, prepare
from kaas.handlers.session import Session
from kaas.net.ordering import Close, Ordering, Slot, outcome
from kaas.net.tls import TlsReader
from kaas.wire.codec import Frame, Gathered, Piece
from kaas.wire.framing import MIN_FRAME, FrameDecoder, FramingError

if TYPE_CHECKING:
    from kaas.broker import Broker

log = structlog.get_logger()

MAX_IN_FLIGHT = 64
# The writer holds a ready answer back while the answers right behind it keep becoming
# ready, at most this many scheduler passes (``_Connection.gather``).
GATHER_PASSES = 16
# The largest frame a connection that has not authenticated may send (a SASL token, an
# ApiVersions request): a 100 MiB "token" is refused at its size prefix, never buffered.
UNAUTHENTICATED_MAX_FRAME = 64 * 1024
_conn_ids = itertools.count(1)
SASL_APIS = (17, 36)  # SaslHandshake, SaslAuthenticate (and the raw tokens of a v0 exchange)
DRAIN_S = 5  # how long a connection the peer closed may still answer what it sent
PRODUCE = 0


async def serve_connection(broker: Broker, stream: trio.abc.Stream, session: Session | None = None) -> None:
    """Serve one connection until the peer closes it or breaks the protocol.

    Nothing a connection does can take the broker down: transport errors end the
    connection quietly, anything else is logged and ends only this connection.

    Args:
        session: the connection's security state (its listener, protocol and, after TLS,
            principal; on a SASL listener unauthenticated); default: a PLAINTEXT
            listener's, authenticated as User:ANONYMOUS.
    """
    try:
        await _serve(broker, stream, session)
    except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        pass
    except* Exception as group:
        log.error("connection_crashed", error=repr(group.exceptions[0]))


def peer_name(stream: trio.abc.Stream) -> str:
    """``host:port`` of the other end of ``stream`` (a socket, or TLS over one); ``memory:0``
    for a stream without a socket."""
    transport = stream
    while isinstance(transport, trio.SSLStream):
        transport = transport.transport_stream
    sock = transport.socket if isinstance(transport, trio.SocketStream) else None
    try:
        host, port = sock.getpeername()[:2] if sock is not None else ("memory", 0)
        return f"{host}:{port}"
    except (OSError, ValueError):  # (an AF_UNIX peer has no (host, port))
        return "?"


async def send_frames(stream: trio.abc.Stream, fd: int | None, out: list[Frame]) -> None:
    """Send the answers ``out`` in order, in one send: one buffer as it is, several
    joined, and when one is in pieces (a fetch's records) every piece in one ``writev``."""
    if not any(isinstance(f, Gathered) for f in out):
        await send_now(stream, fd, out[0] if len(out) == 1 else b"".join(out))  # type: ignore[arg-type]
        return
    parts: list[Piece] = []
    for f in out:
        if isinstance(f, Gathered):
            parts.extend(f.parts)
        else:
            parts.append(f)
    await send_parts(stream, fd, parts)


class _Receiver:
    """Bytes from the stream into the frame decoder: the rest of a large frame straight
    into its buffer, else a chunk. The fast paths: the socket's own reader, or the TLS
    reader's; the stream's ``receive_some`` otherwise (a test's memory stream)."""

    __slots__ = ("decoder", "plain", "tls", "stream")

    def __init__(self, stream: trio.abc.Stream, fd: int | None, decoder: FrameDecoder) -> None:
        self.decoder = decoder
        self.stream = stream
        self.tls = TlsReader(stream) if isinstance(stream, trio.SSLStream) else None
        self.plain = SocketReader(fd) if fd is not None and self.tls is None else None

    async def fill(self) -> bool:
        """Receive once into the decoder. False at the end of the stream."""
        decoder = self.decoder
        room = decoder.room()
        if room is not None:
            with room:
                if self.plain is not None:
                    got = await self.plain.receive_into(room)
                elif self.tls is not None:
                    got = await self.tls.receive_into(room)
                else:
                    chunk = await self.stream.receive_some(len(room))
                    got = len(chunk)
                    room[:got] = chunk
            if got:
                decoder.received(got)
            return bool(got)
        data: bytes | bytearray
        if self.plain is not None:
            data = await self.plain.receive(256 * 1024)
        elif self.tls is not None:
            data = await self.tls.receive(256 * 1024)
        else:
            data = await self.stream.receive_some(256 * 1024)
        if data:
            decoder.feed(data)
        return bool(data)


class _Closed(Exception):
    """The connection ends: a close was sent, or a frame broke the protocol."""


async def _serve(broker: Broker, stream: trio.abc.Stream, session: Session | None) -> None:
    await _Connection(broker, stream, session or Session()).serve()


class _Connection:
    """One connection's state: the reader cuts frames and starts requests (inline, or as
    tasks of the connection's nursery), the writer sends their answers in request order."""

    __slots__ = ("broker", "stream", "session", "conn_id", "peer", "lapses", "fd", "max_frame", "decoder",
                 "receiver", "order", "limit", "send_lock", "wake", "produce_turns", "drained", "logged", "cutting")

    def __init__(self, broker: Broker, stream: trio.abc.Stream, session: Session) -> None:
        self.broker = broker
        self.stream = stream
        self.session = session
        self.conn_id = next(_conn_ids)
        sock = stream.socket if isinstance(stream, trio.SocketStream) else None
        self.peer = peer_name(stream)
        self.lapses = broker.cluster.lapses
        self.fd = sock.fileno() if sock is not None else None
        session.peer_host = self.peer.rsplit(":", 1)[0]
        session.conn_id = self.conn_id
        self.max_frame = max_frame = broker.settings.max_request_size
        self.decoder = FrameDecoder(max_frame if session.authenticated
                                    else min(max_frame, UNAUTHENTICATED_MAX_FRAME))
        self.receiver = _Receiver(stream, self.fd, self.decoder)
        self.order = Ordering()
        self.limit = trio.Semaphore(MAX_IN_FLIGHT)
        self.send_lock = Lock()  # the writer and the inline path both send; in order
        self.wake = trio.Event()  # the writer's: a slot was queued or became ready
        self.produce_turns = Turns()  # pipelined Produce requests append in the order they arrived
        self.drained: trio.Event | None = None  # set by the writer when nothing is left (at close)
        self.logged = False
        self.cutting = False  # the reader is starting the requests of a received chunk

    def log_close(self, event: str, **kw: object) -> None:
        """Log the first close of this connection; later ones are its echo."""
        if not self.logged:
            self.logged = True
            log.warning(event, peer=self.peer, conn_id=self.conn_id, **kw)

    async def send(self, out: list[Frame], close: Close | None) -> None:
        """Send ``out`` (the caller holds the send lock), then carry out ``close``."""
        if out:
            await send_frames(self.stream, self.fd, out)
        if close is not None:
            self.log_close(close.event, reason=close.reason)
            raise _Closed

    async def answer(self, prepared: Prepared, slot: Slot) -> None:
        session, decoder = self.session, self.decoder
        try:
            slot.data = await execute(prepared)
            if session.close_reason is not None:
                slot.close_after = session.close_reason
            else:
                if session.authenticated and decoder.max_frame != self.max_frame:
                    decoder.max_frame = self.max_frame
                if prepared.api_key in SASL_APIS:
                    # the tokens of a SaslHandshake v0 exchange are bare frames, which may
                    # be shorter than a request header; afterwards requests again
                    decoder.min_frame = 0 if session.awaiting_raw_token else MIN_FRAME
        except CloseConnection as exc:
            slot.close = str(exc)
        except Exception as exc:  # a bug: never take the broker down with it
            log.exception("request_failed", peer=self.peer, conn_id=self.conn_id, error=repr(exc))
            slot.close = f"internal error: {exc!r}"

    async def run(self, prepared: Prepared, slot: Slot) -> None:
        try:
            await self.answer(prepared, slot)
        finally:
            self.limit.release()
            slot.ready = True
            self.wake.set()

    async def writer(self, cancel: trio.CancelScope) -> None:
        order = self.order
        try:
            while True:
                while not order.head_ready():
                    if self.drained is not None and not order.pending:
                        self.drained.set()
                    await self.wake.wait()
                    self.wake = trio.Event()
                if order.pending > 1 or self.cutting or self.decoder.buffered:
                    await self.gather()
                async with held(self.send_lock):
                    await self.send(*order.take())
        except _Closed:
            cancel.cancel()

    async def gather(self) -> None:
        """A pipelining client's burst (librdkafka sends up to 5 Produce requests at once):
        the reader starts its requests one per scheduler pass, they append in arrival
        order, and when trio runs their tasks in reverse (it reverses half of its passes)
        one finishes per pass. Sending each answer as it comes costs a send and a wake-up
        of the client per answer; instead wait while the burst still grows (more requests
        started, more answers ready at the head) or the reader is still starting it, then send the
        ready run whole. Two passes without growth end the wait (the writer may run before
        or after the finishing task within a pass), so a request that parks for real (a
        long-poll Fetch, an fsync in a worker thread) holds the answers before it back
        for two passes at most."""
        order, decoder = self.order, self.decoder
        ready, pending = order.ready_at_head(), order.pending
        idle = 0
        for _ in range(GATHER_PASSES):
            if idle >= 2 or (ready >= pending and not self.cutting and not decoder.buffered):
                return
            await trio.lowlevel.checkpoint()
            now_ready, now_pending = order.ready_at_head(), order.pending
            idle = 0 if now_ready > ready or now_pending > pending else idle + 1
            ready, pending = now_ready, now_pending

    async def inline(self, prepared: Prepared) -> None:
        """Answer in the reader: nothing earlier is unanswered (the writer pops under the
        send lock, so taking it after the handler keeps the order)."""
        slot = Slot()
        await self.answer(prepared, slot)
        out: list[Frame] = []
        close = outcome(slot, out)
        send_lock = self.send_lock
        await acquire(send_lock)  # without ``held``'s object (5% of a Heartbeat's CPU)
        try:
            if out:
                await send_frames(self.stream, self.fd, out)
            if close is not None:
                self.log_close(close.event, reason=close.reason)
                raise _Closed
        finally:
            send_lock.release()

    async def read(self, nursery: trio.Nursery) -> None:
        """Cut frames and start their requests until the stream ends."""
        broker, session, decoder, order = self.broker, self.session, self.decoder, self.order
        while True:
            if session.muted_until:
                await self.wait_unmuted()
            if not await self.receiver.fill():
                break
            self.cutting = True
            for frame in decoder.frames():
                if session.muted_until:
                    await self.wait_unmuted()
                try:
                    prepared = prepare(broker, frame, self.peer, self.lapses, session,
                                       None if session.reauth_deadline is None else trio.current_time())
                except CloseConnection as exc:
                    # Nothing after a protocol error runs: the writer answers the earlier
                    # requests, then reaches this one and closes.
                    order.refuse(str(exc))
                    self.wake.set()
                    await trio.sleep_forever()
                if order.answer_inline(prepared.api_key, bool(decoder.buffered)):
                    await self.inline(prepared)
                    if decoder.buffered:
                        # more requests already here (a pipelining client): yield between
                        # them, so one connection cannot hold the loop for a whole buffer
                        await trio.lowlevel.checkpoint()
                    continue
                await self.limit.acquire()
                slot = order.enqueue()
                if prepared.api_key == PRODUCE and prepared.ctx is not None:
                    prepared.ctx.turn = self.produce_turns.take()  # appends in arrival order
                self.wake.set()
                nursery.start_soon(self.run, prepared, slot)
            self.cutting = False

    async def wait_unmuted(self) -> None:
        """A throttled answer mutes the connection (client quotas, KIP-219): no request is
        read or started until its throttle time has passed."""
        wait = self.session.muted_until - trio.current_time()
        if wait > 0:
            await trio.sleep(wait)

    async def serve(self) -> None:
        """Read and answer until the stream ends or a close; then release the connection."""
        broker = self.broker
        broker.connections += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.writer, nursery.cancel_scope)
                try:
                    await self.read(nursery)
                except FramingError as exc:
                    self.log_close("connection_closed_bad_frame", reason=str(exc))
                except _Closed:
                    pass
                else:
                    await self.drain()
                nursery.cancel_scope.cancel()
        finally:
            broker.connections -= 1
            broker.shares.connection_closed(self.conn_id)  # its share sessions end (KIP-932)
            with trio.CancelScope(shield=True):
                with trio.move_on_after(1):
                    await self.stream.aclose()

    async def drain(self) -> None:
        """The peer closed its side: answer what it already sent, then stop."""
        if self.order.pending:
            self.drained = trio.Event()
            self.wake.set()
            with trio.move_on_after(DRAIN_S):
                await self.drained.wait()
        if self.decoder.buffered:
            self.log_close("connection_closed_truncated_frame", buffered=self.decoder.buffered)
