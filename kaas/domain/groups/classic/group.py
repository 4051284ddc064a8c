"""Classic-protocol consumer group state machine: one ``Group`` per group id.

Pure: every operation takes ``now_ms`` plus the request fields and returns what the caller
must carry out. Nothing here awaits, reads a clock, logs or opens a file. The runtime
(``tasks/`` + handlers) answers requests from the effects and calls ``tick(now_ms)`` at
``next_deadline()``.

Effects (frozen dataclasses):

* ``JoinReply(request_key, ...)``: answer the JoinGroup request that was passed in as
  ``request_key``. It may come out of the same ``join`` call (immediate answer or a join
  phase that completes at once) or later, from another member's ``join``/``leave``/
  ``sync`` or from ``tick``.
* ``SyncReply(request_key, ...)``: the same for SyncGroup.

``heartbeat`` and ``validate_commit`` return an ``ErrorCode``; ``leave`` returns a
``LeaveResult`` (per-member codes plus effects).

Rules follow Apache's classic group coordinator (``GroupMetadataManager.classicGroup*``,
``ClassicGroup``), as docs/groups.rst describes them:

=========================  ==============================================================
transition                 trigger
=========================  ==============================================================
Empty -> Preparing         first join; the join phase is then held for
                           ``initial_rebalance_delay_ms``, extended while new members
                           keep arriving, bounded by the rebalance timeout
Stable/Completing ->       a new member, a leader rejoin, a metadata change, a leave, a
Preparing                  session expiry, a member that never sent SyncGroup
Preparing -> Completing    every member (and no KIP-394 pending member) has a parked
                           join, or the rebalance timeout (max over members) passed:
                           dynamic members that did not rejoin are dropped, generation + 1
Preparing -> Empty         the join phase completes with no members (generation + 1)
Completing -> Stable       the leader's SyncGroup: every parked sync gets its assignment
any -> Dead                ``mark_dead`` (group deleted or coordinator moved)
=========================  ==============================================================

Choices where Apache leaves room, or where this machine differs:

* A member that sends a second JoinGroup (or SyncGroup) while one is parked: the newest
  request is parked, the older one is answered at once with REBALANCE_IN_PROGRESS (27),
  which every client treats as "rejoin, keep your member id". Apache drops it silently.
* Static members (group_instance_id) that do not rejoin in time are kept, as in Apache:
  only their session timeout removes them.
* A join phase whose members all left completes at once (-> Empty, generation + 1) even
  during the initial delay, so that Empty iff no members always holds.
* The client id/host of a replaced static member are the new request's (Apache keeps
  the old ones).
* GROUP_MAX_SIZE_REACHED is not implemented (Apache's default max size is unbounded).
* Persistence (``snapshot``/``restore``): a rebalance in progress is kept, not only a
  Stable generation, and so is each member's last heartbeat time; a restored member's
  session ends by the rule all group kinds share (``domain.groups.sessions``, through
  ``restored_session_deadline``): the time it had left, a bounded grace to reach the new
  coordinator granted once per outage, not once per move, where Apache restarts
  every session. So a dead member is removed, and a rebalance completes, even when the
  coordinator moves more often than the session timeout. docs/groups.rst says why.

The machine is split along its concepts: ``records`` (the vocabulary and the transition
table), ``core`` (the state and what every phase reads), ``rebalance`` (the join and sync
phases and the timers), ``members`` (how a JoinGroup changes the members),
``persistence`` (snapshot and restore) and this module (the requests). Every state
change is checked against ``records.VALID_PREVIOUS`` (Apache's
``ClassicGroupState.validPreviousStates``); one it does not list raises
``domain.groups.transitions.IllegalTransition``.

Invariants:
    - ``generation_id`` never falls; it rises by one each time a join phase completes.
    - ``state is EMPTY`` iff there are no members (and hence no parked requests); a Dead
      group has no members and no parked requests.
    - Every parked request is answered exactly once: by the phase completing, by an error
      when its member is removed, fenced or superseded, or by ``mark_dead``. Parked joins
      exist only in PreparingRebalance and parked syncs only in CompletingRebalance, and
      while any exists ``next_deadline()`` is not ``None`` (the join phase is bounded by
      the rebalance timeout, the sync phase by the same timeout counted from its start).
    - A member with a parked request never expires by session timeout.
    - The leader is a member whenever the group has members; in Stable every member has
      an assignment (``bytes``, possibly empty).
    - After ``tick(now_ms)``, ``next_deadline()`` is ``None`` or later than ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

from kio.schema.errors import ErrorCode

from kaas.domain.groups.classic.core import _COMPLETING, _DEAD, _EMPTY, _PREPARING, _STABLE
from kaas.domain.groups.classic.members import JoinFields, MembershipGroup
from kaas.domain.groups.classic.persistence import StoredGroup
from kaas.domain.groups.classic.records import (
    DEFAULT_INITIAL_REBALANCE_DELAY_MS,
    DEFAULT_MAX_SESSION_TIMEOUT_MS,
    DEFAULT_MIN_SESSION_TIMEOUT_MS,
    HEARTBEAT_PERSIST_FRACTION,
    UNKNOWN_GENERATION_ID,
    UNKNOWN_MEMBER_ID,
    Effect,
    GroupDescription,
    GroupState,
    JoinMember,
    JoinReply,
    LeaveMemberResult,
    LeaveResult,
    Member,
    MemberDescription,
    SyncReply,
    join_error,
    restored_session_deadline,
    restored_session_floor_ms,
)

__all__ = [
    "DEFAULT_INITIAL_REBALANCE_DELAY_MS",
    "DEFAULT_MAX_SESSION_TIMEOUT_MS",
    "DEFAULT_MIN_SESSION_TIMEOUT_MS",
    "HEARTBEAT_PERSIST_FRACTION",
    "UNKNOWN_GENERATION_ID",
    "UNKNOWN_MEMBER_ID",
    "Effect",
    "Group",
    "GroupDescription",
    "GroupState",
    "JoinMember",
    "JoinReply",
    "LeaveMemberResult",
    "LeaveResult",
    "MemberDescription",
    "Member",
    "SyncReply",
    "restored_session_deadline",
    "restored_session_floor_ms",
]


class Group(MembershipGroup, StoredGroup):
    """The classic consumer group ``group_id``, held in memory by its coordinator.

    Args:
        group_id: the group id (informational; also in ``describe()``).
        initial_rebalance_delay_ms: Apache ``group.initial.rebalance.delay.ms``. 0 disables
            the delay: the first join phase completes as soon as every member joined.
        min_session_timeout_ms, max_session_timeout_ms: accepted JoinGroup session
            timeouts (else INVALID_SESSION_TIMEOUT 26), Apache defaults.
        id_factory: returns the unique suffix of generated member ids
            (``f"{group_instance_id or client_id}-{suffix}"``); default ``uuid4``. Tests pass
            a counter to stay deterministic.
        now_ms: creation time (``state_since_ms``).

    Request keys (``request_key``) are opaque hashables chosen by the caller, unique per
    request and not ``None``.
    """

    # ------------------------------------------------------------------ JoinGroup

    def join(
        self,
        now_ms: int,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Iterable[tuple[str, bytes]],
        require_known_member: bool,
        request_key: Hashable,
        *,
        skip_assignment_ok: bool = False,
    ) -> list[Effect]:
        """JoinGroup.

        Args:
            now_ms: current time.
            member_id: the request's member id (``""`` for a new member).
            group_instance_id: static membership id (v5+), or ``None``.
            client_id, client_host: from the request header / connection.
            session_timeout_ms: the request's session timeout.
            rebalance_timeout_ms: the request's rebalance timeout (v0: pass the session
                timeout, as Apache does).
            protocol_type: e.g. ``"consumer"``.
            protocols: ``(name, metadata)`` in the member's preference order.
            require_known_member: True for JoinGroup v4+ (KIP-394).
            request_key: identifies this request in the ``JoinReply`` that answers it.
            skip_assignment_ok: True for JoinGroup v9+ (KIP-814): a static leader that
                rejoins a Stable group unchanged is told it leads, with the members, and
                to skip the assignment; before v9 it is not told it leads.

        Returns:
            Effects. The reply to this request may be among them (an error, KIP-394's
            MEMBER_ID_REQUIRED, a rejoin answered from the current generation, or a join
            phase that completed at once) or may come from a later call.
        """
        assert request_key is not None
        protos = tuple((name, bytes(metadata)) for name, metadata in protocols)
        code = self._join_refusal(session_timeout_ms, protocol_type, protos)
        if code is not None:
            return [join_error(request_key, code, member_id)]
        fields = JoinFields(client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                            protocol_type, protos, request_key)
        if member_id == UNKNOWN_MEMBER_ID:
            return self._join_new(now_ms, group_instance_id, require_known_member, fields,
                                  skip_assignment_ok)
        if group_instance_id is None and member_id in self._pending:
            del self._pending[member_id]
            return self._add_member(now_ms, member_id, None, fields)
        return self._join_known(now_ms, member_id, group_instance_id, fields)

    def _join_refusal(
        self, session_timeout_ms: int, protocol_type: str, protos: tuple[tuple[str, bytes], ...]
    ) -> ErrorCode | None:
        """The error a JoinGroup gets before its member is looked at, if any."""
        if not self._min_session_ms <= session_timeout_ms <= self._max_session_ms:
            return ErrorCode.invalid_session_timeout
        if self._state is _DEAD:
            return ErrorCode.coordinator_not_available
        if not self._supports(protocol_type, protos):
            return ErrorCode.inconsistent_group_protocol
        return None

    def _join_new(
        self,
        now_ms: int,
        group_instance_id: str | None,
        require_known_member: bool,
        fields: JoinFields,
        skip_assignment_ok: bool,
    ) -> list[Effect]:
        """A JoinGroup without a member id: a new member (KIP-394: first told its id with
        MEMBER_ID_REQUIRED), or a static member's new incarnation."""
        prefix = group_instance_id if group_instance_id is not None else fields.client_id
        new_id = f"{prefix}-{self._id_factory()}"
        if group_instance_id is not None:
            old_id = self._static.get(group_instance_id)
            if old_id is not None:
                return self._replace_static_member(now_ms, old_id, new_id, fields,
                                                   skip_assignment_ok=skip_assignment_ok)
            return self._add_member(now_ms, new_id, group_instance_id, fields)
        if require_known_member:
            self._pending[new_id] = now_ms + fields.session_timeout_ms
            return [join_error(fields.request_key, ErrorCode.member_id_required, new_id)]
        return self._add_member(now_ms, new_id, None, fields)

    def _join_known(
        self, now_ms: int, member_id: str, group_instance_id: str | None, fields: JoinFields
    ) -> list[Effect]:
        """A JoinGroup of a member the group knows."""
        protos, request_key = fields.protocols, fields.request_key
        code = self._validate_member(member_id, group_instance_id)
        if code is not ErrorCode.none:
            return [join_error(request_key, code, member_id)]
        member = self._members[member_id]
        if self._state is _PREPARING:
            return self._update_member(now_ms, member, fields)
        if self._state is _COMPLETING:
            if member.protocols != protos:
                return self._update_member(now_ms, member, fields)
            # It probably missed the JoinGroup response: answer from this generation.
            member.last_heartbeat_ms = now_ms
            return [self._join_success(member, request_key)]
        if self._state is _STABLE:
            # A leader rejoin forces a rebalance (topic metadata changes); so does a
            # metadata change. A follower rejoining unchanged gets the current generation.
            if member_id == self._leader_id or member.protocols != protos:
                return self._update_member(now_ms, member, fields)
            member.last_heartbeat_ms = now_ms
            return [self._join_success(member, request_key)]
        # pragma: no cover - Empty has no members
        return [join_error(request_key, ErrorCode.unknown_member_id, member_id)]

    # ------------------------------------------------------------------ SyncGroup

    def sync(
        self,
        now_ms: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        assignments: Mapping[str, bytes] | Iterable[tuple[str, bytes]],
        request_key: Hashable,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> list[Effect]:
        """SyncGroup.

        Args:
            now_ms: current time.
            member_id, group_instance_id, generation_id: from the request.
            assignments: the leader's ``member_id -> assignment`` (ignored for followers;
                members it leaves out get ``b""``, unknown ids are ignored).
            request_key: identifies this request in the ``SyncReply`` that answers it.
            protocol_type, protocol_name: v5+ fields; when given they must match the
                group's (else INCONSISTENT_GROUP_PROTOCOL 23).

        Returns:
            Effects: an immediate ``SyncReply`` (error, or the assignment when Stable), or
            nothing (a follower parked until the leader syncs), or, for the leader, the
            replies to every parked sync including its own.
        """
        assert request_key is not None

        def fail(code: ErrorCode) -> list[Effect]:
            return [SyncReply(request_key, code, None, None, b"")]

        if self._state is _DEAD:
            return fail(ErrorCode.coordinator_not_available)
        code = self._validate_member(member_id, group_instance_id)
        if code is not ErrorCode.none:
            return fail(code)
        if generation_id != self._generation_id:
            return fail(ErrorCode.illegal_generation)
        if protocol_type is not None and protocol_type != self._protocol_type:
            return fail(ErrorCode.inconsistent_group_protocol)
        if protocol_name is not None and protocol_name != self._protocol_name:
            return fail(ErrorCode.inconsistent_group_protocol)
        if self._state is _PREPARING:
            return fail(ErrorCode.rebalance_in_progress)
        if self._state is _EMPTY:  # pragma: no cover - Empty has no members
            return fail(ErrorCode.unknown_member_id)

        member = self._members[member_id]
        member.last_heartbeat_ms = now_ms
        self._pending_sync.discard(member_id)
        if not self._pending_sync:
            self._sync_deadline_ms = None
        if self._state is _STABLE:
            return [self._sync_success(request_key, member)]

        # CompletingRebalance: park; the leader's assignment releases everyone.
        effects: list[Effect] = []
        if member.sync_key is not None:
            effects.append(
                SyncReply(member.sync_key, ErrorCode.rebalance_in_progress, None, None, b"")
            )
        member.sync_key = request_key
        if member_id == self._leader_id:
            given = dict(assignments.items() if isinstance(assignments, Mapping) else assignments)
            for m in self._members.values():
                m.assignment = bytes(given.get(m.member_id, b""))
            self._transition(_STABLE, now_ms)
            for m in self._members.values():
                if m.sync_key is not None:
                    effects.append(self._sync_success(m.sync_key, m))
                    m.sync_key = None
        return effects

    # ------------------------------------------------------------------ Heartbeat

    def heartbeat(
        self, now_ms: int, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """Heartbeat: refreshes the member's session when the member and generation match.

        Returns:
            COORDINATOR_NOT_AVAILABLE (Dead), UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
            ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (PreparingRebalance), else NONE
            (CompletingRebalance, Stable). An Empty group has no members: 25.
        """
        if self._state is _DEAD:
            return ErrorCode.coordinator_not_available
        code = self._validate_member(member_id, group_instance_id)
        if code is not ErrorCode.none:
            return code
        if generation_id != self._generation_id:
            return ErrorCode.illegal_generation
        self._members[member_id].last_heartbeat_ms = now_ms
        if self._state is _PREPARING:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # ------------------------------------------------------------------ LeaveGroup

    def leave(self, now_ms: int, members: Iterable[tuple[str, str | None]]) -> LeaveResult:
        """LeaveGroup for ``(member_id, group_instance_id)`` pairs (v0-2: one pair, no id).

        A static member may be removed by instance id alone (member id ``""``, as the
        admin client does); a non-empty member id that does not match the instance's
        current one is FENCED_INSTANCE_ID. Remaining members rebalance; a group left with
        no member completes its join phase to Empty (generation + 1).

        Returns:
            ``LeaveResult`` with the per-member codes and the released replies.
        """
        requested = list(members)
        if self._state is _DEAD:
            code = ErrorCode.coordinator_not_available
            return LeaveResult(
                code, tuple(LeaveMemberResult(m, i, code) for m, i in requested), ()
            )
        results: list[LeaveMemberResult] = []
        effects: list[Effect] = []
        for member_id, instance_id in requested:
            if instance_id is None:
                if member_id in self._pending:
                    del self._pending[member_id]
                    effects += self._maybe_complete_join(now_ms)
                    code = ErrorCode.none
                elif member_id in self._members:
                    effects += self._remove_member_and_update(now_ms, member_id)
                    code = ErrorCode.none
                else:
                    code = ErrorCode.unknown_member_id
            else:
                known = self._static.get(instance_id)
                if known is None:
                    code = ErrorCode.unknown_member_id
                elif member_id not in (UNKNOWN_MEMBER_ID, known):
                    code = ErrorCode.fenced_instance_id
                else:
                    effects += self._remove_member_and_update(now_ms, known)
                    code = ErrorCode.none
            results.append(LeaveMemberResult(member_id, instance_id, code))
        return LeaveResult(ErrorCode.none, tuple(results), tuple(effects))

    # ------------------------------------------------------------------ offsets, admin

    def validate_commit(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        now_ms: int | None = None,
        *,
        transactional: bool = False,
    ) -> ErrorCode:
        """May an OffsetCommit (or, ``transactional=True``, a TxnOffsetCommit) go ahead?

        Apache ``ClassicGroup.validateOffsetCommit``: a negative generation on an Empty
        group is accepted (admin client, manual assignment). Otherwise a member id,
        instance id or generation >= 0 must name a current member (25 / 82) of this
        generation (22); with none of them the group must be Empty (25), except for
        TxnOffsetCommit whose v0-2 carry no member at all. OffsetCommit during
        CompletingRebalance gets 27. Dead: COORDINATOR_NOT_AVAILABLE.

        Args:
            now_ms: when given and the commit is accepted from a member, refreshes its
                session (Apache does).
        """
        if self._state is _DEAD:
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and self._state is _EMPTY:
            return ErrorCode.none
        if (
            generation_id >= 0
            or member_id != UNKNOWN_MEMBER_ID
            or group_instance_id is not None
        ):
            code = self._validate_member(member_id, group_instance_id)
            if code is not ErrorCode.none:
                return code
            if generation_id != self._generation_id:
                return ErrorCode.illegal_generation
        elif not transactional and self._state is not _EMPTY:
            return ErrorCode.unknown_member_id
        if not transactional and self._state is _COMPLETING:
            return ErrorCode.rebalance_in_progress
        if now_ms is not None and member_id in self._members:
            self._members[member_id].last_heartbeat_ms = now_ms
        return ErrorCode.none

    def validate_txn_commit(
        self, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """``validate_commit(..., transactional=True)``, for TxnOffsetCommit."""
        return self.validate_commit(
            member_id, group_instance_id, generation_id, transactional=True
        )

    def describe(self) -> GroupDescription:
        """DescribeGroups view.

        Returns:
            ``{"group_id", "state"`` (Kafka spelling), ``"protocol_type"`` (``""`` when
            unknown), ``"protocol"`` (the selected protocol, ``""`` unless Stable),
            ``"generation_id", "leader_id", "members"}``; each member is a dict with
            ``member_id, group_instance_id, client_id, client_host, metadata, assignment``
            (metadata and assignment are ``b""`` unless Stable, as in Apache).
        """
        stable = self._state is _STABLE
        return {
            "group_id": self.group_id,
            "state": self._state.value,
            "protocol_type": self._protocol_type or "",
            "protocol": (self._protocol_name or "") if stable else "",
            "generation_id": self._generation_id,
            "leader_id": self._leader_id,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "metadata": m.metadata_for(self._protocol_name) if stable else b"",
                    "assignment": (m.assignment or b"") if stable else b"",
                }
                for m in self._members.values()
            ],
        }

    def delete_check(self) -> ErrorCode:
        """DeleteGroups: NONE when Empty (then call ``mark_dead``), GROUP_ID_NOT_FOUND when
        already Dead, else NON_EMPTY_GROUP."""
        if self._state is _EMPTY:
            return ErrorCode.none
        if self._state is _DEAD:
            return ErrorCode.group_id_not_found
        return ErrorCode.non_empty_group

    def mark_dead(
        self, now_ms: int, error_code: ErrorCode = ErrorCode.not_coordinator
    ) -> list[Effect]:
        """Move to Dead: the group was deleted, or this broker stopped coordinating it.

        Every parked request is answered with ``error_code`` (NOT_COORDINATOR by default,
        as Apache does on unload: the client rediscovers the coordinator); members,
        pending members and timers are dropped.
        """
        effects: list[Effect] = []
        for m in self._members.values():
            if m.join_key is not None:
                effects.append(join_error(m.join_key, error_code, m.member_id))
            if m.sync_key is not None:
                effects.append(SyncReply(m.sync_key, error_code, None, None, b""))
        self._members.clear()
        self._static.clear()
        self._pending.clear()
        self._pending_sync.clear()
        self._leader_id = None
        self._protocol_name = None
        self._join_deadline_ms = None
        self._sync_deadline_ms = None
        self._initial_rebalance = False
        self._transition(_DEAD, now_ms)
        return effects

