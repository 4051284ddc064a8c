"""SASL/OAUTHBEARER (RFC 7628, Kafka's KIP-255) with unsecured-free, signed JWTs: the
client message, the JWT's structure and its claims, as pure functions. The signature
itself is checked above this layer (``handlers._jwt``, with ``cryptography``) against
the key the caller picks by ``JwtToken.kid``.

Invariants:
    - the client message is ``n,,`` (no channel binding; an authzid, if any, is ignored
      by Kafka and refused here unless it equals the subject), then ``\\x01``-separated
      ``key=value`` pairs with exactly one ``auth=Bearer <token>``, ending ``\\x01\\x01``;
    - only RS256 and ES256 are accepted: ``none`` (unsigned) and every HMAC algorithm
      (HS*: a shared secret would be the verification key itself) are refused;
    - ``exp`` is required and must lie in the future; ``nbf`` and ``iat``, when present,
      may not lie in the future (with ``CLOCK_SKEW_S`` of tolerance); ``iss`` must equal
      the expected issuer and ``aud`` contain the expected audience when they are
      configured; the subject claim must be a non-empty string;
    - ``OAuthError`` texts are for the broker's log only.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass

MECHANISM = "OAUTHBEARER"
ALGORITHMS = ("RS256", "ES256")
CLOCK_SKEW_S = 30
_KEY = re.compile(r"^[A-Za-z]+$")


class OAuthError(Exception):
    """The message or token is refused."""


@dataclass(frozen=True, slots=True)
class ClientMessage:
    token: str
    authzid: str | None
    extensions: dict[str, str]


def parse_client_message(message: bytes) -> ClientMessage:
    """Raises: OAuthError: not the RFC 7628 client initial response with a Bearer token."""
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise OAuthError("not UTF-8") from None
    gs2, sep, rest = text.partition("\x01")
    if not sep or not rest.endswith("\x01\x01"):
        raise OAuthError("malformed client message")
    flag, _, authzid_part = gs2.partition(",")
    if flag != "n" or not gs2.endswith(","):
        raise OAuthError("channel binding flag must be 'n'")
    authzid_part = authzid_part[:-1]
    authzid = None
    if authzid_part:
        if not authzid_part.startswith("a="):
            raise OAuthError("malformed authzid")
        authzid = authzid_part[2:]
    pairs: dict[str, str] = {}
    for kv in rest[:-2].split("\x01"):
        key, sep, value = kv.partition("=")
        if not sep or not _KEY.match(key) or key in pairs:
            raise OAuthError("malformed key/value pair")
        pairs[key] = value
    auth = pairs.pop("auth", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise OAuthError("no Bearer token")
    return ClientMessage(token.strip(), authzid, pairs)


def _b64url(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise OAuthError("bad base64url") from None


@dataclass(frozen=True, slots=True)
class JwtToken:
    header: dict[str, object]
    claims: dict[str, object]
    signing_input: bytes  # header.payload, what the signature covers
    signature: bytes

    @property
    def alg(self) -> str:
        alg = self.header.get("alg", "")
        return alg if isinstance(alg, str) else ""

    @property
    def kid(self) -> str | None:
        kid = self.header.get("kid")
        return kid if isinstance(kid, str) else None


def parse_jwt(token: str) -> JwtToken:
    """Split and decode a compact JWS.

    Raises:
        OAuthError: not three base64url parts of JSON objects, or an algorithm other than
            RS256/ES256 (``none`` and HS* included).
    """
    parts = token.split(".")
    if len(parts) != 3:
        raise OAuthError("not a compact JWS")
    try:
        header = json.loads(_b64url(parts[0]))
        claims = json.loads(_b64url(parts[1]))
    except ValueError:
        raise OAuthError("header or claims are not JSON") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise OAuthError("header or claims are not objects")
    if header.get("alg") not in ALGORITHMS:
        raise OAuthError(f"algorithm {header.get('alg')!r} refused")
    if "crit" in header:
        raise OAuthError("critical header parameters are not supported")
    signature = _b64url(parts[2])
    if not signature:
        raise OAuthError("no signature")
    return JwtToken(header, claims, f"{parts[0]}.{parts[1]}".encode(), signature)


@dataclass(frozen=True, slots=True)
class Accepted:
    principal_name: str
    expires_ms: int


def _number(claims: dict[str, object], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OAuthError(f"claim {name} is not a number")
    return float(value)


def check_claims(claims: dict[str, object], now_ms: int, *, issuer: str | None = None, audience: str | None = None,
                 subject_claim: str = "sub") -> Accepted:
    """Check a verified token's claims at ``now_ms``.

    Raises:
        OAuthError: expired, not yet valid, wrong issuer or audience, no subject.
    """
    now = now_ms / 1000
    exp = _number(claims, "exp")
    if exp is None:
        raise OAuthError("no exp claim")
    if exp <= now:
        raise OAuthError("token expired")
    for name in ("nbf", "iat"):
        value = _number(claims, name)
        if value is not None and value > now + CLOCK_SKEW_S:
            raise OAuthError(f"claim {name} lies in the future")
    if issuer is not None and claims.get("iss") != issuer:
        raise OAuthError("wrong issuer")
    if audience is not None:
        aud = claims.get("aud")
        auds = aud if isinstance(aud, list) else [aud]
        if audience not in auds:
            raise OAuthError("wrong audience")
    subject = claims.get(subject_claim)
    if not isinstance(subject, str) or not subject:
        raise OAuthError(f"no {subject_claim} claim")
    return Accepted(subject, int(exp * 1000))
