"""KIP-848 consumer group state machine (``group.protocol=consumer``): one
``ConsumerGroup`` per group id, driven by ConsumerGroupHeartbeat.

Pure: every operation takes ``now_ms`` and the request fields and returns what the caller
must answer and whether the group's durable state changed (``HeartbeatReply.changed``:
write it before answering). Nothing here awaits, reads a clock, logs or opens a file. The
runtime (``kaas.coord.group.consumer.runtime``) calls ``tick(now_ms)`` at ``next_deadline()``.

The model follows Apache's ``GroupMetadataManager.consumerGroupHeartbeat``,
``ConsumerGroup`` and ``CurrentAssignmentBuilder`` (``kaas.domain.groups.consumer.member``):

* the **group epoch** rises whenever what the assignment depends on changes: a member
  joins with a subscription, changes it, leaves or is fenced, or the metadata of a
  subscribed topic changes (a topic created or deleted that a name or regex subscribes
  to, partitions added);
* when the group epoch is ahead of the **assignment epoch**, the next heartbeat computes
  a new **target assignment** with the group's server assignor (``kaas.domain.groups.consumer.assignors``)
  and the assignment epoch catches up;
* each member reconciles towards its target on its own heartbeats: partitions it must give
  up are revoked first (it stays at its epoch, ``unrevoked_partitions``, until a heartbeat
  no longer lists them), and a partition is handed out only once no member holds it
  (``unreleased_partitions`` until then). So no partition is ever held by two members.

Timers: a member's session ends ``session_timeout_ms`` after its last heartbeat; a member
that does not acknowledge a revocation within its rebalance timeout is fenced. Both fence
the member (removed, group epoch + 1).

Static members (``instance_id``): a leave with epoch -2 keeps the member, its epoch set to
-2 and its partitions held, until its session ends; a join with the same instance id and a
new member id takes its place and its partitions (UNRELEASED_INSTANCE_ID while the old
member has not left).

Choices where kaas differs from Apache, and why:

* A regex new to the group is resolved at the group's next heartbeat, as Apache resolves
  it off the request path right after the heartbeat that brought it (so the first answer
  carries the topics subscribed by name only, as clients expect); after the topics change,
  regexes are resolved again at a heartbeat at least ``REGEX_REFRESH_MIN_INTERVAL_MS``
  (10 s) after the last resolution, as Apache batches its refreshes.
* A member that re-joins with epoch 0 under its member id keeps its state (KAFKA-19233):
  earlier Apache versions answer FENCED_MEMBER_EPOCH until its session ends.
* Restored sessions and revocation deadlines keep the time they had left, with a grace
  to reach the new coordinator granted once per outage (``domain.groups.sessions``, the rule all
  group kinds share), where Apache's coordinator restarts them on load: a dead member is
  removed within its session and the grace however often the coordinator moves.
* While a group rebalances, its members are told a tenth of the heartbeat interval
  (``heartbeat_interval_ms``): a revocation, its acknowledgement and the hand-over each
  wait for a member's next heartbeat, so at Apache's fixed interval a join of ten members
  takes two intervals; here it takes a fraction of one.
* A static member that leaves with epoch -2 is held for a whole session from its leave
  (Apache counts from its last heartbeat before the leave, which a slow close can eat up).

Invariants:
    - ``group_epoch >= assignment_epoch``; both never fall;
    - no (topic, partition) is held (assigned or pending revocation) by two members;
    - a member's epoch never falls while it stays in the group (except the -2 of a static
      leave), and is at most ``assignment_epoch``;
    - after ``tick(now_ms)``, ``next_deadline()`` is ``None`` or later than ``now_ms``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from kaas.domain.groups import sessions
from kaas.domain.groups.consumer import assignors, topic_regex
from kaas.domain.groups.consumer.heartbeat import (
    LEAVE_EPOCH,
    LEAVE_STATIC_EPOCH,
    Fenced,
    GroupConfig,
    Heartbeat,
    HeartbeatReply,
    validate_heartbeat,
)
from kaas.domain.groups.consumer.member import (
    LEFT_STATIC,
    Assignment,
    ClassicMeta,
    ConsumerMember,
    MemberState,
    freeze,
    reconcile,
    subset_of,
)
from kaas.domain.groups.modern.topic_image import TopicImage, TopicInfo

__all__ = [
    "LEAVE_EPOCH",
    "LEAVE_STATIC_EPOCH",
    "SNAPSHOT_FORMAT",
    "ConsumerGroup",
    "Fenced",
    "GroupConfig",
    "Heartbeat",
    "HeartbeatReply",
    "TopicImage",
    "TopicInfo",
    "validate_heartbeat",
]

SNAPSHOT_FORMAT = 1
REGEX_REFRESH_MIN_INTERVAL_MS = 10_000
"""A group's regexes are resolved again for changed topics at most this often (Apache's
``REGEX_BATCH_REFRESH_MIN_INTERVAL_MS``): topics created together land in one rebalance."""
REBALANCE_HEARTBEAT_DIVISOR = 10
"""While a group rebalances, its members are told to heartbeat this many times as often
(``ConsumerGroup.heartbeat_interval_ms``)."""


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _new_member_id() -> str:
    return str(uuid.uuid4())


class ConsumerGroup:
    """One consumer group: members, epochs, target assignment, timers."""

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
        self._session: dict[str, int] = {}  # member id -> deadline
        self._rebalance: dict[str, tuple[int, int]] = {}  # member id -> (epoch, deadline)
        self._contact: dict[str, int] = {}  # member id -> last contact (kept on file)
        self._filed: dict[str, int] = {}  # member id -> its last contact as on file
        self._asked: dict[str, int] = {}  # member id -> when its pending revocation was asked

    def copy(self) -> ConsumerGroup:
        """An independent copy (members are immutable values, so shared): the runtime
        handles a heartbeat on a copy and keeps it only once its state is on file."""
        g = ConsumerGroup(self.group_id)
        g._group_epoch, g._assignment_epoch = self._group_epoch, self._assignment_epoch
        g._members, g._static, g._target = dict(self._members), dict(self._static), dict(self._target)
        g._owners, g._regexes, g._compiled = dict(self._owners), dict(self._regexes), dict(self._compiled)
        g._signature, g._signature_stale, g._image_version = self._signature, self._signature_stale, self._image_version
        g._changed_ms, g._regex_refresh_ms, g._regex_stale = self._changed_ms, self._regex_refresh_ms, self._regex_stale
        g._session, g._rebalance = dict(self._session), dict(self._rebalance)
        g._contact, g._filed, g._asked = dict(self._contact), dict(self._filed), dict(self._asked)
        return g

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
        if not self._members:
            return "Empty"
        if self._group_epoch > self._assignment_epoch:
            return "Assigning"
        if any(not m.reconciled_to(self._assignment_epoch) for m in self._members.values()):
            return "Reconciling"
        return "Stable"

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
        deadlines = list(self._session.values()) + [d for _, d in self._rebalance.values()]
        return min(deadlines, default=None)

    # ------------------------------------------------------------------ classic members
    # (the online migration: ``kaas.domain.groups.consumer.classic_members`` drives these)

    def renew_session(self, member_id: str, now_ms: int, session_timeout_ms: int) -> None:
        """A classic member's Heartbeat: its session starts again."""
        if member_id in self._members:
            self._session[member_id] = now_ms + session_timeout_ms
            self._contact[member_id] = now_ms

    def contact_due(self, member_id: str, session_timeout_ms: int) -> bool:
        """Is the member's last contact on file late enough to write the group again
        (``domain.groups.sessions.contact_persist_due``)?"""
        contact = self._contact.get(member_id)
        return contact is not None and sessions.contact_persist_due(self._filed.get(member_id), contact,
                                                                     session_timeout_ms)

    def _heard_from(self, member_id: str, now_ms: int, session_ms: int) -> bool:
        """The member's heartbeat: its session starts again; whether its last contact on
        file is late enough to write the group (``domain.groups.sessions.contact_persist_due``)."""
        self._session[member_id] = now_ms + session_ms
        self._contact[member_id] = now_ms
        return sessions.contact_persist_due(self._filed.get(member_id), now_ms, session_ms)

    def mark_filed(self) -> None:
        """The runtime wrote ``snapshot()``: the members' last contacts are on file."""
        self._filed = dict(self._contact)

    def remove_member(self, member_id: str) -> None:
        """A member leaves (a classic LeaveGroup): removed, the group epoch rises."""
        self._fence(member_id)

    def waiting_on_unreleased(self, member_id: str) -> bool:
        """Does the member wait for a partition of its target that another member still
        holds? (Apache ``waitingOnUnreleasedPartition``)"""
        member = self._members[member_id]
        for key, parts in self.target(member_id).items():
            have = member.assigned.get(key, frozenset())
            for p in parts - have:
                holder = self._owners.get((key, p))
                if holder is not None and holder != member_id:
                    return True
        return False

    def all_classic_except(self, member_id: str | None) -> bool:
        """Is every member but ``member_id`` a classic-protocol member?"""
        return all(m.classic is not None for mid, m in self._members.items() if mid != member_id)

    # ------------------------------------------------------------------ heartbeat

    def heartbeat(self, hb: Heartbeat, now_ms: int, image: TopicImage, config: GroupConfig, *,
                  new_member_id: Callable[[], str] = _new_member_id,
                  topic_visible: Callable[[str], bool] | None = None,
                  classic: ClassicMeta | None = None) -> HeartbeatReply:
        """Handle one ConsumerGroupHeartbeat (already checked by ``validate_heartbeat``).

        Args:
            image: the topics now; what depends on them is recomputed when its version moved.
            config: the session timeout, assignors and max size to apply.
            new_member_id: mints a member id for a v0 join without one.
            topic_visible: which topics a regex resolved in this heartbeat may match (the
                member's principal's DESCRIBE right); all when None.
            classic: the member speaks the classic protocol: ``hb`` is its JoinGroup
                (``kaas.domain.groups.consumer.classic_members.join``), its session is its own.

        Returns:
            The reply; on an error the group is unchanged.
        """
        before = (self._group_epoch, self._assignment_epoch)
        try:
            if hb.member_epoch in (LEAVE_EPOCH, LEAVE_STATIC_EPOCH):
                reply = self._leave(hb, now_ms, config)
            else:
                reply = self._heartbeat(hb, now_ms, image, config, new_member_id, topic_visible, classic)
        except _Refused as r:
            return HeartbeatReply(r.code, r.message)
        if (self._group_epoch, self._assignment_epoch) != before:
            self._changed_ms = now_ms
        return reply

    def _heartbeat(self, hb: Heartbeat, now_ms: int, image: TopicImage, config: GroupConfig,
                   new_member_id: Callable[[], str], topic_visible: Callable[[str], bool] | None,
                   classic: ClassicMeta | None) -> HeartbeatReply:
        joining = hb.member_epoch == 0
        if len(self._members) >= config.max_size and (not hb.member_id or hb.member_id not in self._members):
            raise _Refused(ErrorCode.group_max_size_reached,
                           f"The consumer group has reached its maximum capacity of {config.max_size} members.")
        member_id = hb.member_id or new_member_id()
        old, replaced = self._lookup(hb, member_id, joining, classic is not None)
        updated = dataclasses.replace(
            old,
            instance_id=hb.instance_id if hb.instance_id is not None else old.instance_id,
            rack_id=hb.rack_id if hb.rack_id is not None else old.rack_id,
            rebalance_timeout_ms=hb.rebalance_timeout_ms if hb.rebalance_timeout_ms != -1 else old.rebalance_timeout_ms,
            server_assignor=hb.server_assignor if hb.server_assignor is not None else old.server_assignor,
            subscribed_names=(frozenset(hb.subscribed_topic_names) if hb.subscribed_topic_names is not None
                              else old.subscribed_names),
            subscribed_regex=((hb.subscribed_topic_regex or None) if hb.subscribed_topic_regex is not None
                              else old.subscribed_regex),
            client_id=hb.client_id, client_host=hb.client_host, classic=classic)
        names_changed = updated.subscribed_names != old.subscribed_names
        regex_changed = updated.subscribed_regex != old.subscribed_regex
        regex = updated.subscribed_regex
        if regex_changed and regex is not None and regex not in self._compiled:
            try:
                self._compiled[regex] = topic_regex.compile_regex(regex)
            except topic_regex.InvalidRegex as exc:
                raise _Refused(ErrorCode.invalid_regular_expression,
                               f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.") from None

        # -- no refusal past this point: the group changes
        before = (self._group_epoch, self._assignment_epoch)
        resolved = self._resolve_pending(image, topic_visible, now_ms)  # regexes members brought before
        if replaced is not None:
            self._replace_static(replaced, member_id)
        self._put(updated)
        # a regex new to the group is resolved at the group's next heartbeat (Apache: shortly
        # after, off the request path); one already resolved, or none, counts at once
        bump = self._group_epoch == 0 or names_changed or (regex_changed and (regex is None or regex in self._regexes))
        if regex_changed:
            self._forget_unused_regexes()
        self._regex_stale |= image.version != self._image_version
        if self._regex_stale and self._regexes and (
                self._regex_refresh_ms is None or now_ms - self._regex_refresh_ms >= REGEX_REFRESH_MIN_INTERVAL_MS):
            for r, old_topics in list(self._regexes.items()):
                self._regexes[r] = self._resolve(r, image, topic_visible)
                resolved |= self._regexes[r] != old_topics
            self._regex_stale, self._regex_refresh_ms = False, now_ms
        bump = bump or resolved  # a member's topics changed (Apache bumps on any resolution change)
        if bump or self._signature_stale or image.version != self._image_version:
            signature = self._metadata_signature(image)
            if signature != self._signature and not self._signature_stale:
                bump = True
            self._signature, self._signature_stale, self._image_version = signature, False, image.version
        if bump:
            self._group_epoch += 1
        if self._group_epoch > self._assignment_epoch:
            self._compute_target(image, config)

        subscription_changed = names_changed or regex_changed
        if subscription_changed or not updated.reconciled_to(self._assignment_epoch):
            member = reconcile(updated, target_epoch=self._assignment_epoch, target=self.target(member_id),
                               owner_epoch=self._owner_epoch, owned=hb.owned,
                               subscribed=self._subscribed_ids(updated, image),
                               enforce_subscription=subscription_changed)
        else:
            member = updated
        if member is not updated:
            self._put(member)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self._rebalance[member_id] = (member.member_epoch, now_ms + member.rebalance_timeout_ms)
                self._asked[member_id] = now_ms
            else:
                self._rebalance.pop(member_id, None)
                self._asked.pop(member_id, None)
        due = self._heard_from(member_id, now_ms,
                               classic.session_timeout_ms if classic is not None else config.session_timeout_ms)

        full = (hb.rebalance_timeout_ms != -1 and hb.owned is not None
                and (hb.subscribed_topic_names is not None or hb.subscribed_topic_regex is not None))
        send = joining or full or member.assigned != old.assigned
        changed = due or replaced is not None or member != old or (self._group_epoch, self._assignment_epoch) != before
        if changed:  # the runtime writes ``snapshot()`` before it answers
            self.mark_filed()
        return HeartbeatReply(ErrorCode.none, None, member_id, member.member_epoch,
                              dict(member.assigned) if send else None, changed)

    def _lookup(self, hb: Heartbeat, member_id: str, joining: bool,
                classic: bool = False) -> tuple[ConsumerMember, ConsumerMember | None]:
        """(the member as it is before this heartbeat, the static member it replaces). A
        classic static member joining under a new member id replaces the old one even
        while it is active (the classic protocol's rule; Apache does the same for classic
        members of a consumer group)."""
        if hb.instance_id is None:
            member = self._members.get(member_id)
            if member is None:
                if not joining:
                    raise _Refused(ErrorCode.unknown_member_id,
                                   f"Member {member_id} is not a member of group {self.group_id}.")
                return ConsumerMember(member_id), None
            self._check_epoch(member, hb)
            return member, None
        existing_id = self._static.get(hb.instance_id)
        existing = self._members.get(existing_id) if existing_id is not None else None
        if joining:
            if existing is None:
                return self._members.get(member_id) or ConsumerMember(member_id), None
            if existing.member_epoch != LEFT_STATIC and not (classic and existing.member_id != member_id):
                raise _Refused(ErrorCode.unreleased_instance_id,
                               f"Static member {member_id} with instance id {hb.instance_id} cannot join the group "
                               f"because the instance id is owned by {existing.member_id} member.")
            return dataclasses.replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0), existing
        if existing is None:
            raise _Refused(ErrorCode.unknown_member_id, f"Instance id {hb.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise _Refused(ErrorCode.fenced_instance_id,
                           f"Static member {member_id} with instance id {hb.instance_id} was fenced by member "
                           f"{existing.member_id}.")
        self._check_epoch(existing, hb)
        return existing, None

    @staticmethod
    def _check_epoch(member: ConsumerMember, hb: Heartbeat) -> None:
        """Apache ``throwIfConsumerGroupMemberEpochIsInvalid`` (with KAFKA-19233: epoch 0
        re-joins). An epoch one behind is accepted when the member owns no more than its
        assignment: the answer that moved it on may have been lost."""
        got, have = hb.member_epoch, member.member_epoch
        if got == 0:
            return
        if got > have:
            raise _Refused(ErrorCode.fenced_member_epoch,
                           f"The consumer group member has a greater member epoch ({got}) than the one known by the "
                           f"group coordinator ({have}). The member must abandon all its partitions and rejoin.")
        if got < have and (got != member.previous_member_epoch or not subset_of(hb.owned, member.assigned)):
            raise _Refused(ErrorCode.fenced_member_epoch,
                           f"The consumer group member has a smaller member epoch ({got}) than the one known by the "
                           f"group coordinator ({have}). The member must abandon all its partitions and rejoin.")

    def _leave(self, hb: Heartbeat, now_ms: int, config: GroupConfig) -> HeartbeatReply:
        if hb.instance_id is None:
            if hb.member_id not in self._members:
                raise _Refused(ErrorCode.unknown_member_id,
                               f"Member {hb.member_id} is not a member of group {self.group_id}.")
            self._fence(hb.member_id)
            return HeartbeatReply(ErrorCode.none, None, hb.member_id, hb.member_epoch, None, True)
        existing_id = self._static.get(hb.instance_id)
        if existing_id is None:
            raise _Refused(ErrorCode.unknown_member_id, f"Instance id {hb.instance_id} is unknown.")
        if existing_id != hb.member_id:
            raise _Refused(ErrorCode.fenced_instance_id,
                           f"Static member {hb.member_id} with instance id {hb.instance_id} was fenced by member "
                           f"{existing_id}.")
        if hb.member_epoch == LEAVE_STATIC_EPOCH:
            # kept, its partitions held, for a session from now or until its instance comes back
            member = self._members[existing_id]
            self._put(dataclasses.replace(member, member_epoch=LEFT_STATIC, pending_revocation={}))
            self._rebalance.pop(existing_id, None)
            self._asked.pop(existing_id, None)
            self._session[existing_id] = now_ms + config.session_timeout_ms
            self._contact[existing_id] = now_ms
        else:
            self._fence(existing_id)
        return HeartbeatReply(ErrorCode.none, None, hb.member_id, hb.member_epoch, None, True)

    # ------------------------------------------------------------------ timers

    def tick(self, now_ms: int) -> list[Fenced]:
        """Fence the members whose session ended or who did not acknowledge a revocation
        within their rebalance timeout."""
        out: list[Fenced] = []
        for mid, deadline in list(self._session.items()):
            if deadline <= now_ms and mid in self._members:
                self._fence(mid)
                out.append(Fenced(mid, "session"))
        for mid, (epoch, deadline) in list(self._rebalance.items()):
            if deadline > now_ms:
                continue
            member = self._members.get(mid)
            if member is not None and member.member_epoch == epoch:
                self._fence(mid)
                out.append(Fenced(mid, "rebalance"))
            else:
                self._rebalance.pop(mid, None)
                self._asked.pop(mid, None)
        if out:
            self._changed_ms = now_ms
        return out

    # ------------------------------------------------------------------ offsets, admin

    def validate_commit(self, member_id: str, instance_id: str | None, member_epoch: int, *,
                        transactional: bool, api_version: int) -> ErrorCode:
        """May an OffsetCommit (TxnOffsetCommit with ``transactional``) go ahead? Apache
        ``ConsumerGroup.validateOffsetCommit`` and ``OffsetMetadataManager``: a negative
        epoch is accepted while the group has no members (admin client, manual assignment);
        else the member must exist (UNKNOWN_MEMBER_ID) and the epoch match
        (STALE_MEMBER_EPOCH; ILLEGAL_GENERATION for TxnOffsetCommit, whose versions have no
        such code). A member of this protocol commits with OffsetCommit v9 or later
        (UNSUPPORTED_VERSION)."""
        if member_epoch < 0 and not self._members:
            return ErrorCode.none
        member = self._members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member.classic is not None:  # a classic member commits at its generation (= its epoch)
            return ErrorCode.none if member_epoch == member.member_epoch else ErrorCode.illegal_generation
        if not transactional and api_version < 9:
            return ErrorCode.unsupported_version
        if member_epoch != member.member_epoch:
            return ErrorCode.illegal_generation if transactional else ErrorCode.stale_member_epoch
        return ErrorCode.none

    def validate_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9+ (Apache ``ConsumerGroup.validateOffsetFetch``): no member id and a
        negative epoch is the admin client's; else the member must exist and the epoch
        match."""
        if member_id is None and member_epoch < 0:
            return ErrorCode.none
        member = self._members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def describe(self, assignor_names: tuple[str, ...]) -> dict[str, Any]:
        """ConsumerGroupDescribe's view: topic keys, not names (the runtime maps them)."""
        return {
            "group_id": self.group_id, "state": self.state, "group_epoch": self._group_epoch,
            "assignment_epoch": self._assignment_epoch, "assignor": self.preferred_assignor(assignor_names),
            "members": [{
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": sorted(m.subscribed_names), "subscribed_topic_regex": m.subscribed_regex,
                "assignment": dict(m.assigned), "target_assignment": dict(self.target(m.member_id)),
                "pending_revocation": dict(m.pending_revocation), "member_state": m.state.value,
                "classic": m.classic is not None,
            } for m in self._members.values()],
        }

    # ------------------------------------------------------------------ persistence

    def snapshot(self) -> dict[str, Any]:
        """What a successor coordinator needs to carry on: epochs, members with their
        subscriptions, epochs and assignments, the target assignment, the resolved regexes
        and the metadata signature the last target was computed from (JSON-ready)."""
        def enc(a: Assignment) -> dict[str, list[int]]:
            return {k: sorted(ps) for k, ps in sorted(a.items())}
        return {
            "format": SNAPSHOT_FORMAT, "group_epoch": self._group_epoch, "assignment_epoch": self._assignment_epoch,
            "signature": self._signature,
            "regexes": {r: sorted(ts) for r, ts in sorted(self._regexes.items())},
            "members": [{
                "member_id": m.member_id, "protocol": "consumer" if m.classic is None else "classic",
                **({} if m.classic is None else {"classic": {
                    "session_timeout_ms": m.classic.session_timeout_ms,
                    "protocols": [[n, md.hex()] for n, md in m.classic.protocols]}}),
                "instance_id": m.instance_id, "rack_id": m.rack_id,
                "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_names": sorted(m.subscribed_names), "subscribed_regex": m.subscribed_regex,
                "server_assignor": m.server_assignor, "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch,
                "state": m.state.value, "assigned": enc(m.assigned), "pending_revocation": enc(m.pending_revocation),
                "target": enc(self.target(m.member_id)),
                "last_contact_ms": self._contact.get(m.member_id),
                **({} if m.member_id not in self._asked else {"revocation_asked_ms": self._asked[m.member_id]}),
            } for m in self._members.values()],
        }

    @classmethod
    def restore(cls, group_id: str, snap: Mapping[str, Any], *, now_ms: int, session_timeout_ms: int) -> ConsumerGroup:
        """The group as ``snapshot()`` left it, for a coordinator taking it over at
        ``now_ms``: each member's session ends by the rule all group kinds share
        (``domain.groups.sessions.restored_deadline`` of its last contact on file), and so does a
        revocation under way (of when it was asked, with the rebalance timeout). A file
        without those times gives a whole session (rebalance timeout) from ``now_ms``, as
        Apache's load does.

        Raises:
            ValueError: the snapshot is malformed (a corrupt file: reported, never reset).
        """
        try:
            if snap.get("format") != SNAPSHOT_FORMAT:
                raise ValueError(f"unknown format {snap.get('format')!r}")
            g = cls(group_id)
            g._group_epoch = int(snap["group_epoch"])
            g._assignment_epoch = int(snap["assignment_epoch"])
            g._signature = str(snap["signature"])
            g._regexes = {str(r): frozenset(map(str, ts)) for r, ts in snap["regexes"].items()}
            for r in g._regexes:
                g._compiled[r] = topic_regex.compile_regex(r)
            for raw in snap["members"]:
                protocol = raw.get("protocol", "consumer")
                if protocol not in ("consumer", "classic"):
                    raise ValueError(f"member protocol {protocol!r} is not known here")
                classic = None
                if protocol == "classic":
                    c = raw["classic"]
                    classic = ClassicMeta(int(c["session_timeout_ms"]),
                                          tuple((str(n), bytes.fromhex(md)) for n, md in c["protocols"]))
                m = ConsumerMember(
                    member_id=str(raw["member_id"]), instance_id=raw["instance_id"], rack_id=raw["rack_id"],
                    client_id=str(raw["client_id"]), client_host=str(raw["client_host"]),
                    subscribed_names=frozenset(map(str, raw["subscribed_names"])),
                    subscribed_regex=raw["subscribed_regex"], server_assignor=raw["server_assignor"],
                    rebalance_timeout_ms=int(raw["rebalance_timeout_ms"]), member_epoch=int(raw["member_epoch"]),
                    previous_member_epoch=int(raw["previous_member_epoch"]), state=MemberState(raw["state"]),
                    assigned=_decode(raw["assigned"]), pending_revocation=_decode(raw["pending_revocation"]),
                    classic=classic)
                if m.member_id in g._members:
                    raise ValueError(f"member {m.member_id} twice")
                g._put(m)
                target = _decode(raw["target"])
                if target:
                    g._target[m.member_id] = target
                session_ms = session_timeout_ms if classic is None else classic.session_timeout_ms
                seen = _time(raw.get("last_contact_ms"))
                g._session[m.member_id] = sessions.restored_deadline(seen, session_ms, now_ms)
                g._contact[m.member_id] = now_ms if seen is None else min(seen, now_ms)
                if seen is not None:
                    g._filed[m.member_id] = seen
                if m.state is MemberState.UNREVOKED_PARTITIONS:
                    asked = _time(raw.get("revocation_asked_ms"))
                    g._rebalance[m.member_id] = (m.member_epoch,
                                                 sessions.restored_deadline(asked, m.rebalance_timeout_ms, now_ms))
                    g._asked[m.member_id] = now_ms if asked is None else min(asked, now_ms)
            if g._assignment_epoch > g._group_epoch:
                raise ValueError("assignment epoch ahead of the group epoch")
            return g
        except (KeyError, TypeError, AttributeError, topic_regex.InvalidRegex) as exc:
            raise ValueError(f"bad consumer group state: {exc!r}") from None

    def check_invariants(self) -> None:
        """Raise AssertionError if an invariant of the module docstring does not hold."""
        assert self._group_epoch >= self._assignment_epoch
        seen: dict[tuple[str, int], str] = {}
        for m in self._members.values():
            assert m.member_epoch <= self._assignment_epoch or m.member_epoch == LEFT_STATIC
            assert bool(m.pending_revocation) == (m.state is MemberState.UNREVOKED_PARTITIONS) or \
                m.member_epoch == LEFT_STATIC
            for tp in m.owned_keys():
                assert tp not in seen, f"{tp} held by {seen[tp]} and {m.member_id}"
                seen[tp] = m.member_id
        assert seen == self._owners
        for iid, mid in self._static.items():
            assert self._members[mid].instance_id == iid

    # ------------------------------------------------------------------ internals

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
        self._session.pop(member_id, None)
        self._rebalance.pop(member_id, None)
        self._contact.pop(member_id, None)
        self._filed.pop(member_id, None)
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
        h = hashlib.sha256()
        for name in sorted(self.subscribed_topics()):
            t = image.by_name.get(name)
            if t is not None:
                h.update(f"{t.name}\0{t.topic_id}\0{t.partitions}\n".encode())
        return h.hexdigest()

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


def _time(raw: Any) -> int | None:
    """A time on file (ms), or None when absent (a file from before it was kept)."""
    return None if raw is None else int(raw)


def _decode(raw: Mapping[str, Iterable[int]]) -> dict[str, frozenset[int]]:
    return freeze({str(k): [int(p) for p in ps] for k, ps in raw.items()})
