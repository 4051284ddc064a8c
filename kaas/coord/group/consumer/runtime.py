"""The runtime of KIP-848 consumer groups (``group.protocol=consumer``) inside the group
coordinator: ConsumerGroupHeartbeat and ConsumerGroupDescribe over the pure
``domain.groups.consumer.group`` machine, its timers, and its state on file.

One coordinator owns both kinds of group: a group id is a consumer group while its entry
(``coordinator._Entry``) holds a ``ConsumerGroup``. A heartbeat with epoch 0 turns a group
with no classic members into one; a classic JoinGroup turns an empty consumer group back
into a classic group (``GroupCoordinator.join``).

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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog
from kio.schema.errors import ErrorCode

from kaas.aio import Wakeup
from kaas.coord.group.entry import GroupEntry as _Entry
from kaas.coord.group.entry import owned_groups, refuse_unreadable, typed_entry
from kaas.coord.ports import GroupBroker
from kaas.domain.groups.consumer.group import ConsumerGroup
from kaas.domain.groups.consumer.heartbeat import (
    LEAVE_EPOCH,
    GroupConfig,
    Heartbeat,
    HeartbeatReply,
    validate_heartbeat,
)
from kaas.domain.groups.consumer.member import ConsumerMember
from kaas.domain.groups.modern.topic_image import TopicImage, TopicInfo
from kaas.errors import KaasError
from kaas.storage.offset_store import GroupOffsets

log = structlog.get_logger()


class _Store(Protocol):
    def path(self, group_id: str) -> Path: ...

    def load(self, group_id: str) -> GroupOffsets: ...


class Conversions(Protocol):
    """The migration between protocols (``classic_members.ClassicMembers``)."""

    def upgrade(self, e: _Entry) -> ConsumerGroup | None: ...

    def finish_upgrade(self, e: _Entry) -> None: ...

    def downgrade_due(self, g: ConsumerGroup, leaving: str | None) -> bool: ...

    async def downgrade(self, e: _Entry, work: ConsumerGroup, leaving: str | None) -> bool: ...


class GroupCoordinator(Protocol):
    """What the consumer runtime uses of ``coordinator.GroupCoordinator`` (a port: the
    coordinator imports this module, not the other way round)."""

    @property
    def broker(self) -> GroupBroker: ...

    @property
    def groups(self) -> Mapping[str, _Entry]: ...

    @property
    def timer_wakeup(self) -> Wakeup: ...

    @property
    def store(self) -> _Store: ...

    def check_owner(self, group_id: str) -> None: ...

    def _now(self) -> int: ...

    def _load(self, group_id: str, create: bool) -> _Entry | None: ...

    @property
    def classic(self) -> Conversions: ...

    @property
    def consumers(self) -> ConsumerGroups: ...

    def _loaded(self, group_id: str) -> _Entry | None: ...

    async def _offsets(self, e: _Entry) -> GroupOffsets: ...

    async def _save(self, e: _Entry, new: GroupOffsets, *, consumer_write: bool = False) -> None: ...

    def forget(self, group_id: str, e: _Entry) -> None: ...

__all__ = ["ConsumerGroups", "ConsumerSettings"]


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """What a consumer group is served with: the machine's config and the heartbeat
    interval told to its members."""

    config: GroupConfig
    heartbeat_interval_ms: int


class ConsumerGroups:
    """The consumer-protocol half of ``GroupCoordinator`` (``coordinator.consumers``)."""

    def __init__(self, coord: GroupCoordinator) -> None:
        self.coord = coord
        self._image: TopicImage | None = None
        # kaas_consumer_group_events_total{event} (``net.metrics_http``): heartbeats, group
        # epochs bumped, revocations asked of members, members fenced by a timer, and the
        # migration's upgrades and downgrades
        self.stats: dict[str, int] = dict.fromkeys(
            ("heartbeats", "group_epoch_bumps", "revocations", "members_fenced", "upgrades", "downgrades"), 0)

    def settings(self, group_id: str) -> ConsumerSettings:
        """The one place a consumer group's settings are read: its group configs
        (``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``) over the
        broker's ``group.consumer.*``.

        Raises:
            KaasError: KAFKA_STORAGE_ERROR, the group config file was never readable.
        """
        broker = self.coord.broker
        s, g = broker.settings, broker.group_config(group_id)
        return ConsumerSettings(
            GroupConfig(g.consumer_session_timeout_ms, tuple(s.group_consumer_assignors), s.group_consumer_max_size),
            g.consumer_heartbeat_interval_ms)

    def image(self) -> TopicImage:
        """The broker's topics as the groups see them, rebuilt when they changed."""
        topics = self.coord.broker.topics
        version = topics.version
        if self._image is None or self._image.version != version:
            self._image = TopicImage.of(version, [TopicInfo(str(m.topic_id), m.name, m.partitions)
                                                  for m in topics.topics.values()])
        return self._image

    # ------------------------------------------------------------------ loading

    def restore(self, e: _Entry, snap: dict[str, Any]) -> None:
        """Make ``e`` the consumer group its file holds (``_load``); a snapshot that does
        not parse is reported once and refuses service for the group (never reset)."""
        gid = e.group.group_id
        try:
            session_ms = self.settings(gid).config.session_timeout_ms
        except KaasError:  # no group configs yet: the broker's (the next heartbeat applies the group's)
            session_ms = self.coord.broker.settings.group_consumer_session_timeout_ms
        try:
            e.consumer = ConsumerGroup.restore(gid, snap, now_ms=self.coord._now(), session_timeout_ms=session_ms)
            e.consumer_error = None
            g = e.consumer
            log.info("consumer_group_restored", group=g.group_id, state=g.state, group_epoch=g.group_epoch,
                     assignment_epoch=g.assignment_epoch, members=len(g.members))
        except ValueError as exc:
            log.error("consumer_group_state_unreadable", group=e.group.group_id, error=str(exc))
            e.consumer_error = str(exc)

    @staticmethod
    def check_readable(e: _Entry) -> None:
        """Raises KaasError(UNKNOWN_SERVER_ERROR) while the group's state on file is corrupt."""
        refuse_unreadable(e.consumer_error)

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
        e = coord._load(group_id, create=hb.member_epoch == 0)
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
        return reply, work.heartbeat_interval_ms(reply.member_id or hb.member_id, coord._now(),
                                                 settings.heartbeat_interval_ms)

    async def _heartbeat(self, e: _Entry, hb: Heartbeat, settings: ConsumerSettings,
                         topic_visible: Callable[[str], bool] | None) -> tuple[HeartbeatReply, ConsumerGroup]:
        """The heartbeat on a copy of the group, written and swapped in when it changed it."""
        coord, group_id = self.coord, e.group.group_id
        self.check_readable(e)
        await coord._offsets(e)
        async with e.lock:
            if coord.groups.get(group_id) is not e:  # deleted or unloaded meanwhile
                raise KaasError(ErrorCode.not_coordinator, "group moved")
            g = e.consumer
            upgraded = False
            if e.share is not None or e.share_error is not None:
                return HeartbeatReply(ErrorCode.group_id_not_found,
                                      f"Group {group_id} is not a consumer group."), ConsumerGroup(group_id)
            if g is None:
                if hb.member_epoch != 0:
                    return HeartbeatReply(ErrorCode.group_id_not_found,
                                          f"Group {group_id} not found."), ConsumerGroup(group_id)
                if e.group.members:
                    # a classic group with members: converted online when the policy allows
                    # (KIP-848 migration, ``classic_members``), else GROUP_ID_NOT_FOUND (Apache)
                    converted = coord.classic.upgrade(e)
                    if converted is None:
                        return HeartbeatReply(ErrorCode.group_id_not_found,
                                              f"Group {group_id} is not a consumer group."), ConsumerGroup(group_id)
                    work, upgraded = converted, True
                else:
                    work = ConsumerGroup(group_id)
            else:
                work = g.copy()
            before = (work.group_epoch, work.assignment_epoch, work.state)
            was = work.members.get(hb.member_id)
            # the group as it was before a leave: a downgrade keeps its generation (Apache
            # converts before the leave's epoch bump, so stable members' commits still hold)
            pre = work.copy() if hb.member_epoch == LEAVE_EPOCH else None
            reply = work.heartbeat(hb, coord._now(), self.image(), settings.config, topic_visible=topic_visible)
            self.count(work, before[0], was, reply.member_id)
            if reply.error_code != ErrorCode.none:
                return reply, work
            if pre is not None and coord.classic.downgrade_due(pre, hb.member_id) \
                    and await coord.classic.downgrade(e, pre, hb.member_id):
                return reply, work
            if reply.changed or e.consumer_dirty or g is None:
                await self._save(e, work)
            e.consumer, e.consumer_dirty = work, False
            if upgraded:
                coord.classic.finish_upgrade(e)
        if before != (work.group_epoch, work.assignment_epoch, work.state):
            log.info("consumer_group_state", group=group_id, state=work.state, group_epoch=work.group_epoch,
                     assignment_epoch=work.assignment_epoch, members=len(work.members))
        return reply, work

    def count(self, work: ConsumerGroup, epoch_before: int, was: ConsumerMember | None,
              member_id: str | None) -> None:
        """The metrics of one heartbeat (a ConsumerGroupHeartbeat, or a classic member's
        JoinGroup): the group epoch's rise, and a revocation newly asked of the member."""
        self.stats["heartbeats"] += 1
        self.stats["group_epoch_bumps"] += max(0, work.group_epoch - epoch_before)
        now = work.members.get(member_id or "")
        if now is not None and now.pending_revocation and (was is None or not was.pending_revocation):
            self.stats["revocations"] += 1

    async def _save(self, e: _Entry, work: ConsumerGroup) -> None:
        """Write ``work``'s state into the group's file (``GroupCoordinator._save``'s rules:
        the file changes, or nothing does and KaasError is raised)."""
        new = (await self.coord._offsets(e)).copy()
        new.consumer = work.snapshot()
        new.membership = None
        await self.coord._save(e, new, consumer_write=True)
        work.mark_filed()

    # ------------------------------------------------------------------ timers

    def next_deadline(self) -> int | None:
        deadlines = [d for e in self.coord.groups.values() if e.consumer is not None
                     and (d := e.consumer.next_deadline()) is not None]
        return min(deadlines, default=None)

    async def fire_timers(self, now: int) -> None:
        """Fence the members whose session or revocation deadline passed, and write the
        groups whose state is ahead of their file."""
        coord = self.coord
        for gid, e, g in owned_groups(coord, lambda e: e.consumer):
            d = g.next_deadline()
            due = d is not None and d <= now
            if not due and not e.consumer_dirty:
                continue
            async with e.lock:
                if coord.groups.get(gid) is not e or e.consumer is None:
                    continue
                pre = e.consumer
                work = e.consumer.copy()
                fenced = work.tick(now) if due else []
                self.stats["members_fenced"] += len(fenced)
                self.stats["group_epoch_bumps"] += len(fenced)
                for f in fenced:
                    log.info("consumer_member_fenced", group=gid, member=f.member_id, reason=f.reason,
                             group_epoch=work.group_epoch)
                dirty = e.consumer_dirty or bool(fenced)
                e.consumer, e.consumer_dirty = work, dirty
                if fenced and coord.broker.cluster.lease_valid():
                    # one member fenced: converted from the group before its fence (as a leave)
                    one = fenced[0].member_id if len(fenced) == 1 else None
                    base, leaving = (pre, one) if one is not None else (work, None)
                    try:
                        if coord.classic.downgrade_due(base, leaving) and \
                                await coord.classic.downgrade(e, base, leaving):
                            continue
                    except KaasError as exc:
                        log.warning("consumer_group_not_saved", group=gid, error=exc.code.name)
                if dirty and coord.broker.cluster.lease_valid():
                    try:
                        await self._save(e, work)
                        e.consumer_dirty = False
                    except KaasError as exc:
                        log.warning("consumer_group_not_saved", group=gid, error=exc.code.name)

    # ------------------------------------------------------------------ admin

    def describe(self, group_id: str) -> dict[str, Any]:
        """ConsumerGroupDescribe's view of the group, topic ids mapped to names (topics that
        no longer exist are left out, as Apache does).

        Raises:
            KaasError: NOT_COORDINATOR and the like; GROUP_ID_NOT_FOUND for no group or a
                classic one; UNKNOWN_SERVER_ERROR for a corrupt state file.
        """
        _e, g = typed_entry(self.coord, group_id, "consumer", lambda e: e.consumer, lambda e: e.consumer_error)
        d = g.describe(self.settings(group_id).config.assignors)
        by_id = self.image().by_id
        for m in d["members"]:
            for key in ("assignment", "target_assignment", "pending_revocation"):
                m[key] = {by_id[tid].name: (tid, sorted(ps)) for tid, ps in m[key].items() if tid in by_id}
        return d
