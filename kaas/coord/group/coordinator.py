"""The group coordinator (``broker.groups``): what every kind of group shares, and the
dispatch to the kind a group is (``kinds``: classic, consumer, share).

It owns the groups in memory (``groups``: id -> ``GroupEntry``), loads a group from its
file as the kind the file holds, reads and writes that file (``offsets``, ``save``), keeps
committed and transactional offsets in it (``storage.offset_store``), answers the admin
calls every kind shares (ListGroups, DeleteGroups, DescribeGroups), and runs every kind's
timers (``fire_timers``, run by ``kaas.tasks.group_timers.serve_timers``). Each kind's
runtime (``classic.runtime``, ``consumer.runtime``, ``share.runtime``) uses it through the
``ports.Coordinator`` port alone.

Which broker coordinates a group is ``broker.group_owner(group_id)`` (docs/groups.rst: the
coordinators list); every entry point checks it and answers NOT_COORDINATOR otherwise."""

from __future__ import annotations

import structlog
from kio.schema.errors import ErrorCode

from kaas.aio import Wakeup
from kaas.coord.group.classic.runtime import ClassicGroups
from kaas.coord.group.consumer.runtime import ConsumerGroups
from kaas.coord.group.entry import GroupEntry, refuse_unreadable
from kaas.coord.group.kinds import AnyKind, ClassicKind, ConsumerKind, GroupKind, ShareKind
from kaas.coord.group.share.runtime import ShareGroups
from kaas.coord.ports import GroupBroker
from kaas.domain.groups.classic.group import Group, GroupDescription, JoinReply, LeaveResult, SyncReply
from kaas.domain.groups.modern.topic_image import TopicImage, TopicInfo
from kaas.errors import CorruptState, KaasError
from kaas.storage.offset_store import Committed, GroupOffsets, OffsetStore, StaleOffsets

log = structlog.get_logger()

__all__ = ["GroupCoordinator"]

Partition = tuple[str, int]


class GroupCoordinator:
    def __init__(self, broker: GroupBroker) -> None:
        self.broker = broker
        self.store = OffsetStore(broker.layout.consumer_offsets, fsync=broker.settings.fsync)
        self.groups: dict[str, GroupEntry] = {}
        self.timer_wakeup = Wakeup()  # set when a parked request is answered or a timer may have moved
        self._image: TopicImage | None = None
        self.classic = ClassicGroups(self)  # classic groups
        self.consumers = ConsumerGroups(self)  # the consumer-protocol groups (KIP-848) and their classic members
        self.shares = ShareGroups(self)  # KIP-932 share groups

    def now(self) -> int:
        """The broker's wall clock (the machines' session and rebalance deadlines)."""
        return self.broker.clock.wall_ms()

    def topic_image(self) -> TopicImage:
        """The broker's topics as the modern groups see them, rebuilt when they changed."""
        topics = self.broker.topics
        version = topics.version
        if self._image is None or self._image.version != version:
            self._image = TopicImage.of(version, [TopicInfo(str(m.topic_id), m.name, m.partitions)
                                                  for m in topics.topics.values()])
        return self._image

    # ------------------------------------------------------------------ ownership

    def check_owner(self, group_id: str) -> None:
        """Hand-off for groups: answer only while we own the group by the placement hash,
        hold a write lease, every live peer has read a heartbeat of this incarnation (it
        unloaded what it held for us: ``ClusterView.acknowledged``) and applied the
        coordinators list in force (``coordinators_settled``; docs/groups.rst)."""
        if not self.broker.owns_group(group_id):
            raise KaasError(ErrorCode.not_coordinator)
        cluster = self.broker.cluster
        if not cluster.lease_valid():
            raise KaasError(ErrorCode.coordinator_load_in_progress, "write lease lapsed")
        if cluster.has_peers() and not cluster.acknowledged():
            raise KaasError(ErrorCode.coordinator_load_in_progress, "joining the cluster")
        if not cluster.coordinators_settled():
            raise KaasError(ErrorCode.coordinator_load_in_progress, "coordinators moving")

    # ------------------------------------------------------------------ loading

    def entry(self, group_id: str) -> GroupEntry:
        """The group in memory, else as its file left it (``load``), else a new one."""
        e = self.load(group_id, create=True)
        assert e is not None
        return e

    def loaded(self, group_id: str) -> GroupEntry | None:
        """The group in memory, else loaded if its file holds members, else None."""
        return self.load(group_id, create=False)

    def load(self, group_id: str, create: bool) -> GroupEntry | None:
        """The group in memory; else, with ``create``, the group as its file left it, of
        the kind the file holds: a classic group's membership is restored (a Stable
        generation with its members and assignments, or a rebalance in progress;
        ``ClassicGroups.restore``), so consumers carry on across a coordinator move without
        a rebalance, and an Empty group keeps its generation, protocol type and when it
        became Empty; a consumer or share group's state likewise. Without ``create`` only
        a group whose file holds members, or a consumer or share state, is loaded."""
        e = self.groups.get(group_id)
        if e is not None:
            return e
        offsets = None
        try:
            offsets = self.store.load(group_id)  # small; memory speed on tmpfs
        except CorruptState:
            pass  # reported, and refused, by offsets()
        except OSError as exc:
            log.warning("group_file_unreadable", group=group_id, error=str(exc))
        kind = self._kind_on_file(group_id, offsets, create)
        if kind is None:
            return None
        e = GroupEntry(group_id, kind, offsets=offsets)
        self.groups[group_id] = e
        return e

    def _kind_on_file(self, group_id: str, offsets: GroupOffsets | None, create: bool) -> AnyKind | None:
        """The kind of group ``offsets`` (the file, if read) holds; a new classic group for
        none with ``create``, else None. A classic membership on file is always parsed: one
        that does not parse is loaded as an unreadable classic group (reported once,
        refused, never reset), one without members only with ``create``."""
        snap = offsets.membership if offsets is not None else None
        if snap is not None and (kind := self.classic.restore(group_id, snap, keep_empty=create)) is not None:
            return kind
        if offsets is not None and offsets.consumer is not None:
            return self.consumers.restore(group_id, offsets.consumer)
        if offsets is not None and offsets.share is not None:
            return self.shares.restore(group_id, offsets.share)
        return ClassicKind(self.new_classic(group_id)) if create else None

    def new_classic(self, group_id: str) -> Group:
        """An empty classic group, with the broker's group settings."""
        s = self.broker.settings
        return Group(group_id, now_ms=self.now(), initial_rebalance_delay_ms=s.group_initial_rebalance_delay_ms,
                     min_session_timeout_ms=s.group_min_session_timeout_ms,
                     max_session_timeout_ms=s.group_max_session_timeout_ms)

    async def offsets(self, e: GroupEntry) -> GroupOffsets:
        """The group's offsets, loaded from its file on first use (after a takeover too)."""
        if e.offsets is None:
            try:
                e.offsets = await self.broker.run_io(self.store.load, e.group_id)
                e.error = None
            except CorruptState as exc:
                if e.error is None:
                    log.error("group_offsets_corrupt", group=e.group_id, error=str(exc))
                e.error = str(exc)
                raise KaasError(ErrorCode.unknown_server_error, f"offsets file unreadable: {exc.reason}") from None
            except OSError as exc:  # EIO and the like: retriable, nothing is loaded
                log.error("group_offsets_unreadable", group=e.group_id, error=str(exc))
                raise KaasError(ErrorCode.coordinator_not_available, str(exc)) from None
        return e.offsets

    async def save(self, e: GroupEntry, new: GroupOffsets, *, kind_write: bool = False) -> None:
        """Write ``new`` (a changed ``copy()`` of ``e.offsets``, taken under ``e.lock``) to
        the group's file, and make it the group's state only once the file holds it: after
        a failed write, memory and file both still hold the previous state. A write other
        than a modern kind's runtime's (``kind_write``) drops a consumer or share state the
        group no longer has (it became a classic group).

        Raises:
            KaasError: NOT_COORDINATOR (not ours, or the file was changed by another
                coordinator), COORDINATOR_LOAD_IN_PROGRESS (lease), COORDINATOR_NOT_AVAILABLE
                (the write failed: ENOSPC, EIO, ...; the client retries).
        """
        gid = e.group_id
        self.check_owner(gid)
        if not kind_write and not isinstance(e.kind, ConsumerKind):  # an unreadable one's stays
            new.consumer = None
        if not kind_write and not isinstance(e.kind, ShareKind):
            new.share = None
        try:
            await self.broker.run_io(self.store.save, new)
        except StaleOffsets as exc:
            # Another broker wrote the file since we read it: our copy (with this
            # request's change) is dropped, the client retries, we re-read.
            log.error("group_offsets_stale", group=gid, error=str(exc))
            e.offsets = None
            if (e.consumer is not None or kind_write) and self.groups.get(gid) is e:
                del self.groups[gid]  # a consumer group is read back whole from the file
            raise KaasError(ErrorCode.not_coordinator, "group file changed by another coordinator") from None
        except OSError as exc:
            log.error("group_offsets_write_failed", group=gid, error=str(exc))
            raise KaasError(ErrorCode.coordinator_not_available, str(exc)) from None
        e.offsets = new

    def forget(self, group_id: str, e: GroupEntry) -> None:
        """Drop ``e`` if it is the group's entry and holds nothing (no classic member nor
        generation, no consumer group, no file): what a refused first request for a new
        group leaves behind."""
        k = e.kind
        blank = e.consumer is None if not isinstance(k, ClassicKind) \
            else k.group is not None and not k.group.members and k.group.generation_id == 0
        if self.groups.get(group_id) is e and blank and not self.store.path(group_id).exists():
            del self.groups[group_id]

    def retire(self, group: Group, code: ErrorCode) -> None:
        """``group`` ends (Dead): its parked JoinGroup/SyncGroup requests are answered ``code``."""
        self.classic.deliver(group.mark_dead(self.now(), code))

    def drop(self, group_id: str, e: GroupEntry, code: ErrorCode) -> None:
        """Forget ``e`` (deleted, expired, or no longer ours); its parked requests are answered ``code``."""
        if e.group is not None:
            self.retire(e.group, code)
        if self.groups.get(group_id) is e:
            del self.groups[group_id]
        self.timer_wakeup.set()

    def unload(self, group_id: str) -> None:
        """This broker stopped coordinating the group: answer parked requests, forget it."""
        e = self.groups.get(group_id)
        if e is not None:
            self.drop(group_id, e, ErrorCode.not_coordinator)
            log.info("group_unloaded", group=group_id)

    # ------------------------------------------------------------------ timers

    def timer_wait_s(self, longest: float) -> float:
        """Seconds until the earliest timer of a loaded group is due, at most ``longest``
        (the wait of ``kaas.tasks.group_timers.serve_timers``, cut short by ``timer_wakeup``)."""
        kinds: list[GroupKind] = [e.kind for e in self.groups.values()]
        deadline = min((d for k in kinds if (d := k.next_deadline()) is not None), default=None)
        wait = longest if deadline is None else max(0.0, (deadline - self.now()) / 1000)
        return min(wait, longest)

    async def fire_timers(self) -> None:
        """Run every kind's timers that are due, and keep what is ahead of the file on it."""
        now = self.now()
        await self.classic.fire_timers(now)
        await self.consumers.fire_timers(now)
        await self.shares.fire_timers(now)

    # ------------------------------------------------------------------ the classic protocol

    async def join(self, group_id: str, *, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member: bool,
                   skip_assignment_ok: bool = False) -> JoinReply:
        """JoinGroup: to a classic group, or a consumer group's classic member (KIP-848's
        migration); an empty consumer group becomes a classic group."""
        self.check_owner(group_id)
        e = self.entry(group_id)
        await self.offsets(e)
        k = e.kind
        if isinstance(k, ShareKind):
            raise KaasError(ErrorCode.group_id_not_found, f"Group {group_id} is not a classic group.")
        refuse_unreadable(k.unreadable)
        if isinstance(k, ConsumerKind):
            assert k.group is not None
            if not k.group.is_empty():
                return await self.consumers.classic.join(
                    e, member_id=member_id, group_instance_id=group_instance_id, client_id=client_id,
                    client_host=client_host, session_timeout_ms=session_timeout_ms,
                    rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type, protocols=protocols,
                    require_known_member=require_known_member)
            e.kind = ClassicKind(self.new_classic(group_id))  # an empty consumer group becomes a classic one
        return await self.classic.join(e, member_id=member_id, group_instance_id=group_instance_id,
                                       client_id=client_id, client_host=client_host,
                                       session_timeout_ms=session_timeout_ms,
                                       rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type,
                                       protocols=protocols, require_known_member=require_known_member,
                                       skip_assignment_ok=skip_assignment_ok)

    async def sync(self, group_id: str, *, member_id: str, group_instance_id: str | None, generation_id: int,
                   assignments: list[tuple[str, bytes]], protocol_type: str | None,
                   protocol_name: str | None) -> SyncReply:
        self.check_owner(group_id)
        e = self.loaded(group_id)
        if e is None:
            raise KaasError(ErrorCode.unknown_member_id)
        if self.consumers.classic.serves(e):
            return self.consumers.classic.sync(e, member_id=member_id, group_instance_id=group_instance_id,
                                               generation_id=generation_id, protocol_type=protocol_type,
                                               protocol_name=protocol_name)
        return await self.classic.sync(e, member_id=member_id, group_instance_id=group_instance_id,
                                       generation_id=generation_id, assignments=assignments,
                                       protocol_type=protocol_type, protocol_name=protocol_name)

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        self.check_owner(group_id)
        e = self.loaded(group_id)
        if e is None:
            return ErrorCode.unknown_member_id
        if self.consumers.classic.serves(e):
            return self.consumers.classic.heartbeat(e, member_id, group_instance_id, generation_id)
        return self.classic.heartbeat(e, member_id, group_instance_id, generation_id)

    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> LeaveResult:
        self.check_owner(group_id)
        e = self.loaded(group_id)
        if e is None:
            return self.classic.leave_unknown(members)
        if self.consumers.classic.serves(e):
            return await self.consumers.classic.leave(e, members)
        return self.classic.leave(e, members)

    # ------------------------------------------------------------------ admin

    def describe(self, group_id: str) -> GroupDescription:
        """DescribeGroups: a classic group's view; another kind is Dead, not found (Apache)."""
        self.check_owner(group_id)
        e = self.loaded(group_id)
        if e is None:
            # Known only by its offsets file (not loaded here since a restart or move): Empty.
            if self.store.path(group_id).exists():
                return {"group_id": group_id, "state": "Empty", "protocol_type": "", "protocol": "", "members": []}
            return {"group_id": group_id, "state": "Dead", "protocol_type": "", "protocol": "", "members": [],
                    "not_found": f"Group {group_id} not found."}
        if isinstance(e.kind, ConsumerKind | ShareKind):
            # not a classic group: Apache answers Dead (and, from v6, GROUP_ID_NOT_FOUND)
            return {"group_id": group_id, "state": "Dead", "protocol_type": "", "protocol": "", "members": [],
                    "not_found": f"Group {group_id} is not a classic group."}
        return self.classic.describe(e)

    def list_groups(self) -> list[dict[str, str]]:
        """The groups this broker coordinates: group id, protocol type, state and type
        (``classic``, ``consumer`` or ``share``). A group known only by its file is loaded
        when the file holds a consumer or share group (its type and state are in it); a
        classic one is listed Empty until a request loads it (a load starts its members'
        restored sessions, which must not run before a client can reach this broker)."""
        out: dict[str, dict[str, str]] = {}
        for gid in self.store.list_groups():
            if self.broker.owns_group(gid):
                out[gid] = {"group_id": gid, "protocol_type": "consumer", "group_state": "Empty",
                            "group_type": "classic"}
                if gid not in self.groups:
                    self._load_modern(gid)
        for gid, e in self.groups.items():
            # a group only committed to (no member ever joined) has no listing, as in Apache
            if self.broker.owns_group(gid) and (row := e.kind.listing()) is not None:
                out[gid] = {"group_id": gid, "protocol_type": row[0], "group_state": row[1], "group_type": row[2]}
        return list(out.values())

    def _load_modern(self, group_id: str) -> None:
        """Load the group if its file holds a consumer or share group's state."""
        try:
            on_file = self.store.load(group_id)
        except (CorruptState, OSError):
            return
        if on_file.consumer is not None or on_file.share is not None:
            self.load(group_id, create=False)

    async def delete(self, group_id: str) -> ErrorCode:
        self.check_owner(group_id)
        e = self.loaded(group_id)
        exists_on_disk = self.store.path(group_id).exists()
        if e is None and not exists_on_disk:
            return ErrorCode.group_id_not_found
        if e is not None:
            k = e.kind
            if isinstance(k, ConsumerKind | ShareKind) and k.group is not None and not k.group.is_empty():
                return ErrorCode.non_empty_group
            # an unreadable group is deleted whole (the way out of it: docs/groups.rst)
            code = k.group.delete_check() if isinstance(k, ClassicKind) and k.group is not None else ErrorCode.none
            if code != ErrorCode.none and not (code == ErrorCode.group_id_not_found and exists_on_disk):
                return code
            async with e.lock:  # not while a write of this group is under way
                if isinstance(e.kind, ShareKind):  # its share partitions' state first
                    code = await self.shares.drop_state(e)
                    if code != ErrorCode.none:
                        return code
                self.drop(group_id, e, ErrorCode.coordinator_not_available)
        try:
            await self.broker.run_io(self.store.delete, group_id)
        except OSError as exc:  # the file stays: the group is loaded from it again on next use
            log.error("group_offsets_delete_failed", group=group_id, error=str(exc))
            raise KaasError(ErrorCode.coordinator_not_available, str(exc)) from None
        log.info("group_deleted", group=group_id)
        return ErrorCode.none

    # ------------------------------------------------------------------ offsets

    def _no_group_answer(self, group_id: str, generation: int, group_id_not_found: bool) -> ErrorCode | None:
        """Apache 4.4 ``OffsetMetadataManager.validate(Transactional)OffsetCommit``: a
        commit with a generation (member epoch) >= 0 to no group is GROUP_ID_NOT_FOUND where
        the request's version knows that error (``group_id_not_found``), else
        ILLEGAL_GENERATION; a negative one makes a simple group. No group: none in memory
        with members or a consumer or share state (an empty classic group a read made is
        none), and no file. None: the group exists, or the generation is negative."""
        e = self.groups.get(group_id)
        if generation < 0 or (e is not None and e.kind.counts_as_group()):
            return None
        if self.store.path(group_id).exists():
            return None
        return ErrorCode.group_id_not_found if group_id_not_found else ErrorCode.illegal_generation

    def _commit_entry(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                      *, api_version: int, transactional: bool) -> tuple[GroupEntry | None, ErrorCode]:
        """The group an (transactional) offset commit goes to, and its kind's verdict on the
        committing member (a share group keeps no offsets: GROUP_ID_NOT_FOUND, as Apache)."""
        self.check_owner(group_id)
        unknown = self._no_group_answer(group_id, generation_id, api_version >= (6 if transactional else 9))
        if unknown is not None:
            return None, unknown
        e = self.entry(group_id)
        k = e.kind
        if isinstance(k, ShareKind):
            return None, ErrorCode.group_id_not_found
        refuse_unreadable(k.unreadable)
        if isinstance(k, ConsumerKind):
            # KIP-447 fencing by member epoch: a stale one is ILLEGAL_GENERATION (Apache)
            assert k.group is not None
            return e, k.group.validate_commit(member_id, group_instance_id, generation_id,
                                              transactional=transactional,
                                              api_version=0 if transactional else api_version)
        assert k.group is not None
        if transactional:
            return e, k.group.validate_txn_commit(member_id, group_instance_id, generation_id)
        return e, k.group.validate_commit(member_id, group_instance_id, generation_id, self.now())

    async def commit(self, group_id: str, *, member_id: str, group_instance_id: str | None, generation_id: int,
                     offsets: dict[Partition, Committed], api_version: int = 9) -> ErrorCode:
        """OffsetCommit; ``generation_id`` is the member epoch for a consumer group."""
        e, code = self._commit_entry(group_id, member_id, group_instance_id, generation_id,
                                     api_version=api_version, transactional=False)
        if e is None or code != ErrorCode.none:
            return code
        async with e.lock:
            new = self.classic.with_membership(e, (await self.offsets(e)).copy())
            new.offsets.update(offsets)
            await self.save(e, new)
        return ErrorCode.none

    async def txn_commit(self, group_id: str, *, producer_id: int, member_id: str, group_instance_id: str | None,
                         generation_id: int, offsets: dict[Partition, Committed], api_version: int = 0,
                         ) -> ErrorCode:
        """TxnOffsetCommit: stage offsets under the producer id; invisible until COMMIT."""
        e, code = self._commit_entry(group_id, member_id, group_instance_id, generation_id,
                                     api_version=api_version, transactional=True)
        if e is None or code != ErrorCode.none:
            return code
        async with e.lock:
            new = self.classic.with_membership(e, (await self.offsets(e)).copy())
            new.pending.setdefault(producer_id, {}).update(offsets)
            await self.save(e, new)
        return ErrorCode.none

    async def complete_txn(self, group_id: str, producer_id: int, commit: bool) -> None:
        """The offset hook: promote (COMMIT) or drop (ABORT) the staged offsets. Idempotent."""
        self.check_owner(group_id)
        e = self.entry(group_id)
        async with e.lock:
            g = await self.offsets(e)
            if producer_id not in g.pending:
                return
            new = self.classic.with_membership(e, g.copy())
            staged = new.pending.pop(producer_id)
            if commit:
                new.offsets.update(staged)
            await self.save(e, new)
        log.debug("txn_offsets_completed", group=group_id, producer_id=producer_id, commit=commit,
                  partitions=len(staged))

    async def fetch(self, group_id: str, partitions: list[Partition] | None, require_stable: bool,
                    member_id: str | None = None, member_epoch: int = -1,
                    ) -> tuple[dict[Partition, Committed | None], set[Partition]]:
        """(committed per partition or None, the set of partitions with pending txn offsets).
        ``member_id``/``member_epoch`` (OffsetFetch v9+) are checked for a consumer group.

        Raises:
            KaasError: STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID (consumer group), NOT_COORDINATOR...
        """
        self.check_owner(group_id)
        e = self.loaded(group_id)
        if e is not None and isinstance(e.kind, ShareKind):
            raise KaasError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        if e is not None:
            refuse_unreadable(e.kind.unreadable)
        if e is not None and isinstance(e.kind, ConsumerKind):
            assert e.kind.group is not None
            code = e.kind.group.validate_fetch(member_id, member_epoch)
            if code != ErrorCode.none:
                raise KaasError(code)
        if e is None and not self.store.path(group_id).exists():
            # Unknown group (never committed, or deleted): nothing committed, and reading
            # must not create it (it would resurface in ListGroups), as in Apache.
            return ({} if partitions is None else dict.fromkeys(partitions)), set()
        if e is None:
            e = self.entry(group_id)
        g = await self.offsets(e)
        pending: set[Partition] = set()
        for staged in g.pending.values():
            pending.update(staged)
        if partitions is None:
            return dict(g.offsets), pending
        return {tp: g.offsets.get(tp) for tp in partitions}, pending

    async def delete_offsets(self, group_id: str, partitions: list[Partition],
                             ) -> tuple[ErrorCode, dict[Partition, ErrorCode]]:
        self.check_owner(group_id)
        if group_id not in self.groups and not self.store.path(group_id).exists():
            return ErrorCode.group_id_not_found, {}
        e = self.entry(group_id)
        if isinstance(e.kind, ShareKind):
            return ErrorCode.group_id_not_found, {}
        refuse_unreadable(e.kind.unreadable)  # which topics it subscribes to is not known
        await self.offsets(e)
        consumer = e.consumer
        subscribed = consumer.subscribed_topics() if consumer is not None else self.classic.subscribed(e)
        results: dict[Partition, ErrorCode] = {}
        async with e.lock:
            new = (await self.offsets(e)).copy()
            changed = False
            for tp in partitions:
                if tp[0] in subscribed:
                    results[tp] = ErrorCode.group_subscribed_to_topic
                    continue
                if new.offsets.pop(tp, None) is not None:
                    changed = True
                results[tp] = ErrorCode.none
            if changed:
                await self.save(e, new)
        return ErrorCode.none, results
