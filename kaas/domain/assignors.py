"""TEMPORARY PLACEHOLDER (branch cg-core only): the server-side assignors are being written
on branch cg-assign; this file holds the agreed interface with a simple implementation so
that the consumer-group machine can be built and tested meanwhile. It is replaced whole
when cg-assign is merged.

Invariants:
    - every member id of ``members`` gets an entry;
    - a partition goes to at most one member, and only to a member subscribed to its topic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["ASSIGNORS", "MemberSpec", "TopicSpec", "assign"]

ASSIGNORS: tuple[str, ...] = ("uniform", "range")


K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class MemberSpec:
    rack_id: str | None
    instance_id: str | None
    subscribed: frozenset[Any]
    current: Mapping[Any, frozenset[int]]


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int


def assign(assignor: str, members: Mapping[str, MemberSpec],
           topics: Mapping[K, TopicSpec]) -> dict[str, dict[K, frozenset[int]]]:
    """Per member, its partitions per topic key. Raises ValueError for an unknown assignor."""
    if assignor not in ASSIGNORS:
        raise ValueError(f"unknown assignor {assignor!r}")
    out: dict[str, dict[K, set[int]]] = {m: {} for m in members}
    for key in sorted(topics):  # type: ignore[type-var]
        subs = sorted(m for m, spec in members.items() if key in spec.subscribed)
        if not subs:
            continue
        n = topics[key].partitions
        if assignor == "range":
            per, extra = divmod(n, len(subs))
            start = 0
            for i, m in enumerate(subs):
                count = per + (1 if i < extra else 0)
                if count:
                    out[m][key] = set(range(start, start + count))
                start += count
            continue
        # uniform: keep what a member already has up to its quota, spread the rest
        quota, extra = divmod(n, len(subs))
        load = dict.fromkeys(subs, 0)
        taken: set[int] = set()
        for m in subs:
            cap = quota + (1 if extra > 0 else 0)
            mine = sorted(p for p in members[m].current.get(key, frozenset()) if p < n and p not in taken)[:cap]
            if len(mine) > quota:
                extra -= 1
            if mine:
                out[m][key] = set(mine)
            taken.update(mine)
            load[m] = len(mine)
        for p in range(n):
            if p in taken:
                continue
            m = min(subs, key=lambda x: (load[x], x))
            out[m].setdefault(key, set()).add(p)
            load[m] += 1
    return {m: {k: frozenset(v) for k, v in parts.items()} for m, parts in out.items()}
