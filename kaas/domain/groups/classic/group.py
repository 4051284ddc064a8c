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

import enum
import types
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import NotRequired, TypedDict

from kio.schema.errors import ErrorCode

from kaas.domain.groups import sessions

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

DEFAULT_INITIAL_REBALANCE_DELAY_MS = 3000
"""Apache ``group.initial.rebalance.delay.ms``."""
DEFAULT_MIN_SESSION_TIMEOUT_MS = 6000
"""Apache ``group.min.session.timeout.ms``."""
DEFAULT_MAX_SESSION_TIMEOUT_MS = 1_800_000
"""Apache ``group.max.session.timeout.ms``."""
UNKNOWN_GENERATION_ID = -1
UNKNOWN_MEMBER_ID = ""
HEARTBEAT_PERSIST_FRACTION = sessions.PERSIST_FRACTION
"""A member's heartbeat time on file is rewritten once it lags the truth by this fraction
of the member's session timeout (``Group.persist_due``)."""


def restored_session_floor_ms(session_timeout_ms: int) -> int:
    """The grace a restored member is given, from the restore, to reach its new
    coordinator (``domain.groups.sessions.grace_ms``: half its session timeout)."""
    return sessions.grace_ms(session_timeout_ms)


def restored_session_deadline(last_heartbeat_ms: int | None, session_timeout_ms: int, now_ms: int) -> int:
    """When the session of a member restored at ``now_ms`` ends unless it is heard from:
    the rule all group kinds share, ``domain.groups.sessions.restored_deadline`` (its time left,
    at least the grace from the restore, never more than the grace past its session on
    file; a whole session from the restore when the file gives no heartbeat time)."""
    return sessions.restored_deadline(last_heartbeat_ms, session_timeout_ms, now_ms)


class MemberDescription(TypedDict):
    """A member as DescribeGroups reports it (``Group.describe``)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


class GroupDescription(TypedDict):
    """A group as DescribeGroups reports it (``Group.describe``): a plain dict."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation_id: NotRequired[int]  # (not of a group known only by its offsets file)
    leader_id: NotRequired[str | None]
    members: list[MemberDescription]
    # why a Dead group is not found (DescribeGroups v6+, KIP-1043: GROUP_ID_NOT_FOUND)
    not_found: NotRequired[str]


class GroupState(enum.Enum):
    """Classic group states; ``.value`` is Kafka's spelling (DescribeGroups, ListGroups)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_EMPTY = GroupState.EMPTY
_PREPARING = GroupState.PREPARING_REBALANCE
_COMPLETING = GroupState.COMPLETING_REBALANCE
_STABLE = GroupState.STABLE
_DEAD = GroupState.DEAD


@dataclass(frozen=True, slots=True)
class JoinMember:
    """One entry of the leader's JoinGroup ``members[]``."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinReply:
    """Answer the JoinGroup request ``request_key``.

    On an error ``generation_id`` is -1, ``protocol_type``/``protocol_name`` are ``None``,
    ``leader`` is ``""`` and ``member_id`` is the request's (or, for MEMBER_ID_REQUIRED,
    the generated one the client must rejoin with). ``members`` is non-empty only for the
    leader.
    """

    request_key: Hashable
    error_code: ErrorCode
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    member_id: str
    members: tuple[JoinMember, ...] = ()
    skip_assignment: bool = False  # JoinGroup v9+: the leader is told it leads, but not to assign


@dataclass(frozen=True, slots=True)
class SyncReply:
    """Answer the SyncGroup request ``request_key`` (``assignment`` is ``b""`` on errors)."""

    request_key: Hashable
    error_code: ErrorCode
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


Effect = JoinReply | SyncReply


@dataclass(frozen=True, slots=True)
class LeaveMemberResult:
    """Per-member outcome of LeaveGroup (v3+ ``members[]``)."""

    member_id: str
    group_instance_id: str | None
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveResult:
    """Outcome of LeaveGroup.

    Attributes:
        error_code: top-level code (NONE unless the group is Dead). For LeaveGroup v0-2
            (one member) the handler uses ``members[0].error_code`` when this is NONE.
        members: one result per requested member, in request order.
        effects: replies to parked requests released by the departure.
    """

    error_code: ErrorCode
    members: tuple[LeaveMemberResult, ...]
    effects: tuple[Effect, ...]


@dataclass(slots=True)
class Member:
    """A group member. Owned by ``Group``; read it, never mutate it from outside.

    ``join_key``/``sync_key`` hold the parked JoinGroup/SyncGroup request (``None`` when
    none is parked); a non-``None`` ``join_key`` is the "joined in the current round"
    flag. ``assignment`` is ``None`` until the leader's SyncGroup gives it a slot.
    ``last_heartbeat_ms`` is when the member was last heard from (for a restored member:
    when its previous coordinator last heard from it, by that coordinator's file).
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    last_heartbeat_ms: int
    assignment: bytes | None = None
    join_key: Hashable | None = None
    sync_key: Hashable | None = None
    grace_until_ms: int = 0

    @property
    def session_deadline_ms(self) -> int:
        """When the member's session ends unless it is heard from: its last heartbeat plus
        its session timeout, but not before ``grace_until_ms`` (the time a restored member
        is given to reach its new coordinator, see ``Group.restore``)."""
        return max(self.last_heartbeat_ms + self.session_timeout_ms, self.grace_until_ms)

    def metadata_for(self, protocol_name: str | None) -> bytes:
        """The metadata this member sent for ``protocol_name`` (``b""`` if none)."""
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        return b""

    def supports(self, protocol_name: str) -> bool:
        return any(name == protocol_name for name, _ in self.protocols)


def _default_id_suffix() -> str:
    return str(uuid.uuid4())


# Timer kinds, in the order they fire when due at the same millisecond: expiries first, so
# that a dead member is gone before a join phase completes at the same instant.
_T_PENDING = 0
_T_SESSION = 1
_T_SYNC = 2
_T_JOIN = 3


class Group:
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

    def __init__(
        self,
        group_id: str,
        *,
        initial_rebalance_delay_ms: int = DEFAULT_INITIAL_REBALANCE_DELAY_MS,
        min_session_timeout_ms: int = DEFAULT_MIN_SESSION_TIMEOUT_MS,
        max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
        id_factory: Callable[[], str] | None = None,
        now_ms: int = 0,
    ) -> None:
        self.group_id = group_id
        self._initial_delay_ms = initial_rebalance_delay_ms
        self._min_session_ms = min_session_timeout_ms
        self._max_session_ms = max_session_timeout_ms
        self._id_factory = id_factory or _default_id_suffix

        self._state = _EMPTY
        self._state_since_ms = now_ms
        self._generation_id = 0
        self._protocol_type: str | None = None
        self._protocol_name: str | None = None
        self._leader_id: str | None = None
        self._members: dict[str, Member] = {}
        self._static: dict[str, str] = {}  # group_instance_id -> member_id
        self._pending: dict[str, int] = {}  # KIP-394 member_id -> expiry
        self._pending_sync: set[str] = set()  # members yet to send SyncGroup
        # Join phase (PreparingRebalance) timer, and the initial-delay bookkeeping.
        self._join_deadline_ms: int | None = None
        self._initial_rebalance = False
        self._new_member_added = False
        self._initial_step_ms = 0
        self._initial_remaining_ms = 0
        # Sync phase timer: members in _pending_sync are removed when it fires.
        self._sync_deadline_ms: int | None = None

    # ------------------------------------------------------------------ read-only view

    @property
    def state(self) -> GroupState:
        return self._state

    @property
    def state_since_ms(self) -> int:
        """When the group entered its current state (for Empty-group offset retention)."""
        return self._state_since_ms

    @property
    def generation_id(self) -> int:
        return self._generation_id

    @property
    def protocol_type(self) -> str | None:
        return self._protocol_type

    @property
    def protocol_name(self) -> str | None:
        return self._protocol_name

    @property
    def leader_id(self) -> str | None:
        return self._leader_id

    @property
    def members(self) -> Mapping[str, Member]:
        """Members by id, in join order (a read-only view)."""
        return types.MappingProxyType(self._members)

    @property
    def pending_member_ids(self) -> frozenset[str]:
        """KIP-394 member ids handed out with MEMBER_ID_REQUIRED and not yet joined."""
        return frozenset(self._pending)

    def static_member_id(self, group_instance_id: str) -> str | None:
        """The member id currently mapped to ``group_instance_id``."""
        return self._static.get(group_instance_id)

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

        def fail(code: ErrorCode, reply_member_id: str = member_id) -> list[Effect]:
            return [_join_error(request_key, code, reply_member_id)]

        if not self._min_session_ms <= session_timeout_ms <= self._max_session_ms:
            return fail(ErrorCode.invalid_session_timeout)
        if self._state is _DEAD:
            return fail(ErrorCode.coordinator_not_available)
        if not self._supports(protocol_type, protos):
            return fail(ErrorCode.inconsistent_group_protocol)

        fields = (client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                  protocol_type, protos, request_key)
        if member_id == UNKNOWN_MEMBER_ID:
            prefix = group_instance_id if group_instance_id is not None else client_id
            new_id = f"{prefix}-{self._id_factory()}"
            if group_instance_id is not None:
                old_id = self._static.get(group_instance_id)
                if old_id is not None:
                    return self._replace_static_member(now_ms, old_id, new_id, *fields,
                                                       skip_assignment_ok=skip_assignment_ok)
                return self._add_member(now_ms, new_id, group_instance_id, *fields)
            if require_known_member:
                self._pending[new_id] = now_ms + session_timeout_ms
                return fail(ErrorCode.member_id_required, new_id)
            return self._add_member(now_ms, new_id, None, *fields)

        if group_instance_id is None and member_id in self._pending:
            del self._pending[member_id]
            return self._add_member(now_ms, member_id, None, *fields)

        code = self._validate_member(member_id, group_instance_id)
        if code is not ErrorCode.none:
            return fail(code)
        member = self._members[member_id]
        if self._state is _PREPARING:
            return self._update_member(now_ms, member, *fields)
        if self._state is _COMPLETING:
            if member.protocols != protos:
                return self._update_member(now_ms, member, *fields)
            # It probably missed the JoinGroup response: answer from this generation.
            member.last_heartbeat_ms = now_ms
            return [self._join_success(member, request_key)]
        if self._state is _STABLE:
            # A leader rejoin forces a rebalance (topic metadata changes); so does a
            # metadata change. A follower rejoining unchanged gets the current generation.
            if member_id == self._leader_id or member.protocols != protos:
                return self._update_member(now_ms, member, *fields)
            member.last_heartbeat_ms = now_ms
            return [self._join_success(member, request_key)]
        return fail(ErrorCode.unknown_member_id)  # pragma: no cover - Empty has no members

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

    # ------------------------------------------------------------------ timers

    def tick(self, now_ms: int) -> list[Effect]:
        """Fire every timer due at ``now_ms``, earliest first.

        Expires KIP-394 pending members and member sessions (the member is removed and
        the group rebalances), removes members that never sent SyncGroup within the
        rebalance timeout, and completes (or, during the initial delay, extends) join
        phases.

        Returns:
            Replies released: join phase results, errors for removed members.
        """
        effects: list[Effect] = []
        while True:
            due = [t for t in self._timers() if t[0] <= now_ms]
            if not due:
                return effects
            _, kind, ident = min(due, key=lambda t: (t[0], t[1]))
            effects += self._fire(now_ms, kind, ident)

    def next_deadline(self) -> int | None:
        """When ``tick`` next has work to do (absolute ms), or ``None``."""
        return min((t[0] for t in self._timers()), default=None)

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
                effects.append(_join_error(m.join_key, error_code, m.member_id))
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

    # ------------------------------------------------------------------ persistence

    def snapshot(self, now_ms: int) -> dict[str, object] | None:
        """The membership to keep on file, so that a coordinator taking the group over
        carries on where this one stopped (Apache keeps only a Stable generation, in
        ``__consumer_offsets``; here a rebalance in progress is kept too).

        For a group with members: its state, generation, protocol, leader, when it entered
        its state (``since_ms``: for a rebalance, when the join or sync phase began) and
        every member with its metadata, assignment (``None`` while it has none) and
        ``last_heartbeat_ms``: when it was last heard from, ``now_ms`` for a member whose
        JoinGroup or SyncGroup is parked here (it is waiting on us, so alive). For an Empty
        group its generation, protocol type and when it became Empty. ``None`` for a Dead
        group.
        """
        if self._state is _DEAD:
            return None
        if self._state is _EMPTY:  # since_ms: when it became Empty (offset retention, KIP-211)
            return {"state": _EMPTY.value, "generation": self._generation_id,
                    "protocol_type": self._protocol_type, "since_ms": self._state_since_ms}
        return {
            "state": self._state.value,
            "generation": self._generation_id,
            "protocol_type": self._protocol_type,
            "protocol": self._protocol_name,
            "leader": self._leader_id,
            "since_ms": self._state_since_ms,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "session_timeout_ms": m.session_timeout_ms,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms,
                    "protocol_type": m.protocol_type,
                    "protocols": [[name, md.hex()] for name, md in m.protocols],
                    "assignment": None if m.assignment is None else m.assignment.hex(),
                    "last_heartbeat_ms": _last_seen_ms(m, now_ms),
                }
                for m in self._members.values()
            ],
        }

    def persist_due(self, on_file: Mapping[str, object] | None, now_ms: int) -> bool:
        """Should ``snapshot(now_ms)`` be written over ``on_file`` (the membership the
        group's file holds)?

        Yes when the membership changed (state, generation, leader, members, assignments),
        or when some member was heard from at least ``HEARTBEAT_PERSIST_FRACTION`` of its
        session after the time on file, so that the file's heartbeat times lag the truth
        by about that much at most, at a cost of one write per group per that interval
        (and none while nobody is heard from, e.g. a group whose members all died). Never
        for a group that never had a generation (reading a group must not create its file)
        nor for a Dead one.
        """
        snap = self.snapshot(now_ms)
        if snap is None:
            return False
        if on_file is None:
            return not (self._state is _EMPTY and self._generation_id == 0)
        if _shape(snap) != _shape(on_file):
            return True
        seen_on_file = {}
        for raw in on_file.get("members") or ():  # type: ignore[attr-defined]
            if isinstance(raw, Mapping):
                seen_on_file[raw.get("member_id")] = raw.get("last_heartbeat_ms")
        for m in self._members.values():
            old = seen_on_file.get(m.member_id)
            if not isinstance(old, int):
                return True  # written before heartbeat times were kept
            if _last_seen_ms(m, now_ms) - old >= m.session_timeout_ms * HEARTBEAT_PERSIST_FRACTION:
                return True
        return False

    @classmethod
    def restore(cls, group_id: str, snap: Mapping[str, object], *, now_ms: int, **settings: object) -> Group:
        """The group as ``snapshot()`` left it, for a coordinator taking it over at
        ``now_ms`` (this coordinator's wall clock; the file's times are the writer's).

        A Stable group keeps its generation, leader, members and assignments. A group
        caught in a rebalance stays in it: PreparingRebalance keeps its members (each
        must rejoin, or have its session end), CompletingRebalance its new generation and
        leader (each member must send SyncGroup); the phase ends at its rebalance timeout
        counted from when it began (``since_ms``), but not before the latest restored
        member's session deadline below, so that no live member is dropped before it could rejoin.

        Each member's session ends at ``restored_session_deadline``
        (``domain.groups.sessions.restored_deadline`` of its last heartbeat on file). A member
        the file gives no heartbeat time for (a file written before they were kept) gets a
        whole session from ``now_ms``, as Apache does on load.

        Raises:
            ValueError: the snapshot is malformed.
        """
        try:
            g = cls(group_id, now_ms=now_ms, **settings)  # type: ignore[arg-type]
            g._generation_id = int(snap["generation"])  # type: ignore[call-overload]
            pt = snap.get("protocol_type")
            g._protocol_type = None if pt is None else str(pt)
            state = snap.get("state")
            if state not in _RESTORABLE:
                raise ValueError(f"bad group snapshot: state {state!r}")
            members = snap.get("members") or []
            if state == _EMPTY.value or not members:
                since = snap.get("since_ms")  # when it became Empty (None: a file older than that)
                g._state_since_ms = now_ms if since is None else min(int(since), now_ms)  # type: ignore[call-overload]
                return g
            proto = snap.get("protocol")
            g._protocol_name = None if proto is None else str(proto)
            g._leader_id = str(snap["leader"])
            for raw in members:  # type: ignore[attr-defined]
                iid = raw["group_instance_id"]
                seen = raw.get("last_heartbeat_ms")
                assignment = raw.get("assignment")
                m = Member(
                    member_id=str(raw["member_id"]),
                    group_instance_id=None if iid is None else str(iid),
                    client_id=str(raw["client_id"]),
                    client_host=str(raw["client_host"]),
                    session_timeout_ms=int(raw["session_timeout_ms"]),
                    rebalance_timeout_ms=int(raw["rebalance_timeout_ms"]),
                    protocol_type=str(raw["protocol_type"]),
                    protocols=tuple((str(n), bytes.fromhex(md)) for n, md in raw["protocols"]),
                    last_heartbeat_ms=now_ms if seen is None else min(int(seen), now_ms),
                    assignment=None if assignment is None else bytes.fromhex(assignment),
                )
                if seen is not None:
                    m.grace_until_ms = restored_session_deadline(int(seen), m.session_timeout_ms, now_ms)
                g._members[m.member_id] = m
                if m.group_instance_id is not None:
                    g._static[m.group_instance_id] = m.member_id
            if g._leader_id not in g._members:
                raise ValueError(f"leader {g._leader_id!r} is not a member")
            since = snap.get("since_ms")
            g._state_since_ms = now_ms if since is None else min(int(since), now_ms)  # type: ignore[call-overload]
            if state == _STABLE.value:
                if g._protocol_name is None or any(m.assignment is None for m in g._members.values()):
                    raise ValueError("a Stable member without an assignment or protocol")
                g._state = _STABLE
                return g
            phase_end = max(
                g._state_since_ms + g._rebalance_timeout_ms(),
                max(m.session_deadline_ms for m in g._members.values()),
            )
            if state == _PREPARING.value:
                g._state = _PREPARING
                g._join_deadline_ms = phase_end
            else:
                if g._protocol_name is None:
                    raise ValueError("CompletingRebalance without a protocol")
                g._state = _COMPLETING
                g._pending_sync = set(g._members)
                g._sync_deadline_ms = phase_end
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"bad group snapshot: {exc!r}") from None
        return g

    # ------------------------------------------------------------------ internals

    def _transition(self, state: GroupState, now_ms: int) -> None:
        if state is not self._state:
            self._state = state
            self._state_since_ms = now_ms

    def _rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self._members.values()), default=0)

    def _supports(self, protocol_type: str, protos: tuple[tuple[str, bytes], ...]) -> bool:
        if self._state is _EMPTY:
            return protocol_type != "" and len(protos) > 0
        return protocol_type == self._protocol_type and any(
            all(m.supports(name) for m in self._members.values()) for name, _ in protos
        )

    def _select_protocol(self) -> str:
        """Each member votes for its most preferred protocol every member supports; the
        most votes wins, ties going to the earlier choice of the first member."""
        members = list(self._members.values())
        candidates = [
            name for name, _ in members[0].protocols if all(m.supports(name) for m in members)
        ]
        votes = dict.fromkeys(candidates, 0)
        for m in members:
            choice = next(name for name, _ in m.protocols if name in votes)
            votes[choice] += 1
        return max(candidates, key=lambda name: votes[name])  # first max on ties

    def _validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if group_instance_id is None:
            return ErrorCode.none if member_id in self._members else ErrorCode.unknown_member_id
        known = self._static.get(group_instance_id)
        if known is None:
            return ErrorCode.unknown_member_id
        if known != member_id:
            return ErrorCode.fenced_instance_id
        return ErrorCode.none

    def _join_success(self, member: Member, request_key: Hashable) -> JoinReply:
        is_leader = member.member_id == self._leader_id
        return JoinReply(
            request_key=request_key,
            error_code=ErrorCode.none,
            generation_id=self._generation_id,
            protocol_type=self._protocol_type,
            protocol_name=self._protocol_name,
            leader=self._leader_id or "",
            member_id=member.member_id,
            members=self._join_members() if is_leader else (),
        )

    def _join_members(self) -> tuple[JoinMember, ...]:
        return tuple(
            JoinMember(m.member_id, m.group_instance_id, m.metadata_for(self._protocol_name))
            for m in self._members.values()
        )

    def _sync_success(self, request_key: Hashable, member: Member) -> SyncReply:
        return SyncReply(
            request_key,
            ErrorCode.none,
            self._protocol_type,
            self._protocol_name,
            member.assignment or b"",
        )

    def _add_member(
        self,
        now_ms: int,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protos: tuple[tuple[str, bytes], ...],
        request_key: Hashable,
    ) -> list[Effect]:
        if self._state is _PREPARING and self._initial_rebalance:
            self._new_member_added = True
        if not self._members:
            self._protocol_type = protocol_type
        self._members[member_id] = Member(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=protos,
            last_heartbeat_ms=now_ms,
            join_key=request_key,
        )
        if group_instance_id is not None:
            self._static[group_instance_id] = member_id
        if self._leader_id is None:
            self._leader_id = member_id
        return self._maybe_prepare_rebalance_or_complete_join(now_ms)

    def _update_member(
        self,
        now_ms: int,
        member: Member,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protos: tuple[tuple[str, bytes], ...],
        request_key: Hashable,
    ) -> list[Effect]:
        effects: list[Effect] = []
        if member.join_key is not None:  # newest request wins
            effects.append(
                _join_error(member.join_key, ErrorCode.rebalance_in_progress, member.member_id)
            )
        member.client_id = client_id
        member.client_host = client_host
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.protocol_type = protocol_type
        member.protocols = protos
        member.join_key = request_key
        member.last_heartbeat_ms = now_ms
        return effects + self._maybe_prepare_rebalance_or_complete_join(now_ms)

    def _replace_static_member(
        self,
        now_ms: int,
        old_id: str,
        new_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protos: tuple[tuple[str, bytes], ...],
        request_key: Hashable,
        *,
        skip_assignment_ok: bool = False,
    ) -> list[Effect]:
        effects: list[Effect] = []
        old_leader = self._leader_id
        old = self._members[old_id]
        # Fence whatever the old incarnation still has parked.
        if old.join_key is not None:
            effects.append(_join_error(old.join_key, ErrorCode.fenced_instance_id, old_id))
        if old.sync_key is not None:
            effects.append(SyncReply(old.sync_key, ErrorCode.fenced_instance_id, None, None, b""))
        new = Member(
            member_id=new_id,
            group_instance_id=old.group_instance_id,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=protos,
            last_heartbeat_ms=now_ms,
            assignment=old.assignment,
            join_key=request_key,
        )
        # Keep the member's place in join order.
        self._members = {
            (new_id if mid == old_id else mid): (new if mid == old_id else m)
            for mid, m in self._members.items()
        }
        assert old.group_instance_id is not None
        self._static[old.group_instance_id] = new_id
        if self._leader_id == old_id:
            self._leader_id = new_id
        if old_id in self._pending_sync:
            self._pending_sync.discard(old_id)
            self._pending_sync.add(new_id)

        if self._state is _STABLE:
            if self._select_protocol() == self._protocol_name:
                # No rebalance. Before v9, report the leader as it was before the
                # replacement, so that a replaced leader does not run a trivial assignment
                # a Stable group would never broadcast (Apache's rule); from v9 (KIP-814)
                # the leader learns it leads, with the members, and skips the assignment.
                new.join_key = None
                skip = skip_assignment_ok and self._leader_id == new_id
                effects.append(
                    JoinReply(
                        request_key=request_key,
                        error_code=ErrorCode.none,
                        generation_id=self._generation_id,
                        protocol_type=self._protocol_type,
                        protocol_name=self._protocol_name,
                        leader=(self._leader_id or "") if skip_assignment_ok else (old_leader or ""),
                        member_id=new_id,
                        members=self._join_members() if skip else (),
                        skip_assignment=skip,
                    )
                )
                return effects
            return effects + self._prepare_rebalance(now_ms)
        if self._state is _COMPLETING:
            # The leader may already be assigning to the old id: redo the round.
            return effects + self._prepare_rebalance(now_ms)
        return effects + self._maybe_complete_join(now_ms)

    def _maybe_prepare_rebalance_or_complete_join(self, now_ms: int) -> list[Effect]:
        if self._state in (_STABLE, _COMPLETING, _EMPTY):
            return self._prepare_rebalance(now_ms)
        return self._maybe_complete_join(now_ms)

    def _prepare_rebalance(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        if self._state is _COMPLETING:
            # Parked syncs must rejoin; the half-made assignment is void.
            for m in self._members.values():
                m.assignment = None
                if m.sync_key is not None:
                    effects.append(
                        SyncReply(m.sync_key, ErrorCode.rebalance_in_progress, None, None, b"")
                    )
                    m.sync_key = None
        self._pending_sync.clear()
        self._sync_deadline_ms = None
        initial = self._state is _EMPTY and self._initial_delay_ms > 0
        self._transition(_PREPARING, now_ms)
        self._initial_rebalance = initial
        self._new_member_added = False
        if initial:
            self._initial_step_ms = self._initial_delay_ms
            self._initial_remaining_ms = max(
                self._rebalance_timeout_ms() - self._initial_delay_ms, 0
            )
            self._join_deadline_ms = now_ms + self._initial_delay_ms
            return effects
        self._join_deadline_ms = now_ms + self._rebalance_timeout_ms()
        return effects + self._maybe_complete_join(now_ms)

    def _maybe_complete_join(self, now_ms: int) -> list[Effect]:
        if self._state is not _PREPARING:
            return []
        if not self._members:
            return self._complete_join(now_ms)
        if self._initial_rebalance or self._pending:
            return []
        if all(m.join_key is not None for m in self._members.values()):
            return self._complete_join(now_ms)
        return []

    def _complete_join(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        self._join_deadline_ms = None
        self._initial_rebalance = False
        self._new_member_added = False
        for m in list(self._members.values()):
            if m.join_key is None and m.group_instance_id is None:
                effects += self._remove_member(m.member_id)
        if self._members and not self._elect_joined_leader():
            # Only static members that did not rejoin are left: wait for them (their
            # sessions expire eventually) for another rebalance timeout.
            self._join_deadline_ms = now_ms + max(self._rebalance_timeout_ms(), 1)
            return effects
        self._generation_id += 1
        if not self._members:
            self._protocol_name = None
            self._leader_id = None
            self._transition(_EMPTY, now_ms)
            return effects
        self._protocol_name = self._select_protocol()
        self._transition(_COMPLETING, now_ms)
        for m in self._members.values():
            if m.join_key is not None:
                effects.append(self._join_success(m, m.join_key))
                m.join_key = None
            m.last_heartbeat_ms = now_ms
        self._pending_sync = set(self._members)
        self._sync_deadline_ms = now_ms + self._rebalance_timeout_ms()
        return effects

    def _elect_joined_leader(self) -> bool:
        leader = self._members.get(self._leader_id) if self._leader_id is not None else None
        if leader is not None and leader.join_key is not None:
            return True
        for m in self._members.values():
            if m.join_key is not None:
                self._leader_id = m.member_id
                return True
        return False

    def _remove_member(self, member_id: str) -> list[Effect]:
        """Drop a member, answering its parked requests with UNKNOWN_MEMBER_ID."""
        m = self._members.pop(member_id)
        effects: list[Effect] = []
        if m.join_key is not None:
            effects.append(_join_error(m.join_key, ErrorCode.unknown_member_id, member_id))
        if m.sync_key is not None:
            effects.append(SyncReply(m.sync_key, ErrorCode.unknown_member_id, None, None, b""))
        if m.group_instance_id is not None and self._static.get(m.group_instance_id) == member_id:
            del self._static[m.group_instance_id]
        self._pending_sync.discard(member_id)
        if not self._pending_sync:
            self._sync_deadline_ms = None
        if self._leader_id == member_id:
            self._leader_id = next(iter(self._members), None)
        return effects

    def _remove_member_and_update(self, now_ms: int, member_id: str) -> list[Effect]:
        effects = self._remove_member(member_id)
        if self._state in (_STABLE, _COMPLETING):
            return effects + self._prepare_rebalance(now_ms)
        if self._state is _PREPARING:
            return effects + self._maybe_complete_join(now_ms)
        return effects

    def _timers(self) -> list[tuple[int, int, str | None]]:
        timers: list[tuple[int, int, str | None]] = [
            (expiry, _T_PENDING, mid) for mid, expiry in self._pending.items()
        ]
        for m in self._members.values():
            if m.join_key is None and m.sync_key is None:
                timers.append((m.session_deadline_ms, _T_SESSION, m.member_id))
        if self._sync_deadline_ms is not None:
            timers.append((self._sync_deadline_ms, _T_SYNC, None))
        if self._join_deadline_ms is not None:
            timers.append((self._join_deadline_ms, _T_JOIN, None))
        return timers

    def _fire(self, now_ms: int, kind: int, ident: str | None) -> list[Effect]:
        if kind == _T_PENDING:
            assert ident is not None
            del self._pending[ident]
            return self._maybe_complete_join(now_ms)
        if kind == _T_SESSION:
            assert ident is not None
            return self._remove_member_and_update(now_ms, ident)
        if kind == _T_SYNC:
            self._sync_deadline_ms = None
            expired = [mid for mid in self._members if mid in self._pending_sync]
            self._pending_sync.clear()
            if not expired or self._state not in (_COMPLETING, _STABLE):
                return []
            effects: list[Effect] = []
            for mid in expired:
                effects += self._remove_member(mid)
            return effects + self._prepare_rebalance(now_ms)
        # _T_JOIN
        if self._initial_rebalance and self._new_member_added and self._initial_remaining_ms > 0:
            # New members keep arriving: hold the first generation a bit longer.
            step = self._initial_step_ms
            self._new_member_added = False
            self._initial_step_ms = min(self._initial_delay_ms, self._initial_remaining_ms)
            self._initial_remaining_ms = max(self._initial_remaining_ms - step, 0)
            self._join_deadline_ms = now_ms + self._initial_step_ms
            return []
        return self._complete_join(now_ms)


_RESTORABLE = (_EMPTY.value, _PREPARING.value, _COMPLETING.value, _STABLE.value)


def _last_seen_ms(m: Member, now_ms: int) -> int:
    """When ``m`` was last heard from: now if its JoinGroup or SyncGroup is parked here."""
    if m.join_key is not None or m.sync_key is not None:
        return now_ms
    return m.last_heartbeat_ms


def _shape(snap: Mapping[str, object]) -> object:
    """A snapshot without its members' heartbeat times: what a membership change changes."""
    members = snap.get("members")
    if not isinstance(members, list):
        return dict(snap)
    stripped = [{k: v for k, v in raw.items() if k != "last_heartbeat_ms"} if isinstance(raw, Mapping) else raw
                for raw in members]
    return {**snap, "members": stripped}


def _join_error(request_key: Hashable, code: ErrorCode, member_id: str) -> JoinReply:
    return JoinReply(
        request_key=request_key,
        error_code=code,
        generation_id=UNKNOWN_GENERATION_ID,
        protocol_type=None,
        protocol_name=None,
        leader="",
        member_id=member_id,
        members=(),
    )
