"""The classic group's state and what every phase of the machine reads: its fields, the
read-only view, the transition checked against ``records.VALID_PREVIOUS``, member
validation, protocol selection and the successful replies. ``domain.groups.classic.group``
(``Group``) is the machine built on it.

Pure: no I/O.
"""

from __future__ import annotations

import types
import uuid
from collections.abc import Callable, Hashable, Mapping

from kio.schema.errors import ErrorCode

from kaas.domain.groups import transitions
from kaas.domain.groups.classic.records import (
    DEFAULT_INITIAL_REBALANCE_DELAY_MS,
    DEFAULT_MAX_SESSION_TIMEOUT_MS,
    DEFAULT_MIN_SESSION_TIMEOUT_MS,
    VALID_PREVIOUS,
    GroupState,
    JoinMember,
    JoinReply,
    Member,
    SyncReply,
)

__all__ = ["GroupCore"]

_EMPTY = GroupState.EMPTY
_PREPARING = GroupState.PREPARING_REBALANCE
_COMPLETING = GroupState.COMPLETING_REBALANCE
_STABLE = GroupState.STABLE
_DEAD = GroupState.DEAD


def _default_id_suffix() -> str:
    return str(uuid.uuid4())



class GroupCore:
    """The state of the classic consumer group ``group_id``: ``Group`` is the machine, and
    its docstring says what the arguments are."""

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

    # ------------------------------------------------------------------ internals

    def _transition(self, state: GroupState, now_ms: int) -> None:
        """Enter ``state`` (``state_since_ms`` moves only on a change).

        Raises:
            IllegalTransition: ``VALID_PREVIOUS`` does not allow the change (a bug).
        """
        transitions.check("classic", VALID_PREVIOUS, self._state, state)
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
