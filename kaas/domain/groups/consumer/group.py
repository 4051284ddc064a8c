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

The machine is split along its concepts: ``core`` (the state and what every operation
reads or changes, the transition table), ``persistence`` (snapshot and restore) and this
module (the heartbeat, leaves, timers, offsets and the classic members' entry points);
what consumer and share groups share is in ``domain.groups.modern`` (the state and its
derivation, the member epoch check, the subscribed topics' metadata, member sessions).
Every operation ends by checking the state it left the group in against
``core.VALID_PREVIOUS``: a change it does not list raises
``domain.groups.transitions.IllegalTransition``.

Invariants:
    - ``group_epoch >= assignment_epoch``; both never fall;
    - no (topic, partition) is held (assigned or pending revocation) by two members;
    - a member's epoch never falls while it stays in the group (except the -2 of a static
      leave), and is at most ``assignment_epoch``;
    - after ``tick(now_ms)``, ``next_deadline()`` is ``None`` or later than ``now_ms``.
"""
from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kaas.domain.groups.consumer import topic_regex
from kaas.domain.groups.consumer.core import REBALANCE_HEARTBEAT_DIVISOR, REGEX_REFRESH_MIN_INTERVAL_MS, VALID_PREVIOUS
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
    ClassicMeta,
    ConsumerMember,
    MemberState,
    reconcile,
    subset_of,
)
from kaas.domain.groups.consumer.persistence import SNAPSHOT_FORMAT, StoredConsumerGroup
from kaas.domain.groups.modern.epochs import epoch_fenced
from kaas.domain.groups.modern.topic_image import TopicImage, TopicInfo

__all__ = [
    "LEAVE_EPOCH",
    "LEAVE_STATIC_EPOCH",
    "REBALANCE_HEARTBEAT_DIVISOR",
    "REGEX_REFRESH_MIN_INTERVAL_MS",
    "SNAPSHOT_FORMAT",
    "VALID_PREVIOUS",
    "ConsumerGroup",
    "Fenced",
    "GroupConfig",
    "Heartbeat",
    "HeartbeatReply",
    "TopicImage",
    "TopicInfo",
    "validate_heartbeat",
]


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _new_member_id() -> str:
    return str(uuid.uuid4())


class ConsumerGroup(StoredConsumerGroup):
    """One consumer group: members, epochs, target assignment, timers."""

    def copy(self) -> ConsumerGroup:
        """An independent copy (members are immutable values, so shared): the runtime
        handles a heartbeat on a copy and keeps it only once its state is on file."""
        g = ConsumerGroup(self.group_id)
        g._group_epoch, g._assignment_epoch = self._group_epoch, self._assignment_epoch
        g._members, g._static, g._target = dict(self._members), dict(self._static), dict(self._target)
        g._owners, g._regexes, g._compiled = dict(self._owners), dict(self._regexes), dict(self._compiled)
        g._signature, g._signature_stale, g._image_version = self._signature, self._signature_stale, self._image_version
        g._changed_ms, g._regex_refresh_ms, g._regex_stale = self._changed_ms, self._regex_refresh_ms, self._regex_stale
        g._sessions, g._rebalance, g._asked = self._sessions.copy(), dict(self._rebalance), dict(self._asked)
        g._state = self._state
        return g

    # ------------------------------------------------------------------ classic members
    # (the online migration: ``kaas.domain.groups.consumer.classic_members`` drives these)

    def renew_session(self, member_id: str, now_ms: int, session_timeout_ms: int) -> None:
        """A classic member's Heartbeat: its session starts again."""
        if member_id in self._members:
            self._sessions.heard_from(member_id, now_ms, session_timeout_ms)

    def contact_due(self, member_id: str, session_timeout_ms: int) -> bool:
        """Is the member's last contact on file late enough to write the group again
        (``domain.groups.sessions.contact_persist_due``)?"""
        return self._sessions.contact_due(member_id, session_timeout_ms)

    def _heard_from(self, member_id: str, now_ms: int, session_ms: int) -> bool:
        """The member's heartbeat: its session starts again; whether its last contact on
        file is late enough to write the group (``domain.groups.sessions.contact_persist_due``)."""
        return self._sessions.heard_from(member_id, now_ms, session_ms)

    def mark_filed(self) -> None:
        """The runtime wrote ``snapshot()``: the members' last contacts are on file."""
        self._sessions.mark_filed()

    def remove_member(self, member_id: str) -> None:
        """A member leaves (a classic LeaveGroup): removed, the group epoch rises."""
        self._fence(member_id)
        self._settle()

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
        self._settle()
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
        updated = self._updated(old, hb, classic)

        # -- no refusal past this point: the group changes
        before = (self._group_epoch, self._assignment_epoch)
        resolved = self._resolve_pending(image, topic_visible, now_ms)  # regexes members brought before
        if replaced is not None:
            self._replace_static(replaced, member_id)
        self._put(updated)
        names_changed = updated.subscribed_names != old.subscribed_names
        regex_changed = updated.subscribed_regex != old.subscribed_regex
        regex = updated.subscribed_regex
        # a regex new to the group is resolved at the group's next heartbeat (Apache: shortly
        # after, off the request path); one already resolved, or none, counts at once
        bump = self._group_epoch == 0 or names_changed or (regex_changed and (regex is None or regex in self._regexes))
        if regex_changed:
            self._forget_unused_regexes()
        resolved |= self._refresh_regexes(image, topic_visible, now_ms)
        if self._metadata_moved(image, bump or resolved):  # a member's topics or their metadata changed
            self._group_epoch += 1
        if self._group_epoch > self._assignment_epoch:
            self._compute_target(image, config)

        member = self._reconciled(updated, hb, image, now_ms, enforce_subscription=names_changed or regex_changed)
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

    def _updated(self, old: ConsumerMember, hb: Heartbeat, classic: ClassicMeta | None) -> ConsumerMember:
        """The member with what the heartbeat changes (a field left out keeps its value);
        a new regex is compiled (INVALID_REGULAR_EXPRESSION when it does not)."""
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
        regex = updated.subscribed_regex
        if regex != old.subscribed_regex and regex is not None and regex not in self._compiled:
            try:
                self._compiled[regex] = topic_regex.compile_regex(regex)
            except topic_regex.InvalidRegex as exc:
                raise _Refused(ErrorCode.invalid_regular_expression,
                               f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.") from None
        return updated

    def _refresh_regexes(self, image: TopicImage, visible: Callable[[str], bool] | None, now_ms: int) -> bool:
        """Resolve the group's regexes again once the topics changed, at most every
        ``REGEX_REFRESH_MIN_INTERVAL_MS``; whether a resolution changed."""
        resolved = False
        self._regex_stale |= image.version != self._image_version
        if self._regex_stale and self._regexes and (
                self._regex_refresh_ms is None or now_ms - self._regex_refresh_ms >= REGEX_REFRESH_MIN_INTERVAL_MS):
            for r, old_topics in list(self._regexes.items()):
                self._regexes[r] = self._resolve(r, image, visible)
                resolved |= self._regexes[r] != old_topics
            self._regex_stale, self._regex_refresh_ms = False, now_ms
        return resolved

    def _metadata_moved(self, image: TopicImage, bump: bool) -> bool:
        """Whether the group epoch must rise: ``bump`` (a member's topics changed; Apache bumps
        on any resolution change), or the subscribed topics' metadata moved since the last
        target (not when only a removed member changed what is subscribed)."""
        if bump or self._signature_stale or image.version != self._image_version:
            signature = self._metadata_signature(image)
            if signature != self._signature and not self._signature_stale:
                bump = True
            self._signature, self._signature_stale, self._image_version = signature, False, image.version
        return bump

    def _reconciled(self, updated: ConsumerMember, hb: Heartbeat, image: TopicImage, now_ms: int, *,
                    enforce_subscription: bool) -> ConsumerMember:
        """The member one reconciliation step on (``member.reconcile``), installed, with its
        revocation deadline armed or dropped."""
        if not enforce_subscription and updated.reconciled_to(self._assignment_epoch):
            return updated
        member_id = updated.member_id
        member = reconcile(updated, target_epoch=self._assignment_epoch, target=self.target(member_id),
                           owner_epoch=self._owner_epoch, owned=hb.owned,
                           subscribed=self._subscribed_ids(updated, image),
                           enforce_subscription=enforce_subscription)
        if member is not updated:
            self._put(member)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self._rebalance[member_id] = (member.member_epoch, now_ms + member.rebalance_timeout_ms)
                self._asked[member_id] = now_ms
            else:
                self._rebalance.pop(member_id, None)
                self._asked.pop(member_id, None)
        return member

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
        fenced = epoch_fenced(got, have, member.previous_member_epoch,
                              retry_ok=got >= have or subset_of(hb.owned, member.assigned))
        if fenced is not None:
            raise _Refused(ErrorCode.fenced_member_epoch,
                           f"The consumer group member has a {fenced} member epoch ({got}) than the one known by the "
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
            self._sessions.heard_from(existing_id, now_ms, config.session_timeout_ms)
        else:
            self._fence(existing_id)
        return HeartbeatReply(ErrorCode.none, None, hb.member_id, hb.member_epoch, None, True)

    # ------------------------------------------------------------------ timers

    def tick(self, now_ms: int) -> list[Fenced]:
        """Fence the members whose session ended or who did not acknowledge a revocation
        within their rebalance timeout."""
        out: list[Fenced] = []
        for mid in self._sessions.expired(now_ms):
            if mid in self._members:
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
        self._settle()
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
        assert self._state is self._derive_state(), f"settled {self._state}, is {self._derive_state()}"
