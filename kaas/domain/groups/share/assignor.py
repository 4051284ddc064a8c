"""Apache's share-group ``simple`` assignor (Kafka 4.1 and later; KIP-932), pure.

Two rules, balance first and stickiness second:

- **Balance.** With M members and P partitions each partition goes to ``ceil(M / P)``
  members (one when there are at least as many partitions as members: nothing is
  shared), and the members' counts differ by at most one: member ``i`` of the sorted
  member ids wants ``ceil(x (i + 1)) - ceil(x i)`` partitions, ``x = sharing * P / M``.
- **Stickiness.** A member keeps what it holds of topics it still subscribes to, except
  what balance takes away: a partition shared by more members than wanted loses the
  surplus (members holding too many first), then a member holding too many drops its most
  shared ones. What is missing is handed out round robin to the members short of their
  count: first one member to each partition nobody holds, then up to the sharing wanted.

When every member subscribes to the same topics (homogeneous) the partitions of all of
them are balanced together; otherwise (heterogeneous) each topic on its own among its
subscribers, and a member's assignment is the union. Apache 4.0's assignor (each member
the partition its id hashes to, current holdings kept whole) left a first member holding
everything once others joined; librdkafka's share consumer fetches from one partition
leader at a time, so such a member waits out a max_wait on every leader it holds nothing
available on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from kaas.domain.groups.modern.topic_image import TopicImage

__all__ = ["Assignment", "simple_assign"]

Assignment = dict[str, frozenset[int]]  # topic id -> partitions
TP = tuple[str, int]  # (topic id, partition)


def simple_assign(members: Mapping[str, Sequence[str]], current: Mapping[str, Assignment],
                  image: TopicImage, assignable: Mapping[str, frozenset[int]] | None = None) -> dict[str, Assignment]:
    """The target assignment of every member (``members``: id -> subscribed topic names;
    ``current``: what each holds now, topic id -> partitions; ``assignable``: the only
    partitions to hand out, topic id -> partitions, as Apache's share groups assign only
    partitions whose share state is initialized; None: every one)."""
    subs = {mid: tuple(sorted({image.by_name[n].topic_id for n in names if n in image.by_name}))
            for mid, names in members.items()}
    out: dict[str, set[TP]] = {mid: set() for mid in members}
    kinds = set(subs.values())
    if len(kinds) == 1:
        groups = [(next(iter(kinds)), sorted(members))]
    else:
        groups = [((tid,), sorted(m for m in members if tid in subs[m]))
                  for tid in sorted({t for ts in kinds for t in ts})]
    for topics, mids in groups:
        parts = [(tid, p) for tid in topics for p in range(image.by_id[tid].partitions)
                 if assignable is None or p in assignable.get(tid, ())]
        held = {m: {(tid, p) for tid in topics for p in current.get(m, {}).get(tid, ())} for m in mids}
        for m, got in _balance(parts, mids, held).items():
            out[m] |= got
    result: dict[str, Assignment] = {}
    for mid, tps in out.items():
        by_topic: dict[str, set[int]] = {}
        for tid, p in tps:
            by_topic.setdefault(tid, set()).add(p)
        result[mid] = {tid: frozenset(ps) for tid, ps in by_topic.items()}
    return result


def _balance(parts: list[TP], mids: list[str], held: dict[str, set[TP]]) -> dict[str, set[TP]]:
    """One balancing problem: ``parts`` among ``mids`` (in order), from ``held``."""
    if not parts or not mids:
        return {m: set() for m in mids}
    sharing = -(-len(mids) // len(parts))
    x = sharing * len(parts) / len(mids)
    want = {m: math.ceil(x * (i + 1)) - math.ceil(x * i) for i, m in enumerate(mids)}
    valid = set(parts)
    have = {m: {tp for tp in held.get(m, ()) if tp in valid} for m in mids}
    holders: dict[TP, list[str]] = {tp: [m for m in mids if tp in have[m]] for tp in parts}
    over = {m for m in mids if len(have[m]) > want[m]}

    def drop(m: str, tp: TP) -> None:
        have[m].discard(tp)
        holders[tp].remove(m)

    for tp in parts:  # shared by more members than wanted: overfilled members give it up first
        surplus = len(holders[tp]) - sharing
        if surplus > 0:
            for m in sorted(holders[tp], key=lambda m: m not in over)[:surplus]:
                drop(m, tp)
    for m in mids:  # still too many: drop the most shared
        extra = len(have[m]) - want[m]
        if extra > 0:
            for tp in sorted(have[m], key=lambda tp: (-len(holders[tp]), tp))[:extra]:
                drop(m, tp)
    short = [m for m in mids if len(have[m]) < want[m]]
    for first_pass in (True, False):  # one member for every partition first, then the sharing
        turn = 0
        for tp in parts:
            goal = min(1, sharing) if first_pass else sharing
            tried = 0
            while len(holders[tp]) < goal and short and tried < len(short):
                m = short[turn % len(short)]
                if tp in have[m]:
                    turn += 1
                    tried += 1
                    continue
                have[m].add(tp)
                holders[tp].append(m)
                tried = 0
                if len(have[m]) >= want[m]:
                    short.remove(m)
                else:
                    turn += 1
    return have
