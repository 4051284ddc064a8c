"""One member of a KIP-848 consumer group and its reconciliation: the pure rules that move
a member's *current* assignment towards its *target* without ever handing a partition to
two members at once (Apache's ``ConsumerGroupMember`` and ``CurrentAssignmentBuilder``).

A member is an immutable value; ``reconcile`` returns the next one. Assignments map a
topic key (kaas uses the topic id, as a string) to a frozenset of partition indexes.

The member states (Apache's ``MemberState``):

=========================  ==============================================================
state                      meaning
=========================  ==============================================================
``stable``                 the member owns exactly what it was given at its epoch
``unrevoked_partitions``   the member must give up ``pending_revocation`` first; it stays
                           at its epoch until a heartbeat no longer lists them as owned
``unreleased_partitions``  the member is at the target epoch but some of its target
                           partitions are still owned by others; they are added once free
=========================  ==============================================================

Invariants:
    - ``assigned`` and ``pending_revocation`` are disjoint, hold no empty sets, and a
      partition is added to ``assigned`` only when no member owns it (``owner_epoch`` is
      -1) or this member is the one revoking it;
    - ``pending_revocation`` is non-empty iff the state is ``unrevoked_partitions``;
    - a member's epoch never falls, except the static-leave sentinel -2 (``LEFT_STATIC``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "LEFT_STATIC",
    "Assignment",
    "ClassicMeta",
    "ConsumerMember",
    "MemberState",
    "Owned",
    "freeze",
    "reconcile",
    "subset_of",
    "union",
]

LEFT_STATIC = -2
"""The epoch of a static member that left with epoch -2 and is expected back."""

Assignment = Mapping[str, frozenset[int]]
"""Topic key -> partitions."""

Owned = tuple[tuple[str, tuple[int, ...]], ...]
"""The partitions a heartbeat reports as owned: (topic key, partitions) pairs."""


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


def freeze(parts: Mapping[str, Iterable[int]]) -> dict[str, frozenset[int]]:
    """``parts`` with frozenset values and no empty topic."""
    out = {}
    for key, ps in parts.items():
        fs = frozenset(ps)
        if fs:
            out[key] = fs
    return out


def union(a: Assignment, b: Assignment) -> dict[str, frozenset[int]]:
    out = dict(a)
    for key, ps in b.items():
        out[key] = out.get(key, frozenset()) | ps
    return out


def subset_of(owned: Owned | None, assigned: Assignment) -> bool:
    """Every partition of ``owned`` is in ``assigned`` (Apache ``isSubset``); a heartbeat
    that does not say what it owns (None) is not."""
    if owned is None:
        return False
    for key, parts in owned:
        mine = assigned.get(key)
        if mine is None:
            if parts:
                return False
            continue
        if not mine.issuperset(parts):
            return False
    return True


def _owns_any(owned: Owned | None, revoking: Assignment) -> bool:
    """Does the heartbeat's ``owned`` still list a partition of ``revoking``? A heartbeat
    that does not say (None) is taken as still owning them (Apache)."""
    if owned is None:
        return True
    for key, parts in owned:
        pending = revoking.get(key)
        if pending is not None and not pending.isdisjoint(parts):
            return True
    return False


@dataclass(frozen=True, slots=True)
class ClassicMeta:
    """A member that speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat) inside a
    consumer group (KIP-848's online migration, ``kaas.domain.groups.consumer.classic_members``): its
    session timeout and the protocols (name, subscription bytes) its JoinGroup offered."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    def supports(self, protocol_name: str) -> bool:
        return any(name == protocol_name for name, _ in self.protocols)


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    """A consumer-protocol member as the coordinator knows it."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_names: frozenset[str] = frozenset()
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 0
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Mapping[str, frozenset[int]] = field(default_factory=dict)
    pending_revocation: Mapping[str, frozenset[int]] = field(default_factory=dict)
    classic: ClassicMeta | None = None  # a classic-protocol member (online migration)

    def reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def owned_keys(self) -> Iterable[tuple[str, int]]:
        """Every (topic key, partition) this member holds: assigned or being revoked."""
        for assignment in (self.assigned, self.pending_revocation):
            for key, parts in assignment.items():
                for p in parts:
                    yield key, p

    def with_epoch(self, epoch: int, *, state: MemberState | None = None,
                   assigned: Mapping[str, frozenset[int]] | None = None,
                   pending_revocation: Mapping[str, frozenset[int]] | None = None) -> ConsumerMember:
        """Apache's ``updateMemberEpoch``: the old epoch becomes the previous one; the
        given fields replace the member's."""
        return dataclasses.replace(
            self, member_epoch=epoch, previous_member_epoch=self.member_epoch,
            state=self.state if state is None else state,
            assigned=self.assigned if assigned is None else assigned,
            pending_revocation=self.pending_revocation if pending_revocation is None else pending_revocation)


def reconcile(member: ConsumerMember, *, target_epoch: int, target: Assignment,
              owner_epoch: Callable[[str, int], int], owned: Owned | None,
              subscribed: frozenset[str], enforce_subscription: bool) -> ConsumerMember:
    """The member's next state towards ``target`` at ``target_epoch``.

    Args:
        owner_epoch: the epoch of the member that currently holds a partition (assigned or
            being revoked), -1 when nobody does.
        owned: what the member's heartbeat said it owns (None: not said).
        subscribed: the topic keys the member is subscribed to now; partitions of other
            topics are revoked even if the target still lists them.
        enforce_subscription: the subscription changed in this heartbeat: revoke the
            unsubscribed topics at once, even while the member waits on a revocation.
    """
    if member.state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next(member, member.member_epoch, target_epoch, target, owner_epoch, owned, subscribed)
        if enforce_subscription:
            return _drop_unsubscribed(member, owned, subscribed)
        return member
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return _drop_unsubscribed(member, owned, subscribed) if enforce_subscription else member
        return _next(member, member.member_epoch, target_epoch, target, owner_epoch, owned, subscribed)
    return _next(member, member.member_epoch, target_epoch, target, owner_epoch, owned, subscribed)


def _drop_unsubscribed(member: ConsumerMember, owned: Owned | None, subscribed: frozenset[str]) -> ConsumerMember:
    """Apache ``updateCurrentAssignment``: move the partitions of topics the member no
    longer subscribes to into ``pending_revocation``, keeping its epoch."""
    gone = {k: ps for k, ps in member.assigned.items() if k not in subscribed}
    if not gone:
        return member
    assigned = {k: ps for k, ps in member.assigned.items() if k in subscribed}
    revoking = union(member.pending_revocation, gone)
    if _owns_any(owned, revoking):
        return member.with_epoch(member.member_epoch, state=MemberState.UNREVOKED_PARTITIONS,
                                 assigned=assigned, pending_revocation=revoking)
    return member.with_epoch(member.member_epoch, assigned=assigned)


def _next(member: ConsumerMember, epoch: int, target_epoch: int, target: Assignment,
          owner_epoch: Callable[[str, int], int], owned: Owned | None,
          subscribed: frozenset[str]) -> ConsumerMember:
    """Apache ``computeNextAssignment``."""
    unreleased = False
    assigned: dict[str, frozenset[int]] = {}
    revoking: dict[str, frozenset[int]] = {}
    adding: dict[str, frozenset[int]] = {}
    for key in sorted(set(target) | set(member.assigned)):
        want = target.get(key, frozenset()) if key in subscribed else frozenset()
        have = member.assigned.get(key, frozenset())
        keep = have & want
        drop = have - keep
        mine_revoking = member.pending_revocation.get(key, frozenset())
        free = set()
        for p in want - keep:
            if owner_epoch(key, p) == -1 or p in mine_revoking:
                free.add(p)
            else:
                unreleased = True
        if keep:
            assigned[key] = keep
        if drop:
            revoking[key] = drop
        if free:
            adding[key] = frozenset(free)
    if revoking and _owns_any(owned, revoking):
        return member.with_epoch(epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned,
                                 pending_revocation=revoking)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned=union(assigned, adding), pending_revocation={})
