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
from kaas.settings import Settings


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
    assert not rt.lease_valid()

    await rt._tick()
    await rt._tick()

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
