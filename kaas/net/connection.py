"""One client connection: receive bytes, cut frames, run requests concurrently, send the
responses back in request order.

Slow requests (acks=all produce, long-poll fetch) run in the connection's nursery, so a
pipelining client is not serialised behind them, and other connections never are.
"""

from __future__ import annotations

import itertools
from collections import deque

import structlog
import trio

from kaas.aio import SocketReader, acquire, held, send_now
from kaas.dispatch import CloseConnection, Prepared, execute, prepare
from kaas.handlers.session import Session
from kaas.net.tls import TlsReader
from kaas.wire.framing import MIN_FRAME, FrameDecoder, FramingError

log = structlog.get_logger()

MAX_IN_FLIGHT = 64
# The largest frame a connection that has not authenticated may send (a SASL token, an
# ApiVersions request): a 100 MiB "token" is refused at its size prefix, never buffered.
UNAUTHENTICATED_MAX_FRAME = 64 * 1024
_conn_ids = itertools.count(1)
SASL_APIS = (17, 36)  # SaslHandshake, SaslAuthenticate (and the raw tokens of a v0 exchange)

# Requests that never park (no long poll, no rebalance wait, no group-commit batching with
# their neighbours) and so may run in the reader task itself when nothing else of the
# connection is in flight: no task to spawn, no slot, no writer hand-off. On a
# transactional producer's coordinator connection (one request at a time) that is a
# third of each request's cost. Produce, Fetch, JoinGroup, SyncGroup and the topic
# admin requests keep the concurrent path.
INLINE_APIS = frozenset({
    2,  # ListOffsets
    3,  # Metadata
    8, 9,  # OffsetCommit, OffsetFetch
    10,  # FindCoordinator
    12, 13,  # Heartbeat, LeaveGroup
    15, 16,  # DescribeGroups, ListGroups
    18,  # ApiVersions
    22,  # InitProducerId
    23,  # OffsetForLeaderEpoch
    17, 36,  # SaslHandshake, SaslAuthenticate: done before the next frame is cut (its size bound)
    24, 25, 26, 28,  # AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit
    27,  # WriteTxnMarkers: parks for the fsync, but a coordinator's link sends one at a time
    32,  # DescribeConfigs
    60, 61, 65, 66,  # DescribeCluster, DescribeProducers, DescribeTransactions, ListTransactions
})

# Produce runs inline as well when it is the only request the client has sent: a
# transactional producer's one-at-a-time Produce (the fsync and the ack checks do not
# park on tmpfs, and on a disk the next request would wait in the socket for at most one
# fsync). Requests that arrive together (librdkafka pipelines up to 5 per connection)
# take the concurrent path, so they still share one group-commit fsync.
INLINE_WHEN_ALONE = frozenset({0})


class _Slot:
    """One request's answer. ``done`` is set when it is ready, for the writer; a request
    answered inline has no event (nobody waits for it)."""

    __slots__ = ("done", "data", "close", "close_after")

    def __init__(self, *, waited: bool = True) -> None:
        self.done: trio.Event | None = trio.Event() if waited else None
        self.data: bytes | None = None
        self.close: str | None = None
        self.close_after: str | None = None  # send ``data``, then close (a failed SASL exchange)


async def serve_connection(broker, stream: trio.abc.Stream, session: Session | None = None) -> None:
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


async def _serve(broker, stream: trio.abc.Stream, session: Session | None) -> None:
    conn_id = next(_conn_ids)
    sock = stream.socket if isinstance(stream, trio.SocketStream) else None
    peer = peer_name(stream)
    lapses = broker.cluster.lapses
    fd = sock.fileno() if sock is not None else None
    receive = stream.receive_some
    tls = TlsReader(stream) if isinstance(stream, trio.SSLStream) else None
    plain = SocketReader(fd) if fd is not None else None
    if tls is not None:
        receive = tls.receive
    elif plain is not None:
        receive = plain.receive
    if session is None:
        session = Session()
    session.peer_host = peer.rsplit(":", 1)[0]
    max_frame = broker.settings.max_request_size
    decoder = FrameDecoder(max_frame if session.authenticated else min(max_frame, UNAUTHENTICATED_MAX_FRAME))
    slots: deque[_Slot] = deque()
    have_slot = trio.Event()
    limit = trio.Semaphore(MAX_IN_FLIGHT)
    send_lock = trio.Lock()  # the writer and the inline path both send; in order
    broker.connections += 1
    closing = False

    def close_once(event: str, **kw) -> None:
        """Log the first protocol error of this connection; later ones are its echo."""
        nonlocal closing
        if not closing:
            closing = True
            log.warning(event, peer=peer, conn_id=conn_id, **kw)

    async def answer(prepared: Prepared, slot: _Slot) -> None:
        try:
            slot.data = await execute(prepared)
            if session.close_reason is not None:
                slot.close_after = session.close_reason
            else:
                if session.authenticated and decoder.max_frame != max_frame:
                    decoder.max_frame = max_frame
                if prepared.api_key in SASL_APIS:
                    # the tokens of a SaslHandshake v0 exchange are bare frames, which may
                    # be shorter than a request header; afterwards requests again
                    decoder.min_frame = 0 if session.awaiting_raw_token else MIN_FRAME
        except CloseConnection as exc:
            slot.close = str(exc)
        except Exception as exc:  # a bug: never take the broker down with it
            log.exception("request_failed", peer=peer, conn_id=conn_id, error=repr(exc))
            slot.close = f"internal error: {exc!r}"

    async def run(prepared: Prepared, slot: _Slot) -> None:
        try:
            await answer(prepared, slot)
        finally:
            limit.release()
            slot.done.set()

    async def writer(cancel: trio.CancelScope) -> None:
        nonlocal have_slot
        while True:
            while not slots:
                await have_slot.wait()
                have_slot = trio.Event()
            await slots[0].done.wait()
            # Send every response that is ready, in order, with one syscall: a pipelining
            # client (librdkafka keeps up to 5 produce requests in flight) gets them together.
            async with held(send_lock):
                out = []
                while slots and slots[0].done.is_set():
                    slot = slots.popleft()
                    if slot.close is not None:
                        if out:
                            await send_now(stream, fd, out[0] if len(out) == 1 else b"".join(out))
                        close_once("connection_closed_protocol_error", reason=slot.close)
                        cancel.cancel()
                        return
                    if slot.data is not None:
                        out.append(slot.data)
                    if slot.close_after is not None:
                        if out:
                            await send_now(stream, fd, out[0] if len(out) == 1 else b"".join(out))
                        close_once("connection_closed_after_response", reason=slot.close_after)
                        cancel.cancel()
                        return
                if out:
                    await send_now(stream, fd, out[0] if len(out) == 1 else b"".join(out))

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer, nursery.cancel_scope)
            while True:
                room = decoder.room()
                if room is not None:  # the rest of a large frame: straight into its buffer
                    with room:
                        if plain is not None:
                            got = await plain.receive_into(room)
                        elif tls is not None:
                            got = await tls.receive_into(room)
                        else:
                            chunk = await receive(len(room))
                            got = len(chunk)
                            room[:got] = chunk
                    if not got:
                        break
                    decoder.received(got)
                else:
                    data = await receive(256 * 1024)
                    if not data:
                        break
                    decoder.feed(data)
                try:
                    for frame in decoder.frames():
                        try:
                            prepared = prepare(broker, frame, peer, lapses, session,
                                               None if session.reauth_deadline is None else trio.current_time())
                        except CloseConnection as exc:
                            # Nothing after a protocol error runs: the writer answers the
                            # earlier requests, then reaches this slot and closes.
                            slot = _Slot()
                            slot.close = str(exc)
                            slot.done.set()
                            slots.append(slot)
                            have_slot.set()
                            await trio.sleep_forever()
                        if not slots and (prepared.api_key in INLINE_APIS
                                          or (prepared.api_key in INLINE_WHEN_ALONE and not decoder.buffered)):
                            # Nothing earlier is unanswered (the writer pops under the send
                            # lock), so answering here keeps the order.
                            slot = _Slot(waited=False)
                            await answer(prepared, slot)
                            # the send lock without ``held``'s object and two coroutine
                            # calls (about 5% of a Heartbeat's broker CPU)
                            await acquire(send_lock)
                            try:
                                if slot.close is not None:
                                    close_once("connection_closed_protocol_error", reason=slot.close)
                                    nursery.cancel_scope.cancel()
                                    return
                                if slot.data is not None:
                                    await send_now(stream, fd, slot.data)
                                if slot.close_after is not None:
                                    close_once("connection_closed_after_response", reason=slot.close_after)
                                    nursery.cancel_scope.cancel()
                                    return
                            finally:
                                send_lock.release()
                            if decoder.buffered:
                                # more requests already here (a pipelining client): yield
                                # between them, as trio's send did, so that one connection
                                # cannot hold the loop for a whole buffer of requests
                                await trio.lowlevel.checkpoint()
                            continue
                        await limit.acquire()
                        slot = _Slot()
                        slots.append(slot)
                        have_slot.set()
                        nursery.start_soon(run, prepared, slot)
                except FramingError as exc:
                    close_once("connection_closed_bad_frame", reason=str(exc))
                    nursery.cancel_scope.cancel()
                    return
            # Peer closed its side: let the writer answer what it already sent, then stop.
            with trio.move_on_after(5):
                while slots:  # noqa: ASYNC110 - the writer pops slots; a 5 ms poll at close only
                    await trio.sleep(0.005)
            if decoder.buffered:
                close_once("connection_closed_truncated_frame", buffered=decoder.buffered)
            nursery.cancel_scope.cancel()
    finally:
        broker.connections -= 1
        with trio.CancelScope(shield=True):
            with trio.move_on_after(1):
                await stream.aclose()
