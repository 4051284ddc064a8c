"""A KIP-848 consumer group's state and what every operation on it reads or changes: the
members and the partitions they hold, the epochs and the target assignment, the regexes
and the metadata the target was computed from, and the state checked against
``VALID_PREVIOUS``. ``domain.groups.consumer.group`` (``ConsumerGroup``) is the machine
built on it.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from kaas.domain.groups.consumer import assignors, topic_regex
from kaas.domain.groups.consumer.heartbeat import GroupConfig
from kaas.domain.groups.consumer.member import Assignment, ConsumerMember, freeze
from kaas.domain.groups.modern.member_sessions import MemberSessions
from kaas.domain.groups.modern.state import ModernState, derive_state, settle
from kaas.domain.groups.modern.subscriptions import metadata_signature, subscribed_metadata
from kaas.domain.groups.modern.topic_image import TopicImage

__all__ = ["REBALANCE_HEARTBEAT_DIVISOR", "REGEX_REFRESH_MIN_INTERVAL_MS", "VALID_PREVIOUS", "ConsumerCore"]

REGEX_REFRESH_MIN_INTERVAL_MS = 10_000
"""A group's regexes are resolved again for changed topics at most this often (Apache's
``REGEX_BATCH_REFRESH_MIN_INTERVAL_MS``): topics created together land in one rebalance."""
REBALANCE_HEARTBEAT_DIVISOR = 10
"""While a group rebalances, its members are told to heartbeat this many times as often
(``ConsumerGroup.heartbeat_interval_ms``)."""
_EMPTY, _ASSIGNING, _RECONCILING, _STABLE = (ModernState.EMPTY, ModernState.ASSIGNING, ModernState.RECONCILING,
                                             ModernState.STABLE)
VALID_PREVIOUS: dict[ModernState, frozenset[ModernState]] = {
    _EMPTY: frozenset({_ASSIGNING, _RECONCILING, _STABLE}),
    _ASSIGNING: frozenset({_RECONCILING, _STABLE}),
    _RECONCILING: frozenset({_EMPTY, _ASSIGNING, _STABLE}),
    _STABLE: frozenset({_EMPTY, _ASSIGNING, _RECONCILING}),
}
"""For each state, the states a consumer group may enter it from. A group leaves Empty
only by a heartbeat that joins a member, and a heartbeat computes the target assignment
whenever the group epoch moved, so an Empty group never becomes Assigning: only a member
removed (a leave, a fence, a classic LeaveGroup) leaves the group epoch ahead."""


class ConsumerCore:
    """One consumer group's members, epochs, target assignment and timers (``ConsumerGroup``
    is the machine)."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self._group_epoch = 0
        self._assignment_epoch = 0
        self._members: dict[str, ConsumerMember] = {}
        self._static: dict[str, str] = {}  # instance id -> member id
        self._target: dict[str, dict[str, frozenset[int]]] = {}
        self._owners: dict[tuple[str, int], str] = {}
        self._regexes: dict[str, frozenset[str]] = {}  # regex -> resolved topic names
        self._compiled: dict[str, re.Pattern[str]] = {}
        self._signature = ""  # of the subscribed topics' metadata, as last seen
        self._signature_stale = False  # recompute without bumping (a member was removed)
        self._image_version: int | None = None
        self._changed_ms: int | None = None  # when an epoch last moved (not kept on file)
        self._regex_refresh_ms: int | None = None  # when regexes were last resolved (ditto)
        self._regex_stale = False  # the topics changed since
        self._sessions = MemberSessions()  # deadlines and last contacts (kept on file)
        self._rebalance: dict[str, tuple[int, int]] = {}  # member id -> (epoch, deadline)
        self._asked: dict[str, int] = {}  # member id -> when its pending revocation was asked
        self._state = _EMPTY  # as last settled (``_settle``)

    # ------------------------------------------------------------------ views

    @property
    def group_epoch(self) -> int:
        return self._group_epoch

    @property
    def assignment_epoch(self) -> int:
        return self._assignment_epoch

    @property
    def members(self) -> Mapping[str, ConsumerMember]:
        return self._members

    def target(self, member_id: str) -> Assignment:
        return self._target.get(member_id, {})

    def static_member_id(self, instance_id: str) -> str | None:
        return self._static.get(instance_id)
    @property
    def state(self) -> str:
        """Kafka's spelling: Empty, Assigning, Reconciling or Stable."""
        return self._derive_state().value

    def is_empty(self) -> bool:
        return not self._members

    def owner(self, key: str, partition: int) -> str | None:
        """The member holding the partition (assigned or being revoked), if any."""
        return self._owners.get((key, partition))

    def preferred_assignor(self, assignor_names: tuple[str, ...]) -> str:
        """The server assignor most members asked for (ties: the broker's order), else the
        broker's default, the first of ``assignor_names`` (Apache
        ``computePreferredServerAssignor``)."""
        counts: dict[str, int] = {}
        for m in self._members.values():
            if m.server_assignor in assignor_names:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return assignor_names[0]
        return max(assignor_names, key=lambda n: (counts.get(n, 0), -assignor_names.index(n)))

    def subscribed_topics(self) -> set[str]:
        """The topic names some member subscribes to, by name or by a resolved regex."""
        out: set[str] = set()
        for m in self._members.values():
            out |= self._names_of(m)
        return out

    def heartbeat_interval_ms(self, member_id: str, now_ms: int, configured_ms: int) -> int:
        """The heartbeat interval to tell a member: the configured one, but a tenth of it
        (``REBALANCE_HEARTBEAT_DIVISOR``) within one interval of the group's last epoch
        change, while the member itself waits to be reconciled, or while a regex of the
        group waits to be resolved (at the next heartbeat), so that a revocation,
        its acknowledgement and the hand-over take a fraction of an interval rather than
        an interval each (Apache always answers the configured one)."""
        member = self._members.get(member_id)
        recent = self._changed_ms is not None and now_ms - self._changed_ms < configured_ms
        waiting = member is not None and not member.reconciled_to(self._assignment_epoch)
        if recent or waiting or self._unresolved():
            return max(1, configured_ms // REBALANCE_HEARTBEAT_DIVISOR)
        return configured_ms
    def next_deadline(self) -> int | None:
        deadlines = [*self._sessions.deadlines.values(), *(d for _, d in self._rebalance.values())]
        return min(deadlines, default=None)

    # ------------------------------------------------------------------ internals

    def _derive_state(self) -> ModernState:
        return derive_state(bool(self._members), self._group_epoch, self._assignment_epoch,
                            (m.reconciled_to(self._assignment_epoch) for m in self._members.values()))

    def _settle(self) -> None:
        """Record the state an operation left the group in, checked against ``VALID_PREVIOUS``.

        Raises:
            IllegalTransition: the change is not in the table (a bug in the machine).
        """
        self._state = settle("consumer", VALID_PREVIOUS, self._state, self._derive_state())

    def _put(self, member: ConsumerMember) -> None:
        """Install ``member`` (new or changed): its partitions, its instance id."""
        old = self._members.get(member.member_id)
        if old is not None:
            for tp in old.owned_keys():
                del self._owners[tp]
        for tp in member.owned_keys():
            holder = self._owners.get(tp)
            if holder is not None:
                raise AssertionError(f"{tp} is held by {holder}, cannot go to {member.member_id}")
            self._owners[tp] = member.member_id
        self._members[member.member_id] = member
        if member.instance_id is not None:
            self._static[member.instance_id] = member.member_id

    def _remove(self, member_id: str) -> ConsumerMember:
        member = self._members.pop(member_id)
        for tp in member.owned_keys():
            del self._owners[tp]
        if member.instance_id is not None and self._static.get(member.instance_id) == member_id:
            del self._static[member.instance_id]
        self._sessions.forget(member_id)
        self._rebalance.pop(member_id, None)
        self._asked.pop(member_id, None)
        return member

    def _replace_static(self, old: ConsumerMember, new_id: str) -> None:
        """A static member re-joined under a new member id: the old one goes, its target
        moves to the new id (its partitions come along in the new member itself)."""
        self._remove(old.member_id)
        target = self._target.pop(old.member_id, None)
        if target is not None:
            self._target[new_id] = target

    def _fence(self, member_id: str) -> None:
        """Remove a member (leave, session or rebalance timeout): the group epoch rises."""
        self._remove(member_id)
        self._target.pop(member_id, None)
        self._forget_unused_regexes()
        self._group_epoch += 1
        self._signature_stale = True

    def _owner_epoch(self, key: str, partition: int) -> int:
        holder = self._owners.get((key, partition))
        return -1 if holder is None else self._members[holder].member_epoch

    def _forget_unused_regexes(self) -> None:
        used = {m.subscribed_regex for m in self._members.values()}
        for r in [r for r in self._regexes if r not in used]:
            del self._regexes[r]
        for r in [r for r in self._compiled if r not in used]:
            del self._compiled[r]

    def _resolve_pending(self, image: TopicImage, visible: Callable[[str], bool] | None, now_ms: int) -> bool:
        """Resolve the regexes members subscribe to that are not resolved yet; whether one
        matched a topic (the members subscribed to it then have new topics)."""
        pending = {m.subscribed_regex for m in self._members.values()
                   if m.subscribed_regex is not None and m.subscribed_regex not in self._regexes}
        for r in pending:
            self._regexes[r] = self._resolve(r, image, visible)
        if pending:
            self._regex_refresh_ms = now_ms
        return any(self._regexes[r] for r in pending)

    def _unresolved(self) -> bool:
        return any(m.subscribed_regex is not None and m.subscribed_regex not in self._regexes
                   for m in self._members.values())

    def _resolve(self, regex: str, image: TopicImage, visible: Callable[[str], bool] | None) -> frozenset[str]:
        compiled = self._compiled.get(regex)
        if compiled is None:
            compiled = self._compiled[regex] = topic_regex.compile_regex(regex)
        return frozenset(name for name in image.by_name
                         if topic_regex.matches(compiled, name) and (visible is None or visible(name)))

    def _names_of(self, member: ConsumerMember) -> set[str]:
        names = set(member.subscribed_names)
        if member.subscribed_regex is not None:
            names |= self._regexes.get(member.subscribed_regex, frozenset())
        return names

    def _subscribed_ids(self, member: ConsumerMember, image: TopicImage) -> frozenset[str]:
        return frozenset(image.by_name[n].topic_id for n in self._names_of(member) if n in image.by_name)

    def _metadata_signature(self, image: TopicImage) -> str:
        """A digest of (name, id, partitions) of every subscribed topic that exists."""
        return metadata_signature(subscribed_metadata(self.subscribed_topics(), image))

    def _compute_target(self, image: TopicImage, config: GroupConfig) -> None:
        """A new target assignment at the group epoch (Apache ``updateTargetAssignment``)."""
        specs = {}
        topics: dict[str, assignors.TopicSpec] = {}
        for mid, m in self._members.items():
            subscribed = self._subscribed_ids(m, image)
            for tid in subscribed:
                t = image.by_id[tid]
                topics[tid] = assignors.TopicSpec(t.name, t.partitions)
            specs[mid] = assignors.MemberSpec(rack_id=m.rack_id, instance_id=m.instance_id,
                                              subscribed=frozenset(subscribed), current=self.target(mid))
        result = assignors.assign(self.preferred_assignor(config.assignors), specs, topics)
        self._target = {mid: freeze(result.get(mid, {})) for mid in self._members}
        self._target = {mid: t for mid, t in self._target.items() if t}
        self._assignment_epoch = self._group_epoch

