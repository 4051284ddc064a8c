"""The narrow Broker object handed to handlers: led partitions, the cluster view, routing,
and the coordinators. The trio loops that keep it current live in ``kaas.tasks``; topic
administration is ``broker.admin`` (``broker.topic_admin``)."""

from __future__ import annotations

import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas import configs, counters
from kaas.aio import Wakeup
from kaas.broker.acls import Acls
from kaas.broker.client_quotas import ClientQuotaStore
from kaas.broker.cluster_view import ClusterView
from kaas.broker.dynamic import DynamicConfigs
from kaas.broker.features import FeatureStore
from kaas.broker.group_configs import GroupConfigStore
from kaas.broker.partition import Partition
from kaas.broker.quota_sensors import ClientQuotaEnforcer
from kaas.broker.task_time import TaskTimes
from kaas.broker.topic_admin import TopicAdmin
from kaas.clock import SYSTEM, Clock
from kaas.coord.group import GroupCoordinator
from kaas.coord.group.share.offsets import ShareOffsets
from kaas.coord.share_partitions import ShareRuntime
from kaas.coord.share_partitions.admin import ShareStateAdmin
from kaas.coord.txn import TxnCoordinator
from kaas.coord.txn.adder import TxnAdder
from kaas.domain import coordinators, replicas, routing
from kaas.domain.groups.configs import GroupConfig
from kaas.errors import CorruptState, KaasError
from kaas.peer_calls import PeerCalls
from kaas.peers import PeerEndpoint, PeerLinks, client_context, scram_authenticator
from kaas.settings import Settings
from kaas.storage import deaths, incarnation
from kaas.storage.credentials import CredentialStore
from kaas.storage.partition_log import PartitionLog
from kaas.storage.paths import Layout
from kaas.storage.producer_ids import PidAllocator
from kaas.storage.topics import TopicMeta, TopicStore
from kaas.wire import batch as wb

log = structlog.get_logger()
T = TypeVar("T")
GROUP_OWNER_CACHE_MAX = 1 << 16
GROUP_OWNER_VIEW_S = 0.001  # how long group_owner trusts the membership it looked at


def fs_type(path: str | os.PathLike[str]) -> str:
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


def peer_tls_context(settings: Settings) -> ssl.SSLContext:
    """The client context of the peer links when the inter-broker listener is TLS: the
    peers' certificates checked against ``ssl_cafile`` (else the system's CAs), this
    broker's own certificate offered as the client certificate."""
    return client_context(settings.ssl_cafile, settings.ssl_certfile, settings.ssl_keyfile,
                          settings.ssl_keyfile_password)


def peer_sasl_hook(settings: Settings, broker_id: int
                   ) -> Callable[[trio.abc.Stream, PeerEndpoint], Awaitable[int]] | None:
    """The SASL hook of the peer links (``PeerLinks.authenticate``): SCRAM as the broker
    principal ``--inter-broker-sasl-username`` on every new connection to a peer's SASL
    listener; None when this broker has no such credentials (a SASL peer listener is then
    unreachable, and the link says so)."""
    if not settings.inter_broker_sasl_username:
        return None
    return scram_authenticator(broker_id, settings.inter_broker_sasl_mechanism,
                               settings.inter_broker_sasl_username, settings.inter_broker_sasl_password)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


class Broker:
    """Everything a handler may touch. Created by ``net.server`` per process."""

    def __init__(self, settings: Settings, clock: Clock = SYSTEM) -> None:
        self.settings = settings
        self.clock = clock  # the one source of time of this broker and all it holds
        self.id = settings.broker_id
        # which start of broker ``id`` this is: heartbeats, death notices, suspicion
        self.incarnation = settings.incarnation or incarnation.draw()
        self.layout = Layout(settings.data)
        self.layout.ensure()
        self.memory_backed = fs_type(self.layout.data) in ("tmpfs", "ramfs")
        self.topics = TopicStore(self.layout.topics, fsync=settings.fsync)
        self.partitions: dict[tuple[str, int], Partition] = {}
        # partitions whose log failed (a write or fsync error), by key: the reason. The
        # cluster runtime reopens them through recovery on its next tick; until then they
        # answer KAFKA_STORAGE_ERROR.
        self.offline: dict[tuple[str, int], str] = {}
        self._data_event = trio.Event()
        self._flush_wakeup = Wakeup()
        self.nursery: trio.Nursery | None = None
        self.started_ms = clock.wall_ms()
        self.fsync_count = 0
        self.fsync_seconds = 0.0
        self.stopping = False
        self.connections = 0
        self.txn: TxnCoordinator | None = None  # created by tasks.serve_broker
        self.groups = GroupCoordinator(self)
        # KIP-932 share partitions this broker leads, and the share sessions of its clients
        self.shares = ShareRuntime(self)
        self.cluster = ClusterView(self.id, settings.session_timeout_ms, settings.heartbeat_ms, clock,
                                   coordinator_hold_ms=settings.group_coordinator_rejoin_hold_ms)
        self._group_owners: dict[str, int | None] = {}  # group_owner's, for _group_owners_view
        self._group_owners_view: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self._group_owners_checked = -1.0  # monotonic time the view was last computed
        ib = settings.inter_broker
        self.peer_links = PeerLinks(self.id, self.cluster, listener=ib.name,
                                    ssl_context=peer_tls_context(settings) if ib.tls else None,
                                    authenticate=peer_sasl_hook(settings, self.id))
        # TV2 (KIP-890 part 2): partitions and groups added to transactions by this broker
        self.txn_adder = TxnAdder(self, PeerCalls(self.peer_links))
        self.admin = TopicAdmin(self)
        # dynamic broker configs (KIP-226): ``settings`` is the options with them applied
        self.dynamic = DynamicConfigs(self, settings)
        # group configs (KIP-848/932): __cluster/group_configs.json, reloaded by tasks.group_configs
        self.group_configs = GroupConfigStore(self.layout, fsync=settings.fsync)
        # finalized feature levels (KIP-584): __cluster/features.json, reloaded by tasks.features
        self.features = FeatureStore(self.layout, fsync=settings.fsync)
        # client quotas (KIP-546): __cluster/client_quotas.json, reloaded by tasks.features
        self.client_quotas = ClientQuotaStore(self.layout, fsync=settings.fsync)
        # their enforcement on this broker (windows per quota entity) and the request
        # quota's measure of the time a request runs
        self.quotas = ClientQuotaEnforcer(self.client_quotas, clock)
        self.task_times = TaskTimes()
        self.acls = Acls(settings, self.layout)  # the authoriser's ACLs (tasks.acls reloads them)
        self.takeovers = 0
        self.takeover_seconds = 0.0
        self.pids = PidAllocator(self.layout.pid_block_file(self.id), self.id, fsync=settings.fsync)
        # SCRAM users (__cluster/security/scram-credentials.json), re-read by tasks.credentials
        self.credentials = CredentialStore(self.layout.scram_credentials, fsync=settings.fsync)
        self.credentials_lock = trio.Lock()  # AlterUserScramCredentials: one read-alter-write at a time
        # the share groups' admin (KIP-932 offsets): at their coordinator, and as partition leader
        self.share_offsets = ShareOffsets(self)
        self.groups.shares.on_delete = self.share_offsets.delete_all

    @property
    def share_state(self) -> ShareStateAdmin:
        """This broker's share-state calls as partition leader (of the current ``shares``)."""
        return ShareStateAdmin(self.shares)

    # ------------------------------------------------------------------ lifecycle

    @property
    def draining(self) -> bool:
        """SIGTERM: this broker drains (the controller moves its keys away)."""
        return self.cluster.draining

    async def drain_wait(self, timeout: float = 5.0) -> None:
        """SIGTERM: flag draining so the controller moves our keys away, and wait (bounded)
        until we lead nothing and own no transaction slot while still serving; the caller
        then relinquishes the rest. A draining controller stays controller until then: it
        writes the assignment that moves its own keys away (its successor is elected the
        moment its death notice is read)."""
        deadline = self.clock.monotonic() + timeout
        if self.txn is not None:
            if not await self.txn.wait_finishing(timeout / 2):  # EndTxns answered early
                log.warning("txn_finishing_at_drain", note="left prepared for the next owner's sweep")
            await self.txn.flush_slots()  # deferred Complete* states, while we own the slots
        self.cluster.draining = True
        self.cluster.wake()
        with trio.move_on_after(max(0.0, deadline - self.clock.monotonic())):
            while (self.partitions or self._owns_any_slot()) and len(self.cluster.alive()) > 0:  # noqa: ASYNC110 - peers' heartbeats, no event
                await self.cluster.wait_changed()
            if self.txn is not None:  # markers queued to us go on to the partitions' new leaders now
                await self.txn.apply_queue()

    def _owns_any_slot(self) -> bool:
        return any(self.owns_slot(s) for s in range(routing.TXN_SLOTS))

    async def close(self) -> None:
        """Relinquish every partition; after this the broker takes nothing over again."""
        self.stopping = True
        for part in list(self.partitions.values()):
            await self._close_partition(part)
        self.shares.close()

    async def record_own_death(self) -> None:
        """The last act of a graceful shutdown, once every file is given up and every loop
        has stopped: this incarnation's death notice (``storage.deaths``), so peers take
        what is left at once instead of waiting out ``session_timeout``."""
        body = deaths.encode(self.id, self.incarnation, None, pid=os.getpid(), graceful=True)
        try:
            await self.run_io(deaths.write, self.layout.death_file(self.id), body)
        except OSError as exc:
            log.error("death_notice_write_failed", error=str(exc), note="peers wait out the session timeout")
            return
        log.info("death_notice_written", incarnation=self.incarnation[:8])

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
                            configs.log_config(self.settings, meta.configs), clock=self.clock.wall_ms)
        try:
            t0 = self.clock.monotonic()
            epoch = await trio.to_thread.run_sync(plog.open, epoch)
            took = self.clock.monotonic() - t0
            self.takeovers += 1
            self.takeover_seconds += took
            counters.observe_takeover(took)
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
            for note in plog.open_notes:
                log.info("partition_open_note", topic=meta.name, partition=index, note=note)
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
        part.abandon()
        self.notify_data()  # long-polling fetches of it answer now
        self.cluster.wake()

    async def run_io(self, fn: Callable[..., T], *args: Any) -> T:
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

    def brokers(self, listener: str | None = None) -> list[BrokerInfo]:
        """The brokers Metadata names: every broker heard from recently (draining ones
        included: they still answer until they exit; ``ClusterView.listed``), each at its
        endpoint on ``listener`` (the name of the listener the request came in on; None:
        the inter-broker listener). A broker without that listener is left out."""
        s = self.settings
        name = listener or s.inter_broker.name
        mine = next((x for x in s.all_listeners if x.name == name), None)
        out = []
        for bid in self.cluster.listed():
            if bid == self.id:
                if mine is not None:
                    out.append(BrokerInfo(self.id, mine.advertised_host, mine.advertised_port))
            else:
                p = self.cluster.peers.get(bid)
                e = p.endpoint(name) if p is not None else None
                if e is not None and e.port > 0:
                    out.append(BrokerInfo(bid, e.host, e.port))
        return out

    def controller_id(self, listener: str | None = None) -> int:
        """The controller as Metadata reports it: always a broker of the same response's
        broker list (librdkafka waits for a named controller it cannot reach until its next
        metadata refresh, minutes away). Any broker can serve the admin APIs."""
        owner = self.cluster.controller_id
        if owner is not None and any(b.node_id == owner for b in self.brokers(listener)):
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
        manual = meta.replica_assignment.get(index)
        if manual is not None:
            return replicas.describe_manual(view, leader, manual)
        anchor = leader
        if anchor < 0:
            a = self.cluster.assignment
            pl = a.leader_of(meta.name, index) if a is not None else None
            anchor = pl.leader if pl is not None else -1
        return replicas.describe(view, leader, anchor, index, meta.replication_factor)

    def broker_info(self, broker_id: int, listener: str | None = None) -> BrokerInfo | None:
        return next((b for b in self.brokers(listener) if b.node_id == broker_id), None)

    def coordinator_candidates(self) -> list[int]:
        """The live brokers groups are placed on: those the applied assignment lists as
        coordinators (a broker back from the dead only after the hold), or every live
        broker when it lists none of them (``domain.coordinators.candidates``)."""
        return coordinators.candidates(self.alive_brokers(), self.cluster.coordinators())

    def group_owner(self, group_id: str) -> int | None:
        """The group's coordinator under the current membership and coordinators list:
        computed once per group and view (a rendezvous hash in Python was a tenth of a
        Heartbeat's cost).

        The membership itself (registered and live brokers) is looked at again at most
        every ``GROUP_OWNER_VIEW_S``: computing it was half of what remained of a
        Heartbeat's handler. A view that old is far fresher than the membership tick that
        changes it, and a group moves only once its new owner holds a lease and has been
        acknowledged (``GroupCoordinator.check_owner``), which takes ticks, not a millisecond."""
        cache = self._group_owners
        now = self.clock.monotonic()
        if now - self._group_owners_checked >= GROUP_OWNER_VIEW_S or self._group_owners_view is None:
            self._group_owners_checked = now
            view = (tuple(self.registered_brokers()), tuple(self.coordinator_candidates()))
        else:
            view = self._group_owners_view
        if view != self._group_owners_view or len(cache) >= GROUP_OWNER_CACHE_MAX:
            self._group_owners_view = view
            cache.clear()
        try:
            return cache[group_id]
        except KeyError:
            owner = cache[group_id] = routing.coordinator_for(group_id, view[0], view[1])
            return owner

    def owns_group(self, group_id: str) -> bool:
        return self.group_owner(group_id) == self.id

    def group_config(self, group_id: str) -> GroupConfig:
        """What ``group_id`` runs with: its group configs over this broker's ``group.*``
        settings (cheap: cached until either changes).

        Raises:
            KaasError: KAFKA_STORAGE_ERROR, the group config file was never readable.
        """
        return self.group_configs.config(self.settings, group_id)

    async def refresh_group_configs(self) -> None:
        """Read ``__cluster/group_configs.json`` afresh now, not at the next poll (a share
        partition about to start from ``share.auto.offset.reset``)."""
        await self.run_io(self.group_configs.reload, True)

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
        a = self.cluster.assignment
        if a is not None and a.txn_slots and a.txn_slots.get(slot, -1) == self.id:
            # assigned here (and this broker is alive to itself): ``slot_owner`` is this
            # broker; every transactional request asks several times
            return self.cluster.lease_valid()
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

    # ------------------------------------------------------------------ data wakeups

    def notify_data(self) -> None:
        ev, self._data_event = self._data_event, trio.Event()
        ev.set()

    @property
    def flush_wakeup(self) -> Wakeup:
        """The flusher's (``tasks.flush``): a partition's flush.messages was reached."""
        return self._flush_wakeup

    async def wait_for_data(self) -> None:
        await self._data_event.wait()

    def stats_fsync(self, seconds: float) -> None:
        self.fsync_count += 1
        self.fsync_seconds += seconds
        counters.observe_fsync(seconds)
