"""The callers of the state files on a failing disk (issue 17, point 3): the transaction
coordinator (slot files, fence log, PID blocks, marker queue), the group coordinator
(offsets files) and the membership tick (heartbeat, controller epoch, assignment).

A failed write fails that operation with a retriable Kafka error (never an OSError out of
the coordinator), the previous file stays as it was, the caller's in-memory state does not
run ahead of the file, and the operation succeeds once the disk works again.
"""

from __future__ import annotations

import json
import time

import pytest
import trio
from kio.schema.errors import ErrorCode

from kaas.clock import SYSTEM, Clock
from kaas.coord.txn import TxnCoordinator
from kaas.domain.routing import txn_slot
from kaas.domain.txn import TxnState
from kaas.errors import KaasError
from kaas.storage.fences import FenceReader, FenceRecord
from kaas.storage.offset_store import Committed
from kaas.storage.producer_ids import SPAN, PidAllocator
from kaas.tasks.group_timers import serve_timers
from tests.component.faults import faults, leftovers  # noqa: F401 (faults: fixture)
from tests.component.test_txn_coordinator import FakeBroker, V, World, begin, open_txn, produce, state_of
from tests.component.ticks import membership, tick


@pytest.fixture
def cluster(tmp_path):
    world = World()
    brokers = [FakeBroker(world, i, tmp_path / "data") for i in range(3)]
    for b in brokers:
        b.txn = TxnCoordinator(b)
    yield world, brokers
    for b in brokers:
        for key in list(b.partitions):
            b.unlead(*key)


async def raises_code(code: ErrorCode, coro) -> None:
    with pytest.raises(KaasError) as exc:
        await coro
    assert exc.value.code == code, exc.value


# ----------------------------------------------------------------------------- slot files


@pytest.mark.parametrize("kind", ["enospc", "short", "rename"])
async def test_slot_write_failure_fails_the_request_and_keeps_the_slot(cluster, faults, kind):
    world, (b0, _b1, _b2) = cluster
    p0 = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "x", [("t", 0)])
    await produce(p0, "x", pid, epoch)
    slot_file = b0.txn.store.path(txn_slot("x"))
    before = slot_file.read_bytes()

    faults.arm(kind, "slot-")
    # EndTxn: the Prepare* write fails; nothing is decided, no marker is written
    await raises_code(ErrorCode.coordinator_not_available, b0.txn.end_txn("x", pid, epoch, True, V))
    assert slot_file.read_bytes() == before and leftovers(slot_file.parent) == []
    assert state_of(b0, "x").state is TxnState.Ongoing  # memory did not run ahead of the file
    assert open_txn(p0)
    # AddPartitions to the open transaction: refused the same way, the set unchanged
    await raises_code(ErrorCode.coordinator_not_available, b0.txn.add_partitions("x", pid, epoch, [("t", 1)], V))
    assert state_of(b0, "x").partitions == frozenset({("t", 0)})

    faults.disarm()  # the client's retry goes through
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.none
    assert state_of(b0, "x").state is TxnState.CompleteCommit
    assert not open_txn(p0) and p0.high_watermark == 3  # 2 records + one marker


async def test_a_failed_flush_of_deferred_completes_keeps_them_for_the_next_one(cluster, faults):
    world, (b0, _b1, _b2) = cluster
    p0 = b0.lead("t", 0)
    pid, epoch = await begin(b0.txn, "x", [("t", 0)])
    await produce(p0, "x", pid, epoch)
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.none
    slot = txn_slot("x")
    assert slot in b0.txn.slots.unwritten
    faults.arm("eio", "slot-")
    await b0.txn.flush_slots()  # logged, not raised
    assert slot in b0.txn.slots.unwritten
    assert b0.txn.store.load(slot).get("x").state is TxnState.PrepareCommit
    faults.disarm()
    await b0.txn.flush_slots()
    assert b0.txn.store.load(slot).get("x").state is TxnState.CompleteCommit


# ----------------------------------------------------------------------------- fence log


@pytest.mark.parametrize("kind", ["enospc", "short"])
async def test_fence_log_failure_answers_retriably_and_the_retry_fences(cluster, faults, kind):
    world, (b0, b1, _b2) = cluster
    p1 = b1.lead("t", 1)
    pid, epoch = await begin(b0.txn, "x", [("t", 1)])
    await produce(p1, "x", pid, epoch)
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.none
    await b1.txn.apply_queue()
    await b1.txn.load_fences()
    assert await b0.txn.init_producer_id("x", 60_000, -1, -1, 4) == (pid, epoch + 1)
    log_file = b0.layout.fence_log(0)
    before = log_file.read_bytes()

    faults.arm(kind, "producer_fences/")
    await raises_code(ErrorCode.coordinator_not_available, b0.txn.init_producer_id("x", 60_000, -1, -1, 4))
    assert log_file.read_bytes() == before  # no torn bytes for the next line to merge into
    assert not b0.txn.fence_log.torn

    faults.disarm()
    # the client retries: the bump it gets is fenced on every broker
    assert await b0.txn.init_producer_id("x", 60_000, -1, -1, 4) == (pid, epoch + 3)
    reader = FenceReader(log_file.parent)
    assert reader.poll() == [FenceRecord(pid, epoch + 1), FenceRecord(pid, epoch + 3)]
    assert reader.errors == []
    await b1.txn.poll_fences()
    assert p1.log.producers.get(pid).epoch == epoch + 3


# ----------------------------------------------------------------------------- PID blocks


@pytest.mark.parametrize("kind", ["eio", "short", "fsync"])
async def test_pid_block_failure_answers_load_in_progress(cluster, faults, kind):
    world, (b0, _b1, _b2) = cluster
    path = b0.layout.pid_block_file(0)
    pids = PidAllocator(path, 0, fsync=True)
    b0.allocate_pid = pids.allocate
    faults.arm(kind, "producer_ids/")
    await raises_code(ErrorCode.coordinator_load_in_progress, b0.txn.init_producer_id("x", 60_000, -1, -1, 4))
    assert not path.exists() and leftovers(path.parent) == []
    assert pids.block_end == 0
    assert b0.txn.store.load(txn_slot("x")).get("x") is None  # no entry without a pid
    faults.disarm()
    assert await b0.txn.init_producer_id("x", 60_000, -1, -1, 4) == (SPAN, 0)


# ----------------------------------------------------------------------------- marker queue


async def test_marker_enqueue_failure_leaves_prepared_and_the_sweep_finishes(cluster, faults):
    world, (b0, b1, _b2) = cluster
    p1 = b1.lead("t", 1)
    pid, epoch = await begin(b0.txn, "x", [("t", 1)])
    await produce(p1, "x", pid, epoch)
    faults.arm("enospc", "marker_queue/")
    # no nursery here: the EndTxn is not answered early, so its answer shows the failure
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.coordinator_not_available
    assert state_of(b0, "x").state is TxnState.PrepareCommit  # decided: stays owed
    assert b0.txn.queue.list(1) == [] and leftovers(b0.txn.queue.dir(1)) == []
    faults.disarm()
    await b0.txn.sweep()
    assert state_of(b0, "x").state is TxnState.CompleteCommit
    await b1.txn.apply_queue()
    assert not open_txn(p1)


async def test_a_failed_rewrite_keeps_the_whole_entry_and_the_next_pass_finishes(cluster, faults):
    world, (b0, b1, _b2) = cluster
    p1 = b1.lead("t", 1)
    pid, epoch = await begin(b0.txn, "x", [("t", 1), ("t", 2)])
    await produce(p1, "x", pid, epoch)
    world.leaders[("t", 2)] = 7  # no live leader: that part stays owed
    assert await b0.txn.end_txn("x", pid, epoch, True, V) == ErrorCode.coordinator_not_available
    world.leaders[("t", 2)] = 1  # b1 leads it on paper, has not opened it yet
    await b0.txn.sweep()
    [queued] = b0.txn.queue.list(1)
    entry = b0.txn.queue.read(queued)
    assert entry.partitions == {("t", 1), ("t", 2)}

    faults.arm("eio", "marker_queue/to-1/")
    await b1.txn.apply_queue()  # t-1's marker goes in; the rewrite down to t-2 fails: logged
    [taken] = b1.txn.queue.list(1)
    assert b1.txn.queue.read(taken) == entry  # the whole entry, as it was
    assert leftovers(taken.parent) == [] and not open_txn(p1)
    faults.disarm()
    b1.lead("t", 2)
    await b1.txn.apply_queue()
    assert b1.txn.queue.list(1) == []


# ----------------------------------------------------------------------------- groups, membership


async def started_broker(tmp_path, clock: Clock = SYSTEM, **settings):
    """A real ``Broker`` whose membership tick ran: it is the controller, holds its lease and
    coordinates every group and slot. ``clock``: its time (``tests.clocks``)."""
    from kaas.broker import Broker
    from kaas.settings import Settings

    broker = Broker(Settings(broker_id=0, data=tmp_path / "data", fsync=True, **settings), clock)
    await tick(broker)
    await tick(broker)
    assert broker.cluster.lease_valid() and broker.cluster.is_controller
    return broker


@pytest.mark.parametrize("kind", ["enospc", "eio", "short", "fsync", "rename"])
async def test_offset_commit_failure_keeps_the_previous_offset(tmp_path, faults, kind):
    broker = await started_broker(tmp_path)
    groups = broker.groups
    tp = ("t", 0)

    async def commit(offset: int) -> ErrorCode:
        return await groups.commit("g", member_id="", group_instance_id=None, generation_id=-1,
                                   offsets={tp: Committed(offset)})

    async def committed() -> int:
        got, _pending = await groups.fetch("g", [tp], False)
        return got[tp].offset

    assert await commit(5) == ErrorCode.none
    path = groups.store.path("g")
    before = path.read_bytes()
    generation = groups.groups["g"].offsets.generation

    faults.arm(kind, "consumer_offsets/")
    await raises_code(ErrorCode.coordinator_not_available, commit(9))
    assert path.read_bytes() == before and leftovers(path.parent) == []
    assert await committed() == 5  # memory did not take the offset the file did not
    assert groups.groups["g"].offsets.generation == generation

    faults.disarm()
    assert await commit(9) == ErrorCode.none
    assert await committed() == 9
    assert json.loads(path.read_bytes())["offsets"]["t"]["0"][0] == 9


async def test_offset_hook_failure_keeps_the_staged_offsets(tmp_path, faults):
    broker = await started_broker(tmp_path)
    groups = broker.groups
    tp = ("t", 0)
    assert await groups.commit("g", member_id="", group_instance_id=None, generation_id=-1,
                               offsets={tp: Committed(5)}) == ErrorCode.none
    faults.arm("short", "consumer_offsets/")
    await raises_code(ErrorCode.coordinator_not_available,
                      groups.txn_commit("g", producer_id=77, member_id="", group_instance_id=None,
                                        generation_id=-1, offsets={tp: Committed(8)}))
    assert await groups.fetch("g", [tp], True) == ({tp: Committed(5)}, set())
    faults.disarm()
    assert await groups.txn_commit("g", producer_id=77, member_id="", group_instance_id=None,
                                   generation_id=-1, offsets={tp: Committed(8)}) == ErrorCode.none

    faults.arm("enospc", "consumer_offsets/")
    await raises_code(ErrorCode.coordinator_not_available, groups.complete_txn("g", 77, True))
    got, pending = await groups.fetch("g", [tp], True)
    assert got[tp].offset == 5 and pending == {tp}  # still staged, not committed
    faults.disarm()
    await groups.complete_txn("g", 77, True)
    got, pending = await groups.fetch("g", [tp], True)
    assert got[tp].offset == 8 and pending == set()


async def test_membership_write_failure_is_retried_not_raised(tmp_path, faults):
    broker = await started_broker(tmp_path, group_initial_rebalance_delay_ms=0)
    groups = broker.groups
    faults.arm("enospc", "consumer_offsets/")
    reply = None

    async def join() -> None:
        nonlocal reply
        reply = await groups.join("g", member_id="", group_instance_id="i", client_id="c", client_host="h",
                                  session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                                  protocol_type="consumer", protocols=[("range", b"")],
                                  require_known_member=False)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_timers, groups)
        await join()
        member = reply.member_id
        sync = await groups.sync("g", member_id=member, group_instance_id="i", generation_id=reply.generation_id,
                                 assignments=[(member, b"a")], protocol_type="consumer", protocol_name="range")
        assert sync.error_code == ErrorCode.none  # the membership write failed: logged, retried later
        e = groups.groups["g"]
        assert e.offsets.membership is None
        assert not groups.store.path("g").exists()
        faults.disarm()
        with trio.fail_after(5):
            while e.offsets.membership is None:  # the timer loop writes it once the disk works
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert json.loads(groups.store.path("g").read_bytes())["membership"]["generation"] == reply.generation_id


# ----------------------------------------------------------------------------- membership tick


async def test_heartbeat_failure_self_fences_and_recovers(tmp_path, faults):
    broker = await started_broker(tmp_path, session_timeout_ms=400)
    rt = broker.cluster
    tk = membership(broker)
    beat = broker.layout.broker_file(0)
    before = beat.read_bytes()
    counter = rt.counter

    faults.arm("enospc", "brokers/kaas-0")
    t_fail = time.monotonic()
    await tk._tick()
    assert beat.read_bytes() == before and leftovers(beat.parent) == []
    assert rt.counter == counter  # not ahead of the file
    await trio.sleep(max(0.0, t_fail + 0.25 - time.monotonic()))
    await tk._tick()
    assert not rt.lease_valid()  # self-fenced: no lease since the last good heartbeat
    assert not broker.owns_slot(0)
    await raises_code(ErrorCode.coordinator_load_in_progress,
                      broker.groups.commit("g", member_id="", group_instance_id=None, generation_id=-1,
                                           offsets={("t", 0): Committed(1)}))

    faults.disarm()
    await tk._tick()
    assert rt.lease_valid() and rt.lapses == 1 and rt.counter == counter + 1
    assert json.loads(beat.read_bytes())["counter"] == counter + 1
    assert broker.owns_slot(0)


async def test_controller_file_failures_do_not_stop_the_heartbeat(tmp_path, faults):
    from kaas.broker import Broker
    from kaas.settings import Settings

    broker = Broker(Settings(broker_id=0, data=tmp_path / "data", fsync=True))
    rt = broker.cluster
    tk = membership(broker)
    controller_dir = broker.layout.controller
    faults.arm("enospc", "controller/")
    await tk._tick()  # the election's exclusive create fails: not elected, heartbeat written
    assert not rt.is_controller and rt.lease_valid()
    assert list(controller_dir.iterdir()) == []
    faults.disarm()
    await tk._tick()
    assert rt.is_controller and rt.controller_epoch == 1

    broker.topics.create("t", 2)
    before = broker.layout.assignment.read_bytes()
    faults.arm("rename", "assignment.json")
    counter = rt.counter
    await tk._tick()  # the assignment write fails: the old one stays in force, logged
    assert broker.layout.assignment.read_bytes() == before and leftovers(broker.layout.assignment.parent) == []
    assert rt.counter == counter + 1 and rt.lease_valid()
    faults.disarm()
    await tk._tick()
    assert "t" in json.loads(broker.layout.assignment.read_bytes())["partitions"]


async def test_delete_group_failure_answers_retriably_and_the_file_still_counts(tmp_path, monkeypatch):
    import errno

    broker = await started_broker(tmp_path)
    groups = broker.groups
    tp = ("t", 0)
    assert await groups.commit("g", member_id="", group_instance_id=None, generation_id=-1,
                               offsets={tp: Committed(5)}) == ErrorCode.none

    def failing_delete(group_id: str) -> None:
        raise OSError(errno.EIO, "unlink failed", str(groups.store.path(group_id)))

    real = groups.store.delete
    monkeypatch.setattr(groups.store, "delete", failing_delete)
    await raises_code(ErrorCode.coordinator_not_available, groups.delete("g"))
    got, _ = await groups.fetch("g", [tp], False)  # read again from the file that stayed
    assert got[tp].offset == 5
    monkeypatch.setattr(groups.store, "delete", real)
    assert await groups.delete("g") == ErrorCode.none
    assert not groups.store.path("g").exists()
