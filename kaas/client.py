"""A minimal blocking Kafka protocol client built on kio: the operator tools and the tests
speak raw APIs with it."""

from __future__ import annotations

import socket
import struct

from kio.index import load_response_schema
from kio.serial import entity_reader

from kaas.wire import codec
from kaas.wire.build import build


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


class WireClient:
    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.corr = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call_raw(self, api_key: int, version: int, body: dict) -> bytes:
        """Send a request and return the response body bytes (after the header), for the
        few responses kio cannot decode (e.g. a -1 timestamp Apache also sends)."""
        return self._exchange(api_key, version, body)[1]

    def _exchange(self, api_key: int, version: int, body: dict):
        self.corr += 1
        req = build(codec.request_class(api_key, version), body)
        self.sock.sendall(codec.encode_request(api_key, version, self.corr, "kaas-tools", req))
        size = struct.unpack(">i", self._recv(4))[0]
        payload = self._recv(size)
        corr, off = codec.response_header(api_key, version, payload)
        assert corr == self.corr
        return load_response_schema(api_key, version), payload[off:]

    def call(self, api_key: int, version: int, body: dict):
        resp_cls, body_bytes = self._exchange(api_key, version, body)
        return entity_reader(resp_cls)(body_bytes, 0)[0]

    def _recv(self, n: int) -> bytes:
        return recv_exact(self.sock, n)
