"""How a JoinGroup changes a classic group's members: a new member, a known member's new
request, and a static member replaced by its new incarnation; each then starts or
completes the join phase (``domain.groups.classic.rebalance``).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from kaas.domain.groups.classic.core import _COMPLETING, _PREPARING, _STABLE
from kaas.domain.groups.classic.rebalance import RebalancingGroup
from kaas.domain.groups.classic.records import Effect, JoinReply, Member, SyncReply, join_error

__all__ = ["JoinFields", "MembershipGroup"]

class JoinFields(NamedTuple):
    """What a JoinGroup gives its member."""

    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    request_key: Hashable

    def member(self, member_id: str, group_instance_id: str | None, now_ms: int,
               assignment: bytes | None = None) -> Member:
        """A member made by this JoinGroup, its request parked."""
        return Member(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            protocol_type=self.protocol_type,
            protocols=self.protocols,
            last_heartbeat_ms=now_ms,
            assignment=assignment,
            join_key=self.request_key,
        )


class MembershipGroup(RebalancingGroup):
    """The member changes a JoinGroup makes (``Group.join`` picks one)."""

    def _add_member(
        self, now_ms: int, member_id: str, group_instance_id: str | None, fields: JoinFields
    ) -> list[Effect]:
        if self._state is _PREPARING and self._initial_rebalance:
            self._new_member_added = True
        if not self._members:
            self._protocol_type = fields.protocol_type
        self._members[member_id] = fields.member(member_id, group_instance_id, now_ms)
        if group_instance_id is not None:
            self._static[group_instance_id] = member_id
        if self._leader_id is None:
            self._leader_id = member_id
        return self._maybe_prepare_rebalance_or_complete_join(now_ms)

    def _update_member(self, now_ms: int, member: Member, fields: JoinFields) -> list[Effect]:
        effects: list[Effect] = []
        if member.join_key is not None:  # newest request wins
            effects.append(
                join_error(member.join_key, ErrorCode.rebalance_in_progress, member.member_id)
            )
        member.client_id = fields.client_id
        member.client_host = fields.client_host
        member.session_timeout_ms = fields.session_timeout_ms
        member.rebalance_timeout_ms = fields.rebalance_timeout_ms
        member.protocol_type = fields.protocol_type
        member.protocols = fields.protocols
        member.join_key = fields.request_key
        member.last_heartbeat_ms = now_ms
        return effects + self._maybe_prepare_rebalance_or_complete_join(now_ms)

    def _replace_static_member(
        self,
        now_ms: int,
        old_id: str,
        new_id: str,
        fields: JoinFields,
        *,
        skip_assignment_ok: bool = False,
    ) -> list[Effect]:
        effects: list[Effect] = []
        old_leader = self._leader_id
        old = self._members[old_id]
        # Fence whatever the old incarnation still has parked.
        if old.join_key is not None:
            effects.append(join_error(old.join_key, ErrorCode.fenced_instance_id, old_id))
        if old.sync_key is not None:
            effects.append(SyncReply(old.sync_key, ErrorCode.fenced_instance_id, None, None, b""))
        new = fields.member(new_id, old.group_instance_id, now_ms, old.assignment)
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
                        request_key=fields.request_key,
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
