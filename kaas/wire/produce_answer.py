"""The Produce answer, encoded by kio once per shape and patched per request.

A Produce answer of a given shape (version, topic names, partition indexes) is the same
bytes from one request to the next but for four fixed-width fields per partition: the
error code (int16), the base offset, the log append time and the log start offset
(int64 each). Building the entities and encoding them cost as much as the rest of a
one-record transactional Produce (about 90 us of 270 on a pinned single broker); copying
a template and writing those fields costs a few.

The template is kio's own encoding, with sentinel values whose positions are then
found, and it is checked once against kio's encoding of other values before it is used:
a shape whose bytes do not come out identical is never patched (``None``: encode with
kio). Partitions with an error message or record errors (variable length) are never
patched either. A template is made for a shape seen twice, so that producers whose
requests name ever new sets of partitions do not pay for templates never used again.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from functools import lru_cache
from typing import NotRequired, TypedDict

from kio.schema.errors import ErrorCode

from kaas.wire import codec
from kaas.wire.build import build

__all__ = ["PartitionAnswer", "TopicAnswer", "produce_body"]

API_KEY = 0
# Sentinels: distinct, valid as milliseconds since the epoch (kio's log append time is a
# datetime; year ~4200), and unlikely inside a topic name.
_SENTINEL = 0x3F1E_2D3C_4B00
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_SEEN_MAX = 4096

Shape = tuple[tuple[str | uuid.UUID | None, tuple[int, ...]], ...]  # topics by name, or by id (v13)
# Per partition, in order: the offsets of error code, base offset, log append time, log start offset.
Offsets = tuple[tuple[int, int, int, int], ...]
Values = Sequence[tuple[int, int, int, int]]  # per partition: error code, base offset, append time, start

_seen: set[tuple[int, Shape]] = set()  # shapes answered once (with kio)


class PartitionAnswer(TypedDict):
    """A partition of the Produce handler's answer (a plain dict)."""

    index: int
    error_code: ErrorCode
    base_offset: int
    log_append_time: int
    log_start_offset: int
    record_errors: list[dict[str, object]]
    error_message: NotRequired[str | None]


class TopicAnswer(TypedDict):
    """A topic of the Produce handler's answer (a plain dict): by name, or by ``topic_id``
    from v13."""

    name: str
    partition_responses: list[PartitionAnswer]
    topic_id: NotRequired[uuid.UUID | None]


def _body(shape: Shape, values: Values) -> dict[str, object]:
    """The answer's dict, the handler's shape, with (error code, base offset, log append
    time, log start offset) per partition in order."""
    it = iter(values)
    topics: list[dict[str, object]] = []
    for name, indexes in shape:
        parts: list[dict[str, object]] = []
        for index in indexes:
            code, base, append_time, start = next(it)
            parts.append({"index": index, "error_code": code, "base_offset": base, "log_append_time": append_time,
                          "log_start_offset": start, "record_errors": []})
        topics.append({"name": name, "topic_id": name, "partition_responses": parts})  # (the one its version has)
    return {"responses": topics, "throttle_time": 0}


def _kio(version: int, shape: Shape, values: Values) -> bytes:
    return codec.encode_body(API_KEY, version, build(codec.response_class(API_KEY, version), _body(shape, values)))


def _patch(template: bytes, offsets: Offsets, values: Values) -> bytes:
    out = bytearray(template)
    for (at_code, at_base, at_time, at_start), (code, base, append_time, start) in zip(offsets, values, strict=True):
        _I16.pack_into(out, at_code, code)
        _I64.pack_into(out, at_base, base)
        _I64.pack_into(out, at_time, append_time)
        _I64.pack_into(out, at_start, start)
    return bytes(out)


@lru_cache(maxsize=1024)
def _template(version: int, shape: Shape) -> tuple[bytes, Offsets] | None:
    """(kio's encoding with sentinels, the field offsets), or None when the shape cannot
    be patched safely (a sentinel not found exactly once, or a check against kio failed)."""
    n = sum(len(indexes) for _name, indexes in shape)
    sentinels = [(0, _SENTINEL + 3 * i, _SENTINEL + 3 * i + 1, _SENTINEL + 3 * i + 2) for i in range(n)]
    template = _kio(version, shape, sentinels)
    offsets: list[tuple[int, int, int, int]] = []
    for _code, *fields in sentinels:
        found = []
        for value in fields:
            packed = _I64.pack(value)
            at = template.find(packed)
            if at < 0 or template.find(packed, at + 1) >= 0:
                return None
            found.append(at)
        at_base, at_time, at_start = found
        at_code = at_base - 2  # the int16 error code comes right before the base offset
        if template[at_code:at_base] != b"\0\0":
            return None
        offsets.append((at_code, at_base, at_time, at_start))
    check = [(ErrorCode.not_leader_or_follower if i % 2 else ErrorCode.none, 1000 + i, -1, 7 + i) for i in range(n)]
    if _patch(template, tuple(offsets), check) != _kio(version, shape, check):
        return None
    return template, tuple(offsets)


def produce_body(version: int, topics: list[TopicAnswer]) -> bytes | None:
    """The encoded body of the Produce answer ``topics`` (the handler's dicts: per topic
    ``name`` and ``partition_responses``, each with ``index``, ``error_code``,
    ``base_offset``, ``log_append_time``, ``log_start_offset``), or None when it is not of
    a patchable shape (an error message, record errors): encode it with kio then."""
    shape: list[tuple[str | uuid.UUID | None, tuple[int, ...]]] = []
    values: list[tuple[int, int, int, int]] = []
    for t in topics:
        indexes: list[int] = []
        for p in t["partition_responses"]:
            if p.get("error_message") is not None or p["record_errors"]:
                return None
            indexes.append(p["index"])
            values.append((int(p["error_code"]), p["base_offset"], p["log_append_time"], p["log_start_offset"]))
        shape.append((t["topic_id"] if "topic_id" in t else t["name"], tuple(indexes)))
    key: tuple[int, Shape] = (version, tuple(shape))
    if key not in _seen:
        if len(_seen) >= _SEEN_MAX:
            _seen.clear()
        _seen.add(key)
        return None
    found = _template(*key)
    if found is None:
        return None
    template, offsets = found
    return _patch(template, offsets, values)

