"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them: the server
side of one exchange as a pure machine, and the credential arithmetic.

The exchange is two round trips of SaslAuthenticate::

    client-first  n,,n=<user>,r=<client nonce>[,<ext>=<value>...]
    server-first  r=<client nonce><server nonce>,s=<salt b64>,i=<iterations>
    client-final  c=biws,r=<combined nonce>,p=<proof b64>
                  (librdkafka < 2.6.1: r=<client nonce><combined nonce>, ``accepted_nonce``)
    server-final  v=<server signature b64>

``ScramServer`` takes the client's messages and the values only its caller can supply (the
user's credential, a random server nonce) and answers the server's messages; it never
reads a clock, a file or a random source. Its caller (``handlers.sasl_authenticate``)
looks the credential up and logs.

Invariants:
    - a credential is (salt, StoredKey, ServerKey, iterations); the password and the
      salted password are never kept (``credential_from_salted``);
    - the proof is checked with ``hmac.compare_digest``;
    - the server nonce extends the client's, and the client-final must repeat the
      combined nonce exactly (or in the one shape of librdkafka's bug, ``client_nonce``
      followed by the combined nonce: ``accepted_nonce``) and bind the channel as ``n,,``
      (no channel binding, no authorisation id other than the user itself);
    - the proof is checked over the AuthMessage built from the client-final as the client
      sent it (RFC 5802 section 3: client-final-message-without-proof), so whatever nonce
      it repeated is the one its proof binds;
    - a machine answers each step once: a message in any other state fails, and once it
      failed or finished it refuses everything (no replay on the same exchange);
    - every failure raises ``ScramError`` whose text is for the broker's log only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
"""SASL mechanism name -> hashlib name."""

MECHANISM_TYPES: dict[int, str] = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
"""The ``mechanism`` int8 of Describe/AlterUserScramCredentials (Apache ``ScramMechanism``)."""

MIN_ITERATIONS = 4096  # Apache ScramMechanism.minIterations
MAX_ITERATIONS = 16384  # Apache ScramMechanism.maxIterations


class ScramError(Exception):
    """The exchange failed (bad syntax, wrong state, wrong nonce or proof). The message is
    for the broker's log; the client is told only that authentication failed."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server stores of one user and mechanism (RFC 5802 section 3)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def hash_name(mechanism: str) -> str:
    """The hashlib name of a SCRAM mechanism.

    Raises:
        ScramError: not a SCRAM mechanism.
    """
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(f"unknown SCRAM mechanism {mechanism!r}") from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i): PBKDF2-HMAC. (SASLprep is not applied; Apache's
    Java and librdkafka do not apply it either, so the same bytes are hashed.)"""
    name = hash_name(mechanism)
    return hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)


def credential_from_salted(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """The stored credential for a salted password (AlterUserScramCredentials carries the
    salted password the client computed)."""
    name = hash_name(mechanism)
    client_key = _hmac(name, salted, b"Client Key")
    stored_key = hashlib.new(name, client_key).digest()
    server_key = _hmac(name, salted, b"Server Key")
    return ScramCredential(salt, stored_key, server_key, iterations)


def credential_from_password(mechanism: str, password: str, salt: bytes, iterations: int) -> ScramCredential:
    return credential_from_salted(mechanism, salt, salted_password(mechanism, password, salt, iterations),
                                  iterations)


def verify_password(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (SASL/PLAIN checks its
    passwords against the SCRAM credentials, so one store serves both)."""
    name = hash_name(mechanism)
    salted = salted_password(mechanism, password, credential.salt, credential.iterations)
    stored = hashlib.new(name, _hmac(name, salted, b"Client Key")).digest()
    return hmac.compare_digest(stored, credential.stored_key)


def accepted_nonce(nonce: str, client_nonce: str, combined: str) -> bool:
    """Whether a client-final's nonce answers the exchange whose server-first sent
    ``combined`` (``client_nonce`` followed by the server's part).

    Two shapes are accepted: ``combined`` (RFC 5802), and ``client_nonce + combined``, what
    librdkafka before 2.6.1 sends (confluentinc/librdkafka#4895: it writes its own nonce
    before the server's whole ``r=`` value). Apache Kafka 3.8.1 to 3.9 accept it, checking
    only that the nonce ends with the combined one (earlier versions checked no nonce;
    Kafka 4 wants equality). Anything else (another exchange's nonce, a truncated one, any
    other prefix) is refused.
    """
    if not combined.startswith(client_nonce):
        return False
    return (hmac.compare_digest(nonce.encode(), combined.encode())
            or hmac.compare_digest(nonce.encode(), (client_nonce + combined).encode()))


def _printable_nonce(nonce: str) -> bool:
    return bool(nonce) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


def _saslname(value: str) -> str:
    """Decode a saslname (``=2C`` is ``,``, ``=3D`` is ``=``; any other ``=`` is an error)."""
    out = []
    i = 0
    while i < len(value):
        c = value[i]
        if c == "=":
            code = value[i + 1:i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ScramError("bad escape in saslname")
            i += 3
            continue
        if c == ",":
            raise ScramError("unescaped comma in saslname")
        out.append(c)
        i += 1
    return "".join(out)


@dataclass(frozen=True, slots=True)
class ClientFirst:
    """The parsed client-first message."""

    username: str
    client_nonce: str
    gs2_header: str
    bare: str  # client-first-message-bare, part of the AuthMessage
    extensions: dict[str, str]


def parse_client_first(message: bytes) -> ClientFirst:
    """Parse a client-first message.

    Raises:
        ScramError: not UTF-8, a channel-binding flag other than ``n``, an authorisation id
            other than the user, the reserved ``m`` extension, a missing user or nonce,
            Kafka's ``tokenauth`` extension (delegation tokens are not supported).
    """
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise ScramError("client-first is not UTF-8") from None
    flag, sep, rest = text.partition(",")
    if not sep or flag != "n":
        raise ScramError("channel binding flag must be 'n'")
    authzid_part, sep, bare = rest.partition(",")
    if not sep:
        raise ScramError("no gs2 header")
    authzid = None
    if authzid_part:
        if not authzid_part.startswith("a="):
            raise ScramError("malformed authzid")
        authzid = _saslname(authzid_part[2:])
    parts = bare.split(",")
    if parts[0].startswith("m="):
        raise ScramError("mandatory extension not supported")
    if len(parts) < 2 or not parts[0].startswith("n=") or not parts[1].startswith("r="):
        raise ScramError("client-first must start with n= and r=")
    username = _saslname(parts[0][2:])
    nonce = parts[1][2:]
    if not username:
        raise ScramError("empty user name")
    if not _printable_nonce(nonce):
        raise ScramError("bad client nonce")
    if authzid is not None and authzid != username:
        raise ScramError("authorisation id differs from the user")
    extensions: dict[str, str] = {}
    for part in parts[2:]:
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ScramError("malformed extension")
        extensions[key] = value
    if extensions.get("tokenauth", "false").lower() == "true":
        raise ScramError("delegation tokens are not supported")
    return ClientFirst(username, nonce, f"{flag},{authzid_part},", bare, extensions)


def _b64decode(value: str) -> bytes:
    try:
        return base64.b64decode(value.encode(), validate=True)
    except (binascii.Error, ValueError):
        raise ScramError("bad base64") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class ScramServer:
    """The server side of one SCRAM exchange.

    Usage::

        server = ScramServer("SCRAM-SHA-512")
        first = server.receive_client_first(token)        # -> ClientFirst (the user to look up)
        out = server.server_first(credential, nonce)      # -> server-first bytes
        out = server.receive_client_final(token)          # -> server-final bytes; done

    For an unknown user the caller passes a decoy credential, so that the exchange fails
    at the proof exactly as for a wrong password.
    """

    __slots__ = ("mechanism", "_hash", "state", "first", "_credential", "_nonce", "_server_first")

    def __init__(self, mechanism: str) -> None:
        self.mechanism = mechanism
        self._hash = hash_name(mechanism)
        self.state = "client-first"  # -> server-first -> client-final -> done | failed
        self.first: ClientFirst | None = None
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._server_first = ""

    @property
    def username(self) -> str | None:
        """The authenticated user once ``state == "done"``, else None."""
        return self.first.username if self.state == "done" and self.first is not None else None

    def _expect(self, state: str) -> None:
        if self.state != state:
            was, self.state = self.state, "failed"
            raise ScramError(f"unexpected message in state {was}")

    def receive_client_first(self, message: bytes) -> ClientFirst:
        self._expect("client-first")
        try:
            self.first = parse_client_first(message)
        except ScramError:
            self.state = "failed"
            raise
        self.state = "server-first"
        return self.first

    def server_first(self, credential: ScramCredential, server_nonce: str) -> bytes:
        """The server-first message. ``server_nonce`` is the caller's random part (printable,
        no comma); the nonce sent is the client's followed by it."""
        self._expect("server-first")
        assert self.first is not None
        if not _printable_nonce(server_nonce):
            self.state = "failed"
            raise ScramError("bad server nonce")
        self._credential = credential
        self._nonce = self.first.client_nonce + server_nonce
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self.state = "client-final"
        return self._server_first.encode()

    def receive_client_final(self, message: bytes) -> bytes:
        """Check the client's proof; the server-final message.

        Raises:
            ScramError: malformed, a foreign nonce, wrong channel binding, wrong proof.
        """
        self._expect("client-final")
        try:
            out = self._final(message)
        except ScramError:
            self.state = "failed"
            raise
        self.state = "done"
        return out

    def _final(self, message: bytes) -> bytes:
        assert self.first is not None and self._credential is not None
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise ScramError("client-final is not UTF-8") from None
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise ScramError("client-final has no proof")
        parts = without_proof.split(",")
        if len(parts) < 2 or not parts[0].startswith("c=") or not parts[1].startswith("r="):
            raise ScramError("client-final must start with c= and r=")
        if _b64decode(parts[0][2:]) != self.first.gs2_header.encode():
            raise ScramError("channel binding does not match")
        if not accepted_nonce(parts[1][2:], self.first.client_nonce, self._nonce):
            raise ScramError("nonce does not match the exchange")
        proof = _b64decode(proof_b64)
        cred = self._credential
        # the client-final without its proof, as sent (with the nonce it repeated)
        auth_message = f"{self.first.bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(self._hash, cred.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise ScramError("bad proof")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), cred.stored_key):
            raise ScramError("bad proof")
        server_signature = _hmac(self._hash, cred.server_key, auth_message)
        return f"v={_b64(server_signature)}".encode()
