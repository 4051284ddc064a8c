"""Named tuples equal only to their own kind, as dataclasses are (``same_kind``).

A named tuple costs a quarter of a frozen dataclass to build, but compares as a plain
tuple: a ``Fence`` would equal an ``OffsetHook`` of the same values. ``same_kind`` gives
the classes an ``__eq__`` that also compares the types. This module stays pure Python
(setup.py compiles its callers with mypyc, whose functions are C functions that do not
bind as methods).
"""

from __future__ import annotations

from typing import Any

__all__ = ["same_kind"]


def _eq(self: tuple[Any, ...], other: object) -> bool:
    return type(self) is type(other) and tuple.__eq__(self, other)


def _ne(self: tuple[Any, ...], other: object) -> bool:
    return not (type(self) is type(other) and tuple.__eq__(self, other))


def same_kind(*classes: type[tuple[Any, ...]]) -> None:
    """Make instances of each class equal only to instances of that same class (hash as
    the tuple)."""
    for cls in classes:
        setattr(cls, "__eq__", _eq)
        setattr(cls, "__ne__", _ne)
        setattr(cls, "__hash__", tuple.__hash__)
