"""Records as the console tools see them: encode the records a console producer sends into
one v2 batch (uncompressed, no producer id), decode the batches a fetch answers (any codec)
into records with key, value, headers and timestamp, and Apache's default partitioner for
keyed records (murmur2). Pure: no I/O; the client side of the protocol, never the broker's.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import crc32c

from kaas.wire import batch as wb
from kaas.wire.records import RecordsError, decompress

__all__ = ["Fetched", "Outgoing", "decode_batches", "encode_batch", "murmur2", "partition_for"]

Header = tuple[str, bytes | None]


class Outgoing(NamedTuple):
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


class Fetched(NamedTuple):
    offset: int
    timestamp: int
    timestamp_type: str  # CreateTime or LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _bytes(b: bytes | None) -> bytes:
    return _varint(-1) if b is None else _varint(len(b)) + b


def encode_batch(records: list[Outgoing], timestamp: int) -> bytes:
    """One uncompressed v2 batch of ``records`` (offset deltas 0..n-1), all stamped
    ``timestamp`` (CreateTime), without a producer id (not idempotent)."""
    if not records:
        raise ValueError("a batch holds at least one record")
    body = bytearray()
    for i, r in enumerate(records):
        rec = bytearray(b"\x00") + _varint(0) + _varint(i) + _bytes(r.key) + _bytes(r.value)
        rec += _varint(len(r.headers))
        for name, value in r.headers:
            rec += _bytes(name.encode()) + _bytes(value)
        body += _varint(len(rec)) + rec
    n = len(records)
    tail = struct.pack(">hiqqqhii", 0, n - 1, timestamp, timestamp, -1, -1, -1, n) + bytes(body)
    return struct.pack(">qiibI", 0, 9 + len(tail), -1, 2, crc32c.crc32c(tail)) + tail


def _read_bytes(data: bytes, p: int) -> tuple[bytes | None, int]:
    n, p = wb.read_varint(data, p)
    if n < 0:
        return None, p
    if p + n > len(data):
        raise IndexError("field past the end of the record")
    return data[p:p + n], p + n


def _records(h: wb.BatchHeader, data: bytes) -> Iterator[Fetched]:
    kind = "LogAppendTime" if h.attributes & wb.ATTR_LOG_APPEND_TIME else "CreateTime"
    p = 0
    for _ in range(h.records_count):
        length, p = wb.read_varint(data, p)
        end = p + length
        q = p + 1  # attributes
        ts_delta, q = wb.read_varint(data, q)
        off_delta, q = wb.read_varint(data, q)
        key, q = _read_bytes(data, q)
        value, q = _read_bytes(data, q)
        n, q = wb.read_varint(data, q)
        headers = []
        for _ in range(max(n, 0)):
            name, q = _read_bytes(data, q)
            hv, q = _read_bytes(data, q)
            headers.append(((name or b"").decode("utf-8", "replace"), hv))
        ts = h.max_timestamp if kind == "LogAppendTime" else h.base_timestamp + ts_delta
        yield Fetched(h.base_offset + off_delta, ts, kind, key, value, tuple(headers))
        p = end


def decode_batches(buf: bytes | memoryview, aborted: Sequence[tuple[int, int]] = ()) -> list[Fetched]:
    """The records of the whole batches in ``buf`` (a torn tail is left out), without the
    control batches (transaction markers) and, as a read_committed consumer skips them,
    the records of the aborted transactions ``aborted`` ((producer id, first offset) of a
    Fetch answer): a transactional batch of such a producer at or after its first offset,
    up to its ABORT marker.

    Raises:
        RecordsError: a batch's records do not parse, or an unknown codec.
    """
    todo = sorted(aborted, key=lambda a: a[1])
    active: set[int] = set()
    out: list[Fetched] = []
    for pos, h in wb.iter_headers(buf):
        if h.magic != 2:
            raise RecordsError(f"record batch magic {h.magic} (only v2 is read)")
        while todo and todo[0][1] <= h.last_offset:
            active.add(todo.pop(0)[0])
        if h.is_control:
            if h.producer_id in active and wb.control_type(buf, pos, h) == 0:
                active.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in active:
            continue
        raw = bytes(memoryview(buf)[pos + wb.HEADER_SIZE:pos + h.size])
        try:
            out.extend(_records(h, decompress(h.codec, raw)))
        except (IndexError, ValueError) as exc:
            raise RecordsError(f"batch at offset {h.base_offset}: {exc}") from None
    return out


def murmur2(data: bytes) -> int:
    """Apache's ``Utils.murmur2`` (seed 0x9747b28c) as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = length - rest
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, partitions: int) -> int:
    """The partition Apache's default partitioner picks for a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
