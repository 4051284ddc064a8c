"""Server-side partition assignors of the consumer group protocol (KIP-848): ``uniform``, ``range``.

The group coordinator computes a *target assignment* whenever the group epoch moves (a member
joins, leaves or changes its subscription; a subscribed topic appears, grows or goes). It calls
``assign(name, members, topics)`` with every member's subscription (the keys of the subscribed
topics that exist) and the member's *current target* assignment, and reconciles each member
towards the answer. Names are those of Apache Kafka 4 (``group.consumer.assignors``, the
client's ``group.remote.assignor``); the first of ``ASSIGNORS`` is Kafka's default.

``uniform`` (Kafka's ``UniformAssignor``) spreads all partitions evenly over the members and
moves as few as it can. Balance first, then stickiness:

- *Homogeneous* group (every member subscribes to the same topics; Kafka's
  ``UniformHomogeneousAssignmentBuilder``): with ``P`` partitions and ``N`` members each
  member gets ``P // N`` partitions and ``P % N`` of them one more. The extra places go to the
  members that currently hold the most (ties: member order), so a balanced group that gains
  a member gives the newcomer ``P // (N + 1)`` or so partitions and moves nothing else. A member
  over its quota keeps its lowest (topic, partition)s; the freed and the unowned partitions
  go, in (topic, partition) order, to the members under quota in member order.
- *Heterogeneous* group (Kafka's ``UniformHeterogeneousAssignmentBuilder``): every member
  keeps its current partitions of topics it still subscribes to; the unowned partitions are
  placed topic by topic (most partitions per subscriber first, then fewest subscribers, then
  key) each on the subscriber with the fewest partitions in total; then, topic by topic and
  round after round until nothing moves, a partition of topic ``T`` moves from the subscriber
  of ``T`` with the most partitions (that owns one of ``T``) to the one with the fewest while
  they differ by two or more. Kafka stops this loop after 16 rounds; it always terminates
  (each move lowers the sum of squared member sizes), so kaas runs it to the end: members with
  the same subscription then differ by at most one partition.

``range`` (Kafka's server-side ``RangeAssignor``) works topic by topic, for co-partitioned
joins: the ``S`` subscribers of a topic of ``P`` partitions get ``P // S`` partitions each and
``P % S`` of them one more, in contiguous ranges in member order, so topics with the same
partition count are split the same way. It is sticky as Kafka's: a member keeps its lowest
``min(current, quota)`` partitions of the topic, and a member holding more than the minimum
keeps one more while extra places remain; the rest go in ascending ranges to the members
under quota, in member order.

Member order is ``(group.instance.id or member id, member id)``, so a static member keeps its
place across restarts. Kafka iterates hash maps here; kaas sorts, so the answer is a function
of the input alone. Rack-aware placement (KIP-1101, Kafka 4.1+) is not done: ``rack_id`` is
carried but ignored, as in Kafka 4.0.

Invariants (both assignors):
    - every member id of ``members`` has an entry, possibly empty; no empty per-topic sets;
    - a member only gets partitions of topics it subscribes to and that exist in ``topics``;
    - every partition of a topic with at least one subscriber is assigned to exactly one
      member; a topic nobody subscribes to is not assigned;
    - ``assign`` is deterministic: equal inputs give equal outputs, whatever the mapping order;
    - ``current`` entries that are stale (unsubscribed topic, partition out of range, or
      claimed by another member) are ignored, never an error;
    - uniform: members with the same subscription differ by at most one partition;
      range: the subscribers of one topic differ by at most one partition of it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

TopicKey = str
"""A topic's key in a group's assignment (kaas: the topic id as text)."""

ASSIGNORS: tuple[str, ...] = ("uniform", "range")

Assignment = dict[str, dict[TopicKey, frozenset[int]]]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """One member as the assignor sees it.

    Attributes:
        rack_id: The member's rack (carried, not used: see the module notes).
        instance_id: ``group.instance.id`` of a static member, else None.
        subscribed: Keys of the subscribed topics that exist.
        current: The member's current target assignment, for stickiness.
    """

    rack_id: str | None
    instance_id: str | None
    subscribed: frozenset[TopicKey]
    current: Mapping[TopicKey, frozenset[int]]


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic's name and partition count."""

    name: str
    partitions: int


def assign(
    assignor: str, members: Mapping[str, MemberSpec], topics: Mapping[TopicKey, TopicSpec]
) -> Assignment:
    """Compute a group's target assignment.

    Args:
        assignor: ``"uniform"`` or ``"range"``.
        members: Member id -> its subscription and current target assignment.
        topics: Topic key -> name and partition count; subscribed keys missing here are
            ignored (the topic is gone).

    Returns:
        Member id -> topic key -> partitions, with an entry for every member.

    Raises:
        ValueError: ``assignor`` is not one of ``ASSIGNORS``.
    """
    if assignor not in ASSIGNORS:
        raise ValueError(f"unknown assignor {assignor!r}; known: {', '.join(ASSIGNORS)}")
    order = sorted(members, key=lambda m: (members[m].instance_id or m, m))
    subs = {m: sorted(t for t in members[m].subscribed if _count(topics, t) > 0) for m in order}
    if assignor == "range":
        owned = _range(order, subs, members, topics)
    elif len({tuple(s) for s in subs.values()}) <= 1:
        owned = _uniform_homogeneous(order, subs[order[0]] if order else [], members, topics)
    else:
        owned = _uniform_heterogeneous(order, subs, members, topics)
    return {
        m: {t: frozenset(ps) for t, ps in sorted(owned[m].items()) if ps} for m in members
    }


def _count(topics: Mapping[TopicKey, TopicSpec], key: TopicKey) -> int:
    spec = topics.get(key)
    return spec.partitions if spec is not None else 0


def _subscribers(order: list[str], subs: Mapping[str, list[TopicKey]]) -> dict[TopicKey, list[str]]:
    """Topic -> its subscribers, in member order."""
    subscribers: dict[TopicKey, list[str]] = {}
    for m in order:
        for t in subs[m]:
            subscribers.setdefault(t, []).append(m)
    return subscribers


def _kept(
    order: list[str],
    subs: Mapping[str, Iterable[TopicKey]],
    members: Mapping[str, MemberSpec],
    topics: Mapping[TopicKey, TopicSpec],
) -> dict[str, list[tuple[TopicKey, int]]]:
    """The valid part of each member's current assignment, sorted; first claim wins."""
    claimed: set[tuple[TopicKey, int]] = set()
    kept: dict[str, list[tuple[TopicKey, int]]] = {}
    for m in order:
        mine: list[tuple[TopicKey, int]] = []
        current = members[m].current
        for t in subs[m]:
            n = _count(topics, t)
            for p in sorted(current.get(t, ())):
                if 0 <= p < n and (t, p) not in claimed:
                    claimed.add((t, p))
                    mine.append((t, p))
        kept[m] = mine
    return kept


def _uniform_homogeneous(
    order: list[str],
    subscribed: list[TopicKey],
    members: Mapping[str, MemberSpec],
    topics: Mapping[TopicKey, TopicSpec],
) -> dict[str, dict[TopicKey, set[int]]]:
    owned: dict[str, dict[TopicKey, set[int]]] = {m: {} for m in order}
    total = sum(_count(topics, t) for t in subscribed)
    if not order or total == 0:
        return owned
    kept = _kept(order, dict.fromkeys(order, subscribed), members, topics)
    base, extra = divmod(total, len(order))
    rank = sorted(range(len(order)), key=lambda i: (-len(kept[order[i]]), i))
    quota = {order[i]: base + (1 if r < extra else 0) for r, i in enumerate(rank)}
    taken: set[tuple[TopicKey, int]] = set()
    for m in order:
        for t, p in kept[m][: quota[m]]:
            owned[m].setdefault(t, set()).add(p)
            taken.add((t, p))
    free = iter([(t, p) for t in subscribed for p in range(_count(topics, t)) if (t, p) not in taken])
    for m in order:
        for _ in range(quota[m] - sum(len(ps) for ps in owned[m].values())):
            t, p = next(free)
            owned[m].setdefault(t, set()).add(p)
    return owned


def _uniform_heterogeneous(
    order: list[str],
    subs: Mapping[str, list[TopicKey]],
    members: Mapping[str, MemberSpec],
    topics: Mapping[TopicKey, TopicSpec],
) -> dict[str, dict[TopicKey, set[int]]]:
    index = {m: i for i, m in enumerate(order)}
    owned: dict[str, dict[TopicKey, set[int]]] = {m: {} for m in order}
    size = dict.fromkeys(order, 0)
    subscribers = _subscribers(order, subs)
    taken: set[tuple[TopicKey, int]] = set()
    for m, mine in _kept(order, subs, members, topics).items():
        for t, p in mine:
            owned[m].setdefault(t, set()).add(p)
            taken.add((t, p))
        size[m] = len(mine)
    # Most partitions per subscriber first (compared exactly), then fewest subscribers, then key.
    ranked = sorted(
        subscribers,
        key=lambda t: (-Fraction(_count(topics, t), len(subscribers[t])), len(subscribers[t]), t),
    )
    for t in ranked:
        heap = [(size[m], index[m], m) for m in subscribers[t]]
        heapq.heapify(heap)
        for p in range(_count(topics, t)):
            if (t, p) in taken:
                continue
            _, i, m = heapq.heappop(heap)
            owned[m].setdefault(t, set()).add(p)
            size[m] += 1
            heapq.heappush(heap, (size[m], i, m))
    fresh = {m: _pairs(owned[m]) - _pairs(members[m].current) for m in order}
    moved = True
    while moved:
        moved = False
        for t in ranked:
            if len(subscribers[t]) >= 2 and _balance_topic(t, subscribers[t], owned, size, index, fresh):
                moved = True
    return owned


def _pairs(assigned: Mapping[TopicKey, Iterable[int]]) -> set[tuple[TopicKey, int]]:
    return {(t, p) for t, ps in assigned.items() for p in ps}


def _balance_topic(
    topic: TopicKey,
    subscribers: list[str],
    owned: dict[str, dict[TopicKey, set[int]]],
    size: dict[str, int],
    index: Mapping[str, int],
    fresh: Mapping[str, set[tuple[TopicKey, int]]],
) -> bool:
    """Move partitions of ``topic`` from its fullest to its emptiest subscribers; any moved."""
    moved = False
    while True:
        lo = min(subscribers, key=lambda m: (size[m], index[m]))
        donors = [m for m in subscribers if owned[m].get(topic)]
        if not donors:
            return moved
        hi = max(donors, key=lambda m: (size[m], -index[m]))
        if size[hi] - size[lo] < 2:
            return moved
        # Prefer a partition the donor got in this run (moving it costs no revocation).
        parts = owned[hi][topic]
        p = max(parts, key=lambda q: ((topic, q) in fresh[hi], q))
        parts.discard(p)
        owned[lo].setdefault(topic, set()).add(p)
        fresh[lo].add((topic, p))
        size[hi] -= 1
        size[lo] += 1
        moved = True


def _range(
    order: list[str],
    subs: Mapping[str, list[TopicKey]],
    members: Mapping[str, MemberSpec],
    topics: Mapping[TopicKey, TopicSpec],
) -> dict[str, dict[TopicKey, set[int]]]:
    owned: dict[str, dict[TopicKey, set[int]]] = {m: {} for m in order}
    subscribers = _subscribers(order, subs)
    for t in sorted(subscribers):
        n = _count(topics, t)
        base, extra = divmod(n, len(subscribers[t]))
        taken: set[int] = set()
        unfilled: list[tuple[str, int]] = []
        for m in subscribers[t]:
            mine = sorted(p for p in members[m].current.get(t, ()) if 0 <= p < n and p not in taken)
            keep = mine[:base]
            if len(mine) > base and extra > 0:
                extra -= 1
                keep = mine[: base + 1]
            else:
                unfilled.append((m, base - len(keep)))
            taken.update(keep)
            if keep:
                owned[m][t] = set(keep)
        free = [p for p in range(n) if p not in taken]
        at = 0
        for m, missing in unfilled:
            if extra > 0:
                missing += 1
                extra -= 1
            if missing > 0:
                owned[m].setdefault(t, set()).update(free[at : at + missing])
                at += missing
    return owned
