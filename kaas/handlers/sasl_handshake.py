"""SaslHandshake (17): the client names its SASL mechanism; SaslAuthenticate carries the
exchange. Only v1 (the exchange framed in SaslAuthenticate): v0's raw tokens after the
handshake are what Kafka 4 removed (KIP-896), and every client of CLIENTS.md sends v1; a
v0 request is an unsupported version and closes the connection (``dispatch``).

On a listener without SASL the answer is ILLEGAL_SASL_STATE, as Apache's ``KafkaApis``.
An unknown mechanism gets UNSUPPORTED_SASL_MECHANISM with the enabled list, then the
connection closes; so does a handshake in the middle of an exchange. On an authenticated
connection a handshake starts a re-authentication (KIP-368), with the same mechanism."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kaas.domain import scram
from kaas.handlers import _sasl

API_KEY = 17
VERSIONS = (1, 1)


async def handle(ctx, req) -> dict:
    session = ctx.session
    enabled = _sasl.mechanisms(ctx.broker.settings, session)
    if not _sasl.is_sasl(session):
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": ()}
    if session.sasl is not None:
        session.close_reason = "SaslHandshake in the middle of a SASL exchange"
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": tuple(enabled)}
    if req.mechanism not in enabled:
        session.close_reason = f"SASL mechanism {req.mechanism!r} not enabled"
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": tuple(enabled)}
    if session.authenticated and session.mechanism not in (None, req.mechanism):
        session.close_reason = f"re-authentication with {req.mechanism}, authenticated with {session.mechanism}"
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": tuple(enabled)}
    session.mechanism = req.mechanism
    if req.mechanism in scram.MECHANISMS:
        session.sasl = scram.ScramServer(req.mechanism)
    else:
        session.sasl = _sasl.OAUTH_PENDING if req.mechanism == _sasl.OAUTHBEARER else _sasl.PLAIN_PENDING
    return {"error_code": ErrorCode.none, "mechanisms": tuple(enabled)}
