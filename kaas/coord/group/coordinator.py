"""The group coordinator runtime: carries out the pure ``domain.groups.classic.group`` machine's effects,
parks JoinGroup/SyncGroup requests until their reply, fires the session/rebalance timers
(``fire_timers``, run by ``kaas.tasks.group_timers.serve_timers``), and keeps committed
offsets in ``storage.offset_store``.

Which broker coordinates a group is ``broker.group_owner(group_id)`` (docs/groups.rst: the
coordinators list); every entry point checks it and answers NOT_COORDINATOR otherwise."""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas.aio import Wakeup
from kaas.coord.group.consumer.classic_members import ClassicMembers
from kaas.coord.group.consumer.runtime import ConsumerGroups
from kaas.coord.group.entry import GroupEntry, classic_contact_due, no_group_answer
from kaas.coord.group.share.runtime import ShareGroups
from kaas.coord.ports import GroupBroker
from kaas.domain.groups.classic import group as dgroup
from kaas.domain.groups.classic.group import (
    Effect,
    Group,
    GroupDescription,
    GroupState,
    JoinReply,
    LeaveResult,
    SyncReply,
)
from kaas.errors import CorruptState, KaasError
from kaas.storage.offset_store import Committed, GroupOffsets, OffsetStore, StaleOffsets
from kaas.wire import consumer_protocol as cp

log = structlog.get_logger()


_Entry = GroupEntry


class GroupCoordinator:
    def __init__(self, broker: GroupBroker) -> None:
        self.broker = broker
        s = broker.settings
        self.store = OffsetStore(broker.layout.consumer_offsets, fsync=s.fsync)
        self.groups: dict[str, _Entry] = {}
        self._waiters: dict[Hashable, tuple[trio.Event, list[Effect]]] = {}
        self._keys = itertools.count(1)
        self.timer_wakeup = Wakeup()  # set when a parked request is answered or a timer may have moved
        self.consumers = ConsumerGroups(self)  # the consumer-protocol groups (KIP-848)
        self.classic = ClassicMembers(self)  # classic members of consumer groups, conversions
        self.shares = ShareGroups(self)  # KIP-932 share groups

    def _now(self) -> int:
        """The broker's wall clock (the machine's session and rebalance deadlines)."""
        return self.broker.clock.wall_ms()

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

    def _entry(self, group_id: str) -> _Entry:
        """The group in memory, else as its file left it (``_load``), else a new one."""
        e = self._load(group_id, create=True)
        assert e is not None
        return e

    def _loaded(self, group_id: str) -> _Entry | None:
        """The group in memory, else loaded if its file holds members, else None."""
        return self._load(group_id, create=False)

    def _load(self, group_id: str, create: bool) -> _Entry | None:
        """The group in memory; else, with ``create``, the group as its file left it: its
        membership is restored (a Stable generation with its members and assignments, or a
        rebalance in progress; sessions from the heartbeat times on file, see
        ``Group.restore``), so consumers carry on across a coordinator move without a
        rebalance, and a rebalance under way finishes; an Empty group keeps its generation,
        protocol type and when it became Empty. Without ``create`` only a group whose file
        holds members is loaded."""
        e = self.groups.get(group_id)
        if e is not None:
            return e
        s = self.broker.settings
        offsets = None
        try:
            offsets = self.store.load(group_id)  # small; memory speed on tmpfs
        except CorruptState:
            pass  # reported, and refused, by _offsets()
        except OSError as exc:
            log.warning("group_file_unreadable", group=group_id, error=str(exc))
        group = None
        snap = offsets.membership if offsets is not None else None
        if snap is not None and (snap.get("members") or (create and snap.get("state") == GroupState.EMPTY.value)):
            try:
                group = Group.restore(group_id, snap, now_ms=self._now(),
                                      initial_rebalance_delay_ms=s.group_initial_rebalance_delay_ms,
                                      min_session_timeout_ms=s.group_min_session_timeout_ms,
                                      max_session_timeout_ms=s.group_max_session_timeout_ms)
                log.info("group_restored", group=group_id, state=group.state.value,
                         generation=group.generation_id, members=len(group.members))
            except ValueError as exc:
                log.error("group_membership_unreadable", group=group_id, error=str(exc))
        consumer = offsets.consumer if offsets is not None and group is None else None
        share = offsets.share if offsets is not None and group is None else None
        if group is None:
            if not create and consumer is None and share is None:
                return None
            group = self._new_classic(group_id)
        e = _Entry(group, offsets=offsets)
        if consumer is not None:
            self.consumers.restore(e, consumer)
        elif share is not None:
            self.shares.restore(e, share)
        self.groups[group_id] = e
        return e

    def _new_classic(self, group_id: str) -> Group:
        """An empty classic group, with the broker's group settings."""
        s = self.broker.settings
        return Group(group_id, now_ms=self._now(), initial_rebalance_delay_ms=s.group_initial_rebalance_delay_ms,
                     min_session_timeout_ms=s.group_min_session_timeout_ms,
                     max_session_timeout_ms=s.group_max_session_timeout_ms)

    async def _persist_membership(self, e: _Entry) -> None:
        """Keep the group's membership on file: once per change (state, generation,
        members, assignments), and its members' heartbeat times once they lag by a third
        of a session (``Group.persist_due``). A group that never had a generation writes
        nothing (reading a group must not create its file); neither does one whose file
        could not be read (reported by ``_offsets``)."""
        g = e.group
        if (e.offsets is None and e.error is not None) or e.consumer is not None or e.share is not None:
            return
        try:
            if e.offsets is not None and not g.persist_due(e.offsets.membership, self._now()):
                return
            async with e.lock:
                # re-checked under the lock: a DeleteGroups meanwhile must not be undone
                if self.groups.get(g.group_id) is not e:
                    return
                now = self._now()
                current = await self._offsets(e)
                if not g.persist_due(current.membership, now):
                    return
                new = current.copy()
                new.membership = g.snapshot(now)
                await self._save(e, new)
        except KaasError as exc:
            log.warning("group_membership_not_saved", group=g.group_id, error=exc.code.name)

    def _with_membership(self, e: _Entry, new: GroupOffsets) -> GroupOffsets:
        """``new`` (about to be written anyway, for offsets) with the group's membership as
        it is now, when the group has members: the write keeps their heartbeat times fresh
        on file at no extra cost."""
        if e.group.members:
            new.membership = e.group.snapshot(self._now())
        return new

    async def _offsets(self, e: _Entry) -> GroupOffsets:
        """The group's offsets, loaded from its file on first use (after a takeover too)."""
        if e.offsets is None:
            try:
                e.offsets = await self.broker.run_io(self.store.load, e.group.group_id)
                e.error = None
            except CorruptState as exc:
                if e.error is None:
                    log.error("group_offsets_corrupt", group=e.group.group_id, error=str(exc))
                e.error = str(exc)
                raise KaasError(ErrorCode.unknown_server_error, f"offsets file unreadable: {exc.reason}") from None
            except OSError as exc:  # EIO and the like: retriable, nothing is loaded
                log.error("group_offsets_unreadable", group=e.group.group_id, error=str(exc))
                raise KaasError(ErrorCode.coordinator_not_available, str(exc)) from None
        return e.offsets

    async def _save(self, e: _Entry, new: GroupOffsets, *, consumer_write: bool = False) -> None:
        """Write ``new`` (a changed ``copy()`` of ``e.offsets``, taken under ``e.lock``) to
        the group's file, and make it the group's state only once the file holds it: after
        a failed write, memory and file both still hold the previous state. A write other
        than the consumer runtime's (``consumer_write``) drops a consumer group's state the
        group no longer has (it became a classic group).

        Raises:
            KaasError: NOT_COORDINATOR (not ours, or the file was changed by another
                coordinator), COORDINATOR_LOAD_IN_PROGRESS (lease), COORDINATOR_NOT_AVAILABLE
                (the write failed: ENOSPC, EIO, ...; the client retries).
        """
        self.check_owner(e.group.group_id)
        if not consumer_write and e.consumer is None:
            new.consumer = None
        if not consumer_write and e.share is None:
            new.share = None
        try:
            await self.broker.run_io(self.store.save, new)
        except StaleOffsets as exc:
            # Another broker wrote the file since we read it: our copy (with this
            # request's change) is dropped, the client retries, we re-read.
            log.error("group_offsets_stale", group=e.group.group_id, error=str(exc))
            e.offsets = None
            if (e.consumer is not None or consumer_write) and self.groups.get(e.group.group_id) is e:
                del self.groups[e.group.group_id]  # a consumer group is read back whole from the file
            raise KaasError(ErrorCode.not_coordinator, "group file changed by another coordinator") from None
        except OSError as exc:
            log.error("group_offsets_write_failed", group=e.group.group_id, error=str(exc))
            raise KaasError(ErrorCode.coordinator_not_available, str(exc)) from None
        e.offsets = new

    def forget(self, group_id: str, e: _Entry) -> None:
        """Drop ``e`` if it is the group's entry and holds nothing (no members of either
        kind, no file): what a refused first request for a new group leaves behind."""
        if (self.groups.get(group_id) is e and e.consumer is None and not e.group.members
                and e.group.generation_id == 0 and not self.store.path(group_id).exists()):
            del self.groups[group_id]

    def unload(self, group_id: str) -> None:
        """This broker stopped coordinating the group: answer parked requests, forget it."""
        e = self.groups.pop(group_id, None)
        if e is not None:
            self._deliver(e.group.mark_dead(self._now(), ErrorCode.not_coordinator))
            log.info("group_unloaded", group=group_id)

    # ------------------------------------------------------------------ effects

    def _deliver(self, effects: Iterable[Effect]) -> None:
        for eff in effects:
            w = self._waiters.pop(eff.request_key, None)
            if w is not None:
                w[1].append(eff)
                w[0].set()
        self.timer_wakeup.set()

    async def _park(self, key: int, effects: list[Effect]) -> Effect:
        for eff in effects:
            if eff.request_key == key:
                self._deliver([x for x in effects if x is not eff])
                return eff
        ev = trio.Event()
        box: list[Effect] = []
        self._waiters[key] = (ev, box)
        self._deliver(effects)
        try:
            await ev.wait()
        finally:
            self._waiters.pop(key, None)
        return box[0]

    def timer_wait_s(self, longest: float) -> float:
        """Seconds until the earliest timer of a loaded group is due, at most ``longest``
        (the wait of ``kaas.tasks.group_timers.serve_timers``, cut short by ``timer_wakeup``)."""
        deadline = min((d for d in (self.consumers.next_deadline(), self.shares.next_deadline()) if d is not None),
                       default=None)
        for e in self.groups.values():
            d = e.group.next_deadline()
            if d is not None and (deadline is None or d < deadline):
                deadline = d
        wait = longest if deadline is None else max(0.0, (deadline - self._now()) / 1000)
        return min(wait, longest)

    async def fire_timers(self) -> None:
        """Run the timers that are due (session expiry, rebalance deadlines) and keep the
        owned groups' membership on file (``_persist_membership``)."""
        now = self._now()
        for gid, e in list(self.groups.items()):
            d = e.group.next_deadline()
            if d is not None and d <= now:
                before = e.group.state
                self._deliver(e.group.tick(now))
                if e.group.state is not before:
                    log.info("group_state", group=gid, state=e.group.state.value,
                             generation=e.group.generation_id)
        for e in list(self.groups.values()):
            if self.broker.owns_group(e.group.group_id) and self.broker.cluster.lease_valid():
                await self._persist_membership(e)
        await self.consumers.fire_timers(now)
        await self.shares.fire_timers(now)

    # ------------------------------------------------------------------ membership

    async def join(self, group_id: str, *, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member: bool,
                   skip_assignment_ok: bool = False) -> JoinReply:
        self.check_owner(group_id)
        e = self._entry(group_id)
        await self._offsets(e)
        if e.share is not None or e.share_error is not None:
            raise KaasError(ErrorCode.group_id_not_found, f"Group {group_id} is not a classic group.")
        if e.consumer is not None or e.consumer_error is not None:
            self.consumers.check_readable(e)
            if self.classic.serves(e):  # a classic member of a consumer group (KIP-848 migration)
                return await self.classic.join(
                    e, member_id=member_id, group_instance_id=group_instance_id, client_id=client_id,
                    client_host=client_host, session_timeout_ms=session_timeout_ms,
                    rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type, protocols=protocols,
                    require_known_member=require_known_member)
            e.consumer = None  # an empty consumer group becomes a classic one
        key = next(self._keys)
        before = e.group.state
        effects = e.group.join(self._now(), member_id, group_instance_id, client_id, client_host,
                               session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols,
                               require_known_member, key, skip_assignment_ok=skip_assignment_ok)
        if e.group.state is not before:
            log.info("group_state", group=group_id, state=e.group.state.value, generation=e.group.generation_id)
        reply = await self._park(key, effects)
        assert isinstance(reply, JoinReply)
        if reply.error_code in (ErrorCode.invalid_session_timeout, ErrorCode.inconsistent_group_protocol):
            self.forget(group_id, e)  # a join refused before any member: no group (Apache)
        return reply

    async def sync(self, group_id: str, *, member_id: str, group_instance_id: str | None, generation_id: int,
                   assignments: list[tuple[str, bytes]], protocol_type: str | None,
                   protocol_name: str | None) -> SyncReply:
        self.check_owner(group_id)
        e = self._loaded(group_id)
        if e is None:
            raise KaasError(ErrorCode.unknown_member_id)
        if self.classic.serves(e):
            return self.classic.sync(e, member_id=member_id, group_instance_id=group_instance_id,
                                     generation_id=generation_id, protocol_type=protocol_type,
                                     protocol_name=protocol_name)
        key = next(self._keys)
        before = e.group.state
        effects = e.group.sync(self._now(), member_id, group_instance_id, generation_id, assignments, key,
                               protocol_type, protocol_name)
        if e.group.state is not before:
            log.info("group_state", group=group_id, state=e.group.state.value, generation=e.group.generation_id)
            # as Apache: the new generation is on file before its assignments are handed out
            await self._persist_membership(e)
        reply = await self._park(key, effects)
        assert isinstance(reply, SyncReply)
        return reply

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        self.check_owner(group_id)
        e = self._loaded(group_id)
        if e is None:
            return ErrorCode.unknown_member_id
        if self.classic.serves(e):
            return self.classic.heartbeat(e, member_id, group_instance_id, generation_id)
        code = e.group.heartbeat(self._now(), member_id, group_instance_id, generation_id)
        if code is ErrorCode.none and classic_contact_due(e, member_id):
            self.timer_wakeup.set()  # the loop writes it now, not at its next turn
        return code

    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> LeaveResult:
        self.check_owner(group_id)
        e = self._loaded(group_id)
        if e is None:  # no such group: every member is unknown, the request itself fine (Apache)
            return LeaveResult(ErrorCode.none, tuple(dgroup.LeaveMemberResult(m, i, ErrorCode.unknown_member_id)
                                                     for m, i in members), ())
        if self.classic.serves(e):
            return await self.classic.leave(e, members)
        res = e.group.leave(self._now(), members)
        self._deliver(res.effects)
        log.info("group_members_left", group=group_id, members=len(members), state=e.group.state.value)
        return res

    # ------------------------------------------------------------------ admin

    def describe(self, group_id: str) -> GroupDescription:
        self.check_owner(group_id)
        e = self._loaded(group_id)
        if e is None:
            # Known only by its offsets file (not loaded here since a restart or move): Empty.
            if self.store.path(group_id).exists():
                return {"group_id": group_id, "state": "Empty", "protocol_type": "", "protocol": "", "members": []}
            return {"group_id": group_id, "state": "Dead", "protocol_type": "", "protocol": "", "members": [],
                    "not_found": f"Group {group_id} not found."}
        if e.consumer is not None or e.consumer_error is not None or e.share is not None:
            # not a classic group: Apache answers Dead (and, from v6, GROUP_ID_NOT_FOUND)
            return {"group_id": group_id, "state": "Dead", "protocol_type": "", "protocol": "", "members": [],
                    "not_found": f"Group {group_id} is not a classic group."}
        d = e.group.describe()
        if d["state"] == "Dead":  # removed (DeleteGroups) or expired: as Apache, not found
            d["not_found"] = f"Group {group_id} not found."
        return d

    def list_groups(self) -> list[dict[str, str]]:
        """The groups this broker coordinates: group id, protocol type, state and type
        (``classic`` or ``consumer``). A group known only by its file is loaded when the
        file holds a consumer group (its type and state are in it)."""
        out: dict[str, dict[str, str]] = {}
        for gid in self.store.list_groups():
            if self.broker.owns_group(gid):
                out[gid] = {"group_id": gid, "protocol_type": "consumer", "group_state": "Empty",
                            "group_type": "classic"}
                if gid not in self.groups:
                    self._load_consumer(gid)
        for gid, e in self.groups.items():
            if not self.broker.owns_group(gid):
                continue
            if e.consumer is not None:
                out[gid] = {"group_id": gid, "protocol_type": "consumer", "group_state": e.consumer.state,
                            "group_type": "consumer"}
            elif e.share is not None:
                out[gid] = {"group_id": gid, "protocol_type": "share", "group_state": e.share.state,
                            "group_type": "share"}
            elif e.group.state is not GroupState.DEAD:
                # a group only committed to (no member ever joined) has none, as in Apache
                out[gid] = {"group_id": gid, "protocol_type": e.group.protocol_type or "",
                            "group_state": e.group.state.value, "group_type": "classic"}
        return list(out.values())

    def _load_consumer(self, group_id: str) -> None:
        """Load the group if its file holds a consumer group's state."""
        try:
            on_file = self.store.load(group_id)
        except (CorruptState, OSError):
            return
        if on_file.consumer is not None or on_file.share is not None:
            self._load(group_id, create=False)

    async def delete(self, group_id: str) -> ErrorCode:
        self.check_owner(group_id)
        e = self._loaded(group_id)
        exists_on_disk = self.store.path(group_id).exists()
        if e is None and not exists_on_disk:
            return ErrorCode.group_id_not_found
        if e is not None and e.consumer is not None and not e.consumer.is_empty():
            return ErrorCode.non_empty_group
        if e is not None and e.share is not None and not e.share.is_empty():
            return ErrorCode.non_empty_group
        if e is not None:
            code = e.group.delete_check()
            if code != ErrorCode.none and not (code == ErrorCode.group_id_not_found and exists_on_disk):
                return code
            async with e.lock:  # not while a write of this group is under way
                if e.share is not None or e.share_error is not None:  # its share partitions' state first
                    code = await self.shares.drop_state(e)
                    if code != ErrorCode.none:
                        return code
                self._deliver(e.group.mark_dead(self._now(), ErrorCode.coordinator_not_available))
                if self.groups.get(group_id) is e:
                    del self.groups[group_id]
        try:
            await self.broker.run_io(self.store.delete, group_id)
        except OSError as exc:  # the file stays: the group is loaded from it again on next use
            log.error("group_offsets_delete_failed", group=group_id, error=str(exc))
            raise KaasError(ErrorCode.coordinator_not_available, str(exc)) from None
        log.info("group_deleted", group=group_id)
        return ErrorCode.none

    # ------------------------------------------------------------------ offsets

    async def commit(self, group_id: str, *, member_id: str, group_instance_id: str | None, generation_id: int,
                     offsets: dict[tuple[str, int], Committed], api_version: int = 9) -> ErrorCode:
        """OffsetCommit; ``generation_id`` is the member epoch for a consumer group."""
        self.check_owner(group_id)
        if (unknown := no_group_answer(self, group_id, generation_id, api_version >= 9)) is not None:
            return unknown
        e = self._entry(group_id)
        if _is_share(e):
            return ErrorCode.group_id_not_found
        if e.consumer is not None or e.consumer_error is not None:
            self.consumers.check_readable(e)
            assert e.consumer is not None
            code = e.consumer.validate_commit(member_id, group_instance_id, generation_id, transactional=False,
                                              api_version=api_version)
        else:
            code = e.group.validate_commit(member_id, group_instance_id, generation_id, self._now())
        if code != ErrorCode.none:
            return code
        async with e.lock:
            new = self._with_membership(e, (await self._offsets(e)).copy())
            new.offsets.update(offsets)
            await self._save(e, new)
        return ErrorCode.none

    async def txn_commit(self, group_id: str, *, producer_id: int, member_id: str, group_instance_id: str | None,
                         generation_id: int, offsets: dict[tuple[str, int], Committed], api_version: int = 0,
                         ) -> ErrorCode:
        """TxnOffsetCommit: stage offsets under the producer id; invisible until COMMIT."""
        self.check_owner(group_id)
        if (unknown := no_group_answer(self, group_id, generation_id, api_version >= 6)) is not None:
            return unknown
        e = self._entry(group_id)
        if _is_share(e):
            return ErrorCode.group_id_not_found
        if e.consumer is not None or e.consumer_error is not None:
            # KIP-447 fencing by member epoch: a stale one is ILLEGAL_GENERATION (Apache)
            self.consumers.check_readable(e)
            assert e.consumer is not None
            code = e.consumer.validate_commit(member_id, group_instance_id, generation_id, transactional=True,
                                              api_version=0)
        else:
            code = e.group.validate_txn_commit(member_id, group_instance_id, generation_id)
        if code != ErrorCode.none:
            return code
        async with e.lock:
            new = self._with_membership(e, (await self._offsets(e)).copy())
            new.pending.setdefault(producer_id, {}).update(offsets)
            await self._save(e, new)
        return ErrorCode.none

    async def complete_txn(self, group_id: str, producer_id: int, commit: bool) -> None:
        """The offset hook: promote (COMMIT) or drop (ABORT) the staged offsets. Idempotent."""
        self.check_owner(group_id)
        e = self._entry(group_id)
        async with e.lock:
            g = await self._offsets(e)
            if producer_id not in g.pending:
                return
            new = self._with_membership(e, g.copy())
            staged = new.pending.pop(producer_id)
            if commit:
                new.offsets.update(staged)
            await self._save(e, new)
        log.debug("txn_offsets_completed", group=group_id, producer_id=producer_id, commit=commit,
                  partitions=len(staged))

    async def fetch(self, group_id: str, partitions: list[tuple[str, int]] | None, require_stable: bool,
                    member_id: str | None = None, member_epoch: int = -1,
                    ) -> tuple[dict[tuple[str, int], Committed | None], set[tuple[str, int]]]:
        """(committed per partition or None, the set of partitions with pending txn offsets).
        ``member_id``/``member_epoch`` (OffsetFetch v9+) are checked for a consumer group.

        Raises:
            KaasError: STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID (consumer group), NOT_COORDINATOR...
        """
        self.check_owner(group_id)
        e = self._loaded(group_id)
        if _is_share(e):
            raise KaasError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        if e is not None and (e.consumer is not None or e.consumer_error is not None):
            self.consumers.check_readable(e)
            assert e.consumer is not None
            code = e.consumer.validate_fetch(member_id, member_epoch)
            if code != ErrorCode.none:
                raise KaasError(code)
        if e is None and not self.store.path(group_id).exists():
            # Unknown group (never committed, or deleted): nothing committed, and reading
            # must not create it (it would resurface in ListGroups), as in Apache.
            return ({} if partitions is None else dict.fromkeys(partitions)), set()
        if e is None:
            e = self._entry(group_id)
        g = await self._offsets(e)
        pending: set[tuple[str, int]] = set()
        for staged in g.pending.values():
            pending.update(staged)
        if partitions is None:
            return dict(g.offsets), pending
        return {tp: g.offsets.get(tp) for tp in partitions}, pending

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]],
                             ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        self.check_owner(group_id)
        if group_id not in self.groups and not self.store.path(group_id).exists():
            return ErrorCode.group_id_not_found, {}
        e = self._entry(group_id)
        if _is_share(e):
            return ErrorCode.group_id_not_found, {}
        await self._offsets(e)
        subscribed = set()
        if e.consumer is not None:
            subscribed = e.consumer.subscribed_topics()
        elif e.group.state is not GroupState.EMPTY:
            subscribed = subscribed_topics(e.group)
        results: dict[tuple[str, int], ErrorCode] = {}
        async with e.lock:
            new = (await self._offsets(e)).copy()
            changed = False
            for tp in partitions:
                if tp[0] in subscribed:
                    results[tp] = ErrorCode.group_subscribed_to_topic
                    continue
                if new.offsets.pop(tp, None) is not None:
                    changed = True
                results[tp] = ErrorCode.none
            if changed:
                await self._save(e, new)
        return ErrorCode.none, results


def subscribed_topics(group: Group) -> set[str]:
    """The topics a classic consumer group's members subscribe to (none for other types)."""
    if group.protocol_type != "consumer":
        return set()
    return {t for m in group.members.values() for t in _subscription_topics(m.metadata_for(group.protocol_name))}


def _is_share(e: _Entry | None) -> bool:
    """A share group keeps no committed offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch
    and OffsetDelete answer GROUP_ID_NOT_FOUND for it, as Apache."""
    return e is not None and (e.share is not None or e.share_error is not None)



def _subscription_topics(meta: bytes) -> tuple[str, ...]:
    """Topics of a consumer protocol subscription (none when it does not parse)."""
    try:
        return cp.decode_subscription(meta).topics
    except cp.MalformedProtocol:
        return ()
