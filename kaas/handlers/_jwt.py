"""OAUTHBEARER's signature check: a JWKS file (RFC 7517; RSA and P-256 EC keys) and the
RS256 / ES256 verification of a JWT with ``cryptography``. The structure and claims are
``domain.oauthbearer``'s; this module only answers "did the key with this kid sign these
bytes". The file is re-read when it changes (key rotation without a restart); a file that
does not parse refuses every token until it is repaired."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from kaas.clock import SYSTEM
from kaas.domain.oauthbearer import JwtToken, OAuthError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

    PublicKey: TypeAlias = RSAPublicKey | EllipticCurvePublicKey

_ALG_KTY = {"RS256": "RSA", "ES256": "EC"}


def _int(value: str) -> int:
    return int.from_bytes(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)), "big")


def _load_key(jwk: dict[str, Any]) -> tuple[str, PublicKey]:
    """(kty, key) of one JWK (a JSON object: its members are whatever the file holds)."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    kty = jwk.get("kty")
    if kty == "RSA":
        return "RSA", rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"])).public_key()
    if kty == "EC":
        if jwk.get("crv") != "P-256":
            raise ValueError(f"curve {jwk.get('crv')!r} not supported")
        return "EC", ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]), ec.SECP256R1()).public_key()
    raise ValueError(f"key type {kty!r} not supported")


def parse_jwks(data: bytes) -> list[tuple[str | None, str | None, str, PublicKey]]:
    """(kid, alg, kty, public key) of every usable signing key of a JWKS document.

    Raises:
        ValueError: not a JWKS, or a key that cannot be loaded.
    """
    doc = json.loads(data)
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise ValueError("not a JWKS document (no keys list)")
    out: list[tuple[str | None, str | None, str, PublicKey]] = []
    for jwk in doc["keys"]:
        if not isinstance(jwk, dict):
            raise ValueError("a key is not an object")
        if jwk.get("use", "sig") != "sig":
            continue
        kty, key = _load_key(jwk)
        out.append((jwk.get("kid"), jwk.get("alg"), kty, key))
    return out


class Jwks:
    """The keys of one JWKS file, re-read when its inode, size or mtime changes, looked at
    no more than once per ``RECHECK_S`` (a stat on the trio thread per authentication would
    be a round trip each on NFS; a rotated key is in use within a second)."""

    RECHECK_S = 1.0

    def __init__(self, path: str | os.PathLike[str], clock: Callable[[], float] = SYSTEM.monotonic) -> None:
        self.path = Path(path)
        self._clock = clock
        self._stamp: tuple[int, int, int] | None = None
        self._keys: list[tuple[str | None, str | None, str, PublicKey]] = []
        self.error: str | None = "not loaded"
        self._checked = -float("inf")

    def _refresh(self) -> None:
        now = self._clock()
        if now - self._checked < self.RECHECK_S:
            return
        self._checked = now
        try:
            st = os.stat(self.path)
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            if stamp == self._stamp:
                return
            keys = parse_jwks(self.path.read_bytes())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._stamp, self._keys, self.error = None, [], f"JWKS {self.path}: {exc}"
            return
        self._stamp, self._keys, self.error = stamp, keys, None

    def verify(self, token: JwtToken) -> None:
        """Raises: OAuthError: no key of the file matches the token's kid and algorithm, the
        signature does not verify, or the file is missing or corrupt."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
        from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

        self._refresh()
        if self.error is not None:
            raise OAuthError(self.error)
        kty = _ALG_KTY[token.alg]
        candidates = [k for kid, alg, t, k in self._keys
                      if t == kty and alg in (None, token.alg) and (token.kid is None or kid == token.kid)]
        if not candidates or (token.kid is None and len(candidates) > 1):
            raise OAuthError(f"no key for kid {token.kid!r} and {token.alg}")
        key = candidates[0]
        try:
            if isinstance(key, rsa.RSAPublicKey):  # (kty RSA: every candidate is of the token's kty)
                key.verify(token.signature, token.signing_input, padding.PKCS1v15(), hashes.SHA256())
            else:
                if len(token.signature) != 64:
                    raise OAuthError("ES256 signature is not 64 bytes")
                r = int.from_bytes(token.signature[:32], "big")
                s = int.from_bytes(token.signature[32:], "big")
                key.verify(encode_dss_signature(r, s), token.signing_input, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise OAuthError("bad signature") from None
