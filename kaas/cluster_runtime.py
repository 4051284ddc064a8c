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

from kaas.domain.assignment import Assignment, balance
from kaas.errors import CorruptState
from kaas.storage import atomic

log = structlog.get_logger()

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


class ClusterRuntime:
    def __init__(self, broker) -> None:
        self.broker = broker
        s = broker.settings
        self.layout = broker.layout
        self.session = s.session_timeout_ms / 1000
        self.list_window = max(3 * self.session, LIST_WINDOW_S)  # see listed()
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
            if now - p.changed_at < self.session and not p.draining:
                out.append(p.broker_id)
        return sorted(out)

    def alive_any(self) -> list[int]:
        """Alive brokers including draining ones (still serving until they relinquish)."""
        now = time.monotonic()
        out = {self.broker.id}
        for p in self.peers.values():
            if p.broker_id != self.broker.id and now - p.changed_at < self.session:
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
        return p is not None and time.monotonic() - p.changed_at < self.session

    def registered(self) -> list[int]:
        return sorted(set(self.peers) | {self.broker.id})

    def wake(self) -> None:
        self._wake.set()

    # ------------------------------------------------------------------ loop

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await self._tick()
        task_status.started()
        while True:
            self._wake = trio.Event()
            with trio.move_on_after(self.period):
                await self._wake.wait()
            try:
                await self._tick()
            except (OSError, CorruptState) as exc:
                log.error("cluster_tick_failed", error=str(exc))

    async def _tick(self) -> None:
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
        await self._heartbeat(t0)

    def _unload_moved_groups(self) -> None:
        """Forget groups whose coordinator is now another broker, on every tick whatever
        else the tick did: a group that comes back must be read afresh from the file its
        interim coordinator wrote, never served from a cache of an earlier ownership."""
        broker = self.broker
        for gid in list(broker.groups.groups):
            if not broker.owns_group(gid):
                broker.groups.unload(gid)

    # ------------------------------------------------------------------ heartbeats

    def _read_peers(self) -> None:
        now = time.monotonic()
        try:
            names = os.listdir(self.layout.brokers)
        except FileNotFoundError:
            return
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
            elif obj.get("counter") != p.counter:
                p.counter = obj.get("counter")
                p.changed_at = now
            p.host = obj.get("host", "")
            p.port = int(obj.get("port", -1))
            p.applied_version = int(obj.get("applied_version", 0))
            p.draining = bool(obj.get("draining", False))

    async def _heartbeat(self, t0: float) -> None:
        """Write this broker's heartbeat; only a write that succeeded renews the lease (and
        advances ``counter``). A failed one (ENOSPC, EIO, ...) leaves the previous file and
        the lease as they were: after ``session_timeout/2`` without a successful write the
        broker stops acknowledging writes (self-fence) until one succeeds again."""
        counter = self.counter + 1
        s = self.broker.settings
        obj = {"format": 1, "broker_id": self.broker.id, "counter": counter,
               "host": s.advertise_host, "port": s.advertise_port, "pid": os.getpid(),
               "applied_version": self.applied_version, "draining": self.broker.draining,
               "controller_epoch": self.controller_epoch}
        try:
            path = self.layout.broker_file(self.broker.id)
            await self.broker.run_io(lambda: atomic.write_json(path, obj, fsync=s.fsync))
        except OSError as exc:
            log.error("heartbeat_write_failed", error=str(exc), lease_valid=self.lease_valid())
            return
        self.counter = counter
        if self.lease_until and time.monotonic() > self.lease_until:
            # We were paused or starved past our lease: peers may have taken our keys and
            # written their files. Forget cached coordinator state; reload from the volume.
            log.warning("lease_lapsed", late_s=round(time.monotonic() - self.lease_until, 3))
            self.lapses += 1
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
        new = balance(prev, topics, self.registered(), self.alive(), self.controller_epoch, epoch_floor=floors)
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
        # 2. record the version each key came to us in
        for topic, leaders in a.partitions.items():
            for p, pl in enumerate(leaders):
                key = (topic, p)
                if pl.leader == me:
                    old = prev.leader_of(topic, p) if prev is not None else None
                    if old is None or old.leader != me or old.epoch != pl.epoch:
                        self._became_leader_version[key] = a.version
                else:
                    self._became_leader_version.pop(key, None)
        self.applied_version = a.version
        # 3. take over what the hand-off rule allows
        if not self.lease_valid() and time.monotonic() - self.started > self.session:
            # our lease lapsed (e.g. we were paused): heartbeat first, take over next tick
            return
        now = time.monotonic()
        for key, version in list(self._became_leader_version.items()):
            if key in broker.partitions:
                continue
            blockers = [p.broker_id for p in self.peers.values()
                        if p.broker_id != me and now - p.changed_at < self.session and p.applied_version < version]
            if blockers:
                continue
            pl = a.leader_of(*key)
            meta = broker.topics.get(key[0])
            if meta is None:
                broker.topics.refresh()
                meta = broker.topics.get(key[0])
            if meta is None or pl is None:
                continue
            await broker.take_over(meta, key[1], pl.epoch)
        # 4. coordinator state of keys that are not ours any more
        if broker.txn is not None and hasattr(broker.txn, "drop_unowned_slots"):
            broker.txn.drop_unowned_slots()
