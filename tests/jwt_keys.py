"""Test keys, a JWKS file and signed JWTs for the OAUTHBEARER tests (``cryptography``)."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

ISSUER = "https://issuer.test"
AUDIENCE = "kaas"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(n: int) -> str:
    return b64url(n.to_bytes((n.bit_length() + 7) // 8, "big"))


class Keys:
    """An RSA and a P-256 signing key and their JWKS."""

    def __init__(self) -> None:
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())

    def jwks(self) -> dict:
        rn = self.rsa.public_key().public_numbers()
        en = self.ec.public_key().public_numbers()
        return {"keys": [
            {"kty": "RSA", "kid": "rsa-1", "alg": "RS256", "use": "sig", "n": _uint(rn.n), "e": _uint(rn.e)},
            {"kty": "EC", "kid": "ec-1", "crv": "P-256", "x": b64url(en.x.to_bytes(32, "big")),
             "y": b64url(en.y.to_bytes(32, "big"))},
        ]}

    def write_jwks(self, path: Path) -> Path:
        path.write_text(json.dumps(self.jwks()))
        return path

    def token(self, sub: str = "alice", *, alg: str = "RS256", kid: str | None = None, lifetime_s: float = 300,
              **claims) -> str:
        now = time.time()
        body = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": int(now), "exp": now + lifetime_s, **claims}
        body = {k: v for k, v in body.items() if v is not None}
        header = {"alg": alg, "typ": "JWT"}
        if alg != "none":
            header["kid"] = kid or ("rsa-1" if alg == "RS256" else "ec-1")
        signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(body).encode())}".encode()
        if alg == "RS256":
            sig = self.rsa.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        elif alg == "ES256":
            r, s = decode_dss_signature(self.ec.sign(signing_input, ec.ECDSA(hashes.SHA256())))
            sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        elif alg == "HS256":
            import hmac

            sig = hmac.new(b"secret", signing_input, "sha256").digest()
        else:
            sig = b""
        return f"{signing_input.decode()}.{b64url(sig)}"


def client_message(token: str, authzid: str = "") -> bytes:
    """RFC 7628's client initial response, as librdkafka sends it."""
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()
