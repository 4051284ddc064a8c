"""The membership tick of a real ``Broker`` over a tmp data directory.

On a memory-backed volume the tick's file work (peer heartbeats, controller epoch,
assignment, its own heartbeat) runs on the trio thread: each worker-thread round trip
costs the tick a turn through the run queue, and on a loop loaded with 1,000-partition
requests four of them made a tick last up to 0.8 s and the write lease run out. On a
disk (or NFS) the same work goes to worker threads.
"""

from __future__ import annotations

import json

import pytest
import trio

from kaas.broker import Broker
from kaas.clock import TrioClock
from kaas.settings import Settings
from tests.component.ticks import membership


@pytest.mark.parametrize("memory_backed", [True, False])
async def test_tick_renews_the_lease_and_hops_threads_only_off_tmpfs(tmp_path, monkeypatch, memory_backed):
    broker = Broker(Settings(broker_id=0, data=tmp_path / "data", fsync=False))
    broker.memory_backed = memory_backed
    hops = []
    real = trio.to_thread.run_sync

    async def counting(fn, *args, **kw):
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args, **kw)

    monkeypatch.setattr(trio.to_thread, "run_sync", counting)
    rt = broker.cluster
    tk = membership(broker)
    assert not rt.lease_valid()

    await tk._tick()
    await tk._tick()

    assert rt.lease_valid()
    assert rt.is_controller and rt.controller_epoch == 1
    beat = json.loads(broker.layout.broker_file(0).read_bytes())
    assert beat["counter"] == 2 and beat["broker_id"] == 0 and beat["controller_epoch"] == 1
    assert broker.layout.assignment.exists()
    assert rt.alive() == [0]
    if memory_backed:
        assert hops == []
    else:
        # peers, epoch, election, assignment write, assignment read, heartbeat; then
        # peers, epoch, assignment read, heartbeat
        assert len(hops) >= 8, hops


async def test_a_silent_peer_leaves_metadata_later_than_it_loses_its_keys(tmp_path, autojump_clock):
    """A peer whose heartbeat stops is dead for leadership after the session timeout, but
    Metadata keeps naming it until the listing window (9 s) runs out: librdkafka
    decommissions a broker that drops out of Metadata, and a full shared disk makes every
    broker miss heartbeats for a few seconds at once. (On trio's MockClock: the sleeps
    below take no real time.)"""

    broker = Broker(Settings(broker_id=0, data=tmp_path / "data", fsync=False), TrioClock(autojump_clock))
    rt = broker.cluster
    tk = membership(broker)
    peer = {"format": 1, "broker_id": 1, "counter": 1, "host": "127.0.0.1", "port": 9999, "pid": 1,
            "applied_version": 0, "draining": False, "controller_epoch": 0}
    broker.layout.broker_file(1).write_text(json.dumps(peer))
    await tk._tick()
    assert rt.alive() == [0, 1] and rt.listed() == [0, 1]
    assert [b.node_id for b in broker.brokers()] == [0, 1]
    await trio.sleep(4.0)  # past the 3 s session timeout, no new heartbeat
    await tk._tick()
    assert rt.alive() == [0] and not rt.is_alive_any(1)
    assert rt.listed() == [0, 1] and [b.node_id for b in broker.brokers()] == [0, 1]
    await trio.sleep(6.0)  # 10 s silent: past the listing window
    await tk._tick()
    assert rt.listed() == [0] and [b.node_id for b in broker.brokers()] == [0]


async def test_a_topic_config_altered_through_another_broker_reaches_the_leader(tmp_path):
    """AlterConfigs is served by any broker, which writes the topic file; the broker that
    leads a partition of the topic applies the new configs on its next tick."""
    from dataclasses import replace

    from kaas.storage.topics import TopicStore

    broker = Broker(Settings(broker_id=0, data=tmp_path / "data", fsync=False))
    tk = membership(broker)
    await tk._tick()
    meta = broker.topics.create("t", 1, {"segment.bytes": "100000"})
    broker.topics.refresh()
    part = await broker._open_partition(meta, 0, 1)
    assert part.log.config.segment_bytes == 100000 and not part.log.config.compact
    other = TopicStore(broker.layout.topics, fsync=False)  # another broker's view of the volume
    other.refresh()
    other.update(replace(meta, configs={"segment.bytes": "2048", "cleanup.policy": "compact"}))
    await tk._tick()
    assert part.log.config.segment_bytes == 2048 and part.log.config.compact
    await broker._close_partition(part)


async def test_a_tick_takes_over_a_bounded_share_so_its_heartbeat_stays_on_time(tmp_path, monkeypatch,
                                                                                 autojump_clock):
    """Many partitions to take over at once (a CreateTopics of 100 topics) are taken over
    across ticks, half a heartbeat period of them per tick, each tick ending with its
    heartbeat: a take-over that costs 50 ms (a loaded machine) no longer starves the lease.
    (On trio's MockClock.)"""
    broker = Broker(Settings(broker_id=0, data=tmp_path / "data", fsync=False), TrioClock(autojump_clock))
    rt = broker.cluster
    tk = membership(broker)
    await tk._tick()
    real = broker.take_over

    async def slow(meta, index, epoch):
        await trio.sleep(0.05)
        return await real(meta, index, epoch)

    monkeypatch.setattr(broker, "take_over", slow)
    for i in range(25):
        broker.topics.create(f"t{i}", 4)
    ticks, longest = 0, 0.0
    while len(broker.partitions) < 100:
        t0 = trio.current_time()
        rt.clear_wake()
        await tk._tick()
        longest = max(longest, trio.current_time() - t0)
        ticks += 1
        assert rt.lease_valid()
        assert ticks < 100
    # 100 take-overs of 50 ms: several ticks, none much longer than half a period of them
    assert ticks > 1 and longest <= rt.period / 2 + 0.2
