"""``TxnCoordinator`` over a tmp data directory shared by several fake brokers: real
partition logs and slot files, a scripted cluster view (leaders, liveness, owners).

Covers what a single-broker integration test cannot reach: peer-led markers through the
queue, forwarding after a leadership move, claims of a dead broker's queue, the offset
hook of a group coordinated elsewhere, the fence-log broadcast, the begin guard while
markers are queued, dispatch failure + reconcile, the reaper, and KIP-890 verification.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio
from kio.schema.errors import ErrorCode

from kaas import failpoints
from kaas.broker import Partition
from kaas.clock import SYSTEM
from kaas.coord.txn import TxnCoordinator
from kaas.domain.routing import txn_slot
from kaas.domain.txn import TxnState
from kaas.errors import KaasError
from kaas.settings import Settings
from kaas.storage.partition_log import LogConfig, PartitionLog
from kaas.storage.paths import Layout
from kaas.tasks import txn as txn_tasks
from kaas.wire import batch as wb
from tests.clocks import SteppedWall

V = 3  # request version used for AddPartitions/EndTxn (PRODUCER_FENCED from v2)


@dataclass
class World:
    topics: dict[str, int] = field(default_factory=lambda: {"t": 3})
    leaders: dict[tuple[str, int], int] = field(default_factory=dict)
    alive: set[int] = field(default_factory=lambda: {0, 1, 2})
    slot_owner: int = 0
    group_owners: dict[str, int] = field(default_factory=dict)
    pids: itertools.count = field(default_factory=lambda: itertools.count(1000))


class FakeGroups:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, bool]] = []

    async def complete_txn(self, group: str, producer_id: int, commit: bool) -> None:
        self.calls.append((group, producer_id, commit))


class FakeBroker:
    def __init__(self, world: World, broker_id: int, data: Path) -> None:
        self.world = world
        self.id = broker_id
        self.settings = Settings(broker_id=broker_id, data=data, fsync=False, marker_rpc=False)  # the queue only
        self.layout = Layout(data)
        self.layout.ensure()
        self.topics = SimpleNamespace(
            get=lambda name: SimpleNamespace(partitions=world.topics[name]) if name in world.topics else None,
            refresh=lambda: None)
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.groups = FakeGroups()
        self.txn: TxnCoordinator | None = None
        self.cluster = SimpleNamespace(lease_valid=lambda: True)
        self.memory_backed = False
        self.controller_epoch = 1
        self.clock = SYSTEM

    async def run_io(self, fn, *args):
        return await trio.to_thread.run_sync(fn, *args)

    # cluster view
    def leader(self, topic: str, index: int) -> tuple[int, int]:
        part = self.partitions.get((topic, index))
        if part is not None:
            return self.id, part.epoch
        owner = self.world.leaders.get((topic, index), -1)
        return (owner, 1) if owner in self.world.alive and owner != self.id else (-1, 1)

    def owns_slot(self, slot: int) -> bool:
        return self.world.slot_owner == self.id

    def txn_owner(self, txn_id: str) -> int:
        return self.world.slot_owner

    def group_owner(self, group: str) -> int:
        return self.world.group_owners.get(group, 0)

    def owns_group(self, group: str) -> bool:
        return self.group_owner(group) == self.id

    def alive_brokers(self) -> list[int]:
        return sorted(self.world.alive)

    def registered_brokers(self) -> list[int]:
        return [0, 1, 2]

    def allocate_pid(self) -> int:
        return next(self.world.pids)

    # what Partition needs
    def notify_data(self) -> None:
        pass

    def check_before_ack(self, part: Partition) -> None:
        part.check_open()

    def stats_fsync(self, seconds: float) -> None:
        pass

    async def verify_txn_partition(self, part, transactional_id, header) -> None:
        assert self.txn is not None
        await self.txn.verify_partition(transactional_id, header.producer_id, header.producer_epoch,
                                        part.topic, part.index)

    # test controls
    def lead(self, topic: str, index: int) -> Partition:
        plog = PartitionLog(self.layout.partition_dir(topic, index), LogConfig(fsync=False))
        plog.open()
        part = Partition(topic, index, plog, self)
        self.partitions[(topic, index)] = part
        self.world.leaders[(topic, index)] = self.id
        return part

    def unlead(self, topic: str, index: int) -> None:
        part = self.partitions.pop((topic, index))
        part.closed = True
        part.log.close()


@pytest.fixture
def cluster(tmp_path):
    world = World()
    brokers = [FakeBroker(world, i, tmp_path) for i in range(3)]
    for b in brokers:
        b.txn = TxnCoordinator(b)
    yield world, brokers
    for b in brokers:
        for key in list(b.partitions):
            b.unlead(*key)


async def produce(part: Partition, txn_id: str, pid: int, epoch: int, seq: int = 0, n: int = 2):
    raw = wb.build_batch(attributes=wb.ATTR_TRANSACTIONAL, base_timestamp=1000, producer_id=pid,
                         producer_epoch=epoch, base_sequence=seq, records=[(None, b"v")] * n)
    res = await part.produce(raw, wb.validate_produce(raw, 1 << 20), txn_id)
    await part.wait_durable(res.next_offset)
    return res


def state_of(b: FakeBroker, txn_id: str):
    """The coordinator's view: its slot in memory (ahead of the file by at most a deferred
    Complete*), else the file."""
    slot = txn_slot(txn_id)
    cached = b.txn.slots.cache.get(slot)
    return (cached if cached is not None else b.txn.store.load(slot)).get(txn_id)


def state_on_file(b: FakeBroker, txn_id: str):
    return b.txn.store.load(txn_slot(txn_id)).get(txn_id)


def open_txn(part: Partition) -> bool:
    return part.last_stable_offset < part.high_watermark


async def begin(c: TxnCoordinator, txn_id: str, parts, timeout_ms: int = 60_000) -> tuple[int, int]:
    pid, epoch = await c.init_producer_id(txn_id, timeout_ms, -1, -1, 4)
    assert await c.add_partitions(txn_id, pid, epoch, parts, V) == ErrorCode.none
    return pid, epoch


# ----------------------------------------------------------------------------- tests


async def test_peer_led_marker_goes_through_the_queue(cluster):
    world, (b0, b1, _b2) = cluster
    p0, p1 = b0.lead("t", 0), b1.lead("t", 1)
    pid, epoch = await begin(b0.txn, "x", [("t", 0), ("t", 1)])
    await produce(p0, "x", pid, epoch)
    await produce(p1, "x", pid, epoch)  # verified by b1 from b0's slot file
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.none
    assert state_of(b0, "x").state is TxnState.CompleteCommit
    assert not open_txn(p0)  # self-led marker written before answering
    assert open_txn(p1)  # peer-led: queued only
    assert [p.name for p in b0.txn.queue.list(1)] == [f"{pid}-{epoch}-1.json"]
    # the next transaction may not begin while the marker is queued
    assert await b0.txn.add_partitions("x", pid, epoch, [("t", 0)], V) == ErrorCode.concurrent_transactions
    await b1.txn.apply_queue()
    assert not open_txn(p1) and b0.txn.queue.list(1) == []
    assert await b0.txn.add_partitions("x", pid, epoch, [("t", 0)], V) == ErrorCode.none
    assert state_of(b0, "x").txn_seq == 2


@pytest.mark.parametrize("memory_backed", [True, False])
async def test_queue_watcher_wakes_on_the_doorbell_and_polls_only_off_tmpfs(cluster, monkeypatch, memory_backed):
    """A queued marker is applied at once (the full pass is pushed out to 60 s here): on
    tmpfs through the inotify doorbell alone, one stat of the queue per pass; elsewhere
    the stat poll runs between passes as well (NFS: inotify misses other hosts' writes)."""
    world, (b0, b1, _b2) = cluster
    b1.memory_backed = memory_backed
    monkeypatch.setattr(txn_tasks, "MARKER_POLL_S", 60.0)
    b0.lead("t", 0)
    p1 = b1.lead("t", 1)
    counts = {"stamps": 0, "passes": 0}
    stamp, apply = b1.txn.queue_stamp, b1.txn.apply_queue

    async def counted_stamp():
        counts["stamps"] += 1
        return await stamp()

    async def counted_apply():
        counts["passes"] += 1
        await apply()

    monkeypatch.setattr(b1.txn, "queue_stamp", counted_stamp)
    monkeypatch.setattr(b1.txn, "apply_queue", counted_apply)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(txn_tasks.serve_queue_doorbell, b1.txn)
        nursery.start_soon(txn_tasks.serve_markers, b1.txn)
        with trio.fail_after(10):
            while not b1.txn.doorbell_live or counts["passes"] == 0:
                await trio.sleep(0.01)
        pid, epoch = await begin(b0.txn, "x", [("t", 1)])
        await produce(p1, "x", pid, epoch)
        assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.none
        with trio.fail_after(10):
            while open_txn(p1) or b0.txn.queue.list(1):
                await trio.sleep(0.01)
        await trio.sleep(0.3)
        nursery.cancel_scope.cancel()
    if memory_backed:
        assert counts["stamps"] == counts["passes"], counts
    else:
        assert counts["stamps"] > counts["passes"] + 2, counts


async def test_entry_for_a_moved_partition_is_forwarded(cluster):
    world, (b0, b1, b2) = cluster
    b0.lead("t", 0)
    p1 = b1.lead("t", 1)
    b1.lead("t", 2)
    pid, epoch = await begin(b0.txn, "x", [("t", 1), ("t", 2)])
    await produce(p1, "x", pid, epoch)
    assert await b0.txn.end_txn("x", pid, epoch, False, V) == ErrorCode.none
    b1.unlead("t", 1)
    moved = b2.lead("t", 1)  # recovery keeps the open transaction
    assert open_txn(moved)
    await b1.txn.apply_queue()
    assert b1.txn.queue.list(1) == []  # t-2 done, t-1 forwarded
    [fwd] = b1.txn.queue.list(2)
    assert fwd.name.startswith(f"{pid}-{epoch}-1.f1-")
    assert b1.txn.queue.read(fwd).partitions == {("t", 1)}
    await b2.txn.apply_queue()
    assert not open_txn(moved) and b2.txn.queue.list(2) == []
    assert moved.aborted_transactions(0, moved.high_watermark) == [{"producer_id": pid, "first_offset": 0}]


async def test_dead_brokers_queue_is_claimed(cluster):
    world, (b0, b1, b2) = cluster
    b0.lead("t", 0)
    p1 = b1.lead("t", 1)
    pid, epoch = await begin(b0.txn, "x", [("t", 1)])
    await produce(p1, "x", pid, epoch)
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.none
    # broker 1 dies; broker 2 takes t-1 over and claims the queue
    b1.unlead("t", 1)
    world.alive.discard(1)
    p1 = b2.lead("t", 1)
    await b2.txn.apply_queue()
    assert b2.txn.queue.list(1) == [] and b2.txn.queue.list(2) == []
    assert not open_txn(p1)


async def test_offset_hook_for_a_group_coordinated_elsewhere(cluster):
    world, (b0, b1, _b2) = cluster
    world.group_owners.update({"local": 0, "remote": 1})
    p0 = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "x", [("t", 0)])
    for g in ("local", "remote"):
        assert await b0.txn.add_offsets("x", pid, epoch, g, V) == ErrorCode.none
    await produce(p0, "x", pid, epoch)
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.none
    assert b0.groups.calls == [("local", pid, True)]
    assert [p.name for p in b0.txn.queue.list(1)] == [f"{pid}-{epoch}-1.groups.json"]
    await b1.txn.apply_queue()
    assert b1.groups.calls == [("remote", pid, True)] and b0.txn.queue.list(1) == []


async def test_offset_hook_runs_beside_the_peer_led_markers(cluster):
    """With peer-led markers and a group another broker coordinates, the hook is handed
    over beside the markers (both queued here, links being off), not after them; Complete*
    follows both, and each broker applies its part."""
    world, (b0, b1, b2) = cluster
    world.group_owners.update({"g": 2})
    p0 = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "x", [("t", 0), ("t", 1)])
    assert await b0.txn.add_offsets("x", pid, epoch, "g", V) == ErrorCode.none
    await produce(p0, "x", pid, epoch)
    await produce(b1.lead("t", 1), "x", pid, epoch)
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.none
    assert b0.txn.stats["offset_hooks_beside_markers"] == 1
    assert state_of(b0, "x").state is TxnState.CompleteCommit
    assert [p.name for p in b0.txn.queue.list(1)] == [f"{pid}-{epoch}-1.json"]
    assert [p.name for p in b0.txn.queue.list(2)] == [f"{pid}-{epoch}-1.groups.json"]
    await b1.txn.apply_queue()
    await b2.txn.apply_queue()
    assert b2.groups.calls == [("g", pid, True)] and b0.txn.queue.list(2) == []
    assert not open_txn(b1.lead("t", 1)) and not open_txn(p0)


async def test_end_txn_answers_after_prepare_and_finishes_in_the_background(cluster, monkeypatch):
    """With a nursery (a running broker), EndTxn answers once Prepare* is durable; the
    markers (self-led and peer-led) and Complete* follow in a background task, which
    retries a failed hand-over. Until it is done, the id's next request waits."""
    world, (b0, b1, _b2) = cluster
    p0, p1 = b0.lead("t", 0), b1.lead("t", 1)
    pid, epoch = await begin(b0.txn, "x", [("t", 0), ("t", 1)])
    await produce(p0, "x", pid, epoch)
    await produce(p1, "x", pid, epoch)
    monkeypatch.setattr(failpoints, "ARMED", {"endtxn.after_enqueue": {"action": "error", "count": 1}})
    async with trio.open_nursery() as nursery:
        b0.txn.finisher.nursery = nursery
        assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.none
        assert state_of(b0, "x").state is TxnState.PrepareCommit  # the decision; the rest follows
        assert open_txn(p0)  # no marker before the answer, not even a self-led one
        assert await b0.txn.finisher.settled("x", 5)
        assert not open_txn(p0)
        assert failpoints.ARMED["endtxn.after_enqueue"]["count"] == 0  # the first hand-over failed
        assert state_of(b0, "x").state is TxnState.CompleteCommit  # retried and completed
        assert [p.name for p in b0.txn.queue.list(1)] == [f"{pid}-{epoch}-1.json"]
        await b1.txn.apply_queue()
        assert not open_txn(p1)
        assert await b0.txn.add_partitions("x", pid, epoch, [("t", 0)], V) == ErrorCode.none
        assert b0.txn.stats["answered_before_markers"] == 1


async def test_dispatch_failure_leaves_prepared_and_reconcile_finishes(cluster):
    world, (b0, b1, _b2) = cluster
    p0 = b0.lead("t", 0)
    world.leaders[("t", 1)] = 7  # a leader nobody knows alive: no leader
    pid, epoch = await begin(b0.txn, "x", [("t", 0), ("t", 1)])
    await produce(p0, "x", pid, epoch)
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.coordinator_not_available
    assert state_of(b0, "x").state is TxnState.PrepareCommit
    assert not open_txn(p0)  # self-led markers go first
    # the producer retries while still prepared: re-driven, still failing
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.coordinator_not_available
    assert await b0.txn.end_txn("x", pid, epoch, False, V) == ErrorCode.invalid_txn_state
    b1.lead("t", 1)
    await b0.txn.sweep()
    assert state_of(b0, "x").state is TxnState.CompleteCommit
    assert len(b0.txn.queue.list(1)) == 1
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.none  # idempotent retry
    # markers were not duplicated on t-0: one data batch + one marker
    assert p0.high_watermark == 3


async def test_fence_broadcast_reaches_peer_partitions(cluster):
    world, (b0, b1, b2) = cluster
    p1 = b1.lead("t", 1)
    pid, epoch = await begin(b0.txn, "x", [("t", 1)])
    await produce(p1, "x", pid, epoch)
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.none
    await b1.txn.apply_queue()
    await b1.txn.load_fences()
    pid2, epoch2 = await b0.txn.init_producer_id("x", 60_000, -1, -1, 4)
    assert (pid2, epoch2) == (pid, epoch + 1)
    assert b0.layout.fence_log(0).read_text().strip() == f'{{"pid":{pid},"epoch":{epoch + 1}}}'
    assert p1.log.producers.get(pid).epoch == epoch
    await b1.txn.poll_fences()
    assert p1.log.producers.get(pid).epoch == epoch + 1
    # a zombie batch at the old epoch is refused on the peer's partition
    with pytest.raises(KaasError) as exc:
        await produce(p1, "x", pid, epoch, seq=2)
    assert exc.value.code == ErrorCode.invalid_producer_epoch
    # a broker that takes a partition over later applies every fence it has seen
    b1.unlead("t", 1)
    moved = b2.lead("t", 1)
    moved.log.producers._entries[pid].epoch = epoch  # as if the snapshot predated the bump
    await b2.txn.poll_fences()
    assert moved.log.producers.get(pid).epoch == epoch + 1


async def test_init_while_ongoing_aborts_first(cluster):
    world, (b0, _b1, _b2) = cluster
    p0 = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "x", [("t", 0)])
    await produce(p0, "x", pid, epoch)
    with pytest.raises(KaasError) as exc:
        await b0.txn.init_producer_id("x", 60_000, -1, -1, 4)
    assert exc.value.code == ErrorCode.concurrent_transactions
    meta = state_of(b0, "x")
    assert meta.state is TxnState.CompleteAbort and meta.producer_epoch == epoch + 1
    assert not open_txn(p0) and p0.aborted_transactions(0, 10) == [{"producer_id": pid, "first_offset": 0}]
    assert await b0.txn.init_producer_id("x", 60_000, -1, -1, 4) == (pid, epoch + 2)
    # the zombie is fenced on the partition and at the coordinator
    with pytest.raises(KaasError) as exc:
        await produce(p0, "x", pid, epoch, seq=2)
    assert exc.value.code == ErrorCode.invalid_producer_epoch
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.producer_fenced
    assert await b0.txn.end_txn("x", pid, epoch, True, 1) == ErrorCode.invalid_producer_epoch


async def test_reaper_aborts_and_bumps(cluster):
    world, (b0, _b1, _b2) = cluster
    p0 = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "x", [("t", 0)], timeout_ms=1)
    await produce(p0, "x", pid, epoch)
    await trio.sleep(0.01)
    await b0.txn.sweep()
    meta = state_of(b0, "x")
    assert meta.state is TxnState.CompleteAbort and meta.producer_epoch == epoch + 1
    assert not open_txn(p0)
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.producer_fenced


async def test_idle_transactional_ids_expire_by_the_coordinators_clock(cluster):
    """transactional.id.expiration.ms: the sweep drops an id with no transaction open once
    the coordinator's clock is past its last transition by more than the limit (not at the
    limit), keeps an Ongoing one, and the id's next InitProducerId gets a new pid."""
    import dataclasses

    world, (b0, _b1, _b2) = cluster
    b0.settings = dataclasses.replace(b0.settings, transactional_id_expiration_ms=5_000)
    p0 = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "done", [("t", 0)])
    await produce(p0, "done", pid, epoch)
    assert await b0.txn.end_txn("done", pid, epoch, True, V) == ErrorCode.none
    await b0.txn.wait_finishing(5)
    await begin(b0.txn, "open", [("t", 1)], timeout_ms=600_000)
    last = state_of(b0, "done").last_update_ms
    assert state_of(b0, "done").state is TxnState.CompleteCommit

    b0.clock = SteppedWall(last + 5_000)
    await b0.txn.sweep()
    assert state_on_file(b0, "done") is not None
    b0.clock.now_ms = last + 5_001
    await b0.txn.sweep()
    assert state_on_file(b0, "done") is None and state_of(b0, "done") is None
    assert b0.txn.stats["expired_ids"] == 1
    assert state_of(b0, "open").state is TxnState.Ongoing  # an open transaction never expires
    new_pid, new_epoch = await b0.txn.init_producer_id("done", 60_000, -1, -1, 4)
    assert new_pid != pid and new_epoch == 0


async def test_sweep_is_ownership_gated(cluster):
    world, (b0, b1, _b2) = cluster
    p0 = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "x", [("t", 0)], timeout_ms=1)
    await produce(p0, "x", pid, epoch)
    await trio.sleep(0.01)
    await b1.txn.sweep()  # broker 1 owns no slot
    assert state_of(b0, "x").state is TxnState.Ongoing
    with pytest.raises(KaasError) as exc:
        await b1.txn.end_txn("x", pid, epoch, True, V)
    assert exc.value.code == ErrorCode.not_coordinator


async def test_deposed_while_parked_answers_not_coordinator_and_writes_nothing(cluster, monkeypatch):
    """A request that passed the ownership check and then waited (here behind the last
    EndTxn's background half) while its broker was deposed (a SIGSTOP past the session
    timeout) is answered NOT_COORDINATOR when it wakes, not CONCURRENT_TRANSACTIONS (which
    would keep the client on this broker) and not from a write: the new owner's file is
    left alone, and the new owner finishes the prepared transaction."""
    world, (b0, b1, _b2) = cluster
    p0 = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "x", [("t", 0)])
    await produce(p0, "x", pid, epoch)
    monkeypatch.setattr(failpoints, "ARMED", {"endtxn.after_local_markers": {"action": "pause", "ms": 600}})
    outcome: dict[str, object] = {}

    async def add_next() -> None:
        try:
            outcome["code"] = await b0.txn.add_partitions("x", pid, epoch, [("t", 0)], V)
        except KaasError as exc:
            outcome["code"] = exc.code

    async def end_next() -> None:
        try:
            outcome["end"] = await b0.txn.end_txn("x", pid, epoch, True, V)
        except KaasError as exc:
            outcome["end"] = exc.code

    async with trio.open_nursery() as nursery:
        b0.txn.finisher.nursery = nursery
        assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.none
        nursery.start_soon(add_next)  # parks: the background half pauses in the failpoint
        nursery.start_soon(end_next)  # parks on the id's lock behind it
        await trio.sleep(0.05)
        assert not outcome
        world.slot_owner = 1  # deposed while they wait
    assert outcome == {"code": ErrorCode.not_coordinator, "end": ErrorCode.not_coordinator}
    # b0 completed nothing after it was deposed: the file still holds the decision only
    assert state_on_file(b0, "x").state is TxnState.PrepareCommit
    await b1.txn.sweep()
    assert state_on_file(b1, "x").state is TxnState.CompleteCommit
    assert not open_txn(p0)


async def test_kip890_verification(cluster):
    world, (b0, b1, _b2) = cluster
    p0, p1 = b0.lead("t", 0), b1.lead("t", 1)
    pid, epoch = await begin(b0.txn, "x", [("t", 0)])
    with pytest.raises(KaasError) as exc:  # t-1 was never added: a hanging transaction
        await produce(p1, "x", pid, epoch)
    assert exc.value.code == ErrorCode.invalid_txn_state
    with pytest.raises(KaasError) as exc:
        await produce(p0, "other", pid, epoch)
    assert exc.value.code == ErrorCode.invalid_txn_state
    await produce(p0, "x", pid, epoch)
    await produce(p0, "x", pid, epoch, seq=2)  # open here: no slot read needed
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.none
    with pytest.raises(KaasError) as exc:  # committed: the next batch needs a new AddPartitions
        await produce(p0, "x", pid, epoch, seq=4)
    assert exc.value.code == ErrorCode.invalid_txn_state


@pytest.mark.parametrize("memory_backed", [True, False])
async def test_kip890_one_slot_read_per_transaction_and_leader(cluster, monkeypatch, memory_backed):
    """A leader that verified one partition of a transaction from the slot file accepts
    the transaction's other partitions it leads without reading it again; the marker of
    each partition ends that, so the next transaction is verified afresh."""
    world, (b0, b1, _b2) = cluster
    b1.memory_backed = memory_backed
    b0.lead("t", 0)
    p1, p2 = b1.lead("t", 1), b1.lead("t", 2)
    reads = []
    run_io, load = b1.run_io, b1.txn.slots.store.load

    async def counted_io(fn, *args):  # (TxnStore may be compiled: its methods cannot be patched)
        if fn == load:
            reads.append(args[0])
        return await run_io(fn, *args)

    monkeypatch.setattr(b1, "run_io", counted_io)
    pid, epoch = await begin(b0.txn, "x", [("t", 0), ("t", 1), ("t", 2)])
    await produce(p1, "x", pid, epoch)
    await produce(p2, "x", pid, epoch)
    assert len(reads) == 1
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.none
    await b1.txn.apply_queue()  # the markers on t-1 and t-2
    assert not open_txn(p1) and not open_txn(p2)
    assert await b0.txn.add_partitions("x", pid, epoch, [("t", 1)], V) == ErrorCode.none
    with pytest.raises(KaasError) as exc:  # t-2 is not in this transaction: no stale answer
        await produce(p2, "x", pid, epoch, seq=2)
    assert exc.value.code == ErrorCode.invalid_txn_state
    await produce(p1, "x", pid, epoch, seq=2)
    assert len(reads) == 3


async def test_corrupt_slot_refuses_service_and_is_kept(cluster):
    world, (b0, _b1, _b2) = cluster
    path = b0.txn.store.path(txn_slot("x"))
    path.write_text("{garbage")
    with pytest.raises(KaasError) as exc:
        await b0.txn.init_producer_id("x", 60_000, -1, -1, 4)
    assert exc.value.code == ErrorCode.coordinator_not_available
    await b0.txn.sweep()
    assert path.read_text() == "{garbage"


async def test_ids_sharing_a_slot_never_lose_each_others_updates(cluster):
    world, (b0, _b1, _b2) = cluster
    b0.lead("t", 0)
    slot = txn_slot("a0")
    ids = [f"a{i}" for i in range(2000) if txn_slot(f"a{i}") == slot][:8]
    assert len(ids) == 8

    async def one(txn_id: str) -> None:
        pid, epoch = await b0.txn.init_producer_id(txn_id, 60_000, -1, -1, 4)
        for _ in range(3):
            assert await b0.txn.add_partitions(txn_id, pid, epoch, [("t", 0)], V) == ErrorCode.none
            assert await b0.txn.end_txn(txn_id, pid, epoch, True, V) == ErrorCode.none

    async with trio.open_nursery() as nursery:
        for txn_id in ids:
            nursery.start_soon(one, txn_id)
    await b0.txn.flush_slots()  # the last Complete* of each id is written lazily
    state = b0.txn.store.load(slot)
    assert sorted(state.entries) == sorted(ids)
    assert all(m.state is TxnState.CompleteCommit and m.txn_seq == 3 for m in state.entries.values())


async def test_complete_is_written_lazily_and_a_new_owner_finishes_the_prepared_file(cluster):
    """The Complete* write is deferred (Prepare* is the durability pivot): the file shows
    PrepareCommit until the slot's next write or the sweep; a coordinator that takes the
    file over in that state finishes it in the same direction without new markers."""
    world, (b0, b1, _b2) = cluster
    part = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "lazy", [("t", 0)])
    assert await b0.txn.end_txn("lazy", pid, epoch, True, V) == ErrorCode.none
    assert state_of(b0, "lazy").state is TxnState.CompleteCommit
    assert state_on_file(b0, "lazy").state is TxnState.PrepareCommit
    markers = b0.txn.stats["markers_written"]
    end = part.log.log_end_offset

    # a new coordinator over the same files (the old one crashed before flushing)
    fresh = TxnCoordinator(b0)
    await fresh.sweep()
    assert state_on_file(b0, "lazy").state is TxnState.CompleteCommit
    assert part.log.log_end_offset == end  # no second marker
    assert fresh.stats["markers_written"] == 0 and b0.txn.stats["markers_written"] == markers

    # the next transaction's first write carries the completed state along
    pid2, epoch2 = await begin(b0.txn, "lazy2", [("t", 0)])
    assert await b0.txn.end_txn("lazy2", pid2, epoch2, False, V) == ErrorCode.none
    assert state_on_file(b0, "lazy2").state is TxnState.PrepareAbort
    await b0.txn.sweep()
    assert state_on_file(b0, "lazy2").state is TxnState.CompleteAbort


async def test_after_a_move_retries_and_the_abort_of_a_lost_transaction_are_answered(cluster):
    """The client's side of a coordinator move: the old coordinator answered nothing after
    PrepareCommit (its Complete* was only in memory). At the new owner the retried commit
    is finished and answered NONE, and again NONE; the old one sends the client on with
    NOT_COORDINATOR. The next transaction's AddPartitionsToTxn was lost with the old
    coordinator: the client's abort (nothing open) and its KIP-360 InitProducerId are
    answered, and it commits at the bumped epoch."""
    world, (b0, b1, _b2) = cluster
    part = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "mv", [("t", 0)])
    await produce(part, "mv", pid, epoch)
    assert await b0.txn.end_txn("mv", pid, epoch, True, V) == ErrorCode.none
    assert state_on_file(b0, "mv").state is TxnState.PrepareCommit
    world.slot_owner = 1
    with pytest.raises(KaasError) as exc:
        await b0.txn.add_partitions("mv", pid, epoch, [("t", 0)], V)
    assert exc.value.code == ErrorCode.not_coordinator
    assert await b1.txn.end_txn("mv", pid, epoch, True, V) == ErrorCode.none
    assert state_of(b1, "mv").state is TxnState.CompleteCommit
    assert await b1.txn.end_txn("mv", pid, epoch, True, V) == ErrorCode.none
    assert not open_txn(part)
    await b0.txn.apply_queue()  # t-0's leader applies the re-driven marker (a no-op)
    # the lost transaction: abort, then the bump, then on at epoch + 1
    assert await b1.txn.end_txn("mv", pid, epoch, False, V) == ErrorCode.none
    assert state_of(b1, "mv").state is TxnState.CompleteCommit
    assert await b1.txn.init_producer_id("mv", 60_000, pid, epoch, 4) == (pid, epoch + 1)
    assert await b1.txn.add_partitions("mv", pid, epoch + 1, [("t", 0)], V) == ErrorCode.none
    await produce(part, "mv", pid, epoch + 1)
    assert await b1.txn.end_txn("mv", pid, epoch + 1, True, V) == ErrorCode.none
    await b0.txn.apply_queue()
    assert not open_txn(part)
    # b1 decided that commit itself: an abort of it is INVALID_TXN_STATE, as in Apache
    assert await b1.txn.end_txn("mv", pid, epoch + 1, False, V) == ErrorCode.invalid_txn_state
    # a commit of a transaction the coordinator never saw stays refused
    assert await b1.txn.init_producer_id("mv", 60_000, pid, epoch + 1, 4) == (pid, epoch + 2)
    assert await b1.txn.end_txn("mv", pid, epoch + 2, True, V) == ErrorCode.invalid_txn_state


async def test_abort_after_its_own_commit_is_invalid_txn_state_until_the_slot_moves(cluster):
    """EndTxn(abort) after the commit this coordinator decided completed: INVALID_TXN_STATE
    (Apache, TV1), the commit retried still NONE. Once the slot moved away and back, the
    coordinator can no longer tell that no AddPartitionsToTxn was lost with another owner:
    the abort of a lost transaction is answered NONE again."""
    world, (b0, b1, _b2) = cluster
    part = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "own", [("t", 0)])
    await produce(part, "own", pid, epoch)
    assert await b0.txn.end_txn("own", pid, epoch, True, V) == ErrorCode.none
    assert await b0.txn.finisher.wait_all(10)
    assert state_of(b0, "own").state is TxnState.CompleteCommit
    assert await b0.txn.end_txn("own", pid, epoch, False, V) == ErrorCode.invalid_txn_state
    assert await b0.txn.end_txn("own", pid, epoch, True, V) == ErrorCode.none
    assert state_of(b0, "own").state is TxnState.CompleteCommit
    await b0.txn.flush_slots()
    world.slot_owner = 1
    b0.txn.drop_unowned_slots()
    assert "own" not in b0.txn.committed_here
    world.slot_owner = 0
    assert await b0.txn.end_txn("own", pid, epoch, False, V) == ErrorCode.none
    assert state_of(b0, "own").state is TxnState.CompleteCommit


async def test_txn_offset_commit_is_verified_against_the_transaction(cluster):
    """KIP-890 part 1 for TxnOffsetCommit, from any broker (the group's coordinator reads
    the slot file): refused with INVALID_TXN_STATE until AddOffsetsToTxn added the group,
    INVALID_PRODUCER_EPOCH for a fenced epoch, and again 48 once the transaction ended."""
    _world, (b0, b1, _b2) = cluster
    part = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "tc", [("t", 0)])
    await produce(part, "tc", pid, epoch)
    for b in (b0, b1):
        assert await b.txn.check_txn_offset_commit("tc", pid, epoch, "g") == ErrorCode.invalid_txn_state
    assert await b0.txn.add_offsets("tc", pid, epoch, "g", V) == ErrorCode.none
    for b in (b0, b1):
        assert await b.txn.check_txn_offset_commit("tc", pid, epoch, "g") == ErrorCode.none
        assert await b.txn.check_txn_offset_commit("tc", pid, epoch, "other") == ErrorCode.invalid_txn_state
        assert await b.txn.check_txn_offset_commit("tc", pid + 1, epoch, "g") == ErrorCode.invalid_txn_state
        assert await b.txn.check_txn_offset_commit("nope", pid, epoch, "g") == ErrorCode.invalid_txn_state
    assert await b0.txn.end_txn("tc", pid, epoch, True, V) == ErrorCode.none
    assert await b0.txn.finisher.wait_all(10)
    await b0.txn.flush_slots()
    assert await b0.txn.init_producer_id("tc", 60_000, pid, epoch, 4) == (pid, epoch + 1)
    for b in (b0, b1):
        assert await b.txn.check_txn_offset_commit("tc", pid, epoch, "g") == ErrorCode.invalid_producer_epoch
        assert await b.txn.check_txn_offset_commit("tc", pid, epoch + 1, "g") == ErrorCode.invalid_txn_state


def test_sweep_interval_env(monkeypatch):
    monkeypatch.delenv(txn_tasks.SWEEP_ENV, raising=False)
    assert txn_tasks.sweep_interval_ms() == txn_tasks.SWEEP_INTERVAL_MS == 10_000
    monkeypatch.setenv(txn_tasks.SWEEP_ENV, "250")
    assert txn_tasks.sweep_interval_ms() == 250
    monkeypatch.setenv(txn_tasks.SWEEP_ENV, "nope")
    assert txn_tasks.sweep_interval_ms() == 10_000


async def test_the_begin_guard_reads_the_queues_only_while_an_entry_may_be_there(cluster, monkeypatch):
    """The begin guard's look at the marker queues (``QueueApplier.pending_for``): once the
    queues held nothing of a producer id, its next transactions begin without reading them,
    until this coordinator queues an entry of that id again, or a slot of it moves."""
    world, (b0, b1, _b2) = cluster
    b0.lead("t", 0)
    p1 = b1.lead("t", 1)
    reads = []
    pending_for_pid = b0.txn.queue.pending_for_pid
    monkeypatch.setattr(b0.txn.queue, "pending_for_pid", lambda pid: reads.append(pid) or pending_for_pid(pid))
    pid, epoch = await begin(b0.txn, "q", [("t", 0), ("t", 1)])
    await produce(p1, "q", pid, epoch)
    assert await b0.txn.end_txn("q", pid, epoch, True, V) == ErrorCode.none  # t-1's marker is queued
    assert await b0.txn.add_partitions("q", pid, epoch, [("t", 0)], V) == ErrorCode.concurrent_transactions
    await b1.txn.apply_queue()
    assert await b0.txn.add_partitions("q", pid, epoch, [("t", 0)], V) == ErrorCode.none
    n = len(reads)
    assert await b0.txn.end_txn("q", pid, epoch, True, V) == ErrorCode.none  # t-0 only: nothing queued
    assert await b0.txn.add_partitions("q", pid, epoch, [("t", 0)], V) == ErrorCode.none
    assert len(reads) == n  # known empty: not read
    b0.txn.forget_cache()  # (a lapsed lease)
    assert await b0.txn.end_txn("q", pid, epoch, True, V) == ErrorCode.none
    assert await b0.txn.add_partitions("q", pid, epoch, [("t", 1)], V) == ErrorCode.none
    assert len(reads) == n + 1  # read again
    await produce(p1, "q", pid, epoch, seq=2)
    assert await b0.txn.end_txn("q", pid, epoch, True, V) == ErrorCode.none  # queued again
    assert await b0.txn.add_partitions("q", pid, epoch, [("t", 0)], V) == ErrorCode.concurrent_transactions
    assert len(reads) > n + 1
    await b1.txn.apply_queue()
    world.slot_owner = 1  # the slot moves away: what this broker knew of its ids is dropped
    b0.txn.drop_unowned_slots()
    assert b0.txn.inbox.clear_slots == set()
