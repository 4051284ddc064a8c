"""The classic group protocol's vocabulary: its states and their transition table, the
effects the machine returns (``JoinReply``, ``SyncReply``, ``LeaveResult``), a member, and
what DescribeGroups reports. ``domain.groups.classic.group`` is the machine.

Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
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
    "VALID_PREVIOUS",
    "ClassicMemberRecord",
    "ClassicSnapshot",
    "Effect",
    "GroupDescription",
    "GroupState",
    "JoinMember",
    "JoinReply",
    "LeaveMemberResult",
    "LeaveResult",
    "Member",
    "MemberDescription",
    "SyncReply",
    "join_error",
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


class ClassicMemberRecord(TypedDict):
    """One member of a ``ClassicSnapshot``."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[list[str]]
    """Each ``[name, metadata in hex]``."""
    assignment: str | None
    """In hex; None while the member has none."""
    last_heartbeat_ms: int
    """Absent in files written before heartbeat times were kept (read as none)."""


class ClassicSnapshot(TypedDict):
    """A classic group on file: the ``membership`` of its offsets file, which gives the
    format (``domain.groups.classic.persistence``: ``Group.snapshot`` writes it,
    ``Group.restore`` checks it). An Empty group has no ``protocol``, ``leader`` nor
    ``members``; files written before ``since_ms`` was kept read as restored now."""

    state: str
    generation: int
    protocol_type: str | None
    since_ms: int
    protocol: NotRequired[str | None]
    leader: NotRequired[str | None]
    members: NotRequired[list[ClassicMemberRecord]]


class GroupState(enum.Enum):
    """Classic group states; ``.value`` is Kafka's spelling (DescribeGroups, ListGroups)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}
"""For each state, the states a classic group may enter it from (Apache's
``ClassicGroupState.validPreviousStates``); ``Group`` checks every change against it
(``domain.groups.transitions``)."""


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



def join_error(request_key: Hashable, code: ErrorCode, member_id: str) -> JoinReply:
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
