"""Record batch v2 (magic 2): a header-only view, validation, offset patching, control batches.

The broker never decodes records: it reads the fixed 61-byte header, verifies the CRC-32C
(which covers bytes 21..end, so patching baseOffset and partitionLeaderEpoch needs no
recompute) and writes the client's bytes verbatim.

Invariants:
    - ``parse_header`` accepts exactly the bytes ``build_batch`` produces;
    - ``patch`` changes only bytes 0-7 and 12-15;
    - ``stamp_log_append_time`` changes only the CRC, attributes bit 3 and maxTimestamp;
    - ``set_base_sequence`` changes only baseSequence and the CRC.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LENGTH_END = 12  # base offset (8) + batch length (4): the length counts the bytes after it
MAGIC_END = 17  # ... + partition leader epoch (4) + magic (1)
MIN_RECORD_OVERHEAD = 14  # the smallest length any record format (v0) can have
LOG_OVERHEAD = 12  # baseOffset + batchLength
CRC_START = 21

ATTR_CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

_OFFSET_EPOCH = struct.Struct(">q")
_I32 = struct.Struct(">i")


class BatchError(Exception):
    """A batch failed validation. ``code`` is the Kafka error code to answer with."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


CORRUPT_MESSAGE = 2
INVALID_RECORD = 87


class BatchHeader(NamedTuple):
    """The fixed 61-byte header of a v2 batch. A named tuple: made from one ``struct``
    unpack for every batch produced, replayed, fetched for an index or cleaned, where a
    frozen dataclass of 14 fields cost five times as much to build."""

    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, length prefix included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def codec(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (2**31)


_tuple_new = tuple.__new__


def parse_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Read the fixed header of the batch starting at ``pos``.

    Raises:
        BatchError: fewer than 61 bytes are available.
    """
    if len(buf) - pos < HEADER_SIZE:
        raise BatchError(CORRUPT_MESSAGE, "truncated batch header")
    return _tuple_new(BatchHeader, HEADER.unpack_from(buf, pos))  # (no Python __new__: one per batch)


def crc_ok(buf: bytes | memoryview, pos: int, header: BatchHeader) -> bool:
    end = pos + header.size
    return crc32c.crc32c(memoryview(buf)[pos + CRC_START : end]) == header.crc


def validate_produce(records: bytes, max_size: int) -> BatchHeader:
    """Validate the records of one partition of a Produce request (v3+).

    Exactly one magic-2 batch, consistent lengths, a good CRC, count = lastOffsetDelta + 1,
    and no control flag from a client.

    Raises:
        BatchError: with CORRUPT_MESSAGE, INVALID_RECORD or MESSAGE_TOO_LARGE.
    """
    n = len(records)
    if n > max_size:
        raise BatchError(10, f"batch of {n} bytes above {max_size}")
    # As Apache reads a Produce's records: without one whole batch (fewer bytes than the
    # batch length field says, or not even a length and a magic) there is no batch, and
    # Produce v3+ requires one: INVALID_RECORD. A length too small to be a record is
    # corruption: CORRUPT_MESSAGE.
    if n >= LENGTH_END and _I32.unpack_from(records, LENGTH_END - 4)[0] < MIN_RECORD_OVERHEAD:
        raise BatchError(CORRUPT_MESSAGE, "batch length below a record's minimum size")
    if n < MAGIC_END or _I32.unpack_from(records, LENGTH_END - 4)[0] + LENGTH_END > n:
        raise BatchError(INVALID_RECORD, "no whole record batch in the records (truncated, or a length past the end)")
    if n < HEADER_SIZE:
        raise BatchError(CORRUPT_MESSAGE, "records shorter than a batch header")
    h = parse_header(records)
    if h.magic != 2:
        raise BatchError(INVALID_RECORD, f"magic {h.magic} unsupported")
    if h.size < HEADER_SIZE:
        raise BatchError(CORRUPT_MESSAGE, "batch length below a batch header's size")
    # CRC of the declared span first: a batchLength shortened in flight is corruption (2),
    # only a sound first batch followed by more bytes is a second batch (87).
    if not crc_ok(records, 0, h):
        raise BatchError(CORRUPT_MESSAGE, "CRC mismatch")
    if h.size != n:
        raise BatchError(INVALID_RECORD, "more than one batch in a partition's records")
    if h.records_count <= 0 or h.last_offset_delta + 1 != h.records_count:
        raise BatchError(INVALID_RECORD, "records count does not match lastOffsetDelta")
    if h.attributes & ATTR_CONTROL:
        raise BatchError(INVALID_RECORD, "control batches may not be produced by clients")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise BatchError(INVALID_RECORD, "producer id without a base sequence")
    return h


def patch(batch: bytearray | memoryview, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Write the assigned base offset and the leader epoch into a batch in place."""
    _OFFSET_EPOCH.pack_into(batch, pos, base_offset)
    _I32.pack_into(batch, pos + 12, leader_epoch)


_CRC_AT = 17
_MAX_TIMESTAMP_AT = 35
_BASE_SEQUENCE_AT = 53
_ATTRIBUTES = struct.Struct(">h")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")


def stamp_log_append_time(batch: bytes | bytearray | memoryview, append_time: int) -> bytes:
    """The batch as a ``message.timestamp.type=LogAppendTime`` topic stores it.

    Apache's ``LogValidator`` (in-place path, v2 batches: ``setMaxTimestamp(LOG_APPEND_TIME,
    now)``) sets the timestamp-type bit (attributes bit 3) and writes the append time into
    maxTimestamp, then recomputes the CRC. baseTimestamp and the records' timestamp deltas
    are left as the producer wrote them: a reader of a LogAppendTime batch takes every
    record's timestamp from maxTimestamp. This is the one header rewrite inside the CRC.

    Args:
        batch: one whole, validated v2 batch (``validate_produce`` accepted it).
        append_time: the broker's wall clock at append, ms since the epoch.
    Returns:
        A new copy of the batch; every byte outside attributes, maxTimestamp and the CRC
        is unchanged.
    """
    out = bytearray(batch)
    attributes = _ATTRIBUTES.unpack_from(out, CRC_START)[0]
    _ATTRIBUTES.pack_into(out, CRC_START, attributes | ATTR_LOG_APPEND_TIME)
    _I64.pack_into(out, _MAX_TIMESTAMP_AT, append_time)
    _U32.pack_into(out, _CRC_AT, crc32c.crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def set_base_sequence(batch: bytearray | memoryview, pos: int, base_sequence: int) -> None:
    """Write ``base_sequence`` into the batch at ``pos`` in place and recompute its CRC: a
    client sending the bytes of one batch again as its producer's next batch (the bench's
    raw producer). baseSequence lies inside the CRC's span, so unlike ``patch`` this costs
    a CRC over the whole batch.

    Args:
        batch: a buffer holding one whole v2 batch at ``pos`` (and anything around it).
        pos: where the batch starts in ``batch``.
        base_sequence: the new baseSequence, 0 .. 2**31 - 1.
    """
    _I32.pack_into(batch, pos + _BASE_SEQUENCE_AT, base_sequence)
    end = pos + LOG_OVERHEAD + _I32.unpack_from(batch, pos + 8)[0]
    _U32.pack_into(batch, pos + _CRC_AT, crc32c.crc32c(memoryview(batch)[pos + CRC_START : end]))


def iter_headers(buf: bytes | memoryview, pos: int = 0, end: int | None = None
                 ) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each whole batch in ``buf[pos:end]``; stop at a torn tail."""
    if end is None:
        end = len(buf)
    while end - pos >= HEADER_SIZE:
        h = parse_header(buf, pos)
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > end:
            return
        yield pos, h
        pos += h.size


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def build_batch(
    *,
    base_offset: int = 0,
    leader_epoch: int = -1,
    attributes: int = 0,
    base_timestamp: int = 0,
    max_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    records: list[tuple[bytes | None, bytes | None]] | None = None,
) -> bytes:
    """Build an uncompressed batch: used for control markers and by tests.

    ``records`` is a list of (key, value); offset deltas are 0..n-1, timestamp deltas 0.
    """
    records = records or [(None, None)]
    body = bytearray()
    for i, (key, value) in enumerate(records):
        rec = bytearray(b"\x00")  # attributes
        rec += _varint(0)  # timestamp delta
        rec += _varint(i)
        for part in (key, value):
            if part is None:
                rec += _varint(-1)
            else:
                rec += _varint(len(part)) + part
        rec += _varint(0)  # headers
        body += _varint(len(rec)) + rec
    count = len(records)
    if max_timestamp is None:
        max_timestamp = base_timestamp
    tail = struct.pack(
        ">hiqqqhii", attributes, count - 1, base_timestamp, max_timestamp,
        producer_id, producer_epoch, base_sequence, count,
    ) + bytes(body)
    crc = crc32c.crc32c(tail)
    batch_length = 4 + 1 + 4 + len(tail)
    return struct.pack(">qiibI", base_offset, batch_length, leader_epoch, 2, crc) + tail


def control_batch(
    *, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp: int
) -> bytes:
    """A COMMIT or ABORT marker: transactional + control, one record, baseSequence -1
    (``build_batch`` of the marker record, with the record made once per kind)."""
    tail = _CONTROL_TAIL.pack(
        ATTR_TRANSACTIONAL | ATTR_CONTROL, 0, timestamp, timestamp, producer_id, producer_epoch, -1, 1
    ) + _control_record(commit, coordinator_epoch)
    return _CONTROL_HEAD.pack(0, 9 + len(tail), -1, 2, crc32c.crc32c(tail)) + tail


_CONTROL_TAIL = struct.Struct(">hiqqqhii")  # attributes .. records count, as build_batch packs them
_CONTROL_HEAD = struct.Struct(">qiibI")  # base offset, batch length, leader epoch, magic, CRC


@functools.lru_cache(maxsize=256)
def _control_record(commit: bool, coordinator_epoch: int) -> bytes:
    """The one record of a marker (offset and timestamp deltas 0): what ``build_batch``
    writes after the header."""
    key = struct.pack(">hh", 0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(records=[(key, value)])[HEADER_SIZE:]


def control_type(buf: bytes | memoryview, pos: int, header: BatchHeader) -> int | None:
    """For a control batch, the marker type (0 ABORT, 1 COMMIT) read from the first record key."""
    if not header.is_control or header.codec:
        return None
    p = pos + HEADER_SIZE
    view = memoryview(buf)
    # record: varint length, attrs i8, varlong ts delta, varint offset delta, varint key len, key
    _, p = read_varint(view, p)
    p += 1
    _, p = read_varint(view, p)
    _, p = read_varint(view, p)
    klen, p = read_varint(view, p)
    if klen < 4:
        return None
    marker: int = struct.unpack_from(">h", view, p + 2)[0]
    return marker


def read_varint(data: bytes | memoryview, p: int) -> tuple[int, int]:
    """The zigzag varint at ``p``: (value, position after it).

    Raises:
        ValueError: longer than a varlong.
        IndexError: it runs past the end of ``data``.
    """
    shift = 0
    z = 0
    while True:
        b = data[p]
        p += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            return (z >> 1) ^ -(z & 1), p
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")
