"""A minimal blocking Kafka protocol client built on kio: the operator tools and the tests
speak raw APIs with it."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import hmac
import secrets
import socket
import ssl
import struct
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from kio.index import load_response_schema
from kio.serial import entity_reader
from kio.serial._introspect import EntityField, EntityTupleField, classify_field
from kio.serial._parse import get_field_reader
from kio.serial.readers import Reader, read_int64, read_unsigned_varint
from kio.static.protocol import Entity, RequestPayload, ResponsePayload

if TYPE_CHECKING:
    from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
    from typing_extensions import Buffer  # (collections.abc.Buffer from Python 3.12)

from kaas.wire import codec
from kaas.wire.build import build

_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)
T = TypeVar("T")


def parse_properties(text: str, source: str = "properties") -> dict[str, str]:
    """librdkafka-style client properties (``key=value`` lines; ``#`` and ``!`` comments),
    such as ``DATA/run/client.properties`` of ``kaas cluster --secure``.

    Raises:
        ValueError: a line that is not ``key=value`` (``source:line`` in the message).
    """
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{source}:{n}: not key=value")
        out[key.strip()] = value.strip()
    return out


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from a blocking socket.

    Raises:
        ConnectionError: the peer closed the connection first.
    """
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class SaslConfig:
    """A client's SASL settings (librdkafka's ``sasl.mechanism``, ``sasl.username``,
    ``sasl.password``)."""

    mechanism: str
    username: str
    password: str = dataclasses.field(repr=False)


class SaslFailed(ConnectionError):
    """The broker refused the SASL handshake or authentication."""


_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class ScramClient:
    """The client side of one SCRAM exchange (RFC 5802), sans I/O: ``first()``, then
    ``final(server_first)``, then ``check(server_final)``."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        self.hash = _SCRAM_HASHES[mechanism]
        self.username, self.password = username, password
        self.nonce = nonce or secrets.token_urlsafe(18)
        self._bare = ""
        self._server_signature = b""

    def first(self) -> bytes:
        name = self.username.replace("=", "=3D").replace(",", "=2C")
        self._bare = f"n={name},r={self.nonce}"
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        """Raises: SaslFailed: the server's nonce does not extend ours, or the message is malformed."""
        text = server_first.decode()
        try:
            attrs = dict(part.split("=", 1) for part in text.split(","))
            nonce, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
        except (ValueError, KeyError) as exc:
            raise SaslFailed(f"malformed server-first message: {exc}") from None
        if not nonce.startswith(self.nonce) or nonce == self.nonce:
            raise SaslFailed("server nonce does not extend the client's")
        salted = hashlib.pbkdf2_hmac(self.hash, self.password.encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        stored_key = hashlib.new(self.hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth = f"{self._bare},{text},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, hmac.new(stored_key, auth, self.hash).digest(), strict=True))
        server_key = hmac.new(salted, b"Server Key", self.hash).digest()
        self._server_signature = hmac.new(server_key, auth, self.hash).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check(self, server_final: bytes) -> None:
        """Raises: SaslFailed: the server did not prove it knows the credential."""
        expected = b"v=" + base64.b64encode(self._server_signature)
        if not hmac.compare_digest(server_final, expected):
            raise SaslFailed("server signature does not match")


SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class WireClient:
    """One blocking connection: over TLS with ``ssl_context`` (an SSL or SASL_SSL listener;
    the certificate checked against ``host`` as the context says), and with ``sasl``
    authenticated (SaslHandshake v1, SaslAuthenticate v2; PLAIN or SCRAM) before anything
    else.

    Raises:
        OSError, ssl.SSLError: the connection or the handshake failed.
        SaslFailed: the broker refused the mechanism or the credentials.
    """

    def __init__(self, host: str, port: int, timeout: float = 10.0, sasl: SaslConfig | None = None,
                 ssl_context: ssl.SSLContext | None = None, client_id: str = "kaas-tools") -> None:
        self.client_id = client_id
        sock = socket.create_connection((host, port), timeout=timeout)
        if ssl_context is not None:
            try:
                sock = ssl_context.wrap_socket(sock, server_hostname=host)
            except BaseException:
                sock.close()
                raise
        self.sock = sock
        self.corr = 0
        if sasl is not None:
            try:
                self.authenticate(sasl)
            except BaseException:
                self.sock.close()
                raise

    def authenticate(self, sasl: SaslConfig) -> datetime.timedelta:
        """Run one SASL exchange on this connection; the session lifetime the broker
        answered (zero: no expiry)."""
        hs = self.call(SASL_HANDSHAKE, 1, {"mechanism": sasl.mechanism})
        if hs.error_code != 0:
            raise SaslFailed(f"SaslHandshake {sasl.mechanism}: error {hs.error_code}, broker offers {hs.mechanisms}")

        def step(token: bytes) -> SaslAuthenticateResponse:
            resp: SaslAuthenticateResponse = self.call(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
            if resp.error_code != 0:
                raise SaslFailed(f"SaslAuthenticate: error {resp.error_code}: {resp.error_message}")
            return resp

        if sasl.mechanism == "PLAIN":
            return step(f"\0{sasl.username}\0{sasl.password}".encode()).session_lifetime
        if sasl.mechanism not in _SCRAM_HASHES:
            raise SaslFailed(f"mechanism {sasl.mechanism} not supported by this client")
        scram = ScramClient(sasl.mechanism, sasl.username, sasl.password)
        first = step(scram.first())
        final = step(scram.final(first.auth_bytes))
        scram.check(final.auth_bytes)
        return final.session_lifetime

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call_raw(self, api_key: int, version: int, body: dict[str, Any]) -> bytes:
        """Send a request and return the response body bytes (after the header)."""
        return self._exchange(build(codec.request_class(api_key, version), body))[1]

    def _exchange(self, req: RequestPayload) -> tuple[type[ResponsePayload], bytes]:
        api_key, version = req.__api_key__, req.__version__
        self.corr += 1
        self.sock.sendall(codec.encode_request(api_key, version, self.corr, self.client_id, req))
        size = struct.unpack(">i", self._recv(4))[0]
        payload = self._recv(size)
        corr, off = codec.response_header(api_key, version, payload)
        assert corr == self.corr
        return load_response_schema(api_key, version), payload[off:]

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        """Send the request ``body`` (a dict, built into the kio class of ``api_key`` and
        ``version``) and return the kio response object (of a class known once decoded)."""
        resp_cls, body_bytes = self._exchange(build(codec.request_class(api_key, version), body))
        return entity_reader(resp_cls)(body_bytes, 0)[0]

    def call_entity(self, req: RequestPayload) -> Any:
        """Send a kio request object; returns the kio response object of its key and version
        (the caller names its class: ``r: XResponse = wc.call_entity(XRequest(...))``).

        A ``datetime_i64`` field holding a negative time (-1: no time, which Apache sends
        too and kio refuses, e.g. DescribeTransactions' start time of an id with no open
        transaction) reads as None; ``kaas.wire.build.ms`` turns it back into -1.
        """
        resp_cls, body_bytes = self._exchange(req)
        return response_reader(resp_cls)(body_bytes, 0)[0]

    def _recv(self, n: int) -> bytes:
        return recv_exact(self.sock, n)


def _has_times(cls: type[Entity]) -> bool:
    for f in dataclasses.fields(cls):
        fc = classify_field(f)
        if isinstance(fc, (EntityField, EntityTupleField)):
            if _has_times(fc.type_):
                return True
        elif f.metadata.get("kafka_type") == "datetime_i64":
            return True
    return False


def _read_time(buf: Buffer, off: int) -> tuple[datetime.datetime | None, int]:
    value, size = read_int64(buf, off)
    return (None if value < 0 else _EPOCH + datetime.timedelta(milliseconds=value)), size


def _array(read_item: Reader[T]) -> Reader[tuple[T, ...]]:
    """A compact array of ``read_item``s (a null array reads as empty)."""
    def read(buf: Buffer, off: int, /) -> tuple[tuple[T, ...], int]:
        n, size = read_unsigned_varint(buf, off)
        pos = off + size
        out: list[T] = []
        for _ in range(n - 1):
            item, size = read_item(buf, pos)
            out.append(item)
            pos += size
        return tuple(out), pos - off
    return read


@cache
def response_reader(cls: type[Entity]) -> Reader[Entity]:
    """kio's reader for the response class ``cls``, or, when ``cls`` has ``datetime_i64``
    fields, one that reads a negative time as None (``WireClient.call_entity``). Flexible
    classes only; their tagged fields are skipped."""
    if not _has_times(cls):
        return entity_reader(cls)
    if not cls.__flexible__:
        raise NotImplementedError(f"{cls.__name__}: lenient times of a non-flexible response")
    fields: list[tuple[str, Reader[object]]] = []
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            continue  # a tagged field: skipped below, left at its default
        fc = classify_field(f)
        if f.metadata.get("kafka_type") == "datetime_i64":
            fields.append((f.name, _read_time))
        elif isinstance(fc, EntityTupleField) and _has_times(fc.type_):
            fields.append((f.name, _array(response_reader(fc.type_))))
        elif isinstance(fc, EntityField) and _has_times(fc.type_):
            fields.append((f.name, response_reader(fc.type_)))
        else:
            fields.append((f.name, get_field_reader(cls, f, False, False)))

    def read(buf: Buffer, off: int, /) -> tuple[Entity, int]:
        pos = off
        values: dict[str, object] = {}
        for name, reader in fields:
            values[name], size = reader(buf, pos)
            pos += size
        tags, size = read_unsigned_varint(buf, pos)
        pos += size
        for _ in range(tags):
            _tag, size = read_unsigned_varint(buf, pos)
            pos += size
            length, size = read_unsigned_varint(buf, pos)
            pos += size + length
        return cls(**values), pos - off
    return read
