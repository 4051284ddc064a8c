"""The online migration of KIP-848 in the group coordinator: classic members inside a
consumer group (their JoinGroup, SyncGroup, Heartbeat and LeaveGroup), and the conversions
of a group from classic to consumer (a ConsumerGroupHeartbeat joins a classic group) and
back (its last consumer-protocol member leaves). The rules are the pure
``kaas.domain.groups.consumer.classic_members``; this module decodes and encodes the embedded consumer
protocol (``kaas.wire.consumer_protocol``), writes the group's file before it answers
(the consumer runtime's rule: ``ConsumerGroups._save``), and applies the broker's
``group.consumer.migration.policy``.

State on file: a consumer group's classic members are members of its ``consumer`` state
(``"protocol": "classic"`` with their session timeout and protocols); a downgraded group
is a classic group's ``membership`` again. One writer (the group's coordinator), tmp +
fsync + rename, as every group file.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Protocol

import structlog
from kio.schema.errors import ErrorCode

from kaas.aio import Wakeup
from kaas.coord.group.consumer.runtime import ConsumerGroups
from kaas.coord.group.entry import GroupEntry
from kaas.coord.ports import GroupBroker
from kaas.domain.groups.classic.group import Effect, Group, JoinReply, LeaveMemberResult, LeaveResult, SyncReply
from kaas.domain.groups.consumer import classic_members as classic
from kaas.domain.groups.consumer.group import ConsumerGroup
from kaas.errors import KaasError
from kaas.storage.offset_store import GroupOffsets
from kaas.wire import consumer_protocol as cp

log = structlog.get_logger()

__all__ = ["ClassicMembers"]


class GroupCoordinator(Protocol):
    """What this module uses of ``coordinator.GroupCoordinator`` (a port: the coordinator
    imports this module, not the other way round)."""

    @property
    def broker(self) -> GroupBroker: ...

    @property
    def groups(self) -> Mapping[str, GroupEntry]: ...

    @property
    def timer_wakeup(self) -> Wakeup: ...

    @property
    def consumers(self) -> ConsumerGroups: ...

    def _now(self) -> int: ...

    def _new_classic(self, group_id: str) -> Group: ...

    def _deliver(self, effects: Iterable[Effect]) -> None: ...

    async def _offsets(self, e: GroupEntry) -> GroupOffsets: ...

    async def _save(self, e: GroupEntry, new: GroupOffsets, *, consumer_write: bool = False) -> None: ...


def _join_error(code: ErrorCode, member_id: str) -> JoinReply:
    return JoinReply(None, code, -1, None, None, "", member_id)


class ClassicMembers:
    """``coordinator.classic``: the classic protocol's requests to a consumer group with
    members, and the conversions."""

    def __init__(self, coord: GroupCoordinator) -> None:
        self.coord = coord

    @staticmethod
    def serves(e: GroupEntry) -> bool:
        """Is the group a consumer group with members (where classic requests go here)?"""
        return e.consumer is not None and not e.consumer.is_empty()

    @property
    def policy(self) -> str:
        return self.coord.broker.settings.group_consumer_migration_policy

    # ------------------------------------------------------------------ classic requests

    async def join(self, e: GroupEntry, *, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member: bool) -> JoinReply:
        coord = self.coord
        consumers = coord.consumers
        settings = consumers.settings(e.group.group_id)
        if not protocols:
            return _join_error(ErrorCode.inconsistent_group_protocol, member_id)
        try:
            sub = cp.decode_subscription(protocols[0][1])
        except cp.MalformedProtocol as exc:
            log.warning("classic_subscription_malformed", group=e.group.group_id, member=member_id, error=str(exc))
            return _join_error(ErrorCode.inconsistent_group_protocol, member_id)
        unknown = not member_id
        if unknown:
            member_id = f"{client_id}-{uuid.uuid4()}"
            if require_known_member and group_instance_id is None:
                # the classic protocol's first round trip (KIP-394), as for a classic group
                return _join_error(ErrorCode.member_id_required, member_id)
        async with e.lock:
            if coord.groups.get(e.group.group_id) is not e or e.consumer is None:
                raise KaasError(ErrorCode.not_coordinator, "group moved")
            work = e.consumer.copy()
            epoch_before, was = work.group_epoch, work.members.get(member_id)
            res = classic.join(work, classic.ClassicJoin(
                member_id, group_instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                protocol_type, tuple(protocols), sub.topics, sub.owned or {}, sub.rack_id),
                coord._now(), consumers.image(), settings.config, new_member_id=lambda: member_id)
            if res.error_code != ErrorCode.none:
                return _join_error(res.error_code, member_id)
            consumers.count(work, epoch_before, was, res.member_id)
            if res.changed or e.consumer_dirty:
                await consumers._save(e, work)
            e.consumer, e.consumer_dirty = work, False
        log.info("classic_member_joined_consumer_group", group=e.group.group_id, member=res.member_id,
                 member_epoch=res.generation_id, group_epoch=work.group_epoch)
        coord.timer_wakeup.set()
        return JoinReply(None, ErrorCode.none, res.generation_id, cp.PROTOCOL_TYPE, res.protocol_name, "",
                         res.member_id)

    def sync(self, e: GroupEntry, *, member_id: str, group_instance_id: str | None, generation_id: int,
             protocol_type: str | None, protocol_name: str | None) -> SyncReply:
        g = e.consumer
        assert g is not None
        code, m = classic.sync(g, member_id, group_instance_id, generation_id, protocol_type, protocol_name)
        if code != ErrorCode.none or m is None or m.classic is None:
            return SyncReply(None, code, None, None, b"")
        g.renew_session(m.member_id, self.coord._now(), m.classic.session_timeout_ms)
        by_id = self.coord.consumers.image().by_id
        parts = [(by_id[k].name, ps) for k, ps in m.assigned.items() if k in by_id]
        data = cp.encode_assignment(parts, cp.version_of(m.classic.protocols[0][1]))
        return SyncReply(None, ErrorCode.none, cp.PROTOCOL_TYPE, m.classic.protocols[0][0], data)

    def heartbeat(self, e: GroupEntry, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        g = e.consumer
        assert g is not None
        code = classic.heartbeat(g, member_id, group_instance_id, generation_id, self.coord._now())
        m = g.members.get(member_id)
        if m is not None and m.classic is not None and g.contact_due(member_id, m.classic.session_timeout_ms):
            e.consumer_dirty = True  # its last contact on file is a third of a session late:
            self.coord.timer_wakeup.set()  # the timer loop writes the group now
        return code

    async def leave(self, e: GroupEntry, members: list[tuple[str, str | None]]) -> LeaveResult:
        coord = self.coord
        async with e.lock:
            if coord.groups.get(e.group.group_id) is not e or e.consumer is None:
                raise KaasError(ErrorCode.not_coordinator, "group moved")
            work = e.consumer.copy()
            results = classic.leave(work, members)
            if any(code == ErrorCode.none for _, _, code in results):
                await coord.consumers._save(e, work)
                e.consumer, e.consumer_dirty = work, False
        log.info("classic_members_left_consumer_group", group=e.group.group_id, members=len(members),
                 group_epoch=e.consumer.group_epoch)
        coord.timer_wakeup.set()
        return LeaveResult(ErrorCode.none, tuple(LeaveMemberResult(mid, iid, code) for mid, iid, code in results), ())

    # ------------------------------------------------------------------ conversions

    def upgrade(self, e: GroupEntry) -> ConsumerGroup | None:
        """The consumer group a classic group with members becomes for a
        ConsumerGroupHeartbeat (the caller runs the heartbeat on it and writes it), or None
        when it may not (the policy, the embedded protocol, the size: Apache
        ``validateOnlineUpgrade``; the caller answers GROUP_ID_NOT_FOUND)."""
        g = e.group
        gid = g.group_id
        settings = self.coord.consumers.settings(gid)
        if not classic.upgrade_enabled(self.policy):
            log.info("consumer_group_upgrade_refused", group=gid, reason="migration policy")
            return None
        if g.protocol_type != cp.PROTOCOL_TYPE or len(g.members) > settings.config.max_size:
            log.info("consumer_group_upgrade_refused", group=gid, protocol_type=g.protocol_type,
                     members=len(g.members))
            return None
        members = []
        try:
            for m in g.members.values():
                meta = m.metadata_for(g.protocol_name) or m.protocols[0][1]
                sub = cp.decode_subscription(meta)
                assigned = cp.decode_assignment(m.assignment) if m.assignment else None
                members.append(classic.ClassicMember(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                    m.rebalance_timeout_ms, m.protocols, sub.topics, sub.rack_id, assigned))
        except cp.MalformedProtocol as exc:
            log.warning("consumer_group_upgrade_refused", group=gid, reason=str(exc))
            return None
        snap = classic.upgrade_snapshot(members, g.generation_id, self.coord.consumers.image())
        try:
            return ConsumerGroup.restore(gid, snap, now_ms=self.coord._now(),
                                         session_timeout_ms=settings.config.session_timeout_ms)
        except ValueError as exc:
            log.warning("consumer_group_upgrade_refused", group=gid, reason=str(exc))
            return None

    def finish_upgrade(self, e: GroupEntry) -> None:
        """The upgraded group is on file: answer the classic requests parked in a rebalance
        (they join again, now into the consumer group) and leave an empty classic group
        behind for a later downgrade."""
        coord = self.coord
        coord._deliver(e.group.mark_dead(coord._now(), ErrorCode.rebalance_in_progress))
        e.group = coord._new_classic(e.group.group_id)
        coord.consumers.stats["upgrades"] += 1
        log.info("consumer_group_upgraded", group=e.group.group_id)

    def downgrade_due(self, g: ConsumerGroup, leaving: str | None) -> bool:
        """Should the group become classic once ``leaving`` is gone? (Apache
        ``validateOnlineDowngradeWithFencedMember``: only classic members would remain,
        at least one, and the policy allows it.)"""
        if leaving is not None and leaving not in g.members:
            return False
        remaining = len(g.members) - (1 if leaving is not None else 0)
        return remaining >= 1 and g.all_classic_except(leaving) and classic.downgrade_enabled(self.policy)

    async def downgrade(self, e: GroupEntry, work: ConsumerGroup, leaving: str | None) -> bool:
        """Write the classic group that ``work`` becomes without ``leaving`` (the caller
        holds ``e.lock``) and make it the group; False (the group stays a consumer group)
        when the members cannot form one."""
        coord = self.coord
        now = coord._now()
        try:
            snap = classic.downgrade_snapshot(work, leaving, coord.consumers.image(), now, cp.encode_assignment,
                                              cp.version_of)
            s = coord.broker.settings
            group = Group.restore(work.group_id, snap, now_ms=now,
                                  initial_rebalance_delay_ms=s.group_initial_rebalance_delay_ms,
                                  min_session_timeout_ms=s.group_min_session_timeout_ms,
                                  max_session_timeout_ms=s.group_max_session_timeout_ms)
        except ValueError as exc:
            log.warning("consumer_group_downgrade_refused", group=work.group_id, reason=str(exc))
            return False
        new = (await coord._offsets(e)).copy()
        new.consumer = None
        new.membership = group.snapshot(now)
        await coord._save(e, new, consumer_write=True)
        e.consumer, e.consumer_dirty, e.group = None, False, group
        coord.consumers.stats["downgrades"] += 1
        log.info("consumer_group_downgraded", group=work.group_id, generation=group.generation_id,
                 members=len(group.members))
        coord.timer_wakeup.set()
        return True
