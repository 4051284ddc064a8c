"""The runtime of classic groups inside the group coordinator: carries out the pure
``domain.groups.classic.group`` machine's effects, parks JoinGroup/SyncGroup requests until
their reply, fires the session and rebalance timers, and keeps the membership on file.

State on file: the group's membership (``Group.snapshot``) in the ``membership`` field of
its file (``storage.offset_store``), written by the group's coordinator alone, tmp + fsync
+ rename: once per change, and its members' heartbeat times once they lag by a third of a
session. A successor restores the group from it (``Group.restore``): consumers carry on
across a coordinator move without a rebalance, and a rebalance under way finishes.

A group of another kind answers the classic requests that reach this runtime as an empty
classic group would (UNKNOWN_MEMBER_ID): the coordinator sends a consumer group's classic
members to ``consumer.classic_members`` instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas.coord.group.entry import GroupEntry, refuse_unreadable
from kaas.coord.group.kinds import ClassicKind, ShareKind
from kaas.coord.group.ports import Coordinator
from kaas.domain.groups import sessions
from kaas.domain.groups.classic.group import (
    Effect,
    Group,
    GroupDescription,
    GroupState,
    JoinReply,
    LeaveMemberResult,
    LeaveResult,
    SyncReply,
)
from kaas.domain.groups.classic.records import ClassicSnapshot
from kaas.errors import KaasError
from kaas.storage.offset_store import GroupOffsets
from kaas.wire import consumer_protocol as cp

log = structlog.get_logger()

__all__ = ["ClassicGroups", "subscribed_topics"]


class ClassicGroups:
    """The classic half of ``GroupCoordinator`` (``coordinator.classic``)."""

    def __init__(self, coord: Coordinator) -> None:
        self.coord = coord
        self._waiters: dict[Hashable, tuple[trio.Event, list[Effect]]] = {}
        self._keys = itertools.count(1)

    def machine(self, e: GroupEntry) -> Group:
        """The group's classic machine; for a group of another kind, an empty stand-in
        (it answers as an empty classic group, and is not kept).

        Raises:
            KaasError: UNKNOWN_SERVER_ERROR while the state on file of a classic or consumer
                group (which may have classic members) is unreadable; a share group has
                none, and answers as an empty classic group whatever its state.
        """
        if not isinstance(e.kind, ShareKind):
            refuse_unreadable(e.kind.unreadable)
        return e.group if e.group is not None else self.coord.new_classic(e.group_id)

    # ------------------------------------------------------------------ loading

    def restore(self, group_id: str, snap: ClassicSnapshot, *, keep_empty: bool) -> ClassicKind | None:
        """The group as its membership on file left it (sessions from the heartbeat times
        on file, ``Group.restore``); None for one without members unless ``keep_empty``
        (a read loads no group that has none). A membership that does not parse is
        reported once and refuses service for the group (never reset): the kind holds no
        machine, only why."""
        s = self.coord.broker.settings
        try:
            group = Group.restore(group_id, snap, now_ms=self.coord.now(),
                                  initial_rebalance_delay_ms=s.group_initial_rebalance_delay_ms,
                                  min_session_timeout_ms=s.group_min_session_timeout_ms,
                                  max_session_timeout_ms=s.group_max_session_timeout_ms)
        except ValueError as exc:
            log.error("group_membership_unreadable", group=group_id, error=str(exc))
            return ClassicKind(None, error=str(exc))
        if not group.members and not keep_empty:
            return None
        log.info("group_restored", group=group_id, state=group.state.value,
                 generation=group.generation_id, members=len(group.members))
        return ClassicKind(group)

    async def persist_membership(self, e: GroupEntry) -> None:
        """Keep the group's membership on file: once per change (state, generation,
        members, assignments), and its members' heartbeat times once they lag by a third
        of a session (``Group.persist_due``). A group that never had a generation writes
        nothing (reading a group must not create its file); neither does one whose file
        could not be read (reported by ``Coordinator.offsets``)."""
        coord = self.coord
        g = e.group
        if (e.offsets is None and e.error is not None) or g is None:
            return
        try:
            if e.offsets is not None and not g.persist_due(e.offsets.membership, coord.now()):
                return
            async with e.lock:
                # re-checked under the lock: a DeleteGroups meanwhile must not be undone
                if coord.groups.get(g.group_id) is not e:
                    return
                now = coord.now()
                current = await coord.offsets(e)
                if not g.persist_due(current.membership, now):
                    return
                new = current.copy()
                new.membership = g.snapshot(now)
                await coord.save(e, new)
        except KaasError as exc:
            log.warning("group_membership_not_saved", group=g.group_id, error=exc.code.name)

    def with_membership(self, e: GroupEntry, new: GroupOffsets) -> GroupOffsets:
        """``new`` (about to be written anyway, for offsets) with the group's membership as
        it is now, when the group has members: the write keeps their heartbeat times fresh
        on file at no extra cost."""
        if e.group is not None and e.group.members:
            new.membership = e.group.snapshot(self.coord.now())
        return new

    @staticmethod
    def contact_due(e: GroupEntry, member_id: str) -> bool:
        """Does a member's heartbeat time on file lag its last heartbeat by a third of its
        session (``domain.groups.sessions.contact_persist_due``)? Asked per heartbeat, of
        that member alone, so that the write follows at once (``persist_membership``)."""
        m = e.group.members.get(member_id) if e.group is not None else None
        membership = e.offsets.membership if e.offsets is not None else None
        if m is None or membership is None:
            return False
        for raw in membership.get("members") or ():
            if isinstance(raw, dict) and raw.get("member_id") == member_id:
                seen = raw.get("last_heartbeat_ms")
                return sessions.contact_persist_due(seen if isinstance(seen, int) else None,
                                                    m.last_heartbeat_ms, m.session_timeout_ms)
        return False

    # ------------------------------------------------------------------ effects

    def deliver(self, effects: Iterable[Effect]) -> None:
        """Answer the parked requests the effects reply to."""
        for eff in effects:
            w = self._waiters.pop(eff.request_key, None)
            if w is not None:
                w[1].append(eff)
                w[0].set()
        self.coord.timer_wakeup.set()

    async def _park(self, key: int, effects: list[Effect]) -> Effect:
        for eff in effects:
            if eff.request_key == key:
                self.deliver([x for x in effects if x is not eff])
                return eff
        ev = trio.Event()
        box: list[Effect] = []
        self._waiters[key] = (ev, box)
        self.deliver(effects)
        try:
            await ev.wait()
        finally:
            self._waiters.pop(key, None)
        return box[0]

    # ------------------------------------------------------------------ timers

    async def fire_timers(self, now: int) -> None:
        """Run the timers that are due (session expiry, rebalance deadlines) and keep the
        owned groups' membership on file (``persist_membership``)."""
        coord = self.coord
        for gid, e in list(coord.groups.items()):
            g = e.group
            if g is None:
                continue
            d = g.next_deadline()
            if d is not None and d <= now:
                before = g.state
                self.deliver(g.tick(now))
                if g.state is not before:
                    log.info("group_state", group=gid, state=g.state.value, generation=g.generation_id)
        for e in list(coord.groups.values()):
            if coord.broker.owns_group(e.group_id) and coord.broker.cluster.lease_valid():
                await self.persist_membership(e)

    # ------------------------------------------------------------------ membership

    async def join(self, e: GroupEntry, *, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member: bool,
                   skip_assignment_ok: bool = False) -> JoinReply:
        """JoinGroup to a classic group (parked until the join phase ends)."""
        g = e.group
        assert g is not None
        key = next(self._keys)
        before = g.state
        effects = g.join(self.coord.now(), member_id, group_instance_id, client_id, client_host,
                         session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols,
                         require_known_member, key, skip_assignment_ok=skip_assignment_ok)
        if g.state is not before:
            log.info("group_state", group=e.group_id, state=g.state.value, generation=g.generation_id)
        reply = await self._park(key, effects)
        assert isinstance(reply, JoinReply)
        if reply.error_code in (ErrorCode.invalid_session_timeout, ErrorCode.inconsistent_group_protocol):
            self.coord.forget(e.group_id, e)  # a join refused before any member: no group (Apache)
        return reply

    async def sync(self, e: GroupEntry, *, member_id: str, group_instance_id: str | None, generation_id: int,
                   assignments: list[tuple[str, bytes]], protocol_type: str | None,
                   protocol_name: str | None) -> SyncReply:
        """SyncGroup (a follower's parked until the leader's)."""
        g = self.machine(e)
        key = next(self._keys)
        before = g.state
        effects = g.sync(self.coord.now(), member_id, group_instance_id, generation_id, assignments, key,
                         protocol_type, protocol_name)
        if g.state is not before:
            log.info("group_state", group=e.group_id, state=g.state.value, generation=g.generation_id)
            # as Apache: the new generation is on file before its assignments are handed out
            await self.persist_membership(e)
        reply = await self._park(key, effects)
        assert isinstance(reply, SyncReply)
        return reply

    def heartbeat(self, e: GroupEntry, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        code = self.machine(e).heartbeat(self.coord.now(), member_id, group_instance_id, generation_id)
        if code is ErrorCode.none and self.contact_due(e, member_id):
            self.coord.timer_wakeup.set()  # the loop writes it now, not at its next turn
        return code

    def leave(self, e: GroupEntry, members: list[tuple[str, str | None]]) -> LeaveResult:
        g = self.machine(e)
        res = g.leave(self.coord.now(), members)
        self.deliver(res.effects)
        log.info("group_members_left", group=e.group_id, members=len(members), state=g.state.value)
        return res

    @staticmethod
    def leave_unknown(members: list[tuple[str, str | None]]) -> LeaveResult:
        """LeaveGroup to no group: every member is unknown, the request itself fine (Apache)."""
        return LeaveResult(ErrorCode.none, tuple(LeaveMemberResult(m, i, ErrorCode.unknown_member_id)
                                                 for m, i in members), ())

    def describe(self, e: GroupEntry) -> GroupDescription:
        d = self.machine(e).describe()
        if d["state"] == "Dead":  # removed (DeleteGroups) or expired: as Apache, not found
            d["not_found"] = f"Group {e.group_id} not found."
        return d

    @staticmethod
    def subscribed(e: GroupEntry) -> set[str]:
        """The topics a classic group's members subscribe to while it is not Empty."""
        if e.group is None or e.group.state is GroupState.EMPTY:
            return set()
        return subscribed_topics(e.group)


def subscribed_topics(group: Group) -> set[str]:
    """The topics a classic consumer group's members subscribe to (none for other types)."""
    if group.protocol_type != "consumer":
        return set()
    return {t for m in group.members.values() for t in _subscription_topics(m.metadata_for(group.protocol_name))}


def _subscription_topics(meta: bytes) -> tuple[str, ...]:
    """Topics of a consumer protocol subscription (none when it does not parse)."""
    try:
        return cp.decode_subscription(meta).topics
    except cp.MalformedProtocol:
        return ()
