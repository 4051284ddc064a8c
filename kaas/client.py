"""A minimal blocking Kafka protocol client built on kio: the operator tools and the tests
speak raw APIs with it."""

from __future__ import annotations

import dataclasses
import datetime
import socket
import ssl
import struct
from functools import cache
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader
from kio.serial._introspect import EntityField, EntityTupleField, classify_field
from kio.serial._parse import get_field_reader
from kio.serial.readers import read_int64, read_unsigned_varint

from kaas.wire import codec
from kaas.wire.build import build

_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


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
    def __init__(self, host: str, port: int, timeout: float = 10.0, ssl_context: ssl.SSLContext | None = None) -> None:
        """Connect to ``host:port``; with ``ssl_context``, over TLS (an SSL or SASL_SSL
        listener; the certificate checked against ``host`` as the context says).

        Raises:
            OSError, ssl.SSLError: the connection or the handshake failed.
        """
        sock = socket.create_connection((host, port), timeout=timeout)
        if ssl_context is not None:
            try:
                sock = ssl_context.wrap_socket(sock, server_hostname=host)
            except BaseException:
                sock.close()
                raise
        self.sock = sock
        self.corr = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call_raw(self, api_key: int, version: int, body: dict) -> bytes:
        """Send a request and return the response body bytes (after the header)."""
        return self._exchange(build(codec.request_class(api_key, version), body))[1]

    def _exchange(self, req: Any) -> tuple[type, bytes]:
        api_key, version = req.__api_key__, req.__version__
        self.corr += 1
        self.sock.sendall(codec.encode_request(api_key, version, self.corr, "kaas-tools", req))
        size = struct.unpack(">i", self._recv(4))[0]
        payload = self._recv(size)
        corr, off = codec.response_header(api_key, version, payload)
        assert corr == self.corr
        return load_response_schema(api_key, version), payload[off:]

    def call(self, api_key: int, version: int, body: dict):
        """Send the request ``body`` (a dict, built into the kio class of ``api_key`` and
        ``version``) and return the kio response object."""
        resp_cls, body_bytes = self._exchange(build(codec.request_class(api_key, version), body))
        return entity_reader(resp_cls)(body_bytes, 0)[0]

    def call_entity(self, req: Any) -> Any:
        """Send a kio request object; returns the kio response object of its key and version.

        A ``datetime_i64`` field holding a negative time (-1: no time, which Apache sends
        too and kio refuses, e.g. DescribeTransactions' start time of an id with no open
        transaction) reads as None; ``kaas.wire.build.ms`` turns it back into -1.
        """
        resp_cls, body_bytes = self._exchange(req)
        return response_reader(resp_cls)(body_bytes, 0)[0]

    def _recv(self, n: int) -> bytes:
        return recv_exact(self.sock, n)


def _has_times(cls: type) -> bool:
    for f in dataclasses.fields(cls):
        fc = classify_field(f)
        if isinstance(fc, (EntityField, EntityTupleField)):
            if _has_times(fc.type_):
                return True
        elif f.metadata.get("kafka_type") == "datetime_i64":
            return True
    return False


def _read_time(buf, off: int):
    value, size = read_int64(buf, off)
    return (None if value < 0 else _EPOCH + datetime.timedelta(milliseconds=value)), size


def _array(read_item):
    """A compact array of ``read_item``s (a null array reads as empty)."""
    def read(buf, off: int):
        n, size = read_unsigned_varint(buf, off)
        pos = off + size
        out = []
        for _ in range(n - 1):
            item, size = read_item(buf, pos)
            out.append(item)
            pos += size
        return tuple(out), pos - off
    return read


@cache
def response_reader(cls: type):
    """kio's reader for the response class ``cls``, or, when ``cls`` has ``datetime_i64``
    fields, one that reads a negative time as None (``WireClient.call_entity``). Flexible
    classes only; their tagged fields are skipped."""
    if not _has_times(cls):
        return entity_reader(cls)
    if not cls.__flexible__:
        raise NotImplementedError(f"{cls.__name__}: lenient times of a non-flexible response")
    fields = []
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

    def read(buf, off: int):
        pos = off
        values = {}
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
