"""TLS on SSL and SASL_SSL listeners (issue 21): the server context, the handshake with a
deadline, and the principal of a client certificate.

A connection whose handshake fails (plaintext bytes, a certificate from another CA, a
protocol below TLS 1.2, a client too slow to finish within the deadline) is closed with
one ``tls_handshake_failed`` line; nothing else of the broker notices.
"""

from __future__ import annotations

import socket
import ssl
from contextlib import AbstractAsyncContextManager
from typing import Any

import structlog
import trio

from kaas.aio import SCRATCH
from kaas.domain.principal import NoMatchingRule, Rule, format_dn, map_name, parse_rules
from kaas.handlers.session import ANONYMOUS
from kaas.listeners import Listener
from kaas.settings import Settings

log = structlog.get_logger()

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TLSConfigError(ValueError):
    """The TLS options cannot make a server context; the message says which and why."""


def server_context(settings: Settings, listener: Listener | None = None) -> ssl.SSLContext:
    """The context of a TLS listener of this broker: its certificate and key, TLS 1.2 or
    later, client certificates checked against ``ssl_cafile`` as the listener's
    ``ssl.client.auth`` asks (its own, ``listener.name.<l>.ssl.client.auth``, else
    ``--ssl-client-auth``; without ``listener``, the broker-wide option).

    Raises:
        TLSConfigError: no certificate, a client-auth mode without CAs, or a file that does
            not load.
    """
    if not settings.ssl_certfile:
        raise TLSConfigError("a TLS listener (SSL, SASL_SSL) needs --ssl-certfile (and --ssl-keyfile)")
    auth = settings.ssl_client_auth_of(listener) if listener is not None else settings.ssl_client_auth
    if listener is not None and listener.ssl_client_auth is not None:  # the listener's own
        source = f"{listener.config_prefix}ssl.client.auth={auth}"
    else:
        source = f"--ssl-client-auth {auth}"
    mode = CLIENT_AUTH.get(auth)
    if mode is None:
        raise TLSConfigError(f"{source}: one of none, requested, required")
    if mode != ssl.CERT_NONE and not settings.ssl_cafile:
        raise TLSConfigError(f"{source} needs --ssl-cafile (the client CAs)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    try:
        ctx.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile, settings.ssl_keyfile_password)
        if settings.ssl_cafile:
            ctx.load_verify_locations(cafile=settings.ssl_cafile)
    except (OSError, ssl.SSLError) as exc:
        raise TLSConfigError(f"TLS files do not load: {exc}") from None
    ctx.verify_mode = mode
    return ctx


def principal_rules(settings: Settings) -> tuple[Rule, ...]:
    """The parsed ``--ssl-principal-mapping-rules``.

    Raises:
        kaas.domain.principal.RuleError: they do not parse.
    """
    return parse_rules(settings.ssl_principal_mapping_rules)


def principal_of(cert: dict[str, Any] | None, rules: tuple[Rule, ...]) -> str:
    """``User:<mapped subject>`` of a verified client certificate (``getpeercert()``), or
    ``User:ANONYMOUS`` without one, as Apache's DefaultKafkaPrincipalBuilder.

    Raises:
        NoMatchingRule: no mapping rule applies to the subject.
    """
    if not cert or not cert.get("subject"):
        return ANONYMOUS
    return "User:" + map_name(format_dn(cert["subject"]), rules)


async def open_server_stream(transport: trio.abc.Stream, ctx: ssl.SSLContext, rules: tuple[Rule, ...], timeout: float,
                             peer: str, listener: str) -> tuple[trio.SSLStream[trio.abc.Stream], str] | None:
    """Run the server side of the handshake on ``transport`` within ``timeout`` seconds.

    Returns:
        the TLS stream and the client's principal; None when the handshake failed or no
        mapping rule applied (the connection is closed and one line logged).
    """
    stream = trio.SSLStream(transport, ctx, server_side=True)
    reason = None
    principal = ANONYMOUS
    with trio.move_on_after(timeout) as scope:
        try:
            await stream.do_handshake()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            cause = exc.__cause__ or exc
            reason = f"{type(cause).__name__}: {getattr(cause, 'reason', None) or cause}"
    if scope.cancelled_caught:
        reason = f"no handshake within {timeout:g}s"
    if reason is None:
        try:
            principal = principal_of(stream.getpeercert(), rules)
        except NoMatchingRule as exc:
            reason = str(exc)
    if reason is not None:
        log.warning("tls_handshake_failed", peer=peer, listener=listener, reason=reason)
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await transport.aclose()
        return None
    _ack_now(transport)
    if principal != ANONYMOUS:
        log.info("tls_client_authenticated", peer=peer, listener=listener, principal=principal)
    return stream, principal


# The most plaintext one TLS record holds: what a read through ``SSLStream.receive_some``
# asks for (SSLObject.read(n) without a buffer allocates n bytes before it knows how many
# it has).
TLS_RECORD = 16 * 1024


def _ack_now(transport: trio.abc.Stream) -> None:
    """Acknowledge the client's last handshake flight at once instead of in up to 40 ms.

    The server's last word in the handshake is the client's Finished, which it answers with
    no data, so the kernel delays the ACK; a client with Nagle on (librdkafka's default,
    ``socket.nagle.disable=false``) holds its first request until that ACK arrives: every new
    TLS connection's first answer came 40 ms late. Linux only (TCP_QUICKACK)."""
    quickack = getattr(socket, "TCP_QUICKACK", None)
    if quickack is not None and isinstance(transport, trio.SocketStream):
        try:
            transport.socket.setsockopt(socket.IPPROTO_TCP, quickack, 1)
        except OSError:
            pass


class TlsReader:
    """The plaintext of a server-side ``trio.SSLStream``, read with as few steps per TLS
    record as possible: the connection's only reader.

    librdkafka writes a request as many small TLS records (2.6 KiB on average, counted for
    a produce of 1 KiB values over 4 partitions), and ``SSLStream.receive_some`` returns one
    record per call, each through trio's retry loop and a checkpoint, with ciphertext read
    64 KiB at a time. Here every record the incoming buffer holds is decrypted straight into the
    caller's buffer (``SSLObject.read(n, buffer)``: no allocation per record), and when it
    holds none the ciphertext is read 256 KiB at a time into it.

    This reads trio's ``SSLStream`` internals (its SSLObject, incoming BIO and receive lock)
    between its own calls, as the one reader of the stream; when they are not there (another
    trio, another stream) every read goes through ``receive_some``. What OpenSSL wants to
    send meanwhile (a TLS 1.3 KeyUpdate answer) stays in the outgoing BIO, and trio sends it
    before the next response, as it does after any read; renegotiation, the one case where a
    send must read, is off (``OP_NO_RENEGOTIATION``). An error, including the peer's
    close_notify, is left for ``receive_some`` to report: OpenSSL's errors are sticky.
    """

    __slots__ = ("stream", "_obj", "_incoming", "_lock")

    CIPHERTEXT_READ = 256 * 1024

    def __init__(self, stream: trio.SSLStream[trio.abc.Stream]) -> None:
        self.stream = stream
        obj = getattr(stream, "_ssl_object", None)
        incoming = getattr(stream, "_incoming", None)
        lock = getattr(stream, "_inner_recv_lock", None)
        fast = (isinstance(obj, ssl.SSLObject) and isinstance(incoming, ssl.MemoryBIO)
                and isinstance(lock, AbstractAsyncContextManager)
                and isinstance(getattr(stream, "_inner_recv_count", None), int))
        # all three, or None: trio's internals are there, or every read goes through receive_some
        self._obj: ssl.SSLObject | None = obj if fast else None
        self._incoming: ssl.MemoryBIO | None = incoming if fast else None
        self._lock: AbstractAsyncContextManager[object] | None = lock if fast else None

    @staticmethod
    def _drain(obj: ssl.SSLObject, view: memoryview) -> int | None:
        """Decrypt the records already received into ``view``: the count, or None when
        OpenSSL reports an error or the peer's close_notify (for ``receive_some`` to raise
        or to answer the end)."""
        n, limit = 0, len(view)
        while n < limit:
            try:
                # typeshed has read() answer bytes; with a buffer it answers the count
                got: int = obj.read(limit - n, view[n:])  # type: ignore[assignment]
            except ssl.SSLWantReadError:
                break
            except ssl.SSLError:
                return n or None
            if not got:  # the peer's close_notify (Python's read answers 0, not an error)
                return n or None
            n += got
        return n

    async def receive_into(self, view: memoryview) -> int:
        """Receive at least one byte into ``view`` (0: the peer closed)."""
        obj, incoming, lock = self._obj, self._incoming, self._lock
        if obj is None or incoming is None or lock is None:
            data = await self.stream.receive_some(min(len(view), TLS_RECORD))
            view[: len(data)] = data
            return len(data)
        while True:
            n = self._drain(obj, view)
            if n is None:
                break
            if n:
                return n
            async with lock:
                data = await self.stream.transport_stream.receive_some(self.CIPHERTEXT_READ)
                self.stream._inner_recv_count += 1
            if not data:
                break  # the transport's end: receive_some tells close_notify from truncation
            incoming.write(data)
        data = await self.stream.receive_some(min(len(view), TLS_RECORD))
        view[: len(data)] = data
        return len(data)

    async def receive(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` (at least one; b"": the peer closed)."""
        # into the process's receive buffer (``kaas.aio.SCRATCH``), copied out at once
        n = await self.receive_into(SCRATCH[: min(max_bytes, len(SCRATCH))])
        return bytes(SCRATCH[:n])
