"""SaslAuthenticate (36, v0-v2): one SASL token each way. The raw tokens of a SaslHandshake
v0 exchange come here too, as the ``auth_bytes`` of a SaslAuthenticate v0 (``dispatch``
answers them unframed, and a failure with nothing: the connection closes).

PLAIN takes one round: the password is checked against the user's SCRAM credential
(SCRAM-SHA-512 first, else SCRAM-SHA-256), so one credentials file serves both. SCRAM
takes two (``domain.scram.ScramServer``): client-first -> server-first, client-final ->
server-final. An unknown user gets a decoy credential and fails at the proof, like a
wrong password. OAUTHBEARER takes one: a JWT signed by a key of the JWKS file
(``handlers._jwt``), its claims checked by ``domain.oauthbearer``; its expiry bounds the
session (KIP-368).

Every failure answers SASL_AUTHENTICATION_FAILED with Apache's one message, which says
nothing of which part was wrong, and closes the connection after the response; the
reason goes to the broker's log in one line (``net.connection``). A token before
SaslHandshake answers ILLEGAL_SASL_STATE and closes too.

Success sets the session's principal (``User:<name>``) and, with
``--connections-max-reauth-ms``, its deadline (KIP-368: answered as
``session_lifetime_ms`` from v1; a v0 exchange is told nothing, and its connection is
closed at the deadline, as Apache does). A re-authentication may not change the principal.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, TypeAlias

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas.domain import oauthbearer, scram
from kaas.domain.sasl_plain import PlainError, parse_plain
from kaas.errors import CorruptState
from kaas.handlers import _sasl

if TYPE_CHECKING:
    from kio.schema.sasl_authenticate import v0, v1, v2

    from kaas.handlers.context import Context

    SaslAuthenticateRequest: TypeAlias = (v0.SaslAuthenticateRequest | v1.SaslAuthenticateRequest
                                          | v2.SaslAuthenticateRequest)

API_KEY = 36
VERSIONS = (0, 2)
MAX_TOKEN = 64 * 1024  # also on a re-authentication, whose frames the connection no longer bounds so tightly

log = structlog.get_logger()


class _Failed(Exception):
    """Authentication failed; the text is the log's reason."""


def _answer(ctx: Context, code: ErrorCode, message: str | None, auth_bytes: bytes = b"",
            lifetime_ms: int = 0) -> dict[str, object]:
    out: dict[str, object] = {"error_code": code, "error_message": message, "auth_bytes": auth_bytes}
    if ctx.api_version >= 1:
        out["session_lifetime"] = datetime.timedelta(milliseconds=lifetime_ms)
    return out


def _lookup(ctx: Context, user: str, mechanism: str) -> scram.ScramCredential | None:
    try:
        return ctx.broker.credentials.lookup(user, mechanism)
    except CorruptState as exc:  # logged once by tasks.credentials; this login's line says it too
        raise _Failed(f"the credentials file is corrupt ({exc.reason})") from None


def _plain(ctx: Context, token: bytes) -> str:
    try:
        creds = parse_plain(token)
    except PlainError as exc:
        raise _Failed(f"PLAIN: {exc}") from None
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        cred = _lookup(ctx, creds.username, mechanism)
        if cred is not None:
            if scram.verify_password(mechanism, cred, creds.password):
                return creds.username
            raise _Failed(f"user {creds.username!r}: wrong password")
    # the same work as for a known user, so that the answer's timing does not tell
    scram.verify_password("SCRAM-SHA-512", _sasl.decoy_credential("SCRAM-SHA-512", creds.username), creds.password)
    raise _Failed(f"user {creds.username!r}: unknown")


def _oauthbearer(ctx: Context, token: bytes) -> tuple[str, int]:
    """(the subject, the token's expiry in ms since the epoch)."""
    settings = ctx.broker.settings
    try:
        msg = oauthbearer.parse_client_message(token)
        jwt = oauthbearer.parse_jwt(msg.token)
        _sasl.jwks(settings.sasl_oauthbearer_jwks_file).verify(jwt)
        accepted = oauthbearer.check_claims(
            jwt.claims, ctx.broker.clock.wall_ms(), issuer=settings.sasl_oauthbearer_expected_issuer or None,
            audience=settings.sasl_oauthbearer_expected_audience or None,
            subject_claim=settings.sasl_oauthbearer_sub_claim_name)
        if msg.authzid is not None and msg.authzid != accepted.principal_name:
            raise oauthbearer.OAuthError("authorisation id differs from the subject")
    except oauthbearer.OAuthError as exc:
        raise _Failed(f"OAUTHBEARER: {exc}") from None
    return accepted.principal_name, accepted.expires_ms


def _scram(ctx: Context, server: scram.ScramServer, token: bytes) -> tuple[bytes, str | None]:
    """(server message, the user once the exchange is done)."""
    try:
        if server.state == "client-first":
            first = server.receive_client_first(token)
            cred = _lookup(ctx, first.username, server.mechanism)
            if cred is None:
                cred = _sasl.decoy_credential(server.mechanism, first.username)
            return server.server_first(cred, _sasl.server_nonce()), None
        out = server.receive_client_final(token)
        return out, server.username
    except scram.ScramError as exc:
        who = server.first.username if server.first is not None else None
        raise _Failed(f"{server.mechanism} user {who!r}: {exc}") from None


async def handle(ctx: Context, req: SaslAuthenticateRequest) -> dict[str, object]:
    session = ctx.session
    if not _sasl.is_sasl(session):
        return _answer(ctx, ErrorCode.illegal_sasl_state, "SaslAuthenticate on a listener without SASL")
    exchange = session.sasl
    if exchange is None:
        session.close_reason = "SaslAuthenticate before SaslHandshake"
        return _answer(ctx, ErrorCode.illegal_sasl_state, "SaslAuthenticate before SaslHandshake")
    mechanism = session.mechanism
    expires_ms: int | None = None  # an OAUTHBEARER token's expiry bounds the session
    user: str | None
    try:
        if len(req.auth_bytes) > MAX_TOKEN:
            raise _Failed(f"a {len(req.auth_bytes)}-byte token")
        if isinstance(exchange, scram.ScramServer):
            out, user = _scram(ctx, exchange, req.auth_bytes)
            if user is None:
                return _answer(ctx, ErrorCode.none, None, out)
        elif exchange == _sasl.PLAIN_PENDING:
            out, user = b"", _plain(ctx, req.auth_bytes)
        else:  # _sasl.OAUTH_PENDING
            user, expires_ms = _oauthbearer(ctx, req.auth_bytes)
            out = b""
        principal = f"User:{user}"
        if session.authenticated and principal != session.principal:
            raise _Failed(f"re-authentication as {principal}, authenticated as {session.principal}")
    except _Failed as exc:
        session.sasl = None
        session.close_reason = f"SASL authentication failed: {exc}"
        return _answer(ctx, ErrorCode.sasl_authentication_failed, _sasl.failed_message(mechanism))
    session.sasl = None
    reauthentication = session.authenticated
    session.principal, session.authenticated = principal, True
    lifetime_ms = ctx.broker.settings.connections_max_reauth_ms
    if lifetime_ms > 0 and expires_ms is not None:  # KIP-368: min(max reauth, token lifetime)
        lifetime_ms = max(1, min(lifetime_ms, expires_ms - ctx.broker.clock.wall_ms()))
    session.reauth_deadline = trio.current_time() + lifetime_ms / 1000 if lifetime_ms > 0 else None
    log.debug("sasl_authenticated", principal=principal, mechanism=mechanism, peer=ctx.peer,
              reauthentication=reauthentication, raw_tokens=session.raw_tokens)
    return _answer(ctx, ErrorCode.none, None, out, lifetime_ms)
