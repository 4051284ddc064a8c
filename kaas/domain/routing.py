"""Coordinator placement: which broker coordinates a group or a transaction slot.

A key (a group id, or ``__txn_slot_<n>`` for transaction slot ``n``) is placed in two steps:

1. **Primary**: ``fnv1a_32(key) % len(registered)`` indexes the *registered* broker ids,
   deduplicated and sorted ascending. Dead brokers keep their row, so the divisor only
   changes when the registered set itself changes (a broker is added or removed for good).
2. **Alternate**, only when the primary is not alive: rendezvous (highest-random-weight)
   hashing over the alive brokers. Each alive broker ``b`` scores
   ``mix32(fnv1a_32(key + b"\\x00" + str(b)))``; the highest score wins, ties to the lower
   id. ``mix32`` is the murmur3 32-bit finaliser, added because raw FNV-1a avalanches
   poorly on keys that differ only in their last bytes (broker ids ``1`` and ``2``).

Why rendezvous and not "walk forward to the next alive row": when a broker dies, a walk
hands *all* of its keys to one neighbour, doubling that neighbour's load; rendezvous
spreads them evenly over the survivors and still moves nothing else.

Invariants:
    - every function is a pure function of its arguments; the order and duplicates of
      ``registered``/``alive`` never matter;
    - ``coordinator_for`` returns an alive broker, or ``None`` exactly when none is alive;
    - a key whose primary is alive is coordinated by its primary;
    - removing one broker from ``alive`` (``registered`` unchanged) moves only the keys
      that broker coordinated; adding one back moves only keys to that broker;
    - ``txn_slot`` is ``fnv1a_32(utf-8 id) % 50``, as docs/transactions.rst fixes it.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Sequence

FNV32_OFFSET_BASIS = 0x811C9DC5
FNV32_PRIME = 0x01000193
_MASK32 = 0xFFFFFFFF

TXN_SLOTS = 50
"""Number of transaction-state slots (``txn_state/slot-<n>.json``), docs/transactions.rst."""

NO_BROKER = -1
"""Owner id used where nobody alive can own a key (JSON-friendly stand-in for ``None``)."""


def fnv1a_32(data: bytes) -> int:
    """FNV-1a, 32 bits.

    Args:
        data: the bytes to hash.

    Returns:
        The hash as an unsigned int in ``[0, 2**32)``.
    """
    h = FNV32_OFFSET_BASIS
    for byte in data:
        h = ((h ^ byte) * FNV32_PRIME) & _MASK32
    return h


def _mix32(h: int) -> int:
    """murmur3's fmix32: a bijective finaliser that spreads every input bit over the output."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK32
    h ^= h >> 16
    return h


@functools.lru_cache(maxsize=1 << 16)
def txn_slot(transactional_id: str) -> int:
    """The transaction-state slot of a transactional id.

    Args:
        transactional_id: the producer's ``transactional.id``.

    Returns:
        ``fnv1a_32(transactional_id.encode("utf-8")) % TXN_SLOTS``.
    """
    return fnv1a_32(transactional_id.encode("utf-8")) % TXN_SLOTS


def txn_slot_key(slot: int) -> str:
    """The placement key of transaction slot ``slot`` (``"__txn_slot_<slot>"``)."""
    return f"__txn_slot_{slot}"


def _rendezvous_score(key_bytes: bytes, broker: int) -> int:
    return _mix32(fnv1a_32(key_bytes + b"\x00" + str(broker).encode("ascii")))


def _normalise(ids: Iterable[int]) -> list[int]:
    return sorted(set(ids))


def coordinator_for(key: str, registered: Sequence[int], alive: Collection[int]) -> int | None:
    """The broker that coordinates ``key``.

    Args:
        key: a group id, or ``txn_slot_key(n)`` for a transaction slot.
        registered: every registered broker id, dead or alive (any order, duplicates ignored).
        alive: the brokers that may coordinate (alive and not draining; any order).
            An alive id missing from ``registered`` can only win as an alternate.

    Returns:
        The primary ``sorted(registered)[fnv1a_32(key) % len]`` when it is alive; otherwise
        the alive broker with the highest rendezvous score for ``key`` (ties: lower id);
        ``None`` when ``alive`` is empty.
    """
    alive_ids = _normalise(alive)
    if not alive_ids:
        return None
    key_bytes = key.encode("utf-8")
    rows = _normalise(registered)
    if rows:
        primary = rows[fnv1a_32(key_bytes) % len(rows)]
        if primary in alive_ids:
            return primary
    # max over (score, -id): highest score, ties to the lower id.
    return max(alive_ids, key=lambda b: (_rendezvous_score(key_bytes, b), -b))


def slot_owners(registered: Sequence[int], alive: Collection[int]) -> dict[int, int]:
    """The coordinator of every transaction slot.

    Slot ``s`` is placed with ``coordinator_for(txn_slot_key(s), registered, alive)``.

    Args:
        registered: every registered broker id (see ``coordinator_for``).
        alive: the brokers that may coordinate.

    Returns:
        ``{slot: broker}`` for slots ``0..TXN_SLOTS-1``; the broker is ``NO_BROKER`` (-1)
        for every slot when nobody is alive.
    """
    rows = _normalise(registered)
    alive_ids = _normalise(alive)
    owners: dict[int, int] = {}
    for slot in range(TXN_SLOTS):
        owner = coordinator_for(txn_slot_key(slot), rows, alive_ids)
        owners[slot] = NO_BROKER if owner is None else owner
    return owners
