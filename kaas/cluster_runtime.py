"""Membership, controller and assignment on the shared volume (DESIGN section 4).

Every broker, every ``heartbeat_ms``:
  1. reads the peers' heartbeat files and judges liveness by its own monotonic clock
     (a peer is dead when its counter has not moved for ``session_timeout_ms``);
  2. reads ``assignment.json`` (ignored when its controller epoch is below the highest
     ``controller/epoch-<n>``), relinquishes what moved away, takes over what moved to it
     once the hand-off rule allows;
  3. writes its own heartbeat (counter, address, applied assignment version, draining),
     which renews its write lease.
The controller (the broker that won the exclusive create of the highest epoch file)
also re-balances and writes ``assignment.json`` when membership or topics change.

Lease (self-fencing): a broker whose last successful heartbeat is older than
``session_timeout_ms / 2`` by its own monotonic clock stops acknowledging writes
(``lease_valid``), so by the time peers call it dead it has already stopped. A SIGSTOPped
broker resumes with an expired lease and applies the new assignment before writing again.

The tick's file work goes through ``broker.run_io``: inline on tmpfs, in worker threads on
a disk or NFS. Each thread round trip costs the tick a turn through the trio run queue; on
a loop busy with 1,000-partition requests four of them stretched a tick to 0.8 s and the
lease ran out under load (see docs/performance.rst, "Lease lapses under load").
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import structlog
import trio

from kaas import dirwatch
from kaas.domain.assignment import Assignment, balance
from kaas.domain.routing import TXN_SLOTS
from kaas.errors import CorruptState
from kaas.storage import atomic, deaths

log = structlog.get_logger()

REJOIN_HOLD_S = 2.0  # a broker back from the dead gets keys placed on it again this long after
LIST_WINDOW_S = 9.0  # Apache's broker.session.timeout.ms default: how long Metadata names a silent broker


@dataclass
class Peer:
    broker_id: int
    host: str = ""
    port: int = -1
    counter: int = -1
    changed_at: float = 0.0  # monotonic time the counter last moved (observer's clock)
    applied_version: int = 0
    draining: bool = False
    first_seen: float = 0.0
    pid: int = 0
    # the counter a death notice found it at: dead until the counter moves (a new incarnation)
    dead_counter: int | None = None
    # partitions assigned to it in its applied version that it has not opened (yet)
    pending: frozenset[tuple[str, int]] = frozenset()
    # its heartbeat's view of the other brokers' counters (the hand-back acknowledgement)
    seen: dict[int, int] | None = None
    # the counter it had when its presence connection ended: suspected until it moves
    suspected_counter: int | None = None
    back_at: float = 0.0  # monotonic time it came back after being dead (0: never dead)

    def live(self, now: float, session: float) -> bool:
        return self.dead_counter is None and now - self.changed_at < session


class ClusterRuntime:
    def __init__(self, broker) -> None:
        self.broker = broker
        s = broker.settings
        self.layout = broker.layout
        self.session = s.session_timeout_ms / 1000
        self.list_window = max(3 * self.session, LIST_WINDOW_S)  # see listed()
        self.rejoin_hold = REJOIN_HOLD_S  # see _placeable()
        self.period = s.heartbeat_ms / 1000
        self.peers: dict[int, Peer] = {}
        self.counter = 0
        self.lease_until = 0.0
        # times the lease was found lapsed: a connection accepted before the last lapse may
        # hold requests sent before peers declared this broker dead (WriteTxnMarkers checks)
        self.lapses = 0
        self.started = time.monotonic()
        self.assignment: Assignment | None = None
        self._assignment_raw: bytes | None = None
        self._assignment_parsed: Assignment | None = None
        self.controller_epoch = 0  # highest epoch file seen
        self.is_controller = False
        self.controller_id: int | None = None
        self.applied_version = 0
        self._became_leader_version: dict[tuple[str, int], int] = {}
        self._wake = trio.Event()
        self._changed = trio.Event()
        self._next_beat = 0.0  # trio clock: when the next heartbeat is due
        self._last_published: tuple | None = None
        self._peers_dirty = False
        self._noticed: dict[int, deaths.Notice] = {}  # the death notice acted on, per broker
        self._since: dict[tuple[str, int], int] = {}  # assignment version each partition's leadership began
        self.first_counter: int | None = None  # this incarnation's first (or first after a lapse) heartbeat
        self.doorbell = False
        self._owned_slots: frozenset[int] = frozenset()
        self.failovers = 0

    # ------------------------------------------------------------------ views

    def lease_valid(self) -> bool:
        return time.monotonic() < self.lease_until

    def alive(self) -> list[int]:
        now = time.monotonic()
        out = [self.broker.id] if not self.broker.draining else []
        for p in self.peers.values():
            if p.broker_id == self.broker.id:
                continue
            if p.live(now, self.session) and not p.draining:
                out.append(p.broker_id)
        return sorted(out)

    def alive_any(self) -> list[int]:
        """Alive brokers including draining ones (still serving until they relinquish)."""
        now = time.monotonic()
        out = {self.broker.id}
        for p in self.peers.values():
            if p.broker_id != self.broker.id and p.live(now, self.session):
                out.add(p.broker_id)
        return sorted(out)

    def listed(self) -> list[int]:
        """The brokers Metadata names: every broker heard from within ``list_window``
        (longer than the liveness timeout). Leadership and coordinators move after
        ``session``; the broker list does not shrink as fast, because librdkafka
        decommissions the handle of a broker that drops out of Metadata, and a handle
        its transaction or group coordinator lookup still holds then never comes back
        (seen in the disk-full chaos scenario: every broker missed heartbeats for a few
        seconds, clients got one-broker Metadata answers, and a copier's
        send_offsets_to_transaction hung for good). Apache lists a broker until
        broker.session.timeout.ms (9 s) without a heartbeat; this is the same window."""
        now = time.monotonic()
        out = {self.broker.id}
        for p in self.peers.values():
            if now - p.changed_at < self.list_window:
                out.add(p.broker_id)
        return sorted(out)

    def is_alive_any(self, broker_id: int) -> bool:
        """``broker_id in alive_any()``, without building the list (asked on every
        transactional request)."""
        if broker_id == self.broker.id:
            return True
        p = self.peers.get(broker_id)
        return p is not None and p.live(time.monotonic(), self.session)

    def suspect(self, broker_id: int, pid: int) -> None:
        """The presence connection to process ``pid`` of ``broker_id`` ended
        (``PeerLinks.serve_presence``): until its heartbeat counter moves, Metadata and
        FindCoordinator send clients elsewhere for its keys. Ownership does not change;
        read the volume now, where its supervisor's death notice may already be."""
        p = self.peers.get(broker_id)
        if p is None or p.pid != pid or p.suspected_counter is not None:
            return  # (another incarnation by now)
        p.suspected_counter = p.counter
        log.info("peer_suspected", broker=broker_id, pid=pid)
        self.wake()

    def is_suspected(self, broker_id: int) -> bool:
        p = self.peers.get(broker_id)
        return p is not None and p.suspected_counter is not None

    def opened_by(self, leader: int, topic: str, index: int) -> bool:
        """Has peer ``leader`` opened the partition it leads under the current assignment?
        Its heartbeat shows it applied the version that gave it the partition and does not
        list the partition as pending. Until then Metadata names no leader."""
        p = self.peers.get(leader)
        if p is None:
            return False
        key = (topic, index)
        return p.applied_version >= self._since.get(key, 0) and key not in p.pending

    def since(self, topic: str, index: int) -> int:
        """The assignment version in which the partition's current leadership began."""
        return self._since.get((topic, index), 0)

    def applied_everywhere(self, version: int) -> bool:
        """Has every live broker (this one included) applied assignment ``version``?"""
        if self.applied_version < version:
            return False
        now = time.monotonic()
        return all(p.applied_version >= version for p in self.peers.values()
                   if p.broker_id != self.broker.id and p.live(now, self.session))

    def acknowledged(self) -> bool:
        """Has every live peer read a heartbeat of this incarnation (or, after a lapsed
        lease, one written since)? Its ``seen`` entry for us proves that its tick noticed
        us alive and unloaded the groups it held for us, so we may write their files. A
        peer that does not publish ``seen`` (an older version) is given one session."""
        if self.first_counter is None:
            return False
        me, now = self.broker.id, time.monotonic()
        for p in self.peers.values():
            if p.broker_id == me or not p.live(now, self.session):
                continue
            if p.seen is None:
                if now - self.started < self.session:
                    return False
            elif p.seen.get(me, -1) < self.first_counter:
                return False
        return True

    def registered(self) -> list[int]:
        return sorted(set(self.peers) | {self.broker.id})

    def wake(self) -> None:
        self._wake.set()

    # ------------------------------------------------------------------ loop

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Tick every ``heartbeat_ms`` (writing the heartbeat), and in between whenever the
        doorbell rings or a caller ``wake``s the runtime (without a heartbeat, unless what
        the heartbeat publishes changed)."""
        self.counter = await self.broker.run_io(self._last_counter)
        await self._tick(beat=True)
        task_status.started()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._serve_doorbell)
            while True:
                with trio.move_on_at(self._next_beat):
                    await self._wake.wait()
                self._wake = trio.Event()  # a wake during the tick below runs another one
                beat = trio.current_time() >= self._next_beat
                try:
                    await self._tick(beat=beat)
                except (OSError, CorruptState) as exc:
                    log.error("cluster_tick_failed", error=str(exc))
                    self._next_beat = trio.current_time() + self.period

    async def _serve_doorbell(self) -> None:
        """Wake the runtime when the cluster state changes on a local volume: a heartbeat, a
        death notice, a controller epoch, the assignment or a topic (inotify; on NFS it
        sees nothing of other hosts and the ``heartbeat_ms`` tick does the work). A peer's
        routine heartbeat (only its counter moved) is read without running a whole tick."""
        lay = self.layout
        if not self.broker.settings.inotify:
            return
        watch = dirwatch.open_watch([lay.brokers, lay.deaths, lay.controller, lay.cluster, lay.topics])
        if watch is None:
            return
        self.doorbell = True
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
                    self.wake()
                elif self._peers_dirty:
                    if await self.broker.run_io(self._read_peers):
                        self.wake()  # somebody joined, died, drained or applied a version
                    else:
                        self._notify_changed()  # e.g. a leader opened partitions
        finally:
            self.doorbell = False
            watch.close()

    def _last_counter(self) -> int:
        """The counter of this broker's last heartbeat file (a previous incarnation's):
        counters keep rising across restarts, so a peer's ``seen`` entry for us proves it
        read this incarnation's heartbeat."""
        try:
            return int(json.loads(self.layout.broker_file(self.broker.id).read_bytes())["counter"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    async def _tick(self, *, beat: bool = True) -> None:
        t0 = time.monotonic()
        await self.broker.run_io(self._read_peers)
        try:
            await self._elect()
            if self.is_controller:
                await self._control()
            await self._apply_assignment()
            try:
                await self.broker.run_io(self.broker.topics.refresh)
            except OSError as exc:  # (never costs the heartbeat below)
                log.warning("topics_unreadable", error=str(exc))
            self.broker.apply_topic_configs()  # a topic's configs altered through another broker
        finally:
            self._unload_moved_groups()
        if beat or self._published() != self._last_published or not self.lease_valid():
            await self._heartbeat(t0)
        self._sweep_gained_slots()
        self._notify_changed()

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
        tick acts on changed: a broker joined, died (by notice) or came back, started or
        stopped draining, or applied another assignment version. A counter that moved is
        recorded but is no such change (a death by silence is found by the clock)."""
        self._peers_dirty = False
        now = time.monotonic()
        material = False
        try:
            names = os.listdir(self.layout.brokers)
        except FileNotFoundError:
            names = []
        for name in names:
            if not (name.startswith("kaas-") and name.endswith(".json")):
                continue
            try:
                obj = json.loads((self.layout.brokers / name).read_bytes())
                bid = int(obj["broker_id"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            p = self.peers.get(bid)
            if p is None:
                p = self.peers[bid] = Peer(bid, first_seen=now, changed_at=now)
                p.counter = obj.get("counter", -1)
                material = True
            elif obj.get("counter") != p.counter:
                if not p.live(now, self.session):
                    material = True  # back from the dead
                    p.back_at = now
                p.counter = obj.get("counter")
                p.changed_at = now
                p.dead_counter = None
                p.suspected_counter = None
            p.host = obj.get("host", "")
            p.port = int(obj.get("port", -1))
            p.pid = int(obj.get("pid", 0) or 0)
            applied = int(obj.get("applied_version", 0))
            draining = bool(obj.get("draining", False))
            if applied != p.applied_version or draining != p.draining:
                material = True
            p.applied_version, p.draining = applied, draining
            pending = obj.get("pending") or ()
            try:
                p.pending = frozenset((str(t), int(i)) for t, i in pending) if pending else frozenset()
            except (ValueError, TypeError):
                p.pending = frozenset()
            seen = obj.get("seen")
            p.seen = {int(k): int(v) for k, v in seen.items()} if isinstance(seen, dict) else None
        for bid, notice in deaths.read_all(self.layout.deaths).items():
            p = self.peers.get(bid)
            if p is None or bid == self.broker.id or p.dead_counter is not None:
                continue
            if notice.pid == p.pid and self._noticed.get(bid) != notice:
                # reaped by its supervisor: dead now, until its counter moves again
                self._noticed[bid] = notice
                if p.live(now, self.session):
                    log.info("peer_death_noticed", broker=bid, pid=notice.pid)
                    material = True
                p.dead_counter = p.counter
        return material

    def _published(self) -> tuple:
        """What this broker's heartbeat tells its peers beyond the counter: a change is
        written at once rather than at the next ``heartbeat_ms``."""
        return (self.applied_version, self.broker.draining, self._pending(), tuple(self.alive_any()))

    def _pending(self) -> frozenset[tuple[str, int]]:
        """Partitions the applied assignment gives this broker that it has not opened."""
        a = self.assignment
        if a is None:
            return frozenset()
        me, opened = self.broker.id, self.broker.partitions
        return frozenset((t, i) for t, row in a.partitions.items() for i, pl in enumerate(row)
                         if pl.leader == me and (t, i) not in opened)

    def _notify_changed(self) -> None:
        ev, self._changed = self._changed, trio.Event()
        ev.set()

    async def wait_changed(self) -> None:
        """Return after the next tick (the cluster view may have changed)."""
        await self._changed.wait()

    async def _heartbeat(self, t0: float) -> None:
        """Write this broker's heartbeat; only a write that succeeded renews the lease (and
        advances ``counter``). A failed one (ENOSPC, EIO, ...) leaves the previous file and
        the lease as they were: after ``session_timeout/2`` without a successful write the
        broker stops acknowledging writes (self-fence) until one succeeds again."""
        counter = self.counter + 1
        s = self.broker.settings
        published = self._published()
        obj = {"format": 1, "broker_id": self.broker.id, "counter": counter,
               "host": s.advertise_host, "port": s.advertise_port, "pid": os.getpid(),
               "applied_version": self.applied_version, "draining": self.broker.draining,
               "controller_epoch": self.controller_epoch,
               "pending": sorted(published[2]),
               "seen": {str(p.broker_id): p.counter for p in self.peers.values() if p.broker_id != self.broker.id}}
        self._next_beat = trio.current_time() + self.period
        try:
            path = self.layout.broker_file(self.broker.id)
            await self.broker.run_io(lambda: atomic.write_json(path, obj, fsync=s.fsync))
        except OSError as exc:
            log.error("heartbeat_write_failed", error=str(exc), lease_valid=self.lease_valid())
            return
        self.counter = counter
        self._last_published = published
        if self.first_counter is None:
            self.first_counter = counter
        if self.lease_until and time.monotonic() > self.lease_until:
            # We were paused or starved past our lease: peers may have taken our keys and
            # written their files. Forget cached coordinator state; reload from the volume.
            log.warning("lease_lapsed", late_s=round(time.monotonic() - self.lease_until, 3))
            self.lapses += 1
            self.first_counter = counter  # peers must read this heartbeat before we serve groups
            for gid in list(self.broker.groups.groups):
                self.broker.groups.unload(gid)
            if self.broker.txn is not None and hasattr(self.broker.txn, "forget_cache"):
                self.broker.txn.forget_cache()
        # The lease runs from when this tick began: everything after t0 was checked.
        self.lease_until = t0 + self.session / 2
        me = self.peers.get(self.broker.id)
        if me is None:
            self.peers[self.broker.id] = Peer(self.broker.id, s.advertise_host, s.advertise_port, self.counter,
                                              time.monotonic(), self.applied_version, self.broker.draining)

    # ------------------------------------------------------------------ controller

    def _highest_epoch(self) -> tuple[int, int | None]:
        best, owner = 0, None
        try:
            names = os.listdir(self.layout.controller)
        except FileNotFoundError:
            return 0, None
        for name in names:
            if name.startswith("epoch-"):
                try:
                    n = int(name[6:])
                except ValueError:
                    continue
                if n > best:
                    best = n
        if best:
            try:
                owner = int(json.loads((self.layout.controller / f"epoch-{best}").read_bytes())["broker_id"])
            except (OSError, ValueError, KeyError, TypeError):
                owner = None
        return best, owner

    async def _elect(self) -> None:
        epoch, owner = await self.broker.run_io(self._highest_epoch)
        self.controller_epoch = epoch
        self.controller_id = owner
        alive = self.alive_any()
        if owner is not None and (owner in alive or owner == self.broker.id):
            was = self.is_controller
            self.is_controller = owner == self.broker.id and not self.broker.draining
            if was and not self.is_controller:
                log.info("controller_resigned", controller_epoch=epoch)
            if owner != self.broker.id:
                return
            if not self.broker.draining:
                return
        # No live controller (or we are draining away from it): race for the next epoch.
        # Wait one session after start so we know who is alive before deposing anybody.
        if time.monotonic() - self.started < self.session and owner is not None:
            return
        if self.broker.draining:
            self.is_controller = False
            if owner != self.broker.id:
                return
        data = json.dumps({"format": 1, "broker_id": self.broker.id, "epoch": epoch + 1}).encode()
        try:
            won = await self.broker.run_io(
                lambda: atomic.create_exclusive(self.layout.controller / f"epoch-{epoch + 1}", data,
                                                fsync=self.broker.settings.fsync))
        except OSError as exc:  # not elected: the next tick races again
            log.error("controller_epoch_write_failed", controller_epoch=epoch + 1, error=str(exc))
            return
        if won:
            self.controller_epoch = epoch + 1
            self.controller_id = self.broker.id
            self.is_controller = True
            self.failovers += 1
            log.info("controller_elected", controller_epoch=epoch + 1, previous_controller=owner)

    async def _control(self) -> None:
        self.broker.topics.refresh()
        topics = {name: meta.partitions for name, meta in self.broker.topics.topics.items()}
        prev = self._read_assignment_file()
        if prev is not None and prev.controller_epoch > self.controller_epoch:
            self.is_controller = False
            return
        floors = None
        new = balance(prev, topics, self.registered(), self._placeable(), self.controller_epoch, epoch_floor=floors)
        if prev is not None and new == prev:
            return
        # Still the controller? A deposed one must not overwrite its successor's file.
        epoch, _owner = self._highest_epoch()
        if epoch != self.controller_epoch:
            self.is_controller = False
            return
        try:
            await self.broker.run_io(lambda: atomic.write_json(self.layout.assignment, new.to_json(),
                                                                    fsync=self.broker.settings.fsync))
        except OSError as exc:
            # the previous assignment stays in force; the next tick computes and writes again
            log.error("assignment_write_failed", version=new.version, error=str(exc))
            return
        log.info("assignment_written", version=new.version, controller_epoch=new.controller_epoch,
                 alive=self.alive(), partitions=sum(len(v) for v in new.partitions.values()))

    def _placeable(self) -> list[int]:
        """The alive brokers the controller places keys on: a broker back from the dead
        (restarted after a death notice, resumed after a pause) gets its share back only
        ``rejoin_hold`` after it returned. Its keys moved away at its death, and the
        clients that followed them are still settling: moving the keys back at once
        would be a second disruption on top of the first (Apache, too, moves leadership
        back to a returning broker only later, by preferred-leader election)."""
        now = time.monotonic()
        return [b for b in self.alive() if b == self.broker.id or b not in self.peers
                or now - self.peers[b].back_at >= self.rejoin_hold]

    def _read_assignment_file(self) -> Assignment | None:
        """The assignment as last written, read afresh; parsed again only when its bytes
        changed (with 1,000 partitions the parse is the biggest part of an idle tick)."""
        try:
            data = self.layout.assignment.read_bytes()
        except FileNotFoundError:
            return None
        if data == self._assignment_raw and self._assignment_parsed is not None:
            return self._assignment_parsed
        try:
            obj = atomic.parse_json(self.layout.assignment, data)
        except CorruptState as exc:
            log.error("assignment_corrupt", error=str(exc))
            raise
        try:
            parsed = Assignment.from_json(obj)
        except ValueError as exc:
            raise CorruptState(str(self.layout.assignment), str(exc)) from None
        self._assignment_raw, self._assignment_parsed = data, parsed
        return parsed

    # ------------------------------------------------------------------ apply

    async def _apply_assignment(self) -> None:
        a = await self.broker.run_io(self._read_assignment_file)
        if a is None:
            return
        if a.controller_epoch < self.controller_epoch and not (self.assignment is None):
            # Written by a deposed controller: ignore it until the new one writes.
            if self.assignment is not None and a.version <= self.assignment.version:
                return
        if self.assignment is not None and a.version < self.assignment.version and \
                a.controller_epoch <= self.assignment.controller_epoch:
            return
        prev = self.assignment
        self.assignment = a
        broker = self.broker
        me = broker.id
        # 1. relinquish everything that moved away (or whose topic is gone)
        for key, part in list(broker.partitions.items()):
            leader = a.leader_of(*key)
            if leader is None or leader.leader != me or leader.epoch != part.epoch:
                await broker.relinquish(part)
        # 2. record the version each leadership began in (ours: the hand-off rule below;
        #    everyone's: Metadata names a leader only once it opened the partition)
        if a is not prev:
            since = self._since
            for key in [k for k in since if k[0] not in a.partitions]:
                del since[key]
            for topic, leaders in a.partitions.items():
                prow = prev.partitions.get(topic, ()) if prev is not None else ()
                for p, pl in enumerate(leaders):
                    key = (topic, p)
                    old = prow[p] if p < len(prow) else None
                    if prev is None:
                        since[key] = 0  # began before we joined: the leader's pending list tells
                    elif old is None or old != pl:
                        since[key] = a.version
                    if pl.leader == me:
                        if old is None or old.leader != me or old.epoch != pl.epoch:
                            self._became_leader_version[key] = a.version
                    else:
                        self._became_leader_version.pop(key, None)
            for key in [k for k in self._became_leader_version if k[0] not in a.partitions]:
                del self._became_leader_version[key]
        self.applied_version = a.version
        # 3. take over what the hand-off rule allows
        if not self.lease_valid() and time.monotonic() - self.started > self.session:
            # our lease lapsed (e.g. we were paused): heartbeat first, take over next tick
            return
        now = time.monotonic()
        took = False
        for key, version in list(self._became_leader_version.items()):
            if key in broker.partitions:
                continue
            blockers = [p.broker_id for p in self.peers.values()
                        if p.broker_id != me and p.live(now, self.session) and p.applied_version < version]
            if blockers:
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
        if (took or a is not prev) and broker.txn is not None and hasattr(broker.txn, "wake_markers"):
            broker.txn.wake_markers()
        # 4. coordinator state of keys that are not ours any more
        if broker.txn is not None and hasattr(broker.txn, "drop_unowned_slots"):
            broker.txn.drop_unowned_slots()

    def _sweep_gained_slots(self) -> None:
        """Slots that came to us (by the assignment, with a valid lease: after the tick's
        heartbeat) are swept at once: prepared transactions of a dead or departed
        coordinator finish now, not at the next periodic sweep."""
        txn = self.broker.txn
        if txn is None or not hasattr(txn, "wake_sweeps"):
            return
        owned = frozenset(s for s in range(TXN_SLOTS) if self.broker.owns_slot(s))
        if owned - self._owned_slots:
            txn.wake_sweeps()
        self._owned_slots = owned
