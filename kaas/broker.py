"""The narrow Broker object handed to handlers: topics, led partitions, cluster view.

A ``Partition`` wraps one ``PartitionLog`` for the trio world: appends happen on the trio
thread (no await between validation and the write, so they are serialised), fsyncs run in
a worker thread as a group commit, and readers park on ``wait_for_data`` for long-polls.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas import configs, failpoints, metrics
from kaas.domain import replicas, routing
from kaas.domain.producer_state import Duplicate, Reject
from kaas.errors import CorruptState, KaasError
from kaas.cluster_runtime import ClusterRuntime
from kaas.coord.group import GroupCoordinator
from kaas.coord.txn import TxnCoordinator
from kaas.net.peer_link import PeerLinks
from kaas.settings import Settings
from kaas.storage.partition_log import AppendResult, PartitionLog, ReadResult
from kaas.storage.paths import Layout
from kaas.storage.producer_ids import PidAllocator
from kaas.storage.topics import TopicMeta, TopicStore, valid_topic_name
from kaas.tasks.group_timers import serve_timers
from kaas.tasks.txn import serve_txn
from kaas.wire import batch as wb

log = structlog.get_logger()


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class ProduceResult:
    base_offset: int
    next_offset: int
    duplicate: bool
    log_append_time: int = -1  # the batch's append time on a LogAppendTime topic, else -1


class Partition:
    """A partition this broker leads."""

    def __init__(self, topic: str, index: int, plog: PartitionLog, broker: Broker) -> None:
        self.topic = topic
        self.index = index
        self.log = plog
        self.broker = broker
        self._syncing = False
        self._sync_done = trio.Event()
        self.closed = False
        self.offline: str | None = None  # why the log failed (KAFKA_STORAGE_ERROR until reopened)
        self._abandon_after_sync = False
        self.append_listeners: list[Callable[[wb.BatchHeader, AppendResult], None]] = []

    @property
    def epoch(self) -> int:
        return self.log.epoch

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset()

    def check_open(self) -> None:
        if self.offline is not None:
            raise KaasError(ErrorCode.kafka_storage_error, f"partition offline: {self.offline}")
        if self.closed:
            raise KaasError(ErrorCode.not_leader_or_follower, "partition relinquished")
        if not self.broker.cluster.lease_valid():
            raise KaasError(ErrorCode.not_leader_or_follower, "write lease lapsed (self-fenced)")

    def append(self, records: bytes, header: wb.BatchHeader) -> AppendResult:
        """Append a validated batch on the trio thread; readers are woken."""
        self.check_open()
        try:
            res = self.log.append(records, header)
        except KaasError:
            if self.log.failed is not None:
                self.broker.take_offline(self)
            raise
        for listener in self.append_listeners:
            listener(header, res)
        self.broker.notify_data()
        return res

    async def wait_durable(self, offset: int) -> None:
        """Return once every byte below ``offset`` is fsynced (group commit).

        Raises:
            KaasError: NOT_LEADER_OR_FOLLOWER when leadership was lost before the ack
                (check-before-ack), KAFKA_STORAGE_ERROR when the fsync failed.
        """
        while self.log.durable_offset < offset:
            self.check_open()
            if self._syncing:
                await self._sync_done.wait()
                continue
            end, fds = self.log.take_dirty()
            self._syncing = True
            try:
                await failpoints.hit_async("append.after_write_before_fsync")
                if self.log.config.fsync and fds:
                    t0 = time.perf_counter()
                    if self.broker.memory_backed:
                        # tmpfs: fsync is a no-op syscall; a worker-thread round trip would
                        # cost more than it (measured: ~25% of broker CPU under produce load)
                        self.log.fsync_fds(fds)
                    else:
                        await trio.to_thread.run_sync(self.log.fsync_fds, fds)
                    self.broker.stats_fsync(time.perf_counter() - t0)
                if end > self.log.durable_offset:
                    self.log.durable_offset = end
            except OSError as exc:
                # Never retried as if it had succeeded: the log is failed, every waiter gets
                # KAFKA_STORAGE_ERROR and the partition is reopened through recovery.
                self.log.fail(f"fsync failed: {exc}")
                self.broker.take_offline(self)
                raise KaasError(ErrorCode.kafka_storage_error, str(exc)) from None
            finally:
                self._syncing = False
                done, self._sync_done = self._sync_done, trio.Event()
                done.set()
                if self._abandon_after_sync:
                    self._abandon_after_sync = False
                    self.log.abandon()
        self.broker.check_before_ack(self)

    def append_control(self, producer_id: int, producer_epoch: int, commit: bool,
                       coordinator_epoch: int) -> AppendResult | None:
        """Append a COMMIT/ABORT marker for ``producer_id`` (the caller then awaits
        ``wait_durable(result.next_offset)``). Returns None when the marker is stale
        (the partition knows a newer epoch whose transaction this cannot close)."""
        self.check_open()
        d = self.log.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if isinstance(d, Reject):
            return None
        records = wb.control_batch(producer_id=producer_id, producer_epoch=producer_epoch, commit=commit,
                                   coordinator_epoch=coordinator_epoch, timestamp=now_ms())
        return self.append(records, wb.parse_header(records))

    def read(self, offset: int, max_bytes: int, limit: int, min_one: bool = True) -> ReadResult:
        return self.log.read(offset, max_bytes, limit, min_one=min_one)

    def aborted_transactions(self, start: int, end: int) -> list[dict]:
        """Aborted transactions overlapping [start, end) for read_committed fetches."""
        return [{"producer_id": pid, "first_offset": first} for pid, first in self.log.aborted_in(start, end)]

    async def produce(self, records: bytes, header: wb.BatchHeader, transactional_id: str | None,
                      *, log_append_time: bool = False) -> ProduceResult:
        """Classify (idempotence, seed) and append one validated batch from a Produce request.

        Runs without an await between the check and the append, so the classification and
        the write are atomic with respect to every other producer of this partition.

        With ``log_append_time`` (message.timestamp.type=LogAppendTime) the batch is stamped
        with the broker's clock before it is written; a duplicate is answered with the time
        its original was stamped with (the dedupe ring keeps each batch's max timestamp).

        Raises:
            KaasError: 45/47/48/87 from the dedupe ring, or NOT_LEADER_OR_FOLLOWER.
        """
        self.check_open()
        pid = header.producer_id
        if pid >= 0:
            if header.is_transactional:
                await self.broker.verify_txn_partition(self, transactional_id, header)
                self.check_open()
            d = self.log.producers.check(pid, header.producer_epoch, header.base_sequence,
                                         header.records_count, header.is_transactional)
            if isinstance(d, Duplicate):
                return ProduceResult(d.base_offset, d.base_offset + header.records_count, True,
                                     d.timestamp if log_append_time else -1)
            if isinstance(d, Reject):
                raise KaasError(ErrorCode(int(d.code)), d.reason)
        append_time = -1
        if log_append_time:
            append_time = now_ms()
            records = wb.stamp_log_append_time(records, append_time)
            header = wb.parse_header(records)
        res = self.append(records, header)
        return ProduceResult(res.base_offset, res.next_offset, False, append_time)


def fs_type(path) -> str:
    """The file system type of the mount holding ``path`` (from /proc/self/mountinfo)."""
    target = os.path.realpath(path)
    best, kind = "", ""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                mount_point = left.split()[4]
                if (target == mount_point or target.startswith(mount_point.rstrip("/") + "/")) \
                        and len(mount_point) >= len(best):
                    best, kind = mount_point, right.split()[0]
    except OSError:
        return ""
    return kind


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


class Broker:
    """Everything a handler may touch. Created by ``net.server`` per process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.id = settings.broker_id
        self.layout = Layout(settings.data)
        self.layout.ensure()
        self.memory_backed = fs_type(self.layout.data) in ("tmpfs", "ramfs")
        self.topics = TopicStore(self.layout.topics, fsync=settings.fsync)
        self.partitions: dict[tuple[str, int], Partition] = {}
        # partitions whose log failed (a write or fsync error), by key: the reason. The
        # cluster runtime reopens them through recovery on its next tick; until then they
        # answer KAFKA_STORAGE_ERROR.
        self.offline: dict[tuple[str, int], str] = {}
        self._applied_meta: dict[str, object] = {}  # topic -> the TopicMeta its partitions' configs came from
        self._data_event = trio.Event()
        self.nursery: trio.Nursery | None = None
        self.started_ms = now_ms()
        self.fsync_count = 0
        self.fsync_seconds = 0.0
        self.draining = False
        self.stopping = False
        self.connections = 0
        self.txn: TxnCoordinator | None = None
        self.groups = GroupCoordinator(self)
        self.cluster = ClusterRuntime(self)
        self.peer_links = PeerLinks(self)
        self.takeovers = 0
        self.takeover_seconds = 0.0
        self.pids = PidAllocator(self.layout.pid_block_file(self.id), self.id, fsync=settings.fsync)

    # ------------------------------------------------------------------ lifecycle

    async def start(self, nursery: trio.Nursery) -> None:
        """Join the cluster: heartbeats, controller election, assignment; partitions this
        broker is assigned are taken over by the cluster runtime."""
        self.nursery = nursery
        self.topics.refresh()
        failpoints.configure(self.layout.run, self.id)
        nursery.start_soon(self._failpoint_loop)
        await nursery.start(self.cluster.serve)
        await nursery.start(self.peer_links.serve_presence)
        nursery.start_soon(self._retention_loop)
        await nursery.start(serve_timers, self.groups)
        if self.txn is None:
            self.txn = TxnCoordinator(self)
            nursery.start_soon(serve_txn, self.txn)

    async def drain_wait(self, timeout: float = 5.0) -> None:
        """SIGTERM: flag draining so the controller moves our keys away, and wait (bounded)
        until we lead nothing while still serving; the caller then relinquishes the rest."""
        if self.txn is not None and hasattr(self.txn, "flush_slots"):
            if not await self.txn.wait_finishing(timeout / 2):  # EndTxns answered early
                log.warning("txn_finishing_at_drain", note="left prepared for the next owner's sweep")
            await self.txn.flush_slots()  # deferred Complete* states, while we own the slots
        self.draining = True
        self.cluster.wake()
        with trio.move_on_after(timeout):
            while self.partitions and len(self.cluster.alive()) > 0:
                await trio.sleep(0.1)

    async def close(self) -> None:
        """Relinquish every partition; after this the broker takes nothing over again."""
        self.stopping = True
        for part in list(self.partitions.values()):
            await self._close_partition(part)

    async def take_over(self, meta: TopicMeta, index: int, epoch: int) -> Partition | None:
        if self.stopping or self.draining:
            return None
        return await self._open_partition(meta, index, epoch)

    async def relinquish(self, part: Partition) -> None:
        await self._close_partition(part)

    async def _open_partition(self, meta: TopicMeta, index: int, epoch: int | None = None) -> Partition | None:
        key = (meta.name, index)
        if key in self.partitions:
            return self.partitions[key]
        plog = PartitionLog(self.layout.partition_dir(meta.name, index),
                            configs.log_config(self.settings, meta.configs))
        try:
            t0 = time.monotonic()
            epoch = await trio.to_thread.run_sync(plog.open, epoch)
            took = time.monotonic() - t0
            self.takeovers += 1
            self.takeover_seconds += took
            metrics.observe_takeover(took)
        except (CorruptState, OSError, KaasError) as exc:
            plog.abandon()
            if key in self.offline:  # said once when it went offline; retried every tick
                log.debug("partition_recovery_failed", topic=meta.name, partition=index, error=str(exc))
            else:
                log.error("partition_takeover_failed", topic=meta.name, partition=index, error=str(exc))
            return None
        finally:
            for cut in plog.recoveries:
                log.warning("recovery_truncated", topic=meta.name, partition=index, **cut)
            if plog.recovery_journal_error:
                log.error("recovery_journal_write_failed", topic=meta.name, partition=index,
                          error=plog.recovery_journal_error)
        if key in self.partitions or self.stopping:  # raced with another opener, or shutting down
            await trio.to_thread.run_sync(plog.close)
            return self.partitions.get(key)
        if plog.snapshot_error:
            log.error("producer_snapshot_unreadable_rebuilt_from_log", topic=meta.name, partition=index,
                      error=plog.snapshot_error)
        part = Partition(meta.name, index, plog, self)
        self.partitions[key] = part
        reason = self.offline.pop(key, None)
        if reason is not None:
            log.warning("partition_back_online", topic=meta.name, partition=index, epoch=epoch,
                        was=reason, log_end_offset=plog.log_end_offset)
        log.info("partition_takeover", topic=meta.name, partition=index, epoch=epoch,
                 log_end_offset=plog.log_end_offset, log_start_offset=plog.log_start_offset)
        return part

    async def _close_partition(self, part: Partition) -> None:
        part.closed = True
        if self.partitions.get((part.topic, part.index)) is part:
            del self.partitions[(part.topic, part.index)]
        try:
            await trio.to_thread.run_sync(part.log.close)
        except OSError as exc:  # e.g. the topic directory was deleted under us
            log.warning("partition_close_failed", topic=part.topic, partition=part.index, error=str(exc))
        log.info("partition_relinquish", topic=part.topic, partition=part.index, epoch=part.epoch)

    def take_offline(self, part: Partition) -> None:
        """A write or fsync of ``part`` failed and could not be undone: stop serving it
        (KAFKA_STORAGE_ERROR), give its files up without writing, and let the cluster
        runtime reopen it through recovery (it stays assigned here, so the next tick takes
        it over again, and keeps trying while the disk refuses writes)."""
        key = (part.topic, part.index)
        if part.offline is not None:
            return
        part.offline = part.log.failed or "storage error"
        part.closed = True
        if self.partitions.get(key) is part:
            del self.partitions[key]
        self.offline[key] = part.offline
        log.error("partition_offline", topic=part.topic, partition=part.index, epoch=part.epoch,
                  reason=part.offline, durable_offset=part.log.durable_offset)
        if part._syncing:  # a worker thread may be fsyncing its fds: close them after it
            part._abandon_after_sync = True
        else:
            part.log.abandon()
        self.notify_data()  # long-polling fetches of it answer now
        self.cluster.wake()

    async def run_io(self, fn, *args):
        """Run blocking file work: in a worker thread on a real disk, inline on tmpfs where
        the thread round trip costs more than the (memory-speed) file operation.

        Inline means no checkpoint either: a trio checkpoint is a trip through the
        scheduler (an epoll poll and a task switch, ~20 us here), more than the file
        operation itself, and a transactional request makes several. Background loops
        that call this many times in a row yield on their own (``apply_queue``, ``sweep``)."""
        if self.memory_backed:
            return fn(*args)
        return await trio.to_thread.run_sync(fn, *args)

    def allocate_pid(self) -> int:
        return self.pids.allocate()

    # ------------------------------------------------------------------ cluster view

    def brokers(self) -> list[BrokerInfo]:
        """The brokers Metadata names: every broker heard from recently (draining ones
        included: they still answer until they exit; ``ClusterRuntime.listed``)."""
        s = self.settings
        out = []
        for bid in self.cluster.listed():
            if bid == self.id:
                out.append(BrokerInfo(self.id, s.advertise_host, s.advertise_port))
            else:
                p = self.cluster.peers.get(bid)
                if p is not None and p.port > 0:
                    out.append(BrokerInfo(bid, p.host, p.port))
        return out

    def controller_id(self) -> int:
        """The controller as Metadata reports it: always a broker of the same response's
        broker list (librdkafka waits for a named controller it cannot reach until its next
        metadata refresh, minutes away). Any broker can serve the admin APIs."""
        owner = self.cluster.controller_id
        if owner is not None and any(b.node_id == owner for b in self.brokers()):
            return owner
        return self.id

    @property
    def controller_epoch(self) -> int:
        return self.cluster.controller_epoch

    def registered_brokers(self) -> list[int]:
        return self.cluster.registered()

    def alive_brokers(self) -> list[int]:
        return self.cluster.alive()

    def replica_view(self) -> replicas.View:
        """The cluster snapshot ``replicas`` reads (take one per request)."""
        return replicas.View.of(self.cluster.registered(), self.cluster.alive(), self.cluster.alive_any())

    def replicas(self, view: replicas.View, meta: TopicMeta, index: int, leader: int) -> replicas.Replicas:
        """Replicas, ISR and offline replicas Metadata reports for a partition whose live
        leader is ``leader`` (-1: none; the ring then starts at the assigned leader)."""
        anchor = leader
        if anchor < 0:
            a = self.cluster.assignment
            pl = a.leader_of(meta.name, index) if a is not None else None
            anchor = pl.leader if pl is not None else -1
        return replicas.describe(view, leader, anchor, index, meta.replication_factor)

    def broker_info(self, broker_id: int) -> BrokerInfo | None:
        return next((b for b in self.brokers() if b.node_id == broker_id), None)

    def group_owner(self, group_id: str) -> int | None:
        return routing.coordinator_for(group_id, self.registered_brokers(), self.alive_brokers())

    def owns_group(self, group_id: str) -> bool:
        return self.group_owner(group_id) == self.id

    def slot_owner(self, slot: int) -> int | None:
        a = self.cluster.assignment
        if a is not None and a.txn_slots:
            owner = a.txn_slots.get(slot, -1)
            if owner >= 0 and self.cluster.is_alive_any(owner):
                return owner
        owner = routing.slot_owners(self.registered_brokers(), self.alive_brokers()).get(slot, -1)
        return None if owner < 0 else owner

    def owns_slot(self, slot: int) -> bool:
        """This broker coordinates the slot and may write its file: it is the assigned
        owner and holds a write lease. A broker resumed after a pause answers requests
        from its socket backlog before it applies the new assignment; without the lease
        check it could write a slot file its successor already owns."""
        return self.slot_owner(slot) == self.id and self.cluster.lease_valid()

    def txn_owner(self, transactional_id: str) -> int | None:
        return self.slot_owner(routing.txn_slot(transactional_id))

    def leader(self, topic: str, index: int) -> tuple[int, int]:
        """(leader broker id, leader epoch) of a partition from the assignment; (-1, epoch)
        while it has no live leader. The routing view (markers go to the assigned leader,
        which applies them when it opens the partition); Metadata uses ``served_leader``."""
        part = self.partitions.get((topic, index))
        if part is not None:
            return self.id, part.epoch
        a = self.cluster.assignment
        pl = a.leader_of(topic, index) if a is not None else None
        if pl is None:
            return -1, -1
        if pl.leader == self.id or not self.cluster.is_alive_any(pl.leader):
            return -1, pl.epoch  # not (yet) taken over
        return pl.leader, pl.epoch

    def served_leader(self, topic: str, index: int) -> tuple[int, int]:
        """``leader``, but (-1, epoch) also while a peer leader has not opened the partition
        yet (its heartbeat still lists it pending, or predates the version that gave it
        the partition), or is suspected dead (its presence connection ended): Metadata
        answers LEADER_NOT_AVAILABLE rather than send a client to a broker that would only
        refuse it or not answer, and the client asks again soon."""
        leader, epoch = self.leader(topic, index)
        if leader >= 0 and leader != self.id and (self.cluster.is_suspected(leader)
                                                  or not self.cluster.opened_by(leader, topic, index)):
            return -1, epoch
        return leader, epoch

    async def verify_txn_partition(self, part: Partition, transactional_id: str | None,
                                   header: wb.BatchHeader) -> None:
        """KIP-890 part 1: a transactional batch must belong to an Ongoing transaction that
        has this partition. Without a coordinator every transactional batch is refused."""
        if self.txn is None:
            raise KaasError(ErrorCode.invalid_txn_state, "no transaction coordinator")
        await self.txn.verify_partition(transactional_id, header.producer_id, header.producer_epoch,
                                        part.topic, part.index)

    def check_before_ack(self, part: Partition) -> None:
        """After the fsync and before the ack: the manifest must still carry our epoch,
        else a new leader took the partition over and this write may be discarded."""
        part.check_open()
        try:
            epoch = part.log.manifest_epoch()
        except (OSError, CorruptState):
            epoch = -1
        if epoch != part.epoch:
            log.warning("partition_deposed", topic=part.topic, partition=part.index, epoch=part.epoch,
                        manifest_epoch=epoch)
            part.closed = True
            self.partitions.pop((part.topic, part.index), None)
            self.cluster.wake()
            raise KaasError(ErrorCode.not_leader_or_follower, "partition taken over")

    def get_partition(self, topic: str, index: int) -> Partition:
        """The led partition, or a KaasError telling the client what to do."""
        part = self.partitions.get((topic, index))
        if part is not None:
            return part
        meta = self.topics.get(topic)
        if meta is None or index < 0 or index >= meta.partitions:
            raise KaasError(ErrorCode.unknown_topic_or_partition)
        reason = self.offline.get((topic, index))
        if reason is not None:
            a = self.cluster.assignment
            pl = a.leader_of(topic, index) if a is not None else None
            if pl is not None and pl.leader == self.id:
                raise KaasError(ErrorCode.kafka_storage_error, f"partition offline: {reason}")
            self.offline.pop((topic, index), None)  # moved away: no longer ours to report
        raise KaasError(ErrorCode.not_leader_or_follower)

    # ------------------------------------------------------------------ topics

    async def ensure_topic(self, name: str, *, auto_create: bool) -> TopicMeta | None:
        meta = self.topics.get(name)
        if meta is None:
            self.topics.refresh()
            meta = self.topics.get(name)
        if meta is None and auto_create and self.settings.auto_create_topics and valid_topic_name(name):
            meta, _err = await self.create_topic(name, self.settings.num_partitions, {})
            if meta is None:
                self.topics.refresh()
                meta = self.topics.get(name)
        return meta

    async def ensure_partitions(self, meta: TopicMeta, timeout: float = 5.0) -> bool:
        """Wait (bounded by ``timeout`` seconds) until every live broker serves the topic's
        ``meta.partitions`` partitions: the controller assigned them, each leader opened its
        own, and every live broker applied that assignment (so any broker's Metadata names
        the leaders and routes to them). Returns False when the time ran out first."""
        return await self.wait_served(lambda: self.serves_topic(meta.name, meta.partitions), timeout)

    async def wait_served(self, ready, timeout: float) -> bool:
        """Wait until ``ready()``, re-checked after every cluster tick (the doorbell makes
        those milliseconds apart on a local volume), for at most ``timeout`` seconds."""
        self.cluster.wake()
        with trio.move_on_after(max(0.0, timeout)):
            while not ready():
                await self.cluster.wait_changed()
            return True
        return ready()

    def serves_topic(self, name: str, partitions: int) -> bool:
        """Does the whole cluster serve partitions ``0..partitions-1`` of ``name``?"""
        a = self.cluster.assignment
        row = a.partitions.get(name) if a is not None else None
        if row is None or len(row) < partitions or self.topics.get(name) is None:
            return False
        version = 0
        for p in range(partitions):
            if self.served_leader(name, p)[0] < 0:
                return False
            version = max(version, self.cluster.since(name, p))
        return self.cluster.applied_everywhere(version)

    def serves_without(self, name: str) -> bool:
        """Has every live broker applied an assignment without topic ``name``?"""
        a = self.cluster.assignment
        return a is not None and name not in a.partitions and self.cluster.applied_everywhere(a.version)

    async def create_topic(self, name: str, partitions: int, topic_configs: dict[str, str],
                           *, validate_only: bool = False, replication_factor: int = 1,
                           timeout: float = 5.0) -> tuple[TopicMeta | None, tuple[ErrorCode, str | None]]:
        """Create the topic file, then wait up to ``timeout`` seconds until the cluster
        serves the topic (``ensure_partitions``); REQUEST_TIMED_OUT if it did not by then
        (the topic exists and comes into service anyway, as with Apache)."""
        if not valid_topic_name(name):
            return None, (ErrorCode.invalid_topic_exception, f"invalid topic name {name!r}")
        if partitions == -1:
            partitions = self.settings.num_partitions
        if partitions <= 0:
            return None, (ErrorCode.invalid_partitions, "partition count must be positive")
        for k, v in topic_configs.items():
            err = configs.validate(k, v)
            if err:
                return None, (ErrorCode.invalid_config, err)
        self.topics.refresh()
        if self.topics.get(name) is not None:
            return None, (ErrorCode.topic_already_exists, f"topic {name} already exists")
        if validate_only:
            return None, (ErrorCode.none, None)
        meta = await trio.to_thread.run_sync(self.topics.create, name, partitions, topic_configs,
                                             replication_factor)
        if meta is None:
            return None, (ErrorCode.topic_already_exists, f"topic {name} already exists")
        log.info("topic_created", topic=name, partitions=partitions, topic_id=str(meta.topic_id))
        if timeout > 0 and not await self.ensure_partitions(meta, timeout):
            return meta, (ErrorCode.request_timed_out, f"topic {name} created; not yet served by every broker")
        return meta, (ErrorCode.none, None)

    async def delete_topic(self, name: str, timeout: float = 5.0) -> ErrorCode:
        """Delete the topic file, wait up to ``timeout`` seconds until every live broker
        applied an assignment without the topic (its leaders closed their partitions),
        then remove the partition directories. REQUEST_TIMED_OUT when the wait ran out:
        the directories are removed all the same (a leader that has not closed its files
        yet only writes into unlinked files)."""
        self.topics.refresh()
        meta = self.topics.get(name)
        if meta is None:
            return ErrorCode.unknown_topic_or_partition
        await trio.to_thread.run_sync(self.topics.delete, name)
        served = await self.wait_served(lambda: self.serves_without(name), timeout)
        for p in range(meta.partitions):
            part = self.partitions.get((name, p))
            if part is not None:
                await self._close_partition(part)
        tdir = self.layout.topic_dir(name)
        if tdir.exists():
            trash = tdir.with_name(f".{name}.deleted-{meta.topic_id}")
            os.rename(tdir, trash)
            await trio.to_thread.run_sync(shutil.rmtree, trash, True)
        log.info("topic_deleted", topic=name, served=served)
        return ErrorCode.none if served else ErrorCode.request_timed_out

    async def add_partitions(self, name: str, count: int, *, validate_only: bool = False,
                             timeout: float = 5.0) -> tuple[ErrorCode, str | None]:
        self.topics.refresh()
        meta = self.topics.get(name)
        if meta is None:
            return ErrorCode.unknown_topic_or_partition, None
        if count <= meta.partitions:
            return ErrorCode.invalid_partitions, f"topic has {meta.partitions} partitions already"
        if validate_only:
            return ErrorCode.none, None
        new = replace(meta, partitions=count)
        await trio.to_thread.run_sync(self.topics.update, new)
        log.info("partitions_created", topic=name, partitions=count)
        if timeout > 0 and not await self.ensure_partitions(new, timeout):
            return ErrorCode.request_timed_out, f"{count} partitions created; not yet served by every broker"
        return ErrorCode.none, None

    async def alter_topic_configs(self, name: str, new_configs: dict[str, str]) -> None:
        meta = self.topics.get(name)
        assert meta is not None
        new = replace(meta, configs=new_configs)
        await trio.to_thread.run_sync(self.topics.update, new)
        self.apply_topic_configs()

    def apply_topic_configs(self) -> None:
        """Give each partition this broker leads its topic's configs as the topic files say
        now. Any broker serves AlterConfigs and writes the topic file; the others find the
        change on their next membership tick (``TopicStore.refresh``) and apply it here."""
        fresh: dict[str, object] = {}
        for (name, _index), part in list(self.partitions.items()):
            meta = self.topics.get(name)
            if meta is None or self._applied_meta.get(name) is meta:
                continue  # (the cache replaces a topic's TopicMeta when its file changes)
            cfg = fresh.get(name)
            if cfg is None:
                cfg = fresh[name] = configs.log_config(self.settings, meta.configs)
            if cfg != part.log.config:
                part.log.config = cfg
                log.info("topic_configs_applied", topic=name, partition=part.index)
        for name in fresh:
            self._applied_meta[name] = self.topics.get(name)

    # ------------------------------------------------------------------ data wakeups

    def notify_data(self) -> None:
        ev, self._data_event = self._data_event, trio.Event()
        ev.set()

    async def wait_for_data(self) -> None:
        await self._data_event.wait()

    def stats_fsync(self, seconds: float) -> None:
        self.fsync_count += 1
        self.fsync_seconds += seconds
        metrics.observe_fsync(seconds)

    # ------------------------------------------------------------------ background

    async def _failpoint_loop(self) -> None:
        while True:
            await trio.sleep(0.2)
            failpoints.reload()

    async def _retention_loop(self) -> None:
        while True:
            await trio.sleep(self.settings.retention_check_ms / 1000)
            now = now_ms()
            for part in list(self.partitions.values()):
                if part._syncing or part.closed:
                    continue
                try:
                    n = part.log.apply_retention(now)
                except OSError as exc:
                    log.error("retention_failed", topic=part.topic, partition=part.index, error=str(exc))
                    continue
                expired = part.log.producers.expire(now, self.settings.producer_id_expiration_ms)
                if expired:
                    log.info("producer_state_expired", topic=part.topic, partition=part.index, count=len(expired))
                if n:
                    log.info("retention_deleted_segments", topic=part.topic, partition=part.index,
                             segments=n, log_start_offset=part.log_start_offset)
