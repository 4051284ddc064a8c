"""``Partition.wait_durable``'s group commit off tmpfs: while one fsync runs in a worker
thread, later waiters wait for its end (an event made by the first of them) and then for
their own bytes; each returns only once its offset is durable."""

from __future__ import annotations

import dataclasses

import trio
import trio.testing

from kaas.wire import batch as wb
from tests.component.test_txn_coordinator import FakeBroker, World


async def test_waiters_during_an_fsync_wait_for_it_then_for_their_bytes(tmp_path, monkeypatch):
    b0 = FakeBroker(World(), 0, tmp_path)
    part = b0.lead("t", 0)
    part.log.config = dataclasses.replace(part.log.config, fsync=True)
    gate = trio.Event()
    fsyncs = []
    real = part.log.fsync_fds

    def slow_fsync(fds):
        trio.from_thread.run(gate.wait)
        fsyncs.append(list(fds))
        real(fds)

    monkeypatch.setattr(part.log, "fsync_fds", slow_fsync)
    done = []

    async def append_and_wait(name):
        res = part.append(*_batch())
        await part.wait_durable(res.next_offset)
        assert part.log.durable_offset >= res.next_offset
        done.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(append_and_wait, "a")
        await trio.testing.wait_all_tasks_blocked()
        assert part.syncing and not done
        nursery.start_soon(append_and_wait, "b")
        nursery.start_soon(append_and_wait, "c")
        await trio.testing.wait_all_tasks_blocked()
        assert part._sync_done is not None and not done  # b and c wait for a's fsync
        gate.set()
    assert sorted(done) == ["a", "b", "c"]
    assert len(fsyncs) == 2  # a's, then one for b and c
    assert part._sync_done is None


def _batch():
    raw = wb.build_batch(base_timestamp=1000, records=[(None, b"v")])
    return raw, wb.parse_header(raw)
