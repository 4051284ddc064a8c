"""The membership tick (design section 4): heartbeats, controller election, assignment.

Every broker, every ``heartbeat_ms``:
  1. reads the peers' heartbeat files and judges liveness by its own monotonic clock
     (a peer is dead when its counter has not moved for ``session_timeout_ms``, or at once
     when its supervisor's death notice names its process);
  2. reads ``assignment.json`` (ignored when its controller epoch is below the highest
     ``controller/epoch-<n>``), relinquishes what moved away, takes over what moved to it
     once the hand-off rule allows, for at most half a heartbeat period per tick (the
     rest at the next tick, run at once): a CreateTopics of hundreds of partitions must
     not hold back the heartbeat below and lapse the lease;
  3. writes its own heartbeat (counter, address, applied assignment version, draining,
     pending partitions, the counters it has seen), which renews its write lease.
The controller (the broker that won the exclusive create of the highest epoch file)
also re-balances and writes ``assignment.json`` when membership or topics change.

Between ticks the inotify doorbell (a local volume only; ``--no-inotify`` turns it off, and
on NFS it sees nothing of other hosts) runs a tick at once when the cluster state changed.

The tick's file work goes through ``broker.run_io``: inline on tmpfs, in worker threads on
a disk or NFS. Each thread round trip costs the tick a turn through the trio run queue; on
a loop busy with 1,000-partition requests four of them stretched a tick to 0.8 s and the
lease ran out under load (docs/performance.rst, "Under load").
"""

from __future__ import annotations

import os

import structlog
import trio

from kaas import dirwatch
from kaas.broker import Broker
from kaas.domain import coordinators, elections
from kaas.domain import membership as rules
from kaas.domain.assignment import Assignment, balance
from kaas.domain.membership import Heartbeat, Peer
from kaas.domain.routing import TXN_SLOTS
from kaas.errors import CorruptState
from kaas.storage import cluster_files, deaths, incarnation
from kaas.storage.cluster_files import AssignmentFile

log = structlog.get_logger()

Published = tuple[int, bool, frozenset[tuple[str, int]], tuple[int, ...]]
"""What a heartbeat tells peers beyond the counter: applied version, draining, pending
partitions, the brokers seen alive (``Membership._published``)."""


class Membership:
    """Keeps ``broker.cluster`` (a ``ClusterView``) current and acts on it."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.view = broker.cluster
        self.clock = broker.clock  # one time base: the broker's monotonic clock
        self.layout = broker.layout
        self._assignment_file = AssignmentFile(self.layout.assignment)
        self._became_leader_version: dict[tuple[str, int], int] = {}
        self._next_beat = 0.0  # self.clock.monotonic(): when the next heartbeat is due
        self._last_published: Published | None = None
        self._peers_dirty = False
        self._noticed: dict[int, deaths.Notice] = {}  # the death notice acted on, per broker
        self._owned_slots: frozenset[int] = frozenset()

    # ------------------------------------------------------------------ loop

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Tick every ``heartbeat_ms`` (writing the heartbeat), and in between whenever the
        doorbell rings or a caller ``wake``s the view (without a heartbeat, unless what
        the heartbeat publishes changed)."""
        view = self.view
        view.counter = await self.broker.run_io(self._last_counter)
        await self._tick(beat=True)
        task_status.started()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._serve_doorbell)
            while True:
                with trio.move_on_after(max(0.0, self._next_beat - self.clock.monotonic())):
                    await view.wait_woken()
                view.clear_wake()  # a wake during the tick below runs another one
                beat = self.clock.monotonic() >= self._next_beat
                try:
                    await self._tick(beat=beat)
                except (OSError, CorruptState) as exc:
                    log.error("cluster_tick_failed", error=str(exc))
                    self._next_beat = self.clock.monotonic() + view.period

    async def _serve_doorbell(self) -> None:
        """Wake the tick when the cluster state changes on a local volume: a heartbeat, a
        death notice, a controller epoch, the assignment or a topic (inotify; on NFS it
        sees nothing of other hosts and the ``heartbeat_ms`` tick does the work). A peer's
        routine heartbeat (only its counter moved) is read without running a whole tick."""
        lay, view = self.layout, self.view
        if not self.broker.settings.inotify:
            return
        watch = dirwatch.open_watch([lay.brokers, lay.deaths, lay.controller, lay.cluster, lay.topics])
        if watch is None:
            return
        view.doorbell = True
        interesting = {lay.cluster: ("assignment.json",)}
        try:
            while True:
                changes = await watch.wait_changes()
                full = False
                for d, name in changes:
                    if name.startswith(".") or name.endswith(".tmp"):
                        continue
                    want = interesting.get(d)
                    if want is not None and name not in want:
                        continue
                    if d == lay.brokers and name == f"kaas-{self.broker.id}.json":
                        continue  # our own heartbeat
                    if d == lay.brokers:
                        self._peers_dirty = True
                    else:
                        full = True
                if full:
                    view.wake()
                elif self._peers_dirty:
                    if await self.broker.run_io(self._read_peers):
                        view.wake()  # somebody joined, died, drained or applied a version
                    else:
                        view.notify_changed()  # e.g. a leader opened partitions
        finally:
            view.doorbell = False
            watch.close()

    def _last_counter(self) -> int:
        """The counter of this broker's last heartbeat file (a previous incarnation's):
        counters keep rising across restarts, so a peer's ``seen`` entry for us proves it
        read this incarnation's heartbeat."""
        return cluster_files.last_counter(self.layout, self.broker.id)

    async def _tick(self, *, beat: bool = True) -> None:
        t0 = self.clock.monotonic()
        broker = self.broker
        await broker.run_io(self._read_peers)
        try:
            await self._elect()
            if self.view.is_controller:
                await self._control()
            await self._apply_assignment()
            try:
                await broker.run_io(broker.topics.refresh)
            except OSError as exc:  # (never costs the heartbeat below)
                log.warning("topics_unreadable", error=str(exc))
            broker.admin.apply_topic_configs()  # a topic's configs altered through another broker
        finally:
            self._unload_moved_groups()
        if beat or self._published() != self._last_published or not self.view.lease_valid():
            await self._heartbeat(t0)
        self._sweep_gained_slots()
        self.view.notify_changed()

    def _unload_moved_groups(self) -> None:
        """Forget groups whose coordinator is now another broker, on every tick whatever
        else the tick did: a group that comes back must be read afresh from the file its
        interim coordinator wrote, never served from a cache of an earlier ownership."""
        broker = self.broker
        for gid in list(broker.groups.groups):
            if not broker.owns_group(gid):
                broker.groups.unload(gid)

    # ------------------------------------------------------------------ heartbeats

    def _read_peers(self) -> bool:
        """Read every heartbeat file, then the death notices. Returns True when something a
        tick acts on changed (``domain.membership.absorb_heartbeat``), or a death notice
        killed a live peer."""
        self._peers_dirty = False
        view, me = self.view, self.broker.id
        now = self.clock.monotonic()
        material = False
        for obj in cluster_files.read_heartbeats(self.layout):
            material |= rules.absorb_heartbeat(view.peers, obj, now, view.session)
        for bid, notice in deaths.read_all(self.layout.deaths).items():
            p = view.peers.get(bid)
            if p is None or bid == me or not rules.notice_applies(p, notice.incarnation) \
                    or self._noticed.get(bid) == notice:
                continue
            # reaped by its supervisor, or gone by its own graceful shutdown: dead now,
            # until its counter moves again
            self._noticed[bid] = notice
            if rules.mark_dead(p, now, view.session):
                log.info("peer_death_noticed", broker=bid, incarnation=incarnation.short(notice.incarnation),
                         host_name=p.host_name, graceful=notice.graceful)
                material = True
        return material

    def _published(self) -> Published:
        """What this broker's heartbeat tells its peers beyond the counter: a change is
        written at once rather than at the next ``heartbeat_ms``."""
        view = self.view
        return (view.applied_version, view.draining, self._pending(), tuple(view.alive_any()))

    def _pending(self) -> frozenset[tuple[str, int]]:
        """Partitions the applied assignment gives this broker that it has not opened."""
        return rules.pending(self.view.assignment, self.broker.id, self.broker.partitions)

    async def _heartbeat(self, t0: float) -> None:
        """Write this broker's heartbeat; only a write that succeeded renews the lease (and
        advances ``counter``). A failed one (ENOSPC, EIO, ...) leaves the previous file and
        the lease as they were: after ``session_timeout/2`` without a successful write the
        broker stops acknowledging writes (self-fence) until one succeeds again."""
        view, broker = self.view, self.broker
        counter = view.counter + 1
        s = broker.settings
        published = self._published()
        obj: Heartbeat = {"format": 1, "broker_id": broker.id, "counter": counter,
               "host": s.inter_broker.advertised_host, "port": s.inter_broker.advertised_port,
               "listeners": rules.listeners_field(s.all_listeners),
               "incarnation": broker.incarnation, "host_name": incarnation.HOST_NAME, "pid": os.getpid(),
               "applied_version": view.applied_version, "draining": view.draining,
               "controller_epoch": view.controller_epoch,
               "pending": sorted(published[2]),
               "seen": {str(p.broker_id): p.counter for p in view.peers.values() if p.broker_id != broker.id}}
        self._next_beat = self.clock.monotonic() + view.period
        try:
            await broker.run_io(lambda: cluster_files.write_heartbeat(self.layout, broker.id, obj, fsync=s.fsync))
        except OSError as exc:
            log.error("heartbeat_write_failed", error=str(exc), lease_valid=view.lease_valid())
            return
        view.counter = counter
        self._last_published = published
        if view.first_counter is None:
            view.first_counter = counter
        if view.lease_until and self.clock.monotonic() > view.lease_until:
            # We were paused or starved past our lease: peers may have taken our keys and
            # written their files. Forget cached coordinator state; reload from the volume.
            log.warning("lease_lapsed", late_s=round(self.clock.monotonic() - view.lease_until, 3))
            view.lapses += 1
            view.first_counter = counter  # peers must read this heartbeat before we serve groups
            for gid in list(broker.groups.groups):
                broker.groups.unload(gid)
            if broker.txn is not None:
                broker.txn.forget_cache()
        # The lease runs from when this tick began: everything after t0 was checked.
        view.lease_until = t0 + view.session / 2
        if broker.id not in view.peers:
            view.peers[broker.id] = Peer(broker.id, s.inter_broker.advertised_host, s.inter_broker.advertised_port,
                                         view.counter, self.clock.monotonic(), view.applied_version, view.draining,
                                         listeners=rules.parse_listeners(rules.listeners_field(s.all_listeners)))

    # ------------------------------------------------------------------ controller

    def _highest_epoch(self) -> tuple[int, int | None]:
        return cluster_files.highest_epoch(self.layout)

    async def _elect(self) -> None:
        view, broker = self.view, self.broker
        epoch, owner = await broker.run_io(self._highest_epoch)
        view.controller_epoch = epoch
        view.controller_id = owner
        alive = view.alive_any()
        if owner is not None and (owner in alive or owner == broker.id):
            # A draining controller stays controller: it writes the assignment that moves its
            # own keys away (it places nothing on itself), and its successor is elected as
            # soon as its death notice is read. (Resigning at once left the cluster without a
            # controller until its lease ran out, and its keys where they were.)
            view.is_controller = owner == broker.id
            return
        # No live controller: race for the next epoch (a draining broker takes no new role).
        if view.draining:
            view.is_controller = False
            return
        # Wait one session after start so we know who is alive before deposing anybody,
        # unless the controller's own death notice said it is dead (a death notice is
        # certain; silence in our first session is not).
        dead = view.peers.get(owner) if owner is not None else None
        noticed_dead = dead is not None and dead.dead_counter is not None
        if self.clock.monotonic() - view.started < view.session and owner is not None and not noticed_dead:
            return
        try:
            won = await broker.run_io(
                lambda: cluster_files.claim_epoch(self.layout, epoch + 1, broker.id, fsync=broker.settings.fsync))
        except OSError as exc:  # not elected: the next tick races again
            log.error("controller_epoch_write_failed", controller_epoch=epoch + 1, error=str(exc))
            return
        if won:
            view.controller_epoch = epoch + 1
            view.controller_id = broker.id
            view.is_controller = True
            view.failovers += 1
            log.info("controller_elected", controller_epoch=epoch + 1, previous_controller=owner)

    async def _control(self) -> None:
        view, broker = self.view, self.broker
        broker.topics.refresh()
        deleting = broker.admin.deleting  # re-created under a name still being deleted: not yet
        topics = {name: meta.partitions for name, meta in broker.topics.topics.items() if name not in deleting}
        preferred = {(name, p): reps for name, meta in broker.topics.topics.items()
                     for p, reps in meta.replica_assignment.items()}
        prev = self._read_assignment_file()
        if prev is not None and prev.controller_epoch > view.controller_epoch:
            view.is_controller = False
            return
        placeable = self._placeable()
        new = balance(prev, topics, view.registered(), placeable, view.controller_epoch, epoch_floor=None,
                      preferred=preferred, elected=self._elections(preferred, placeable),
                      coordinators=self._coordinators(prev))
        if prev is not None and new == prev:
            return
        # Still the controller? A deposed one must not overwrite its successor's file.
        epoch, _owner = self._highest_epoch()
        if epoch != view.controller_epoch:
            view.is_controller = False
            return
        try:
            await broker.run_io(lambda: self._assignment_file.write(new, fsync=broker.settings.fsync))
        except OSError as exc:
            # the previous assignment stays in force; the next tick computes and writes again
            log.error("assignment_write_failed", version=new.version, error=str(exc))
            return
        log.info("assignment_written", version=new.version, controller_epoch=new.controller_epoch,
                 alive=view.alive(), partitions=sum(len(v) for v in new.partitions.values()))

    def _elections(self, preferred: dict[tuple[str, int], tuple[int, ...]],
                   placeable: list[int]) -> dict[tuple[str, int], int]:
        """The ElectLeaders choices still to pin (``ClusterView.elections``, pruned by
        ``domain.elections.still_held``)."""
        view = self.view
        view.elections = elections.still_held(view.elections, preferred, view.alive(), set(placeable))
        return view.elections

    def _placeable(self) -> list[int]:
        """The alive brokers the controller places keys on (``domain.membership.placeable``:
        one back from the dead gets its share again only ``rejoin_hold`` after it returned;
        Apache, too, moves leadership back to a returning broker only later, by
        preferred-leader election)."""
        view = self.view
        return rules.placeable(view.alive(), self.broker.id, view.peers, self.clock.monotonic(), view.rejoin_hold)

    def _coordinators(self, prev: Assignment | None) -> list[int]:
        """The brokers the controller lists as group coordinators
        (``domain.coordinators.eligible``): one back from the dead only
        ``coordinator_hold`` after it returned, so the groups that moved away at its death
        are not moved back while they may still be rebalancing (docs/groups.rst)."""
        view = self.view
        now = self.clock.monotonic()
        back_at = {b: p.back_at for b, p in view.peers.items() if b != self.broker.id}
        return coordinators.eligible(view.alive(), self.broker.id, back_at, now, view.coordinator_hold,
                                     listed_before=prev.coordinators if prev is not None else None,
                                     up_for=now - view.started)

    def _read_assignment_file(self) -> Assignment | None:
        try:
            return self._assignment_file.read()
        except CorruptState as exc:
            log.error("assignment_corrupt", error=str(exc))
            raise

    # ------------------------------------------------------------------ apply

    async def _apply_assignment(self) -> None:
        view, broker = self.view, self.broker
        a = await broker.run_io(self._read_assignment_file)
        if a is None:
            return
        if a.controller_epoch < view.controller_epoch and view.assignment is not None \
                and a.version <= view.assignment.version:
            return  # written by a deposed controller: ignored until the new one writes
        if view.assignment is not None and a.version < view.assignment.version and \
                a.controller_epoch <= view.assignment.controller_epoch:
            return
        prev = view.assignment
        view.assignment = a
        if prev is None or prev.coordinators != a.coordinators:
            view.coordinators_version = a.version  # groups wait for every live peer to apply it
        me = broker.id
        # 1. relinquish everything that moved away (or whose topic is gone)
        for key, part in list(broker.partitions.items()):
            leader = a.leader_of(*key)
            if leader is None or leader.leader != me or leader.epoch != part.epoch:
                await broker.relinquish(part)
        # 2. record the version each leadership began in (ours: the hand-off rule below;
        #    everyone's: Metadata names a leader only once it opened the partition)
        if a is not prev:
            rules.track_leadership(prev, a, me, view._since, self._became_leader_version)
        view.applied_version = a.version
        # 3. take over what the hand-off rule allows
        if not view.lease_valid() and self.clock.monotonic() - view.started > view.session:
            # our lease lapsed (e.g. we were paused): heartbeat first, take over next tick
            return
        now = self.clock.monotonic()
        budget_end = now + view.period / 2
        took = False
        for key, version in list(self._became_leader_version.items()):
            if key in broker.partitions:
                continue
            if self.clock.monotonic() >= budget_end:
                # the rest at the next tick, right after this one's heartbeat: hundreds of
                # new partitions (a CreateTopics of many topics) must not starve our lease
                view.wake()
                break
            if rules.handoff_blockers(me, version, view.peers.values(), now, view.session):
                continue
            pl = a.leader_of(*key)
            meta = broker.topics.get(key[0])
            if meta is None:
                broker.topics.refresh()
                meta = broker.topics.get(key[0])
            if meta is None or pl is None:
                continue
            if await broker.take_over(meta, key[1], pl.epoch) is not None:
                took = True
        # markers queued for partitions we now lead, or must pass on to their new leader,
        # are applied now rather than at the marker watcher's next poll (2 s)
        if (took or a is not prev) and broker.txn is not None:
            broker.txn.wake_markers()
        # 4. coordinator state of keys that are not ours any more
        if broker.txn is not None:
            broker.txn.drop_unowned_slots()

    def _sweep_gained_slots(self) -> None:
        """Slots that came to us (by the assignment, with a valid lease: after the tick's
        heartbeat) are swept at once: prepared transactions of a dead or departed
        coordinator finish now, not at the next periodic sweep."""
        txn = self.broker.txn
        if txn is None:
            return
        owned = frozenset(s for s in range(TXN_SLOTS) if self.broker.owns_slot(s))
        if owned - self._owned_slots:
            txn.wake_sweeps()
        self._owned_slots = owned
