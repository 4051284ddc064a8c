"""The runtime of KIP-848 consumer groups (``group.protocol=consumer``) inside the group
coordinator: ConsumerGroupHeartbeat and ConsumerGroupDescribe over the pure
``domain.groups.consumer.group`` machine, its timers, and its state on file.

A group id is a consumer group while its entry's kind is ``kinds.ConsumerKind``. A
heartbeat with epoch 0 turns a group with no classic members into one; a classic JoinGroup
turns an empty consumer group back into a classic group (``GroupCoordinator.join``); the
classic protocol's members inside a consumer group, and the conversions, are
``classic_members``. The runtime uses the coordinator through ``ports.Coordinator``.

State on file: the group's state (``ConsumerGroup.snapshot()``) lives in the ``consumer``
field of the group's offsets file (``storage.offset_store``), written by the group's
coordinator alone, tmp + fsync + rename. A heartbeat is handled on a copy of the group;
when it changed the group (a member, an epoch, an assignment), the copy is written before
the answer is sent and only then becomes the group, so an answer never hands out an epoch
or a partition the file does not hold, and a failed write leaves memory and file as they
were. Timers (session ends, unacknowledged revocations) fence members in memory first and
write when they can (``dirty``): a successor that read the older file only fences them
again. A successor restores the group from the file (``ConsumerGroup.restore``): members
keep their epochs and partitions, and their sessions by the rule all group kinds share
(``domain.groups.sessions``): each member's last contact is on file (a heartbeat writes the group
when the file's lags by a third of a session), and a restored member keeps the time it had
left, with a grace granted once per outage.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from kaas.coord.group.consumer.classic_members import ClassicMembers
from kaas.coord.group.consumer.settings import ConsumerSettings, consumer_settings
from kaas.coord.group.entry import GroupEntry, refuse_unreadable
from kaas.coord.group.filing import save_if_dirty
from kaas.coord.group.kinds import ClassicKind, ConsumerKind, ShareKind
from kaas.coord.group.lookup import owned_groups, typed_entry
from kaas.coord.group.ports import Coordinator
from kaas.domain.groups.consumer.group import ConsumerGroup
from kaas.domain.groups.consumer.heartbeat import LEAVE_EPOCH, Heartbeat, HeartbeatReply, validate_heartbeat
from kaas.domain.groups.consumer.member import ConsumerMember
from kaas.domain.groups.consumer.persistence import ConsumerSnapshot
from kaas.errors import KaasError

log = structlog.get_logger()

__all__ = ["ConsumerGroups"]


class ConsumerGroups:
    """The consumer-protocol half of ``GroupCoordinator`` (``coordinator.consumers``)."""

    def __init__(self, coord: Coordinator) -> None:
        self.coord = coord
        # kaas_consumer_group_events_total{event} (``net.metrics_http``): heartbeats, group
        # epochs bumped, revocations asked of members, members fenced by a timer, and the
        # migration's upgrades and downgrades
        self.stats: dict[str, int] = dict.fromkeys(
            ("heartbeats", "group_epoch_bumps", "revocations", "members_fenced", "upgrades", "downgrades"), 0)
        self.classic = ClassicMembers(coord, self)  # classic members of consumer groups, conversions

    def settings(self, group_id: str) -> ConsumerSettings:
        """The group's settings (``settings.consumer_settings``).

        Raises:
            KaasError: KAFKA_STORAGE_ERROR, the group config file was never readable.
        """
        return consumer_settings(self.coord.broker, group_id)

    # ------------------------------------------------------------------ loading

    def restore(self, group_id: str, snap: ConsumerSnapshot) -> ConsumerKind:
        """The consumer group its file holds (``Coordinator.load``); a snapshot that does
        not parse is reported once and refuses service for the group (never reset)."""
        try:
            session_ms = self.settings(group_id).config.session_timeout_ms
        except KaasError:  # no group configs yet: the broker's (the next heartbeat applies the group's)
            session_ms = self.coord.broker.settings.group_consumer_session_timeout_ms
        try:
            g = ConsumerGroup.restore(group_id, snap, now_ms=self.coord.now(), session_timeout_ms=session_ms)
        except ValueError as exc:
            log.error("consumer_group_state_unreadable", group=group_id, error=str(exc))
            return ConsumerKind(None, error=str(exc))
        log.info("consumer_group_restored", group=g.group_id, state=g.state, group_epoch=g.group_epoch,
                 assignment_epoch=g.assignment_epoch, members=len(g.members))
        return ConsumerKind(g)

    # ------------------------------------------------------------------ heartbeat

    async def heartbeat(self, group_id: str, hb: Heartbeat, *, api_version: int,
                        topic_visible: Callable[[str], bool] | None = None) -> tuple[HeartbeatReply, int]:
        """One ConsumerGroupHeartbeat: (the reply, the heartbeat interval to send).

        Raises:
            KaasError: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
                (the state could not be written), UNKNOWN_SERVER_ERROR (its file is corrupt).
        """
        coord = self.coord
        settings = self.settings(group_id)
        refused = validate_heartbeat(hb, api_version, group_id, settings.config.assignors)
        if refused is not None:
            return refused, 0
        coord.check_owner(group_id)
        created = group_id not in coord.groups
        e = coord.load(group_id, create=hb.member_epoch == 0)
        if e is None:
            return HeartbeatReply(ErrorCode.group_id_not_found, f"Group {group_id} not found."), 0
        try:
            reply, work = await self._heartbeat(e, hb, settings, topic_visible)
        finally:
            if created:  # a refused join of a new group leaves nothing behind
                coord.forget(group_id, e)
        if reply.error_code != ErrorCode.none:
            return reply, 0
        if reply.changed:
            coord.timer_wakeup.set()
        return reply, work.heartbeat_interval_ms(reply.member_id or hb.member_id, coord.now(),
                                                 settings.heartbeat_interval_ms)

    async def _heartbeat(self, e: GroupEntry, hb: Heartbeat, settings: ConsumerSettings,
                         topic_visible: Callable[[str], bool] | None) -> tuple[HeartbeatReply, ConsumerGroup]:
        """The heartbeat on a copy of the group, written and swapped in when it changed it."""
        coord, group_id = self.coord, e.group_id
        if not isinstance(e.kind, ShareKind):  # a share group is none whatever its state
            refuse_unreadable(e.kind.unreadable)
        await coord.offsets(e)
        async with e.lock:
            if coord.groups.get(group_id) is not e:  # deleted or unloaded meanwhile
                raise KaasError(ErrorCode.not_coordinator, "group moved")
            was_kind = e.kind
            start = self._work(e, hb)
            if isinstance(start, HeartbeatReply):
                return start, ConsumerGroup(group_id)
            work = start
            before = (work.group_epoch, work.assignment_epoch, work.state)
            was = work.members.get(hb.member_id)
            # the group as it was before a leave: a downgrade keeps its generation (Apache
            # converts before the leave's epoch bump, so stable members' commits still hold)
            pre = work.copy() if hb.member_epoch == LEAVE_EPOCH else None
            reply = work.heartbeat(hb, coord.now(), coord.topic_image(), settings.config, topic_visible=topic_visible)
            self.count(work, before[0], was, reply.member_id)
            if reply.error_code != ErrorCode.none:
                return reply, work
            if pre is not None and self.classic.downgrade_due(pre, hb.member_id) \
                    and await self.classic.downgrade(e, pre, hb.member_id):
                return reply, work
            if reply.changed or not isinstance(was_kind, ConsumerKind) or was_kind.dirty:
                await self.save_group(e, work)
            e.kind = ConsumerKind(work)
            if isinstance(was_kind, ClassicKind) and was_kind.group is not None and was_kind.group.members:
                self.classic.finish_upgrade(was_kind.group)
        if before != (work.group_epoch, work.assignment_epoch, work.state):
            log.info("consumer_group_state", group=group_id, state=work.state, group_epoch=work.group_epoch,
                     assignment_epoch=work.assignment_epoch, members=len(work.members))
        return reply, work

    def _work(self, e: GroupEntry, hb: Heartbeat) -> ConsumerGroup | HeartbeatReply:
        """The consumer group the heartbeat runs on (a copy, or a new group: an empty
        classic group becomes one, one with members is converted), or the refusal
        (GROUP_ID_NOT_FOUND) of a group of another kind."""
        group_id, k = e.group_id, e.kind
        if isinstance(k, ShareKind):
            return HeartbeatReply(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        if isinstance(k, ConsumerKind):
            assert k.group is not None  # refused while unreadable
            return k.group.copy()
        if hb.member_epoch != 0:
            return HeartbeatReply(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        assert k.group is not None  # refused while unreadable
        if not k.group.members:
            return ConsumerGroup(group_id)
        # a classic group with members: converted online when the policy allows
        # (KIP-848 migration, ``classic_members``), else GROUP_ID_NOT_FOUND (Apache)
        converted = self.classic.upgrade(k.group)
        if converted is None:
            return HeartbeatReply(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        return converted

    def count(self, work: ConsumerGroup, epoch_before: int, was: ConsumerMember | None,
              member_id: str | None) -> None:
        """The metrics of one heartbeat (a ConsumerGroupHeartbeat, or a classic member's
        JoinGroup): the group epoch's rise, and a revocation newly asked of the member."""
        self.stats["heartbeats"] += 1
        self.stats["group_epoch_bumps"] += max(0, work.group_epoch - epoch_before)
        now = work.members.get(member_id or "")
        if now is not None and now.pending_revocation and (was is None or not was.pending_revocation):
            self.stats["revocations"] += 1

    async def save_group(self, e: GroupEntry, work: ConsumerGroup) -> None:
        """Write ``work``'s state into the group's file (``Coordinator.save``'s rules: the
        file changes, or nothing does and KaasError is raised)."""
        new = (await self.coord.offsets(e)).copy()
        new.consumer = work.snapshot()
        new.membership = None
        await self.coord.save(e, new, kind_write=True)
        work.mark_filed()

    # ------------------------------------------------------------------ timers

    async def fire_timers(self, now: int) -> None:
        """Fence the members whose session or revocation deadline passed, and write the
        groups whose state is ahead of their file."""
        for gid, e, k in owned_groups(self.coord, ConsumerKind):
            d = k.group.next_deadline() if k.group is not None else None
            due = d is not None and d <= now
            if k.group is not None and (due or k.dirty):
                await self._fire(gid, e, now, due)

    async def _fire(self, gid: str, e: GroupEntry, now: int, due: bool) -> None:
        """Fence the group's members (``due``) and write it when it is ahead of its file."""
        coord = self.coord
        async with e.lock:
            k = e.kind
            if coord.groups.get(gid) is not e or not isinstance(k, ConsumerKind) or k.group is None:
                return
            pre = k.group
            work = pre.copy()
            fenced = work.tick(now) if due else []
            self.stats["members_fenced"] += len(fenced)
            self.stats["group_epoch_bumps"] += len(fenced)
            for f in fenced:
                log.info("consumer_member_fenced", group=gid, member=f.member_id, reason=f.reason,
                         group_epoch=work.group_epoch)
            k = e.kind = ConsumerKind(work, dirty=k.dirty or bool(fenced))
            if fenced and coord.broker.cluster.lease_valid():
                # one member fenced: converted from the group before its fence (as a leave)
                one = fenced[0].member_id if len(fenced) == 1 else None
                base, leaving = (pre, one) if one is not None else (work, None)
                try:
                    if self.classic.downgrade_due(base, leaving) and await self.classic.downgrade(e, base, leaving):
                        return
                except KaasError as exc:
                    log.warning("consumer_group_not_saved", group=gid, error=exc.code.name)
            await save_if_dirty(coord, gid, k, partial(self.save_group, e, work))

    # ------------------------------------------------------------------ admin

    def describe(self, group_id: str) -> dict[str, Any]:
        """ConsumerGroupDescribe's view of the group, topic ids mapped to names (topics that
        no longer exist are left out, as Apache does).

        Raises:
            KaasError: NOT_COORDINATOR and the like; GROUP_ID_NOT_FOUND for no group or a
                classic one; UNKNOWN_SERVER_ERROR for a corrupt state file.
        """
        _e, g = typed_entry(self.coord, group_id, ConsumerKind, lambda e: e.consumer)
        d = g.describe(self.settings(group_id).config.assignors)
        by_id = self.coord.topic_image().by_id
        for m in d["members"]:
            for key in ("assignment", "target_assignment", "pending_revocation"):
                m[key] = {by_id[tid].name: (tid, sorted(ps)) for tid, ps in m[key].items() if tid in by_id}
        return d
