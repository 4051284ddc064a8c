"""Validate and normalise one produced batch, as Apache's ``LogValidator`` does for magic 2.

``validate`` is the one call the Produce handler makes per partition. It checks the header
(``batch.validate_produce``: size, magic, CRC, one batch, count against the last offset
delta, no control batch, a sequence with a producer id; and base offset 0, as Apache
requires of a client's v2 batch), then walks the
records once, decompressed if the producer compressed them:

- every record is whole and well formed, the records are exactly ``count`` and fill the
  batch (INVALID_RECORD otherwise, as Apache's record reader answers);
- on a compacted topic every record has a key (INVALID_RECORD, the record's index in the
  record errors);
- on a CreateTime topic every record's timestamp (but -1) is within
  ``[now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms]``
  (KIP-937; INVALID_TIMESTAMP, each offending record's index in the record errors); a
  producer may not set the LogAppendTime flag on a LogAppendTime topic (INVALID_TIMESTAMP);
- a compressed payload that cannot be decompressed, or an unknown codec: CORRUPT_MESSAGE.

Then it normalises, rewriting the header (and the CRC) only when something changed:

- CreateTime: maxTimestamp becomes the largest record timestamp (-1 when there is none),
  as Apache's ``setMaxTimestamp``; a producer's LogAppendTime flag is cleared (the records'
  timestamps are then the header's maxTimestamp, as Apache reads them);
- offset deltas that are not 0..count-1 are rewritten to be (Apache rebuilds such a
  batch instead of keeping it in place);
- with a topic ``compression.type`` other than ``producer`` and the producer's codec, the
  records are recompressed (or stored uncompressed), producer id, epoch, base sequence
  and the transactional flag kept; a result above ``max.message.bytes`` is
  MESSAGE_TOO_LARGE, as Apache re-checks after recompressing.

LogAppendTime topics are stamped later, at append (``batch.stamp_log_append_time``).

The walk of an uncompressed batch allocates nothing per record: one-byte varints (the
common case) are read inline, as in ``records.records``.

Invariants:
    - an accepted batch comes back either as the very bytes given (nothing to normalise)
      or as a batch with a valid CRC whose records read back the same, in order, with
      offset deltas 0..count-1;
    - a refused batch raises ``Rejected`` (a ``BatchError``) and nothing else is returned.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NoReturn

import crc32c

from kaas.wire import batch as wb
from kaas.wire.compress import compress
from kaas.wire.records import RecordsError, decompress

__all__ = ["Policy", "Rejected", "validate", "INVALID_TIMESTAMP", "LONG_MAX"]

INVALID_TIMESTAMP = 32
MESSAGE_TOO_LARGE = 10
LONG_MAX = 2**63 - 1
_LONG_MIN = -(2**63)
_SAFE = 2**62  # timestamps within +-2**62: no Java overflow in now - ts, the plain check holds

_TAIL = struct.Struct(">hiqqqhii")  # attributes .. records count (bytes 21..60)
_FRONT = struct.Struct(">qiib")  # base offset, batch length, leader epoch, magic
_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Policy:
    """What a topic asks of its batches (the handler builds one per topic and request).

    Args:
        max_size: ``max.message.bytes``.
        log_append_time: ``message.timestamp.type=LogAppendTime``.
        compact: ``cleanup.policy`` holds ``compact`` (records need keys).
        before_max_ms, after_max_ms: ``message.timestamp.before.max.ms``/``after.max.ms``.
        codec: the codec the topic stores (``compression.type``), -1 for ``producer``.
        level: that codec's level (``compression.<codec>.level``), None for the default.
    """

    max_size: int
    log_append_time: bool = False
    compact: bool = False
    before_max_ms: int = LONG_MAX
    after_max_ms: int = 3_600_000
    codec: int = -1
    level: int | None = None


class Rejected(wb.BatchError):
    """A batch refused by a record-level rule: ``record_errors`` holds ``(batch index,
    message)`` per offending record (the Produce response's ``record_errors``)."""

    def __init__(self, code: int, reason: str, record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(code, reason)
        self.record_errors = record_errors or []


def _wrap(x: int) -> int:
    """``x`` as Java's long arithmetic leaves it."""
    return ((x + 2**63) % 2**64) - 2**63


# One-byte zigzag varints, the common case, read by table: the value, and how far a length
# field of that byte skips (itself and the bytes it counts; 0: a longer varint).
_ZZ = tuple((b >> 1) ^ -(b & 1) for b in range(256))
_SKIP = tuple(1 + max(0, (b >> 1) ^ -(b & 1)) if b < 0x80 else 0 for b in range(256))


# A two-byte zigzag varint b, c (b >= 0x80, c < 0x80) read by table: _LEN2[b + (c << 7)].
_LEN2 = tuple(((x - 128) >> 1) ^ -((x - 128) & 1) if x >= 128 else 0 for x in range(128 * 129))
# The offset delta i as a varint: its first byte and (from 64 on) its second, for the scan.
_OFF1 = tuple(((2 * i) & 0x7F) | (0x80 if i >= 64 else 0) for i in range(8192))
_OFF2 = tuple((2 * i) >> 7 for i in range(8192))


def _scan(data: bytes, p: int, count: int) -> tuple[int, int, bool]:
    """The hot path's walk of an uncompressed batch: every record's bounds (a chain of
    length prefixes that must end exactly at the end of the batch after ``count``
    records), its timestamp delta and whether its offset delta is its index. The fields
    inside a record (key, value, headers) are not read: see ``_walk``.

    Returns:
        (smallest timestamp delta, largest timestamp delta, offset deltas 0..count-1).

    Raises:
        Rejected: INVALID_RECORD, as ``_walk``.
    """
    n = len(data)
    lo = 1 << 64
    hi = -lo
    in_order = True
    zz, len2, off1, off2, read_varint = _ZZ, _LEN2, _OFF1, _OFF2, wb.read_varint
    i = 0
    try:
        for i in range(count):  # noqa: B007 - i names the record in the errors below
            b = data[p]
            if b < 0x80:
                q = p + 1
                length = zz[b]
            else:
                c = data[p + 1]
                if c < 0x80:  # records of 64 B to 8 KiB
                    q = p + 2
                    length = len2[b + (c << 7)]
                else:
                    length, q = read_varint(data, p)
            end = q + length
            if length < 6 or end > n:  # 6: attributes and five one-byte varints
                raise Rejected(wb.INVALID_RECORD, f"record {i}: length {length} outside the batch")
            b = data[q + 1]  # past the attributes: the timestamp delta, then the offset delta
            if b < 0x80 and i < 8192:
                d = zz[b]
                if data[q + 2] != off1[i] or (i >= 64 and data[q + 3] != off2[i]):
                    in_order = False
            else:
                d, r = read_varint(data, q + 1)
                off, r = read_varint(data, r)
                if off != i:
                    in_order = False
            if d > hi:
                hi = d
            if d < lo:
                lo = d
            p = end
    except (IndexError, ValueError):
        raise Rejected(wb.INVALID_RECORD, f"record {i}: cut short (the batch holds fewer records than "
                                          f"its count {count})") from None
    if p != n:
        raise Rejected(wb.INVALID_RECORD, f"{n - p} bytes left after the last of {count} records")
    return lo, hi, in_order


def _walk(data: bytes, p: int, count: int, compact: bool) -> tuple[int, int, list[int] | None, bool]:
    """Walk ``count`` records from ``p`` to the end of ``data``, every field of each: as
    ``_scan``, and the key, value and header lengths must add up to the record's length, as
    Apache's record reader requires. Used for compressed batches (decompressing costs more
    than this walk) and on compacted topics (the keys are read anyway).

    Returns:
        (smallest timestamp delta, largest timestamp delta, the indexes of keyless records
        when ``compact`` (else None), whether the offset deltas are 0..count-1).

    Raises:
        Rejected: INVALID_RECORD for a record that is cut short, longer or shorter than its
            length says, or bytes left after the last record.
    """
    n = len(data)
    lo = 1 << 64
    hi = -lo
    keyless: list[int] | None = [] if compact else None
    in_order = True
    zz, read_varint = _ZZ, wb.read_varint
    i = 0
    try:
        for i in range(count):  # noqa: B007 - i names the record in the errors below
            b = data[p]
            if b < 0x80:
                length, q = zz[b], p + 1
            else:
                c = data[p + 1]
                if c < 0x80:  # records of 64 B to 8 KiB
                    z = (b & 0x7F) | (c << 7)
                    length, q = (z >> 1) ^ -(z & 1), p + 2
                else:
                    length, q = read_varint(data, p)
            end = q + length
            if length < 6 or end > n:  # 6: attributes and five one-byte varints
                raise Rejected(wb.INVALID_RECORD, f"record {i}: length {length} outside the batch")
            d, offset_ok, r = _fields(data, q, i, keyless)
            if d > hi:
                hi = d
            if d < lo:
                lo = d
            if not offset_ok:
                in_order = False
            if r != end:
                raise Rejected(wb.INVALID_RECORD, f"record {i}: {r - q} bytes read, its length says {length}")
            p = end
    except (IndexError, ValueError):
        raise Rejected(wb.INVALID_RECORD, f"record {i}: cut short (the batch holds fewer records than "
                                          f"its count {count})") from None
    if p != n:
        raise Rejected(wb.INVALID_RECORD, f"{n - p} bytes left after the last of {count} records")
    return lo, hi, keyless, in_order


def _fields(data: bytes, q: int, i: int, keyless: list[int] | None) -> tuple[int, bool, int]:
    """Read the fields of record ``i``, whose attributes are at ``q`` (past its length):
    timestamp delta, offset delta, key, value and headers. Appends ``i`` to ``keyless``
    (when not None) if the record has no key.

    Returns:
        (its timestamp delta, whether its offset delta is ``i``, the position after it).

    Raises:
        IndexError, ValueError: the record runs past ``data`` or holds a bad varint
            (``_walk`` answers INVALID_RECORD).
        Rejected: INVALID_RECORD for bad headers.
    """
    zz, skip, read_varint = _ZZ, _SKIP, wb.read_varint
    offset_ok = True
    b = data[q + 1]  # past the attributes: the timestamp delta
    if b < 0x80:
        d, r = zz[b], q + 2
    else:
        d, r = read_varint(data, q + 1)
    b = data[r]  # the offset delta
    if b == i << 1 and b < 0x80:
        r += 1
    else:
        off, r = read_varint(data, r)
        offset_ok = off == i
    b = data[r]  # the key's length
    s = skip[b]
    if s:
        r += s
        if b & 1 and keyless is not None:
            keyless.append(i)
    else:
        klen, r = read_varint(data, r)
        if klen >= 0:
            r += klen
        elif keyless is not None:
            keyless.append(i)
    b = data[r]  # the value's length
    s = skip[b]
    if s:
        r += s
    else:
        c = data[r + 1]
        if c < 0x80:
            z = (b & 0x7F) | (c << 7)
            r += 2 if z & 1 else 2 + (z >> 1)
        else:
            vlen, r = read_varint(data, r)
            if vlen > 0:
                r += vlen
    if data[r]:  # headers
        r = _headers(data, r, i)
    else:
        r += 1
    return d, offset_ok, r


def _headers(data: bytes, r: int, i: int) -> int:
    """Skip a record's headers (count at ``r``); the position after them."""
    nh, r = wb.read_varint(data, r)
    if nh < 0:
        raise Rejected(wb.INVALID_RECORD, f"record {i}: {nh} headers")
    for _ in range(nh):
        hk, r = wb.read_varint(data, r)
        if hk < 0:
            raise Rejected(wb.INVALID_RECORD, f"record {i}: a header key of length {hk}")
        r += hk
        hv, r = wb.read_varint(data, r)
        if hv > 0:
            r += hv
    return r


def _timestamps(data: bytes, p: int, count: int, base: int) -> list[int]:
    """Every record's timestamp (Java's long ``base + delta``): the slow path, taken only
    when some record may be out of bounds or the sum may overflow."""
    out = []
    for _ in range(count):
        length, q = wb.read_varint(data, p)
        d, _r = wb.read_varint(data, q + 1)
        out.append(_wrap(base + d))
        p = q + length
    return out


def _renumber(data: bytes, p: int, count: int) -> bytes:
    """The records from ``p`` with their offset deltas rewritten to 0..count-1 (each
    record's length prefix re-encoded to match)."""
    out = bytearray()
    for i in range(count):
        length, q = wb.read_varint(data, p)
        end = q + length
        r = q + 1
        _d, r = wb.read_varint(data, r)
        _off, s = wb.read_varint(data, r)
        body = data[q:r] + wb._varint(i) + data[s:end]
        out += wb._varint(len(body))
        out += body
        p = end
    return bytes(out)


def _out_of_bounds(ts: int, now: int, before: int, after: int) -> bool:
    """Apache's test, in Java's long arithmetic: ``now - ts`` above ``before``, or its
    negation above ``after``."""
    diff = _wrap(now - ts)
    return diff > before or _wrap(-diff) > after


def validate(records: bytes, policy: Policy, now_ms: int) -> tuple[bytes, wb.BatchHeader]:
    """Validate one partition's records of a Produce request (v3+) and normalise them.

    Args:
        records: the partition's ``records`` bytes (one v2 batch).
        policy: the topic's rules.
        now_ms: the broker's wall clock (``kaas.clock``), for the KIP-937 bounds.

    Returns:
        (the batch to append, its header): ``records`` itself when nothing changed.

    Raises:
        BatchError: a header rule (``batch.validate_produce``), MESSAGE_TOO_LARGE after
            recompression, or CORRUPT_MESSAGE for a payload that cannot be decompressed.
        Rejected: a record rule, with the record errors when the rule is per record.
    """
    h = wb.validate_produce(records, policy.max_size)
    if h.base_offset != 0:
        raise wb.BatchError(wb.INVALID_RECORD, f"a produced batch has base offset 0, not {h.base_offset}")
    codec = h.codec
    count = h.records_count
    data, start = _payload(records, h) if codec else (records, wb.HEADER_SIZE)
    keyless: list[int] | None
    if codec or policy.compact:
        lo, hi, keyless, in_order = _walk(data, start, count, policy.compact)
    else:  # the hot path: uncompressed, keys not needed
        lo, hi, in_order = _scan(data, start, count)
        keyless = None
    errors: dict[int, tuple[int, str]] = {}
    if keyless:
        for i in keyless:
            errors[i] = (wb.INVALID_RECORD, "a compacted topic takes no record without a key")
    max_ts = _check_timestamps(h, data, start, lo, hi, policy, now_ms, errors)
    if errors:
        _refuse(errors)
    return _normalised(records, h, data, start, in_order, max_ts, policy)


def _payload(records: bytes, h: wb.BatchHeader) -> tuple[bytes, int]:
    """A compressed batch's records, decompressed, and where they start (0)."""
    try:
        return decompress(h.codec, records[wb.HEADER_SIZE:]), 0
    except RecordsError as exc:
        raise wb.BatchError(wb.CORRUPT_MESSAGE, str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - zlib.error, cramjam's DecompressionError, ...
        raise wb.BatchError(wb.CORRUPT_MESSAGE, f"cannot decompress codec {h.codec}: {exc}") from None


def _check_timestamps(h: wb.BatchHeader, data: bytes, start: int, lo: int, hi: int, policy: Policy,
                      now_ms: int, errors: dict[int, tuple[int, str]]) -> int:
    """The batch's true max timestamp; each record whose timestamp breaks the topic's rules
    (LogAppendTime claimed by the producer, KIP-937 bounds) goes into ``errors``."""
    count = h.records_count
    producer_lat = bool(h.attributes & wb.ATTR_LOG_APPEND_TIME)
    max_ts = h.max_timestamp
    if policy.log_append_time:
        if producer_lat:  # the producer may not claim LogAppendTime itself
            for i in range(count):
                errors.setdefault(i, (INVALID_TIMESTAMP, "the producer set the LogAppendTime flag"))
        return max_ts
    now, before, after = now_ms, policy.before_max_ms, policy.after_max_ms
    if producer_lat:  # every record's timestamp is the header's maxTimestamp
        if max_ts == -1:
            bad: str | None = "the producer set the LogAppendTime flag"
        elif _out_of_bounds(max_ts, now, before, after):
            bad = f"timestamp {max_ts} out of range [{now - before}, {now + after}]"
        else:
            bad = None
        if bad is not None:
            for i in range(count):
                errors.setdefault(i, (INVALID_TIMESTAMP, bad))
        return max_ts
    base = h.base_timestamp
    first, last = base + lo, base + hi
    if -_SAFE < first and last < _SAFE and now - first <= before and last - now <= after:
        return last if last > -1 else -1  # all in bounds: the common case
    stamps = _timestamps(data, start, count, base)
    for i, ts in enumerate(stamps):
        if ts != -1 and _out_of_bounds(ts, now, before, after):
            errors.setdefault(i, (INVALID_TIMESTAMP, f"timestamp {ts} out of range "
                                                     f"[{_wrap(now - before)}, {_wrap(now + after)}]"))
    return max(-1, *stamps)


def _refuse(errors: dict[int, tuple[int, str]]) -> NoReturn:
    """Raise ``Rejected`` for the records in ``errors``: INVALID_TIMESTAMP when any is a
    timestamp error (Apache's precedence), else INVALID_RECORD."""
    listed = sorted((i, msg) for i, (_code, msg) in errors.items())
    if any(code == INVALID_TIMESTAMP for code, _msg in errors.values()):
        raise Rejected(INVALID_TIMESTAMP, f"{len(listed)} record(s) refused for their timestamp", listed)
    shown = "; ".join(f"record {i}: {msg}" for i, msg in listed[:3])
    raise Rejected(wb.INVALID_RECORD, f"{len(listed)} record(s) refused (the first three at most): {shown}",
                   listed)


def _normalised(records: bytes, h: wb.BatchHeader, data: bytes, start: int, in_order: bool, max_ts: int,
                policy: Policy) -> tuple[bytes, wb.BatchHeader]:
    """The batch to append: ``records`` untouched when nothing changes; else the header
    rewritten in place (attributes, maxTimestamp, CRC), or the records renumbered and
    recompressed in the topic's codec."""
    codec, count = h.codec, h.records_count
    attributes = h.attributes
    if not policy.log_append_time:
        attributes &= ~wb.ATTR_LOG_APPEND_TIME
    target = codec if policy.codec < 0 else policy.codec
    if in_order and target == codec:
        if max_ts == h.max_timestamp and attributes == h.attributes:
            return records, h  # nothing to normalise: the producer's bytes, untouched
        body = None
    else:
        plain = data[start:] if in_order else _renumber(data, start, count)
        body = compress(target, plain, policy.level if target == policy.codec else None)
        attributes = (attributes & ~wb.ATTR_CODEC_MASK) | target
    tail = _TAIL.pack(attributes, h.last_offset_delta, h.base_timestamp, max_ts, h.producer_id,
                      h.producer_epoch, h.base_sequence, count)
    if body is None:  # the header rewritten in place: attributes, maxTimestamp, CRC
        out = bytearray(records)
        out[wb.CRC_START:wb.HEADER_SIZE] = tail
        _U32.pack_into(out, 17, crc32c.crc32c(memoryview(out)[wb.CRC_START:]))
    else:
        size = wb.HEADER_SIZE + len(body)
        if size > policy.max_size:
            raise wb.BatchError(MESSAGE_TOO_LARGE, f"batch of {size} bytes after recompression, above "
                                                   f"{policy.max_size}")
        crc = crc32c.crc32c(tail + body) if len(body) < 4096 else crc32c.crc32c(body, crc32c.crc32c(tail))
        out = bytearray(_FRONT.pack(h.base_offset, size - wb.LOG_OVERHEAD, h.leader_epoch, 2))
        out += _U32.pack(crc)
        out += tail
        out += body
    new = bytes(out)
    return new, wb.parse_header(new)
