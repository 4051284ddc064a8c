"""The online migration of KIP-848 in the group coordinator: classic members inside a
consumer group (their JoinGroup, SyncGroup, Heartbeat and LeaveGroup), and the conversions
of a group from classic to consumer (a ConsumerGroupHeartbeat joins a classic group) and
back (its last consumer-protocol member leaves). The rules are the pure
``kaas.domain.groups.consumer.classic_members``; this module decodes and encodes the embedded consumer
protocol (``kaas.wire.consumer_protocol``), writes the group's file before it answers
(the consumer runtime's rule: ``ConsumerGroups.save_group``), and applies the broker's
``group.consumer.migration.policy``.

State on file: a consumer group's classic members are members of its ``consumer`` state
(``"protocol": "classic"`` with their session timeout and protocols); a downgraded group
is a classic group's ``membership`` again. One writer (the group's coordinator), tmp +
fsync + rename, as every group file.
"""

from __future__ import annotations

import uuid
from typing import Protocol

import structlog
from kio.schema.errors import ErrorCode

from kaas.coord.group.consumer.settings import ConsumerSettings
from kaas.coord.group.entry import GroupEntry
from kaas.coord.group.kinds import ClassicKind, ConsumerKind
from kaas.coord.group.ports import Coordinator
from kaas.domain.groups.classic.group import Group, JoinReply, LeaveMemberResult, LeaveResult, SyncReply
from kaas.domain.groups.consumer import classic_members as classic
from kaas.domain.groups.consumer.group import ConsumerGroup
from kaas.domain.groups.consumer.member import ConsumerMember
from kaas.errors import KaasError
from kaas.wire import consumer_protocol as cp

log = structlog.get_logger()

__all__ = ["ClassicMembers"]


class ConsumerRuntime(Protocol):
    """What this module uses of the consumer runtime (``runtime.ConsumerGroups``, which
    makes ``ClassicMembers``)."""

    @property
    def stats(self) -> dict[str, int]: ...

    def settings(self, group_id: str) -> ConsumerSettings: ...

    def count(self, work: ConsumerGroup, epoch_before: int, was: ConsumerMember | None,
              member_id: str | None) -> None: ...

    async def save_group(self, e: GroupEntry, work: ConsumerGroup) -> None: ...


def _consumer(e: GroupEntry) -> ConsumerKind:
    """The consumer group (with members) a classic request was sent here for."""
    assert isinstance(e.kind, ConsumerKind) and e.kind.group is not None
    return e.kind


def _join_error(code: ErrorCode, member_id: str) -> JoinReply:
    return JoinReply(None, code, -1, None, None, "", member_id)


class ClassicMembers:
    """``coordinator.consumers.classic``: the classic protocol's requests to a consumer
    group with members, and the conversions."""

    def __init__(self, coord: Coordinator, consumers: ConsumerRuntime) -> None:
        self.coord = coord
        self.consumers = consumers

    @staticmethod
    def serves(e: GroupEntry) -> bool:
        """Is the group a consumer group with members (where classic requests go here)?"""
        return isinstance(e.kind, ConsumerKind) and e.kind.group is not None and not e.kind.group.is_empty()

    @property
    def policy(self) -> str:
        return self.coord.broker.settings.group_consumer_migration_policy

    # ------------------------------------------------------------------ classic requests

    async def join(self, e: GroupEntry, *, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member: bool) -> JoinReply:
        coord, consumers, gid = self.coord, self.consumers, e.group_id
        settings = consumers.settings(gid)
        if not protocols:
            return _join_error(ErrorCode.inconsistent_group_protocol, member_id)
        try:
            sub = cp.decode_subscription(protocols[0][1])
        except cp.MalformedProtocol as exc:
            log.warning("classic_subscription_malformed", group=gid, member=member_id, error=str(exc))
            return _join_error(ErrorCode.inconsistent_group_protocol, member_id)
        unknown = not member_id
        if unknown:
            member_id = f"{client_id}-{uuid.uuid4()}"
            if require_known_member and group_instance_id is None:
                # the classic protocol's first round trip (KIP-394), as for a classic group
                return _join_error(ErrorCode.member_id_required, member_id)
        async with e.lock:
            k = e.kind
            if coord.groups.get(gid) is not e or not isinstance(k, ConsumerKind) or k.group is None:
                raise KaasError(ErrorCode.not_coordinator, "group moved")
            work = k.group.copy()
            epoch_before, was = work.group_epoch, work.members.get(member_id)
            res = classic.join(work, classic.ClassicJoin(
                member_id, group_instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                protocol_type, tuple(protocols), sub.topics, sub.owned or {}, sub.rack_id),
                coord.now(), coord.topic_image(), settings.config, new_member_id=lambda: member_id)
            if res.error_code != ErrorCode.none:
                return _join_error(res.error_code, member_id)
            consumers.count(work, epoch_before, was, res.member_id)
            if res.changed or k.dirty:
                await consumers.save_group(e, work)
            e.kind = ConsumerKind(work)
        log.info("classic_member_joined_consumer_group", group=gid, member=res.member_id,
                 member_epoch=res.generation_id, group_epoch=work.group_epoch)
        coord.timer_wakeup.set()
        return JoinReply(None, ErrorCode.none, res.generation_id, cp.PROTOCOL_TYPE, res.protocol_name, "",
                         res.member_id)

    def sync(self, e: GroupEntry, *, member_id: str, group_instance_id: str | None, generation_id: int,
             protocol_type: str | None, protocol_name: str | None) -> SyncReply:
        g = _consumer(e).group
        assert g is not None
        code, m = classic.sync(g, member_id, group_instance_id, generation_id, protocol_type, protocol_name)
        if code != ErrorCode.none or m is None or m.classic is None:
            return SyncReply(None, code, None, None, b"")
        g.renew_session(m.member_id, self.coord.now(), m.classic.session_timeout_ms)
        by_id = self.coord.topic_image().by_id
        parts = [(by_id[k].name, ps) for k, ps in m.assigned.items() if k in by_id]
        data = cp.encode_assignment(parts, cp.version_of(m.classic.protocols[0][1]))
        return SyncReply(None, ErrorCode.none, cp.PROTOCOL_TYPE, m.classic.protocols[0][0], data)

    def heartbeat(self, e: GroupEntry, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        k = _consumer(e)
        g = k.group
        assert g is not None
        code = classic.heartbeat(g, member_id, group_instance_id, generation_id, self.coord.now())
        m = g.members.get(member_id)
        if m is not None and m.classic is not None and g.contact_due(member_id, m.classic.session_timeout_ms):
            k.dirty = True  # its last contact on file is a third of a session late:
            self.coord.timer_wakeup.set()  # the timer loop writes the group now
        return code

    async def leave(self, e: GroupEntry, members: list[tuple[str, str | None]]) -> LeaveResult:
        coord = self.coord
        async with e.lock:
            k = e.kind
            if coord.groups.get(e.group_id) is not e or not isinstance(k, ConsumerKind) or k.group is None:
                raise KaasError(ErrorCode.not_coordinator, "group moved")
            work = k.group.copy()
            results = classic.leave(work, members)
            if any(code == ErrorCode.none for _, _, code in results):
                await self.consumers.save_group(e, work)
                e.kind = ConsumerKind(work)
        log.info("classic_members_left_consumer_group", group=e.group_id, members=len(members),
                 group_epoch=e.consumer.group_epoch if e.consumer is not None else None)
        coord.timer_wakeup.set()
        return LeaveResult(ErrorCode.none, tuple(LeaveMemberResult(mid, iid, code) for mid, iid, code in results), ())

    # ------------------------------------------------------------------ conversions

    def upgrade(self, g: Group) -> ConsumerGroup | None:
        """The consumer group a classic group (``g``) with members becomes for a
        ConsumerGroupHeartbeat (the caller runs the heartbeat on it and writes it), or None
        when it may not (the policy, the embedded protocol, the size: Apache
        ``validateOnlineUpgrade``; the caller answers GROUP_ID_NOT_FOUND)."""
        gid = g.group_id
        settings = self.consumers.settings(gid)
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
        snap = classic.upgrade_snapshot(members, g.generation_id, self.coord.topic_image())
        try:
            return ConsumerGroup.restore(gid, snap, now_ms=self.coord.now(),
                                         session_timeout_ms=settings.config.session_timeout_ms)
        except ValueError as exc:
            log.warning("consumer_group_upgrade_refused", group=gid, reason=str(exc))
            return None

    def finish_upgrade(self, old: Group) -> None:
        """The upgraded group is on file: answer the requests parked in the classic group
        (``old``) it was with REBALANCE_IN_PROGRESS (they join again, now into the consumer
        group)."""
        self.coord.retire(old, ErrorCode.rebalance_in_progress)
        self.consumers.stats["upgrades"] += 1
        log.info("consumer_group_upgraded", group=old.group_id)

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
        now = coord.now()
        try:
            snap = classic.downgrade_snapshot(work, leaving, coord.topic_image(), now, cp.encode_assignment,
                                              cp.version_of)
            s = coord.broker.settings
            group = Group.restore(work.group_id, snap, now_ms=now,
                                  initial_rebalance_delay_ms=s.group_initial_rebalance_delay_ms,
                                  min_session_timeout_ms=s.group_min_session_timeout_ms,
                                  max_session_timeout_ms=s.group_max_session_timeout_ms)
        except ValueError as exc:
            log.warning("consumer_group_downgrade_refused", group=work.group_id, reason=str(exc))
            return False
        new = (await coord.offsets(e)).copy()
        new.consumer = None
        new.membership = group.snapshot(now)
        await coord.save(e, new, kind_write=True)
        e.kind = ClassicKind(group)
        self.consumers.stats["downgrades"] += 1
        log.info("consumer_group_downgraded", group=work.group_id, generation=group.generation_id,
                 members=len(group.members))
        coord.timer_wakeup.set()
        return True
