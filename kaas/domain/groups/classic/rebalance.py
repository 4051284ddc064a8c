"""The classic group's rebalance phases and timers: a join phase (PreparingRebalance)
held for the initial delay and bounded by the rebalance timeout, the sync phase
(CompletingRebalance) that follows, member removal, session expiry, and ``tick``.

Pure: no I/O.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kaas.domain.groups.classic.core import _COMPLETING, _EMPTY, _PREPARING, _STABLE, GroupCore
from kaas.domain.groups.classic.records import Effect, SyncReply, join_error

__all__ = ["RebalancingGroup"]

# Timer kinds, in the order they fire when due at the same millisecond: expiries first, so
# that a dead member is gone before a join phase completes at the same instant.
_T_PENDING = 0
_T_SESSION = 1
_T_SYNC = 2
_T_JOIN = 3


class RebalancingGroup(GroupCore):
    """The join and sync phases and the timers of a classic group (``Group`` answers the
    requests that drive them)."""

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
            effects.append(join_error(m.join_key, ErrorCode.unknown_member_id, member_id))
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

