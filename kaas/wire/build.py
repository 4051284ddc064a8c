"""Build a kio entity of any version from a plain dict tree.

Handlers describe a response once, as dicts with the union of the fields the versions
use; ``build`` keeps the fields the target class has, converts milliseconds to the
timedelta/datetime types kio expects and ints to ErrorCode, and recurses into nested
entities and arrays. Fields the dict leaves out take the class default.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode
from kio.serial._introspect import EntityField, EntityTupleField, classify_field

_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

E = TypeVar("E", bound="DataclassInstance")  # a kio entity

_PLAIN, _ENTITY, _ENTITIES, _ERROR, _TD, _DT, _NDT = range(7)


@cache
def _plan(cls: type) -> tuple[tuple[str, int, Any, bool], ...]:
    plan = []
    for f in dataclasses.fields(cls):
        kind = _PLAIN
        sub: Any = None
        ktype: str = f.metadata.get("kafka_type", "")
        fc = classify_field(f)
        if isinstance(fc, EntityTupleField):
            kind, sub = _ENTITIES, fc.type_
        elif isinstance(fc, EntityField):
            kind, sub = _ENTITY, fc.type_
        elif ktype == "error_code":
            kind = _ERROR
        elif ktype in ("timedelta_i32", "timedelta_i64"):
            kind = _TD
        elif ktype == "datetime_i64":
            kind = _DT
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if kind == _PLAIN and not has_default:
            sub = {"uuid": None, "string": "", "bool": False, "records": b"", "bytes": b""}.get(ktype, 0)
        plan.append((f.name, kind, sub, has_default))
    return tuple(plan)


def build(cls: type[E], data: Mapping[str, object]) -> E:
    """Instantiate ``cls`` (a kio entity class) from ``data``.

    Args:
        cls: the target kio class, of the request's version.
        data: field name -> value; nested entities as dicts, arrays as lists of dicts
            (of whatever type the class's field takes).
            Missing fields with no default become empty tuples / zero values.
    Returns:
        An instance of ``cls``.
    """
    kwargs: dict[str, object] = {}
    for name, kind, sub, has_default in _plan(cls):
        if name not in data:
            if has_default:
                continue
            value = sub if kind == _PLAIN else _zero(kind)
        else:
            value = data[name]  # (Any: the field's type is the plan's to know)
        if kind == _PLAIN or value is None:
            kwargs[name] = value
        elif kind == _ENTITIES:
            kwargs[name] = tuple(v if dataclasses.is_dataclass(v) else build(sub, v) for v in value)
        elif kind == _ENTITY:
            kwargs[name] = value if dataclasses.is_dataclass(value) else build(sub, value)
        elif kind == _ERROR:
            kwargs[name] = value if isinstance(value, ErrorCode) else ErrorCode(int(value))
        elif kind == _TD:
            kwargs[name] = value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)
        elif kind == _DT:
            if isinstance(value, datetime.datetime):
                kwargs[name] = value
            elif value < 0:
                kwargs[name] = None if _nullable_dt(cls, name) else _EPOCH + datetime.timedelta(milliseconds=value)
            else:
                kwargs[name] = _EPOCH + datetime.timedelta(milliseconds=value)
        else:
            kwargs[name] = value
    return cls(**kwargs)


def _zero(kind: int) -> Any:
    if kind == _ENTITIES:
        return ()
    if kind == _ERROR:
        return ErrorCode.none
    if kind == _TD:
        return datetime.timedelta(0)
    return 0


@cache
def _nullable_dt(cls: type, name: str) -> bool:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return "None" in str(f.type)
    return False


def ms(value: datetime.timedelta | datetime.datetime | int | None) -> int:
    """Milliseconds from a kio timedelta/datetime field (or pass an int through)."""
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int((value - _EPOCH).total_seconds() * 1000)
    return int(value)


def shallow_dict(entity: DataclassInstance) -> dict[str, object]:
    """A kio entity's fields by name, one level deep (nested entities stay entities):
    what ``build`` makes back into the entity's class."""
    return {f.name: getattr(entity, f.name) for f in dataclasses.fields(entity)}
