"""A minimal blocking Kafka protocol client built on kio: the operator tools and the tests
speak raw APIs with it."""

from __future__ import annotations

import io
import socket
import struct

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

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
        req_cls = load_request_schema(api_key, version)
        hdr_cls = req_cls.__header_schema__
        self.corr += 1
        buf = io.BytesIO()
        entity_writer(hdr_cls)(buf, hdr_cls(request_api_key=api_key, request_api_version=version,
                                            correlation_id=self.corr, client_id="kaas-tools"))
        entity_writer(req_cls)(buf, build(req_cls, body))
        data = buf.getvalue()
        self.sock.sendall(struct.pack(">i", len(data)) + data)
        size = struct.unpack(">i", self._recv(4))[0]
        payload = self._recv(size)
        resp_cls = load_response_schema(api_key, version)
        header, off = entity_reader(resp_cls.__header_schema__)(payload, 0)
        assert header.correlation_id == self.corr
        return resp_cls, payload[off:]

    def call(self, api_key: int, version: int, body: dict):
        resp_cls, body_bytes = self._exchange(api_key, version, body)
        return entity_reader(resp_cls)(body_bytes, 0)[0]

    def _recv(self, n: int) -> bytes:
        return recv_exact(self.sock, n)
