"""kio's nominal types (``i16``, ``i32``, ``i64``, ``TopicName``, ``ProducerId``, ...), given
to values the broker already knows are in range, without kio's run-time check.

kio types each integer and name field with a phantom type whose constructor validates the
value (about 0.4 us a call). The broker builds request and response entities from values
it has validated or produced itself, on hot paths (markers, produce answers), so it tells
the type checker instead: each function here is a ``cast``, checked by mypy, free at run
time but for the call.
"""

from __future__ import annotations

from typing import cast

from kio.schema.types import BrokerId, GroupId, ProducerId, TopicName, TransactionalId
from kio.static import primitive

__all__ = ["broker_id", "group_id", "i8", "i16", "i32", "i64", "producer_id", "topic", "transactional_id"]


def i8(v: int) -> primitive.i8:
    return cast(primitive.i8, v)


def i16(v: int) -> primitive.i16:
    return cast(primitive.i16, v)


def i32(v: int) -> primitive.i32:
    return cast(primitive.i32, v)


def i64(v: int) -> primitive.i64:
    return cast(primitive.i64, v)


def broker_id(v: int) -> BrokerId:
    return cast(BrokerId, v)


def producer_id(v: int) -> ProducerId:
    return cast(ProducerId, v)


def topic(v: str) -> TopicName:
    return cast(TopicName, v)


def group_id(v: str) -> GroupId:
    return cast(GroupId, v)


def transactional_id(v: str) -> TransactionalId:
    return cast(TransactionalId, v)
