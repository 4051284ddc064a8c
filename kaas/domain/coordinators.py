"""Which brokers may coordinate groups: the group coordinator hold.

A broker back from the dead does not take its groups back at once. The
controller lists, in ``assignment.json`` (``Assignment.coordinators``), the brokers that
may coordinate; a live broker it saw come back from the dead enters that list only
``hold`` seconds after it came back. Every broker places a key over the *candidates*: the
live brokers the assignment it applied lists, or every live broker when none of those is
alive (or the assignment has no list: written before the list existed). So all brokers
place a group from the same file, and a returning broker's groups stay at their interim
coordinators until the list names it again: one move back, at a time the controller
chose, instead of one the moment the broker returns, while the groups that moved away at
its death may still be rebalancing. The rule and why: ``docs/groups.rst``, "Where a group's
coordinator is".

Invariants:
    - every function is pure: times are the caller's (the controller's monotonic clock);
    - ``candidates`` is never empty while ``alive`` is not: no key is left without a
      coordinator because of the hold;
    - ``candidates`` is a subset of ``alive``;
    - ``eligible`` lists the controller itself unless it is a returning broker within its
      hold and another eligible broker is alive; a broker it never saw dead (``back_at`` 0)
      is never held, so a cluster's first start and a new broker move nothing later.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping


def eligible(alive: Iterable[int], me: int, back_at: Mapping[int, float], now: float, hold: float, *,
             listed_before: Collection[int] | None, up_for: float) -> list[int]:
    """The brokers the controller lists as coordinators.

    Args:
        alive: the live brokers that take keys (draining ones excluded).
        me: the controller's id.
        back_at: per peer, the controller's monotonic time it came back from the dead
            (0 or absent: the controller never saw it dead).
        now: the controller's monotonic time.
        hold: seconds a broker back from the dead waits before it is listed again.
        listed_before: the list of the assignment in force (None: none, or one without a
            list).
        up_for: seconds since the controller itself started.

    Returns:
        The live brokers not within their hold, sorted. The controller is one of them,
        unless ``listed_before`` left it out (it was dead or held), it started less than
        ``hold`` ago, and another live broker is listed: a broker that returned and then
        won the controller's election holds itself as it would hold a peer.
    """
    ids = sorted(set(alive))
    out = [b for b in ids if b == me or back_at.get(b, 0.0) <= 0.0 or now - back_at[b] >= hold]
    if (me in out and listed_before is not None and me not in listed_before and up_for < hold
            and any(b != me for b in out)):
        out.remove(me)
    return out


def candidates(alive: Iterable[int], listed: Collection[int] | None) -> list[int]:
    """The brokers a group may be placed on (``routing.coordinator_for``'s alive).

    Args:
        alive: the live brokers that take keys, as this broker sees them.
        listed: the coordinators of the assignment this broker applied (None: no
            assignment yet, or one without the list).

    Returns:
        The live brokers ``listed`` names, sorted; every live broker when it names none
        that is alive, or is None.
    """
    ids = sorted(set(alive))
    if listed is None:
        return ids
    out = [b for b in ids if b in listed]
    return out or ids
