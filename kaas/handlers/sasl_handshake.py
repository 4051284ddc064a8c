"""SaslHandshake (17, v0-v1): the client names its SASL mechanism, and the version says how
the exchange follows. v1 (KIP-152): in SaslAuthenticate requests. v0: as raw SASL tokens,
each a bare size-prefixed frame with no Kafka header, answered the same way; once the
exchange ends (success) the connection is back to Kafka requests (``session.raw_tokens``,
``dispatch.prepare`` reads each such frame as a token for ``sasl_authenticate``).

v0 is served as Apache Kafka serves it (KIP-896 meant to drop it in 4.0; KAFKA-18270 kept
it) because librdkafka enables SASL only when ApiVersions lists SaslHandshake v0, and then
sends v1 (confluentinc/librdkafka#4983; Debian's kcat links librdkafka 2.0.2), and clients
pinned below Kafka 1.0 send v0 itself (kafka-python with ``api_version=(0, 11, 0)``).

On a listener without SASL the answer is ILLEGAL_SASL_STATE, as Apache's ``KafkaApis``.
An unknown mechanism gets UNSUPPORTED_SASL_MECHANISM with the enabled list, then the
connection closes; so does a handshake in the middle of an exchange. On an authenticated
connection a v1 handshake starts a re-authentication (KIP-368), with the same mechanism;
a session that authenticated with v0, or a v0 handshake, cannot re-authenticate (KIP-368
needs SaslAuthenticate v1): ILLEGAL_SASL_STATE, then the connection closes. Such a
session still expires with ``--connections-max-reauth-ms`` (``dispatch.prepare``), as in
Apache, whose v0 path sets the session's expiry too."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.domain import scram
from kaas.domain.oauthbearer import MECHANISM as OAUTHBEARER
from kaas.handlers import _sasl

if TYPE_CHECKING:
    from kio.schema.sasl_handshake import v0, v1

    from kaas.handlers.context import Context

    SaslHandshakeRequest: TypeAlias = v0.SaslHandshakeRequest | v1.SaslHandshakeRequest

API_KEY = 17
VERSIONS = (0, 1)


async def handle(ctx: Context, req: SaslHandshakeRequest) -> dict[str, object]:
    session = ctx.session
    enabled = _sasl.mechanisms(ctx.broker.settings, session)
    if not _sasl.is_sasl(session):
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": ()}
    if session.sasl is not None:
        session.close_reason = "SaslHandshake in the middle of a SASL exchange"
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": tuple(enabled)}
    if session.authenticated and (ctx.api_version == 0 or session.raw_tokens):
        session.close_reason = "re-authentication needs SaslHandshake v1, and a login made with v1 (KIP-368)"
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": tuple(enabled)}
    if req.mechanism not in enabled:
        session.close_reason = f"SASL mechanism {req.mechanism!r} not enabled"
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": tuple(enabled)}
    if session.authenticated and session.mechanism not in (None, req.mechanism):
        session.close_reason = f"re-authentication with {req.mechanism}, authenticated with {session.mechanism}"
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": tuple(enabled)}
    session.mechanism = req.mechanism
    session.raw_tokens = ctx.api_version == 0
    if req.mechanism in scram.MECHANISMS:
        session.sasl = scram.ScramServer(req.mechanism)
    else:
        session.sasl = _sasl.OAUTH_PENDING if req.mechanism == OAUTHBEARER else _sasl.PLAIN_PENDING
    return {"error_code": ErrorCode.none, "mechanisms": tuple(enabled)}
