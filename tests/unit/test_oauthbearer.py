"""OAUTHBEARER: the client message and claims (kaas.domain.oauthbearer), and the JWKS and
signature check (kaas.handlers._jwt) with RS256 and ES256 test keys."""

from __future__ import annotations

import json
import time

import pytest

from kaas.domain import oauthbearer
from kaas.domain.oauthbearer import OAuthError, check_claims, parse_client_message, parse_jwt
from kaas.handlers._jwt import Jwks
from tests.jwt_keys import AUDIENCE, ISSUER, Keys, b64url, client_message

KEYS = Keys()
OTHER = Keys()


def now_ms() -> int:
    return int(time.time() * 1000)


def test_client_message():
    msg = parse_client_message(b"n,,\x01host=h\x01auth=Bearer abc.def.ghi\x01\x01")
    assert (msg.token, msg.authzid, msg.extensions) == ("abc.def.ghi", None, {"host": "h"})
    assert parse_client_message(client_message("t.t.t", "alice")).authzid == "alice"


@pytest.mark.parametrize("bad", [b"", b"n,,", b"y,,\x01auth=Bearer x\x01\x01", b"n,,\x01auth=Basic x\x01\x01",
                                 b"n,,\x01auth=Bearer x\x01", b"n,,\x01auth=Bearer \x01\x01",
                                 b"n,,\x01\x01\x01", b"n,,\x01auth=Bearer x\x01auth=Bearer y\x01\x01", b"\xff"])
def test_bad_client_message(bad):
    with pytest.raises(OAuthError):
        parse_client_message(bad)


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_signed_token_verifies_and_its_claims_pass(tmp_path, alg):
    jwks = Jwks(KEYS.write_jwks(tmp_path / "jwks.json"))
    jwt = parse_jwt(KEYS.token("alice", alg=alg))
    jwks.verify(jwt)
    accepted = check_claims(jwt.claims, now_ms(), issuer=ISSUER, audience=AUDIENCE)
    assert accepted.principal_name == "alice" and accepted.expires_ms > now_ms()


@pytest.mark.parametrize("alg", ["none", "HS256", "HS512", "PS256", "RS512"])
def test_algorithms_refused(alg):
    header = b64url(json.dumps({"alg": alg}).encode())
    body = b64url(json.dumps({"sub": "a", "exp": time.time() + 60}).encode())
    with pytest.raises(OAuthError, match="algorithm"):
        parse_jwt(f"{header}.{body}.{b64url(b'sig')}")
    if alg in ("none", "HS256"):
        with pytest.raises(OAuthError, match="algorithm"):
            parse_jwt(KEYS.token(alg=alg))


def test_wrong_key_tampered_payload_and_unknown_kid(tmp_path):
    jwks = Jwks(KEYS.write_jwks(tmp_path / "jwks.json"))
    for token in (OTHER.token(), OTHER.token(alg="ES256")):
        with pytest.raises(OAuthError, match="bad signature"):
            jwks.verify(parse_jwt(token))
    h, _b, s = KEYS.token("alice").split(".")
    forged = b64url(json.dumps({"sub": "admin", "iss": ISSUER, "aud": AUDIENCE, "exp": time.time() + 60}).encode())
    with pytest.raises(OAuthError, match="bad signature"):
        jwks.verify(parse_jwt(f"{h}.{forged}.{s}"))
    with pytest.raises(OAuthError, match="no key"):
        jwks.verify(parse_jwt(KEYS.token(kid="rsa-2")))
    with pytest.raises(OAuthError, match="no key"):  # an RSA kid named for an ES256 token
        jwks.verify(parse_jwt(KEYS.token(alg="ES256", kid="rsa-1")))


def test_a_corrupt_or_missing_jwks_refuses_and_a_rotation_is_picked_up(tmp_path):
    """The file is looked at once per RECHECK_S at most (a clock the test moves)."""
    path = tmp_path / "jwks.json"
    now = [0.0]
    jwks = Jwks(path, clock=lambda: now[0])
    with pytest.raises(OAuthError, match="JWKS"):
        jwks.verify(parse_jwt(KEYS.token()))
    path.write_text("{not json")
    now[0] += Jwks.RECHECK_S
    with pytest.raises(OAuthError, match="JWKS"):
        jwks.verify(parse_jwt(KEYS.token()))
    OTHER.write_jwks(path)
    with pytest.raises(OAuthError, match="JWKS"):  # within the second: not looked at yet
        jwks.verify(parse_jwt(OTHER.token()))
    now[0] += Jwks.RECHECK_S
    jwks.verify(parse_jwt(OTHER.token()))
    with pytest.raises(OAuthError):
        jwks.verify(parse_jwt(KEYS.token()))


@pytest.mark.parametrize(("claims", "match"), [
    ({"exp": None}, "no exp"),
    ({"lifetime_s": -1}, "expired"),
    ({"nbf": time.time() + 3600}, "future"),
    ({"iss": "https://evil"}, "issuer"),
    ({"aud": "other"}, "audience"),
    ({"sub": None}, "no sub"),
    ({"exp": "tomorrow"}, "not a number"),
])
def test_claims_refused(claims, match):
    lifetime = claims.pop("lifetime_s", 300)
    jwt = parse_jwt(KEYS.token(lifetime_s=lifetime, **claims))
    with pytest.raises(OAuthError, match=match):
        check_claims(jwt.claims, now_ms(), issuer=ISSUER, audience=AUDIENCE)


def test_audience_list_and_subject_claim():
    jwt = parse_jwt(KEYS.token(aud=["x", AUDIENCE], client_id="svc"))
    assert check_claims(jwt.claims, now_ms(), issuer=ISSUER, audience=AUDIENCE,
                        subject_claim="client_id").principal_name == "svc"
    assert oauthbearer.ALGORITHMS == ("RS256", "ES256")
