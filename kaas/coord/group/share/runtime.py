"""The runtime of KIP-932 share groups inside the group coordinator: ShareGroupHeartbeat
and ShareGroupDescribe over the pure ``domain.groups.share.group`` machine, its session timer
and its state on file.

State on file: ``ShareGroup.snapshot()`` in the ``share`` field of the group's file
(``storage.offset_store``), written by the group's coordinator alone (tmp + fsync +
rename). A heartbeat is handled on a copy of the group; a copy that changed is written
before the answer leaves and only then becomes the group, so no answer hands out an epoch
or a partition the file does not hold. A member fenced by its session timer is dropped
in memory first and written when the lease allows (``dirty``). A successor restores the
group from the file, each member's session by the rule all group kinds share
(``domain.groups.sessions``: its last contact on file, a grace once per outage).

As in Apache, the share partitions do not follow the membership: a member that leaves or
is fenced keeps its share sessions on the partitions' leaders until their final request
or their connection's end (``domain.share_sessions``), and its records their locks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from kaas.coord.group.entry import GroupEntry, refuse_unreadable
from kaas.coord.group.filing import save_if_dirty
from kaas.coord.group.kinds import ClassicKind, ConsumerKind, ShareKind
from kaas.coord.group.lookup import owned_groups, typed_entry
from kaas.coord.group.ports import Coordinator
from kaas.domain.groups.share.group import ShareConfig, ShareGroup, ShareHeartbeat, ShareReply, ShareSnapshot
from kaas.errors import KaasError

log = structlog.get_logger()

__all__ = ["ShareGroups"]

#: the heartbeat interval answered to a member whose heartbeat initialized partitions: they
#: are assigned at the group's next heartbeat, so it comes back for them at once instead of
#: a whole ``share.heartbeat.interval.ms`` later
INITIALIZED_INTERVAL_MS = 50


class ShareGroups:
    """The share-group half of ``GroupCoordinator`` (``coordinator.shares``)."""

    def __init__(self, coord: Coordinator) -> None:
        self.coord = coord
        # the share partitions' state goes with a deleted group (``ShareOffsets.delete_all``)
        self.on_delete: Callable[[str], Awaitable[tuple[ErrorCode, str | None]]] | None = None
        self.stats: dict[str, int] = dict.fromkeys(("heartbeats", "group_epoch_bumps", "members_fenced"), 0)

    def config(self, group_id: str) -> tuple[ShareConfig, int]:
        """(the machine's config, the heartbeat interval): the group's
        ``share.session.timeout.ms`` and ``share.heartbeat.interval.ms`` over the broker's
        ``group.share.*``, and ``group.share.max.size``."""
        broker = self.coord.broker
        gc = broker.group_config(group_id)
        return (ShareConfig(gc.share_session_timeout_ms, broker.settings.group_share_max_size),
                gc.share_heartbeat_interval_ms)

    # ------------------------------------------------------------------ loading

    def restore(self, group_id: str, snap: ShareSnapshot) -> ShareKind:
        """The share group its file holds; a snapshot that does not parse is reported once
        and refuses service for the group (never reset)."""
        try:
            g = ShareGroup.restore(group_id, snap, now_ms=self.coord.now(),
                                   session_timeout_ms=self.config(group_id)[0].session_timeout_ms)
        except ValueError as exc:
            log.error("share_group_state_unreadable", group=group_id, error=str(exc))
            return ShareKind(None, error=str(exc))
        log.info("share_group_restored", group=group_id, group_epoch=g.group_epoch, members=len(g.members))
        return ShareKind(g)

    @staticmethod
    def check_readable(e: GroupEntry) -> None:
        """Raises KaasError(UNKNOWN_SERVER_ERROR) while the state on file of a share group,
        or of a classic group (an empty one would become a share group), is unreadable; a
        consumer group is none whatever its state."""
        if not isinstance(e.kind, ConsumerKind):
            refuse_unreadable(e.kind.unreadable)

    # ------------------------------------------------------------------ heartbeat

    async def heartbeat(self, group_id: str, hb: ShareHeartbeat) -> tuple[ShareReply, int]:
        """One ShareGroupHeartbeat: (the reply, the heartbeat interval to send).

        Raises:
            KaasError: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
                (the state could not be written), UNKNOWN_SERVER_ERROR (its file is corrupt).
        """
        coord = self.coord
        config, interval = self.config(group_id)
        coord.check_owner(group_id)
        e = coord.load(group_id, create=hb.member_epoch == 0)
        if e is None:
            return ShareReply(ErrorCode.group_id_not_found, f"Group {group_id} not found."), 0
        self.check_readable(e)
        await coord.offsets(e)
        async with e.lock:
            if coord.groups.get(group_id) is not e:
                raise KaasError(ErrorCode.not_coordinator, "group moved")
            k = e.kind
            if isinstance(k, ShareKind) and k.group is not None:
                work = k.group.copy()
            elif isinstance(k, ClassicKind) and k.group is not None and not k.group.members \
                    and hb.member_epoch == 0:
                work = ShareGroup(group_id)  # an empty classic group (none yet) becomes a share group
            else:
                return ShareReply(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group."), 0
            before = work.group_epoch
            reply = work.heartbeat(hb, coord.now(), coord.topic_image(), config)
            self.stats["heartbeats"] += 1
            if reply.error_code != ErrorCode.none:
                if reply.error_code in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id):
                    log.info("share_heartbeat_refused", group=group_id, member=hb.member_id,
                             member_epoch=hb.member_epoch, error=reply.error_code.name)
                return reply, 0
            if reply.retried:
                log.info("share_heartbeat_previous_epoch", group=group_id, member=hb.member_id,
                         member_epoch=hb.member_epoch, answered_epoch=reply.member_epoch)
            if reply.initialize:
                # Apache writes them initializing, asks its persister, then writes them
                # initialized. Here the persister's step is empty (a share partition's
                # state starts at its leader's first fetch, from share.auto.offset.reset):
                # the heartbeat's one write records them initialized
                work.mark_initialized(reply.initialize)
                interval = min(interval, INITIALIZED_INTERVAL_MS)
            if reply.changed or e.share is None:
                await self.save_group(e, work)
            e.kind = ShareKind(work, dirty=k.dirty if isinstance(k, ShareKind) else False)
        self.stats["group_epoch_bumps"] += work.group_epoch - before
        if work.group_epoch != before:
            log.info("share_group_state", group=group_id, state=work.state, group_epoch=work.group_epoch,
                     members=len(work.members))
            coord.timer_wakeup.set()
        return reply, interval

    async def save_group(self, e: GroupEntry, work: ShareGroup) -> None:
        """Write ``work``'s state into the group's file (``Coordinator.save``'s rules)."""
        new = (await self.coord.offsets(e)).copy()
        new.share = work.snapshot()
        new.membership = new.consumer = None
        await self.coord.save(e, new, kind_write=True)
        work.mark_filed()

    # ------------------------------------------------------------------ timers

    async def fire_timers(self, now: int) -> None:
        """Fence the members whose session ended; write the groups ahead of their file."""
        coord = self.coord
        for gid, e, seen in owned_groups(coord, ShareKind):
            d = seen.group.next_deadline() if seen.group is not None else None
            if seen.group is None or ((d is None or d > now) and not seen.dirty):
                continue
            async with e.lock:
                k = e.kind
                if coord.groups.get(gid) is not e or not isinstance(k, ShareKind) or k.group is None:
                    continue
                work = k.group.copy()
                fenced = work.tick(now, coord.topic_image())
                for mid in fenced:
                    log.info("share_member_fenced", group=gid, member=mid, group_epoch=work.group_epoch)
                self.stats["members_fenced"] += len(fenced)
                self.stats["group_epoch_bumps"] += len(fenced)
                k = e.kind = ShareKind(work, dirty=k.dirty or bool(fenced))
                await save_if_dirty(coord, gid, k, partial(self.save_group, e, work))

    # ------------------------------------------------------------------ admin

    async def drop_state(self, e: GroupEntry) -> ErrorCode:
        """DeleteGroups of a share group (``e.lock`` held): NON_EMPTY_GROUP while it has
        members (one may have joined since the first check), else the state of each of its
        share partitions removed at the partition's leader; the first failure keeps the
        group (as Apache), to be deleted again."""
        if e.share is not None and not e.share.is_empty():
            return ErrorCode.non_empty_group
        if self.on_delete is None:
            return ErrorCode.none
        code, message = await self.on_delete(e.group_id)
        if code != ErrorCode.none:
            log.warning("share_group_state_not_deleted", group=e.group_id, error=code.name, detail=message)
        return code

    async def entry_or_new(self, group_id: str) -> tuple[GroupEntry, ShareGroup]:
        """``entry``, the group made first (empty, on file) when no group has the id: an
        AlterShareGroupOffsets before the first member (Apache 4.2+, KAFKA-19662), so that
        ``kafka-share-groups --reset-offsets`` sets where the group starts.

        Raises:
            KaasError: as ``entry`` (GROUP_ID_NOT_FOUND for a group of another type);
                COORDINATOR_NOT_AVAILABLE when the new group could not be written.
        """
        coord = self.coord
        coord.check_owner(group_id)
        if coord.loaded(group_id) is None and not coord.store.path(group_id).exists():
            e = coord.load(group_id, create=True)
            assert e is not None
            async with e.lock:
                if coord.groups.get(group_id) is e and e.group is not None and not e.group.members:
                    work = ShareGroup(group_id)
                    await self.save_group(e, work)
                    e.kind = ShareKind(work)
                    log.info("share_group_created", group=group_id, by="alter_share_group_offsets")
        return self.entry(group_id)

    async def mark_initialized(self, e: GroupEntry, partitions: dict[str, frozenset[int]]) -> None:
        """The share state of ``partitions`` (topic id -> partitions) was set by
        AlterShareGroupOffsets: the group holds them initialized (``e.lock`` held), as
        Apache's ``initializeShareGroupState`` records them.

        Raises:
            KaasError: COORDINATOR_NOT_AVAILABLE (the group could not be written).
        """
        k = e.kind
        if not isinstance(k, ShareKind) or k.group is None or not partitions:
            return
        work = k.group.copy()
        if work.mark_initialized(partitions):
            await self.save_group(e, work)
            e.kind = ShareKind(work, dirty=k.dirty)

    def entry(self, group_id: str) -> tuple[GroupEntry, ShareGroup]:
        """The share group's entry and machine (loaded from its file when need be).

        Raises:
            KaasError: NOT_COORDINATOR and the like; GROUP_ID_NOT_FOUND for no group or one
                of another type; UNKNOWN_SERVER_ERROR for a corrupt state file.
        """
        return typed_entry(self.coord, group_id, ShareKind, lambda e: e.share)

    def describe(self, group_id: str) -> dict[str, Any]:
        """ShareGroupDescribe's view, topic ids named (topics gone are left out).

        Raises:
            KaasError: as ``entry``.
        """
        d = self.entry(group_id)[1].describe()
        by_id = self.coord.topic_image().by_id
        for m in d["members"]:
            m["assignment"] = {by_id[tid].name: (tid, sorted(ps)) for tid, ps in m["assignment"].items()
                               if tid in by_id}
        return d

