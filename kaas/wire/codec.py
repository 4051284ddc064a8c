"""Request decoding and response encoding with kio.

The request header version comes from the request class's ``__header_schema__`` and the
response header version from the response class's, never a constant (ApiVersions always
answers with header v0).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from functools import cache, lru_cache
from typing import Any, NamedTuple

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from kaas.spans import FileSpan

_KEY_VERSION_CORR = struct.Struct(">hhi")
PEER_CLIENT_PREFIX = "kaas-broker-"
"""The client id prefix of every request a broker sends a peer (``kaas-broker-<id>``)."""


class DecodeError(Exception):
    """The frame could not be decoded. ``correlation_id`` is known when the header parsed."""

    def __init__(self, reason: str, api_key: int = -1, api_version: int = -1, correlation_id: int | None = None):
        super().__init__(reason)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class Request(NamedTuple):
    """A decoded request (a named tuple: one per request)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


Buffer = bytes | bytearray | memoryview
# kio's cached codecs of one entity class: (buffer, offset) -> (entity, size), and
# (stream, entity) -> None
Reader = Callable[[Buffer, int], tuple[Any, int]]
Writer = Callable[[Any, Any], None]


def peek(frame: Buffer) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a frame."""
    return _KEY_VERSION_CORR.unpack_from(frame, 0)


@cache
def request_io(api_key: int, version: int) -> tuple[Reader, Reader]:
    cls = load_request_schema(api_key, version)
    hdr = cls.__header_schema__
    return entity_reader(hdr), entity_reader(cls)


@cache
def response_io(api_key: int, version: int) -> tuple[type[Any], type[Any], Writer, Writer]:
    cls = load_response_schema(api_key, version)
    hdr = cls.__header_schema__
    return cls, hdr, entity_writer(hdr), entity_writer(cls)


def decode_request(frame: Buffer) -> Request:
    """Decode one frame whose (key, version) the caller has checked is supported.

    Raises:
        DecodeError: the header or body is malformed.
    """
    api_key, version, corr = peek(frame)
    read_header, read_body = request_io(api_key, version)
    try:
        header, off = read_header(frame, 0)
        body, _size = read_body(frame, off)
    except Exception as exc:  # kio raises assorted errors on bad bytes
        raise DecodeError(f"malformed request: {type(exc).__name__}: {exc}", api_key, version, corr) from None
    # Like Apache, bytes after the body are ignored (librdkafka pads some requests).
    return Request(api_key, version, corr, header.client_id, body)


# Responses whose bodies repeat byte for byte from one request to the next and whose
# handlers answer kio entities: TxnOffsetCommit for a producer's group, a coordinator's
# WriteTxnMarkers over the peer link, an AddPartitionsToTxn with codes per partition (its
# usual answer, one code for all, is encoded by the handler). Their bodies are small
# frozen kio entities (cheap to hash and compare), encoded once and then reused; only the
# header (the correlation id) is encoded per response. Bounded: the cache is emptied when
# it is full. Heartbeat, EndTxn and AddOffsetsToTxn answer ``error_body`` bytes instead:
# building the entity and hashing it for this cache cost more than the encoding it saves.
REPEATING_BODY_APIS = frozenset({24, 27, 28})
_BODY_CACHE_MAX = 1024
_body_cache: dict[tuple[int, int, Any], bytes] = {}


def encode_body(api_key: int, version: int, body: Any) -> bytes:
    """The encoded body alone (no size, no header): what a handler whose answer never
    changes returns, once, for ``encode_response`` to frame."""
    buf = io.BytesIO()
    response_io(api_key, version)[3](buf, body)
    return buf.getvalue()


@lru_cache(maxsize=1024)
def constant_body(api_key: int, version: int, fields: tuple[tuple[str, Any], ...]) -> bytes:
    """The encoded body of a response made of ``fields`` ((name, value) pairs, the rest
    defaults) alone, built and encoded once: for answers that repeat (a Heartbeat's)."""
    from kaas.wire.build import build

    return encode_body(api_key, version, build(response_class(api_key, version), dict(fields)))


def error_body(api_key: int, version: int, code: Any) -> bytes:
    """The encoded body of an answer that is a throttle time of 0 and an error code
    (Heartbeat, EndTxn, AddOffsetsToTxn), once per key, version and code."""
    return constant_body(api_key, version, (("throttle_time", 0), ("error_code", code)))


@cache
def _header_prefix(api_key: int, version: int) -> tuple[bool, bytes]:
    """(header written by kio, the bytes after the correlation id): response header v0 is
    the correlation id alone, v1 adds an empty tagged-field section; any other shape goes
    through kio's writer."""
    _cls, hdr_cls, write_header, _write_body = response_io(api_key, version)
    buf = io.BytesIO()
    write_header(buf, hdr_cls(correlation_id=0))
    tail = buf.getvalue()[4:]
    return tail not in (b"", b"\0"), tail


# Responses that carry records read from the log (Fetch, ShareFetch): kio writes them into
# a ``_Gather`` sink, which keeps each large write (a partition's records) as the object it
# was given, a buffer or a ``FileSpan`` of the segment file, so the frame is a ``Gathered``
# list of pieces that the connection hands to the socket (``aio.send_parts``: ``writev``
# and ``sendfile``); copying megabytes of records into one buffer was the largest part of
# a fetch's CPU after the read itself.
GATHERED_APIS = frozenset({1, 78})
GATHER_MIN = 16 * 1024
"""Writes at least this long stay pieces of their own; shorter ones are copied together."""


Piece = bytes | bytearray | memoryview | FileSpan


class Gathered:
    """A framed response as pieces to send in order (size prefix, header and the fields
    copied into ``bytearray`` pieces, the records as the buffers they were read into or
    spans of the segment file). ``len`` is the frame's size; ``bytes`` joins it (a stream
    that is not a socket; a span is read then)."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[Piece], size: int) -> None:
        self.parts = parts
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(p if isinstance(p, (bytes, bytearray, memoryview)) else bytes(p) for p in self.parts)


Frame = bytes | memoryview | Gathered
"""An encoded response: one buffer, or pieces (``Gathered``)."""


class _Gather:
    """The file-like sink kio writes a response into: short writes are appended to the
    current ``bytearray`` piece, a write of ``GATHER_MIN`` bytes or more (or a span)
    becomes a piece of its own, not copied (the buffer must not change until the frame is
    sent: records are ``bytes`` or views of ``bytes``)."""

    __slots__ = ("parts", "small", "size")

    def __init__(self) -> None:
        self.small = bytearray(b"\0\0\0\0")  # the size prefix, patched at the end
        self.parts: list[Piece] = [self.small]
        self.size = 0

    def write(self, data: Piece) -> int:
        n = len(data)
        if n >= GATHER_MIN or not isinstance(data, (bytes, bytearray, memoryview)):
            self.size += len(self.small)
            self.parts.append(data)
            self.size += n
            self.small = bytearray()
            self.parts.append(self.small)
        else:
            self.small += data
        return n


def _gathered(write_header: Writer, header: Any, write_body: Writer, body: Any) -> Frame:
    """Size prefix + header + body as ``_framed`` makes it, with the large writes kept as
    pieces: one buffer when there was none (a fetch with no records, or only small ones)."""
    sink = _Gather()
    head = sink.small
    write_header(sink, header)
    write_body(sink, body)
    parts = sink.parts
    size = sink.size + len(sink.small)
    struct.pack_into(">i", head, 0, size - 4)
    if len(parts) == 1:
        return memoryview(head)
    if not parts[-1]:
        parts.pop()
    return Gathered(parts, size)


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> Frame:
    """Frame a response: size prefix, response header of the class's version, body.
    ``body`` is a kio response entity, or ``bytes``: a body already encoded (``encode_body``)."""
    _cls, hdr_cls, write_header, write_body = response_io(api_key, version)
    if isinstance(body, bytes):
        encoded = body
    elif api_key in REPEATING_BODY_APIS:
        key = (api_key, version, body)
        cached = _body_cache.get(key)
        if cached is None:
            buf = io.BytesIO()
            write_body(buf, body)
            encoded = buf.getvalue()
            if len(_body_cache) >= _BODY_CACHE_MAX:
                _body_cache.clear()
            _body_cache[key] = encoded
        else:
            encoded = cached
    elif api_key in GATHERED_APIS:
        # the records stay the buffers the log was read into: no copy into the frame
        return _gathered(write_header, hdr_cls(correlation_id=correlation_id), write_body, body)
    else:
        # a view of the encoded bytes: no copy on the way to the socket
        return _framed(write_header, hdr_cls(correlation_id=correlation_id), write_body, body)
    generic, tail = _header_prefix(api_key, version)
    if generic:
        return _framed(write_header, hdr_cls(correlation_id=correlation_id), _write_encoded, encoded)
    return struct.pack(">ii", 4 + len(tail) + len(encoded), correlation_id) + tail + encoded


def _write_encoded(buf: io.BytesIO, encoded: bytes) -> None:
    buf.write(encoded)


def _framed(write_header: Writer, header: Any, write_body: Writer, body: Any) -> memoryview:
    """Size prefix + header + body, encoded into one buffer (the prefix patched last)."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    write_header(buf, header)
    write_body(buf, body)
    out = buf.getbuffer()
    struct.pack_into(">i", out, 0, len(out) - 4)
    return out


def response_class(api_key: int, version: int) -> type[Any]:
    return response_io(api_key, version)[0]


@cache
def _request_writers(api_key: int, version: int) -> tuple[type[Any], type[Any], Writer, Writer]:
    cls = load_request_schema(api_key, version)
    hdr = cls.__header_schema__
    return cls, hdr, entity_writer(hdr), entity_writer(cls)


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """Frame a request (the client side): size prefix, request header, body. ``body`` is a
    kio request object of that key and version, or ``bytes``: a body already encoded
    (``encode_request_body``)."""
    if isinstance(body, bytes):
        head = bytearray(_request_header(api_key, version, client_id))
        struct.pack_into(">i", head, 8, correlation_id)
        struct.pack_into(">i", head, 0, len(head) - 4 + len(body))
        return bytes(head) + body
    _cls, hdr_cls, write_header, write_body = _request_writers(api_key, version)
    header = hdr_cls(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
                     client_id=client_id)
    return bytes(_framed(write_header, header, write_body, body))


def encode_request_body(api_key: int, version: int, body: Any) -> bytes:
    """A request's encoded body alone (no size, no header), for ``encode_request`` to frame
    again and again (a peer link's WriteTxnMarkers of one producer's transactions)."""
    buf = io.BytesIO()
    _request_writers(api_key, version)[3](buf, body)
    return buf.getvalue()


@lru_cache(maxsize=256)
def _request_header(api_key: int, version: int, client_id: str | None) -> bytes:
    """Size prefix (0) and request header (correlation id 0, at bytes 8-11) of a request,
    encoded by kio once per key, version and client id."""
    _cls, hdr_cls, write_header, _write_body = _request_writers(api_key, version)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    write_header(buf, hdr_cls(request_api_key=api_key, request_api_version=version, correlation_id=0,
                              client_id=client_id))
    return buf.getvalue()


def request_class(api_key: int, version: int) -> type[Any]:
    return _request_writers(api_key, version)[0]


@cache
def _response_readers(api_key: int, version: int) -> tuple[type[Any], Reader, Reader]:
    cls = load_response_schema(api_key, version)
    return cls, entity_reader(cls.__header_schema__), entity_reader(cls)


def response_header(api_key: int, version: int, payload: Buffer) -> tuple[int, int]:
    """(correlation id, offset of the body) of a response frame's payload (no size prefix)."""
    _cls, read_header, _read_body = _response_readers(api_key, version)
    header, off = read_header(payload, 0)
    return header.correlation_id, off


def decode_body(api_key: int, version: int, body: Buffer) -> Any:
    """The kio response object of an encoded body alone (``encode_body``'s output)."""
    return _response_readers(api_key, version)[2](body, 0)[0]


def decode_response(api_key: int, version: int, payload: Buffer) -> tuple[int, Any]:
    """(correlation id, kio response object) of a response frame's payload.

    Raises:
        DecodeError: the header or body is malformed.
    """
    _cls, read_header, read_body = _response_readers(api_key, version)
    try:
        header, off = read_header(payload, 0)
        body, _size = read_body(payload, off)
    except Exception as exc:  # kio raises assorted errors on bad bytes
        raise DecodeError(f"malformed response: {type(exc).__name__}: {exc}", api_key, version) from None
    return header.correlation_id, body
