"""Connections from this broker to its peers, for WriteTxnMarkers (API 27) and the
forwarding of topic edits to the controller (``forward``). (The presence connections,
whose end is the earliest sign that a peer's process exited, are ``tasks.presence``.)

A transaction coordinator hands the COMMIT/ABORT markers of peer-led partitions straight
to the partition's leader over one TCP connection per peer, as Apache's coordinator does.
The marker queue on the volume (``storage.markers``) stays the path of last resort: what a
link cannot deliver (the peer is down, declared dead, answered an error, or closed the
connection) is queued there by the caller, exactly as before.

Invariants:
    - one request in flight per link; callers that arrive while it is out are sent
      together in the next request (one round trip for every transaction that completed
      meanwhile);
    - a request is given up only when its connection fails or the cluster view declares
      the peer dead. A live peer is waited for however slow it is: giving up on it and
      queueing the same markers could let the late request close the producer's *next*
      transaction. A peer declared dead has let its write lease lapse, and it refuses
      requests from connections accepted before the lapse (``handlers.write_txn_markers``);
    - results are matched to markers by position and producer id; a response that does not
      match is treated as a failed link;
    - on a SASL listener whose sessions expire (the peer's connections.max.reauth.ms,
      KIP-368), a link replaces its connection, authenticated afresh, before the first
      request past ``RENEW_AT_SHARE`` of the session's lifetime, so the peer never closes it
      under a request for an expired session (which would send the markers to the queue).
      Between requests nothing is in flight, so replacing the connection is safe.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas.aio import Lock, SocketReader, held, send_now
from kaas.client import SaslConfig, SaslFailed, ScramClient
from kaas.errors import PeerUnavailable
from kaas.wire import codec
from kaas.wire.framing import MIN_RESPONSE, FrameDecoder, FramingError

__all__ = ["MARKERS_VERSION", "RENEW_AT_SHARE", "LinkFailed", "PeerAuth", "PeerDirectory", "PeerLinks",
           "authenticate_peer", "client_context", "open_peer_stream", "reset_on_close", "scram_authenticator"]

log = structlog.get_logger()

WRITE_TXN_MARKERS = 27
MARKERS_VERSION = 1
BODIES_MAX = 1024  # encoded WriteTxnMarkers bodies a link keeps (then it starts over)
CONNECT_TIMEOUT_S = 2.0
LIVENESS_CHECK_S = 0.5  # how often a waiting request looks whether its peer was declared dead
# A marker request unanswered this long fails although the peer is alive: the network
# between the two is cut while both still reach the volume (packets dropped, no reset).
# The markers then go through the queue on the volume, and the link is not tried again
# for SILENT_BACKOFF_S, so later transactions do not each wait for a connect that times out.
ANSWER_TIMEOUT_S = 5.0
SILENT_BACKOFF_S = 5.0
MAX_RESPONSE = 64 * 1024 * 1024
PRESENCE_SCAN_S = 0.1  # how often live peers without a presence connection are connected to
PRESENCE_IDLE_S = 5.0  # how often an idle presence connection checks its peer is still alive

MarkerResult = dict[tuple[str, int], ErrorCode]



def reset_on_close(stream: object) -> None:
    """Make the coming close of ``stream`` (a trio socket stream, or a TLS stream over one)
    a reset: what the kernel has not delivered yet is discarded, never sent later."""
    sock = getattr(stream, "socket", None) or getattr(getattr(stream, "transport_stream", None), "socket", None)
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass

class PeerEndpoint(Protocol):
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def protocol(self) -> str: ...


class PeerAddress(Protocol):
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def incarnation(self) -> str: ...

    def peer_endpoint(self, listener: str) -> PeerEndpoint | None: ...


class PeerDirectory(Protocol):
    """Where the peers are and which are alive (``broker.ClusterView`` is one)."""

    me: int

    @property
    def peers(self) -> Mapping[int, PeerAddress]: ...

    def alive_any(self) -> list[int]: ...

    def is_alive_any(self, broker_id: int) -> bool: ...

    def suspect(self, broker_id: int, incarnation: str) -> None: ...


TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


def client_context(cafile: str | None, certfile: str | None, keyfile: str | None,
                   password: str | None = None, check_hostname: bool = True) -> ssl.SSLContext:
    """The TLS context of this broker's connections to its peers' TLS listeners: their
    certificates checked against ``cafile`` (and the host name they advertise), TLS 1.2 or
    later, and this broker's own certificate offered as the client certificate (a peer
    that asks for one, ``ssl.client.auth`` on its inter-broker listener: ``--ssl-client-auth``
    or the listener's own ``listener.name.<l>.ssl.client.auth``, maps it to this broker's
    principal).

    Raises:
        OSError, ssl.SSLError: a file does not load.
    """
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = check_hostname
    if certfile:
        ctx.load_cert_chain(certfile, keyfile, password)
    return ctx


class LinkFailed(PeerUnavailable):
    """The request's outcome is unknown to the caller only in the sense that it must not
    count on it: the peer closed, died, or answered something that does not match."""


class _Unanswered(LinkFailed):
    """A live peer did not answer within ``ANSWER_TIMEOUT_S``."""


class _Silent(Exception):
    """The link is in its back-off after a silence (``SILENT_BACKOFF_S``)."""


class _Ask:
    __slots__ = ("markers", "results", "done")

    def __init__(self, markers: Sequence[Any]) -> None:
        self.markers = markers
        self.results: list[MarkerResult] | None = None
        self.done = False


class _Link:
    """One peer's connection and its queue of callers."""

    def __init__(self, links: PeerLinks, broker_id: int) -> None:
        self.links = links
        self.broker_id = broker_id
        self.stream: trio.abc.Stream | None = None
        self.fd: int | None = None  # the socket of a plain TCP link (``send_now``)
        self.reader: SocketReader | None = None  # its receiving side (a plain TCP link)
        self.decoder: FrameDecoder | None = None
        # trio time after which this connection is replaced before its next request: its SASL
        # session's lifetime (KIP-368, the peer's connections.max.reauth.ms) is nearly over
        self.renew_at: float | None = None
        self.lock = Lock()
        self.pending: list[_Ask] = []
        self.corr = 0
        self.silent_until = 0.0  # trio time: the peer did not answer; the queue until then
        self._bodies: dict[tuple[int, ...], tuple[tuple[Any, ...], bytes]] = {}  # ``_body``'s

    async def ask(self, markers: Sequence[Any]) -> list[MarkerResult] | None:
        ask = _Ask(markers)
        self.pending.append(ask)
        async with held(self.lock):
            if ask.done:  # sent with an earlier caller's request
                return ask.results
            batch, self.pending = self.pending, []
            results: list[MarkerResult] | None = None
            try:
                if trio.current_time() < self.silent_until:
                    raise _Silent("the peer did not answer lately")
                results = await self._exchange([m for a in batch for m in a.markers])
            except _Silent:
                pass  # already said when it began
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                    FramingError, codec.DecodeError, LinkFailed) as exc:
                log.warning("peer_link_failed", to_broker=self.broker_id, error=f"{type(exc).__name__}: {exc}")
                if isinstance(exc, (trio.TooSlowError, _Unanswered)):  # silence, not a refusal
                    self.silent_until = trio.current_time() + SILENT_BACKOFF_S
                    self._abort()
                await self.close()
            except BaseException:  # cancelled mid-exchange: nobody can use this connection now
                await self.close()
                for a in batch:
                    a.done = True
                raise
            i = 0
            for a in batch:
                n = len(a.markers)
                a.results = None if results is None else results[i:i + n]
                a.done = True
                i += n
            return ask.results

    async def _connect(self) -> None:
        with trio.fail_after(CONNECT_TIMEOUT_S):
            self.stream, self.renew_at = await self.links.open_session(self.broker_id)
        self.fd = self.stream.socket.fileno() if isinstance(self.stream, trio.SocketStream) else None
        self.reader = SocketReader(self.fd) if self.fd is not None else None
        self.decoder = FrameDecoder(MAX_RESPONSE, MIN_RESPONSE)

    async def _exchange(self, markers: list[Any]) -> list[MarkerResult]:
        if self.stream is not None and self.renew_at is not None and trio.current_time() >= self.renew_at:
            # the peer would close it at the first request past the session's end: a new
            # connection, authenticated afresh, before the request rather than a failed one
            log.info("peer_link_renewed", to_broker=self.broker_id, reason="sasl session lifetime")
            self.links.stats["renewed"] += 1
            await self.close()
        if self.stream is None:
            await self._connect()
        assert self.stream is not None and self.decoder is not None
        self.corr += 1
        # straight to the socket (a plain link; TLS through trio): the lock is held
        await send_now(self.stream, self.fd, codec.encode_request(WRITE_TXN_MARKERS, MARKERS_VERSION, self.corr,
                                                                  self.links.client_id, self._body(markers)))
        payload = await self._receive()
        corr, body = codec.decode_response(WRITE_TXN_MARKERS, MARKERS_VERSION, payload)
        if corr != self.corr or len(body.markers) != len(markers):
            raise LinkFailed(f"response does not match the request (correlation {corr}, expected {self.corr})")
        out: list[MarkerResult] = []
        for sent, got in zip(markers, body.markers, strict=True):
            if got.producer_id != sent.producer_id:
                raise LinkFailed(f"result for producer {got.producer_id}, expected {sent.producer_id}")
            out.append({(t.name, p.partition_index): p.error_code for t in got.topics for p in t.partitions})
        return out

    def _body(self, markers: list[Any]) -> bytes:
        """The encoded body of a WriteTxnMarkers request of ``markers``: encoded once per
        list of marker objects (``Dispatch`` keeps one object per producer, epoch,
        outcome and partitions, so a producer's next transactions send the same)."""
        key = tuple(map(id, markers))
        hit = self._bodies.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], markers, strict=True)):
            return hit[1]
        req = codec.request_class(WRITE_TXN_MARKERS, MARKERS_VERSION)(markers=tuple(markers))
        body = codec.encode_request_body(WRITE_TXN_MARKERS, MARKERS_VERSION, req)
        if len(self._bodies) >= BODIES_MAX:
            self._bodies.clear()
        self._bodies[key] = (tuple(markers), body)
        return body

    async def _receive(self) -> bytes | memoryview:
        """The next response frame; waits as long as the peer is alive, at most
        ``ANSWER_TIMEOUT_S``."""
        assert self.stream is not None and self.decoder is not None
        give_up = trio.current_time() + ANSWER_TIMEOUT_S
        while True:
            for frame in self.decoder.frames():
                if self.decoder.buffered:
                    raise LinkFailed("more bytes than one response")
                return frame
            with trio.move_on_after(LIVENESS_CHECK_S) as scope:
                # a plain link reads the socket itself (no 64 KiB allocation and no
                # checkpoint when the answer is already there); TLS goes through trio
                data = await (self.reader.receive(65536) if self.reader is not None
                              else self.stream.receive_some(65536))
            if scope.cancelled_caught:
                # alive_any: a draining peer still serves (and holds its lease); only a
                # peer silent for the session timeout has let its lease lapse
                if self.broker_id not in self.links.cluster.alive_any():
                    raise LinkFailed("peer declared dead while the request was out")
                if trio.current_time() >= give_up:
                    raise _Unanswered(f"no answer in {ANSWER_TIMEOUT_S:g} s from a live peer: "
                                      "the network between us is cut; the markers go through the volume")
                continue
            if not data:
                raise LinkFailed("peer closed the connection")
            self.decoder.feed(data)

    def _abort(self) -> None:
        """Make the coming close a reset that discards what the kernel has not delivered:
        after a silence, a request still in the send queue must never reach the peer later
        (when the network heals), after its markers went through the queue and the
        producer's next transaction began (a late COMMIT would end that one too)."""
        reset_on_close(self.stream)

    async def close(self) -> None:
        stream, self.stream, self.decoder, self.fd, self.reader = self.stream, None, None, None, None
        self.renew_at = None
        if stream is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()


SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SASL_HANDSHAKE_VERSION, SASL_AUTHENTICATE_VERSION = 1, 2


async def _call(stream: trio.abc.Stream, decoder: FrameDecoder, api_key: int, version: int, corr: int,
                client_id: str, body: Any) -> Any:
    await stream.send_all(codec.encode_request(api_key, version, corr, client_id, body))
    while True:
        frame = next(iter(decoder.frames()), None)
        if frame is not None:
            got, response = codec.decode_response(api_key, version, bytes(frame))
            if got != corr:
                raise LinkFailed(f"SASL response for correlation {got}, expected {corr}")
            return response
        data = await stream.receive_some(65536)
        if not data:
            raise LinkFailed("peer closed the connection during SASL authentication")
        decoder.feed(data)


class PeerAuth(NamedTuple):
    """What ``authenticate_peer`` learned: the connection's next correlation id, and the
    session's lifetime the peer answered (KIP-368 ``session_lifetime_ms``; 0: it does not
    expire)."""

    next_corr: int
    lifetime_ms: int


# A link renews its connection once this share of its SASL session's lifetime has passed
# (Apache's clients re-authenticate between 85% and 95% of it).
RENEW_AT_SHARE = 0.85


async def authenticate_peer(stream: trio.abc.Stream, decoder: FrameDecoder, client_id: str,
                            sasl: SaslConfig, first_corr: int = 1) -> PeerAuth:
    """Authenticate a fresh peer connection with SASL/SCRAM (SaslHandshake v1, then two
    SaslAuthenticate v2), as the broker principal ``sasl.username``, before any other
    request: what a link to a peer's SASL_PLAINTEXT/SASL_SSL inter-broker listener sends
    first. (The caller chooses the credentials; see docs/security.rst, "Peers".)

    Returns:
        the next correlation id to use on the connection and the session's lifetime.
    Raises:
        LinkFailed: the peer refused the mechanism or the credentials, did not prove it
            holds them (server signature), closed, or answered something else.
    """
    corr = first_corr
    hs_cls = codec.request_class(SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION)
    auth_cls = codec.request_class(SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION)
    hs = await _call(stream, decoder, SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION, corr, client_id,
                     hs_cls(mechanism=sasl.mechanism))
    corr += 1
    if hs.error_code != ErrorCode.none:
        raise LinkFailed(f"SaslHandshake {sasl.mechanism}: {hs.error_code.name} (peer offers {list(hs.mechanisms)})")
    try:
        scram = ScramClient(sasl.mechanism, sasl.username, sasl.password)
    except KeyError:
        raise LinkFailed(f"{sasl.mechanism} is not a SCRAM mechanism") from None
    token = scram.first()
    lifetime_ms = 0
    for step in ("client-first", "client-final"):
        resp = await _call(stream, decoder, SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION, corr, client_id,
                           auth_cls(auth_bytes=token))
        corr += 1
        if resp.error_code != ErrorCode.none:
            raise LinkFailed(f"SaslAuthenticate ({step}): {resp.error_code.name}")
        try:
            if step == "client-first":
                token = scram.final(resp.auth_bytes)
            else:
                scram.check(resp.auth_bytes)
                lifetime_ms = max(0, int(resp.session_lifetime.total_seconds() * 1000))
        except (SaslFailed, UnicodeDecodeError) as exc:
            raise LinkFailed(f"SCRAM with the peer: {exc}") from None
    return PeerAuth(corr, lifetime_ms)


def scram_authenticator(broker_id: int, mechanism: str, username: str, password: str
                        ) -> Callable[[trio.abc.Stream, PeerEndpoint], Awaitable[int]]:
    """The ``PeerLinks.authenticate`` hook of broker ``broker_id``: ``authenticate_peer``
    with these SCRAM credentials (the broker principal) on every new connection; it
    returns the session's lifetime in ms (0: none)."""
    sasl = SaslConfig(mechanism, username, password)
    client_id = f"{codec.PEER_CLIENT_PREFIX}{broker_id}"

    async def authenticate(stream: trio.abc.Stream, endpoint: PeerEndpoint) -> int:
        return (await authenticate_peer(stream, FrameDecoder(MAX_RESPONSE, MIN_RESPONSE), client_id, sasl)).lifetime_ms

    return authenticate


class PeerLinks:
    """This broker's links to its peers (``broker.peer_links``), opened on first use."""

    def __init__(self, broker_id: int, cluster: PeerDirectory, *, listener: str = "PLAINTEXT",
                 ssl_context: ssl.SSLContext | None = None,
                 authenticate: Callable[[trio.abc.Stream, PeerEndpoint], Awaitable[int]] | None = None) -> None:
        """
        Args:
            listener: the inter-broker listener's name: peers are reached at their
                endpoint of that name (their heartbeat's ``listeners``).
            ssl_context: the client context for a peer listener that is SSL or SASL_SSL
                (``client_context``); None: such a peer cannot be reached.
            authenticate: the SASL hook: awaited on every new connection to a SASL_PLAINTEXT
                or SASL_SSL peer listener (after TLS), before the first request; it returns
                the session's lifetime in ms (0: none) and raises ``LinkFailed`` when the
                peer refuses. None: SASL peer listeners cannot be reached.
        """
        self.broker_id = broker_id
        self.cluster = cluster
        self.listener = listener
        self.ssl_context = ssl_context
        self.authenticate = authenticate
        self.client_id = f"{codec.PEER_CLIENT_PREFIX}{broker_id}"
        self._links: dict[int, _Link] = {}
        self.stats = {"calls": 0, "markers": 0, "failed": 0, "renewed": 0}

    async def open_stream(self, broker_id: int) -> trio.abc.Stream:
        """A new connection to ``broker_id``'s inter-broker listener: TCP, TLS when the
        listener is SSL/SASL_SSL (the peer's certificate checked), then the SASL hook on a
        SASL listener. The caller bounds the time (``fail_after``) and closes the stream.

        Raises:
            LinkFailed: the peer's address is unknown, it has no such listener, or its
                listener needs TLS or SASL this broker is not configured for.
            OSError, trio.BrokenResourceError: the connection or the handshake failed.
        """
        return (await open_peer_stream(self, broker_id))[0]

    async def open_session(self, broker_id: int) -> tuple[trio.abc.Stream, float | None]:
        """``open_stream``, and the trio time after which the connection should be replaced
        before its next request (``RENEW_AT_SHARE`` of its SASL session's lifetime, counted
        from before the authentication began, so it falls before the peer's own deadline);
        None when the session does not expire."""
        return await open_peer_stream(self, broker_id)

    def endpoint(self, broker_id: int) -> PeerEndpoint:
        """``broker_id``'s inter-broker endpoint.

        Raises:
            LinkFailed: unknown, or the peer has no listener of that name.
        """
        peer = self.cluster.peers.get(broker_id)
        e = peer.peer_endpoint(self.listener) if peer is not None else None
        if e is None or e.port <= 0:
            raise LinkFailed("peer address unknown" if peer is None or peer.port <= 0
                             else f"peer has no listener {self.listener}")
        return e

    async def write_markers(self, broker_id: int, markers: Sequence[Any]) -> list[MarkerResult] | None:
        """Send kio ``WritableTxnMarker`` objects to ``broker_id``.

        Returns:
            per marker, the error code of each of its partitions; None when the link failed
            (the caller queues the markers on the volume instead).
        """
        link = self._links.get(broker_id)
        if link is None:
            link = self._links[broker_id] = _Link(self, broker_id)
        self.stats["calls"] += 1
        self.stats["markers"] += len(markers)
        res = await link.ask(markers)
        if res is None:
            self.stats["failed"] += 1
        return res

    async def forward(self, broker_id: int, api_key: int, version: int, body: Any, timeout: float) -> Any:
        """Send one request (a kio request object) to ``broker_id`` on a connection of its
        own and return its decoded response body. Admin requests are rare; a connection
        per request keeps them out of the marker link's batching.

        Raises:
            LinkFailed: the peer is unknown or unreachable, closed, or did not answer within
                ``timeout`` seconds (the caller answers a retriable error).
        """
        try:
            with trio.fail_after(max(0.1, timeout)):
                stream = await self.open_stream(broker_id)
                try:
                    await stream.send_all(codec.encode_request(api_key, version, 1, self.client_id, body))
                    decoder = FrameDecoder(MAX_RESPONSE, MIN_RESPONSE)
                    while True:
                        frame = next(iter(decoder.frames()), None)
                        if frame is not None:
                            break
                        data = await stream.receive_some(65536)
                        if not data:
                            raise LinkFailed("peer closed the connection")
                        decoder.feed(data)
                finally:
                    with trio.CancelScope(shield=True), trio.move_on_after(1):
                        await stream.aclose()
        except (OSError, trio.BrokenResourceError, trio.TooSlowError, FramingError) as exc:
            raise LinkFailed(f"{type(exc).__name__}: {exc}") from None
        try:
            _corr, response = codec.decode_response(api_key, version, bytes(frame))
        except codec.DecodeError as exc:
            raise LinkFailed(f"undecodable response: {exc}") from None
        return response


async def open_peer_stream(links: PeerLinks, broker_id: int) -> tuple[trio.abc.Stream, float | None]:
    """``PeerLinks.open_session``: TCP to the peer's inter-broker endpoint, TLS over it on an
    SSL/SASL_SSL listener, then ``links.authenticate`` on a SASL one.

    Raises:
        LinkFailed, OSError, trio.BrokenResourceError: see ``PeerLinks.open_stream``.
    """
    e = links.endpoint(broker_id)
    ssl_context = links.ssl_context if e.protocol in TLS_PROTOCOLS else None
    if e.protocol in TLS_PROTOCOLS and ssl_context is None:
        raise LinkFailed(f"peer listener {links.listener} is {e.protocol}: no TLS context (--ssl-cafile)")
    authenticate = links.authenticate if e.protocol in SASL_PROTOCOLS else None
    if e.protocol in SASL_PROTOCOLS and authenticate is None:
        raise LinkFailed(f"peer listener {links.listener} is {e.protocol}: no SASL credentials for peers")
    stream: trio.abc.Stream = await trio.open_tcp_stream(e.host, e.port)
    try:
        if ssl_context is not None:  # an SSL or SASL_SSL listener
            tls = trio.SSLStream(stream, ssl_context, server_hostname=e.host)
            await tls.do_handshake()
            stream = tls
        renew_at = None
        if authenticate is not None:  # a SASL_PLAINTEXT or SASL_SSL listener
            began = trio.current_time()
            lifetime_ms = await authenticate(stream, e)
            if lifetime_ms:
                renew_at = began + RENEW_AT_SHARE * lifetime_ms / 1000
    except BaseException:
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await stream.aclose()
        raise
    return stream, renew_at
