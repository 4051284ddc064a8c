"""Frame -> handler -> response bytes. Unsupported versions and malformed bodies are
decided here, so handlers only ever see well-formed requests of a version they declared.

After a SaslHandshake v0 the frames of its exchange are raw SASL tokens, not requests
(``Session.awaiting_raw_token``): each is run as the ``auth_bytes`` of a SaslAuthenticate
v0 by the same handler, and answered as a bare size-prefixed token (nothing on failure:
the connection closes, as Apache's v0 path does)."""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas import counters
from kaas.broker.quota_sensors import REQUEST
from kaas.errors import CloseConnection
from kaas.handlers.context import Answer, Context
from kaas.handlers.registry import API_KEYS, REGISTRY, Handler, versions_table
from kaas.handlers.session import Session
from kaas.wire import codec
from kaas.wire.build import build
from kaas.wire.codec import PEER_CLIENT_PREFIX
from kaas.wire.framing import frame as size_prefixed
from kaas.wire.throttle import with_throttle

if TYPE_CHECKING:
    from kio.static.protocol import RequestPayload

    from kaas.broker import Broker

log = structlog.get_logger()

API_VERSIONS = 18
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
# What a session that has not authenticated (a SASL listener's, until SaslAuthenticate
# succeeds) may send; anything else closes the connection (Apache SaslServerAuthenticator).
# The same three are all a session past its KIP-368 deadline may send (re-authenticate).
BEFORE_AUTHENTICATION = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})


def _unsupported_api_versions(corr: int) -> codec.Frame:
    """ApiVersions at a version we do not know: v0 layout, error 35, our key-18 range."""
    h = REGISTRY[API_VERSIONS]
    body = build(codec.response_class(API_VERSIONS, 0), {
        "error_code": ErrorCode.unsupported_version,
        "api_keys": [{"api_key": API_VERSIONS, "min_version": h.min_version, "max_version": h.max_version}],
    })
    return codec.encode_response(API_VERSIONS, 0, corr, body)


@dataclass(slots=True)
class Prepared:
    """A decoded request ready to run, or an immediate answer (``response``)."""

    api_key: int
    version: int
    corr: int
    handler: Handler | None = None
    ctx: Context | None = None
    body: RequestPayload | None = None  # of a version the handler serves
    response: codec.Frame | None = None
    size: int = 0  # request frame bytes on the wire (size prefix included), for metrics
    raw: bool = False  # a raw SASL token (after SaslHandshake v0): answered without a header


def _raw_token(broker: Broker, frame: codec.Buffer, peer: str, lapses: int, session: Session) -> Prepared:
    """A frame of a SaslHandshake v0 exchange: the token, as the body of a SaslAuthenticate
    v0 (no correlation id: the answer carries none)."""
    handler = REGISTRY[SASL_AUTHENTICATE]
    body = codec.request_class(SASL_AUTHENTICATE, 0)(auth_bytes=bytes(frame))
    ctx = Context(broker, SASL_AUTHENTICATE, 0, -1, None, peer, lapses, session)
    return Prepared(SASL_AUTHENTICATE, 0, -1, handler, ctx, body, size=len(frame) + 4, raw=True)


def prepare(broker: Broker, frame: codec.Buffer, peer: str, lapses: int = 0, session: Session | None = None,
            now: float | None = None) -> Prepared:
    """Check the key/version and decode one frame, synchronously.

    The connection calls this for each frame in arrival order before running it, so a
    request that follows a protocol error on the same connection is never executed.

    Args:
        now: the connection's clock (trio time), given when the session has a
            re-authentication deadline.
    Raises:
        CloseConnection: unknown key/version, a malformed request, a request other than
            ApiVersions/SaslHandshake/SaslAuthenticate before authentication or after the
            session expired.
    """
    if session is not None and session.awaiting_raw_token:
        return _raw_token(broker, frame, peer, lapses, session)
    api_key, version, corr = codec.peek(frame)
    if session is not None and api_key not in BEFORE_AUTHENTICATION:
        if not session.authenticated:
            raise CloseConnection(f"api_key {api_key} before SASL authentication")
        if session.reauth_deadline is not None and now is not None and now >= session.reauth_deadline:
            raise CloseConnection(f"api_key {api_key} after the SASL session expired (connections.max.reauth.ms)")
    handler = REGISTRY.get(api_key)
    if handler is None or not handler.min_version <= version <= handler.max_version:
        if api_key == API_VERSIONS:
            log.warning("api_versions_unsupported_version", peer=peer, version=version)
            return Prepared(api_key, version, corr, response=_unsupported_api_versions(corr))
        raise CloseConnection(f"unsupported api_key {api_key} version {version}")
    try:
        req = codec.decode_request(frame)
    except codec.DecodeError as exc:
        raise CloseConnection(f"api_key {api_key} v{version}: {exc}") from None
    ctx = Context(broker, api_key, version, corr, req.client_id, peer, lapses,
                  session if session is not None else Session(), request_size=len(frame) + 4, api_keys=API_KEYS)
    return Prepared(api_key, version, corr, handler, ctx, req.body, size=ctx.request_size)


async def execute(p: Prepared) -> codec.Frame | None:
    """Run a prepared request. Returns the framed response, or None (acks=0)."""
    if p.handler is None or p.ctx is None or p.body is None:
        return p.response
    ctx = p.ctx
    t0 = perf_counter()
    out: codec.Frame | None = None
    timed = not p.raw and _request_quota_applies(ctx)
    try:
        if timed:
            ctx.broker.task_times.start()
        try:
            result = await p.handler.handle(ctx, p.body)
        finally:
            spent = ctx.broker.task_times.stop() if timed else 0.0
        if p.raw:  # a raw token's answer, or nothing (a failure: the connection closes)
            assert isinstance(result, dict)  # SaslAuthenticate's
            token = result["auth_bytes"]
            assert isinstance(token, bytes)
            out = size_prefixed(token) if result["error_code"] == ErrorCode.none else None
            return out
        if timed and result is not None:  # (an acks=0 Produce is not charged request time, as in Apache)
            ctx.throttle(REQUEST, ctx.broker.quotas.record(REQUEST, ctx.principal, ctx.client_id, spent * 100))
        if ctx.throttle_ms > 0:
            result = _throttled(ctx, result)
        if result is not None:
            if isinstance(result, dict):  # (bytes: a body the handler encoded once)
                result = build(codec.response_class(p.api_key, p.version), result)
            out = codec.encode_response(p.api_key, p.version, p.corr, result)
        return out
    except Exception:
        counters.record_error(p.api_key)
        raise
    finally:
        counters.record_request(p.api_key, p.size, out, perf_counter() - t0)


def _request_quota_applies(ctx: Context) -> bool:
    """Is this request charged to its client's request quota? Not while no request quota
    is set, nor the SASL exchange, nor a peer broker's requests (Apache exempts its
    cluster actions)."""
    return (ctx.broker.quotas.enabled(REQUEST) and ctx.api_key not in (SASL_HANDSHAKE, SASL_AUTHENTICATE)
            and not (ctx.client_id or "").startswith(PEER_CLIENT_PREFIX))


def _throttled(ctx: Context, result: Answer) -> Answer:
    """The answer with its throttle time; the connection reads nothing more until the
    throttle ends (Apache mutes the channel; KIP-219 clients also wait on their own)."""
    assert ctx.throttle_type is not None
    ctx.broker.quotas.throttled(ctx.throttle_type, ctx.principal, ctx.client_id, ctx.throttle_ms)
    session = ctx.session
    session.muted_until = max(session.muted_until, trio.current_time() + ctx.throttle_ms / 1000)
    answer: Answer = with_throttle(ctx.api_key, ctx.api_version, result, ctx.throttle_ms)
    return answer


async def dispatch(broker: Broker, frame: codec.Buffer, peer: str) -> codec.Frame | None:
    """Answer one request frame.

    Returns:
        the framed response, or None when the request gets no response (acks=0).
    Raises:
        CloseConnection: unknown key/version or a malformed request.
    """
    return await execute(prepare(broker, frame, peer))


__all__ = ["dispatch", "prepare", "execute", "Prepared", "CloseConnection", "versions_table"]
