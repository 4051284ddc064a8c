"""What SaslHandshake and SaslAuthenticate share: the mechanisms a session may use, the
decoy credential of an unknown user, and the failure every wrong input ends in."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from functools import cache

from kaas.domain import scram
from kaas.domain.oauthbearer import MECHANISM as OAUTHBEARER
from kaas.domain.sasl_plain import MECHANISM as PLAIN
from kaas.handlers._jwt import Jwks
from kaas.handlers.session import Session
from kaas.settings import Settings

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
PLAIN_PENDING = "PLAIN"  # ``session.sasl`` between a PLAIN handshake and its one token
OAUTH_PENDING = "OAUTHBEARER"  # and between an OAUTHBEARER handshake and its token
SUPPORTED = (PLAIN, *scram.MECHANISMS, OAUTHBEARER)
CLEARTEXT = (PLAIN, OAUTHBEARER)  # the client's secret itself crosses the network
DECOY_ITERATIONS = 4096

_DECOY_KEY = secrets.token_bytes(32)  # per process: an unknown user's salt is stable here


def is_sasl(session: Session) -> bool:
    return session.security_protocol in SASL_PROTOCOLS


def mechanisms(settings: Settings, session: Session) -> list[str]:
    """The mechanisms this session may use: the ones enabled on its listener (its own
    ``listener.name.<l>.sasl.enabled.mechanisms``, else ``--sasl-enabled-mechanisms``), less
    PLAIN and OAUTHBEARER on a plaintext listener unless ``--sasl-allow-plaintext-credentials``
    (a password or a bearer token would cross the network in clear; the broker refuses to
    start with a listener's own list naming them there), less OAUTHBEARER without a JWKS."""
    out = [m for m in settings.sasl_mechanisms_of(session.listener) if m in SUPPORTED]
    if session.security_protocol == "SASL_PLAINTEXT" and not settings.sasl_allow_plaintext_credentials:
        out = [m for m in out if m not in CLEARTEXT]
    if not settings.sasl_oauthbearer_jwks_file:
        out = [m for m in out if m != OAUTHBEARER]
    return out


@cache
def jwks(path: str) -> Jwks:
    """The broker's one ``Jwks`` of ``path`` (it re-reads the file when it changes)."""
    return Jwks(path)


def decoy_credential(mechanism: str, user: str) -> scram.ScramCredential:
    """A credential no password matches, with a salt stable per user: an unknown user's
    exchange looks like a known user's and fails at the proof, as a wrong password does."""
    name = scram.hash_name(mechanism)
    salt = hmac.new(_DECOY_KEY, f"{mechanism}\0{user}".encode(), hashlib.sha256).digest()[:16]
    junk = hmac.new(_DECOY_KEY, salt, name).digest()
    return scram.ScramCredential(salt, junk, junk, DECOY_ITERATIONS)


def failed_message(mechanism: str | None) -> str:
    """Apache's text, the same for an unknown user, a wrong password and a bad message."""
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


def server_nonce() -> str:
    return secrets.token_urlsafe(24)
