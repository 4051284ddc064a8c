"""The consumer protocol embedded in classic groups' JoinGroup and SyncGroup: a member's
subscription (``ConsumerProtocolSubscription`` v0-v3: topics, user data, owned partitions
from v1, generation from v2, rack from v3) and its assignment
(``ConsumerProtocolAssignment``: partitions by topic, user data), each as a big-endian
int16 version followed by that version's struct (kio's schemas).

A consumer group of the KIP-848 protocol reads its classic members' subscriptions with
``decode_subscription`` and hands out their partitions with ``encode_assignment``
(``kaas.coord.group.consumer.classic_members``). A version above the newest known one is read as
the newest, as Kafka's clients do (newer versions only add fields at the end).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.consumer_protocol_assignment.v0 import data as a0
from kio.schema.consumer_protocol_assignment.v1 import data as a1
from kio.schema.consumer_protocol_assignment.v2 import data as a2
from kio.schema.consumer_protocol_assignment.v3 import data as a3
from kio.schema.consumer_protocol_subscription import v0 as s0
from kio.schema.consumer_protocol_subscription import v1 as s1
from kio.schema.consumer_protocol_subscription import v2 as s2
from kio.schema.consumer_protocol_subscription import v3 as s3
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

__all__ = ["PROTOCOL_TYPE", "MalformedProtocol", "Subscription", "decode_subscription", "encode_assignment",
           "decode_assignment", "version_of"]

PROTOCOL_TYPE = "consumer"
_SUBSCRIPTIONS: tuple[Any, ...] = (s0.ConsumerProtocolSubscription, s1.ConsumerProtocolSubscription,
                                   s2.ConsumerProtocolSubscription, s3.ConsumerProtocolSubscription)
_ASSIGNMENTS: tuple[Any, ...] = (a0.ConsumerProtocolAssignment, a1.ConsumerProtocolAssignment,
                                 a2.ConsumerProtocolAssignment, a3.ConsumerProtocolAssignment)
_TOPIC_PARTITION: tuple[Any, ...] = (a0.TopicPartition, a1.TopicPartition, a2.TopicPartition, a3.TopicPartition)


class MalformedProtocol(ValueError):
    """The bytes are not a consumer-protocol subscription or assignment."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: Mapping[str, frozenset[int]] | None  # by topic name; None before v1 (not sent)
    generation: int
    rack_id: str | None


def version_of(data: bytes) -> int:
    """The version a subscription or assignment was written in (0 for empty bytes)."""
    if len(data) < 2:
        return 0
    return int(struct.unpack_from(">h", data, 0)[0])


def decode_subscription(data: bytes) -> Subscription:
    """Raises MalformedProtocol."""
    version = version_of(data)
    if len(data) < 2 or version < 0:
        raise MalformedProtocol(f"subscription of {len(data)} bytes, version {version}")
    cls = _SUBSCRIPTIONS[min(version, len(_SUBSCRIPTIONS) - 1)]
    try:
        sub, _ = entity_reader(cls)(memoryview(data), 2)
    except Exception as exc:  # kio raises assorted errors on bad bytes
        raise MalformedProtocol(f"subscription v{version}: {type(exc).__name__}: {exc}") from None
    owned = None
    if version >= 1:
        merged: dict[str, set[int]] = {}
        for tp in sub.owned_partitions:
            merged.setdefault(str(tp.topic), set()).update(int(p) for p in tp.partitions)
        owned = {t: frozenset(ps) for t, ps in merged.items()}
    return Subscription(version, tuple(str(t) for t in sub.topics), owned,
                        int(getattr(sub, "generation_id", -1)), getattr(sub, "rack_id", None))


def encode_assignment(partitions: Iterable[tuple[str, Iterable[int]]], version: int) -> bytes:
    """A ConsumerProtocolAssignment of ``partitions`` (topic name, partitions) in
    ``version`` (the member's subscription version, capped at the newest known)."""
    v = max(0, min(version, len(_ASSIGNMENTS) - 1))
    tp_cls = _TOPIC_PARTITION[v]
    body = _ASSIGNMENTS[v](assigned_partitions=tuple(
        tp_cls(topic=TopicName(t), partitions=tuple(i32(p) for p in sorted(ps)))
        for t, ps in sorted(partitions, key=lambda x: x[0])), user_data=None)
    buf = io.BytesIO()
    buf.write(struct.pack(">h", v))
    entity_writer(_ASSIGNMENTS[v])(buf, body)
    return buf.getvalue()


def decode_assignment(data: bytes) -> dict[str, frozenset[int]]:
    """The partitions by topic name of an assignment (empty bytes: none). Raises
    MalformedProtocol."""
    if not data:
        return {}
    version = version_of(data)
    if len(data) < 2 or version < 0:
        raise MalformedProtocol(f"assignment of {len(data)} bytes, version {version}")
    cls = _ASSIGNMENTS[min(version, len(_ASSIGNMENTS) - 1)]
    try:
        a, _ = entity_reader(cls)(memoryview(data), 2)
    except Exception as exc:
        raise MalformedProtocol(f"assignment v{version}: {type(exc).__name__}: {exc}") from None
    merged: dict[str, set[int]] = {}
    for tp in a.assigned_partitions:
        merged.setdefault(str(tp.topic), set()).update(int(p) for p in tp.partitions)
    return {t: frozenset(ps) for t, ps in merged.items()}
