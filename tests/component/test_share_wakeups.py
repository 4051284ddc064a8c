"""A ShareFetch waiting (max_wait) on a share partition that can hand nothing out is
answered as soon as something can be acquired again: an acceptance that moves the share
partition's start offset frees room under ``group.share.partition.max.record.locks`` (a
full window of in-flight records), so it wakes the waiting fetches as a release does.
Without it the fetch sleeps out its max_wait: librdkafka's share consumer, which sends the
acknowledgements of a broker's partitions only once its fetch there has returned, then
stalls a whole max_wait (500 ms) per window of records."""

from __future__ import annotations

import trio

from tests.component.share_calls import ack_req, acquired, call, fetch_req, produce
from tests.component.test_share_fetch import broker_with_topic

ACCEPT = 1
WAIT_MS = 10_000


async def test_an_accept_that_frees_the_window_wakes_a_waiting_fetch(shm_path, thread_safe_autojump_clock):
    async with broker_with_topic(shm_path, thread_safe_autojump_clock,
                                 group_share_partition_max_record_locks=10,
                                 group_share_min_partition_max_record_locks=10) as (broker, tid):
        await produce(broker, "q", 10)
        await produce(broker, "q", 10)
        # m1 holds the whole window (10 in-flight records): nothing more may be acquired
        assert acquired(await call(broker, fetch_req("m1", 0, tid))) == [(0, 9, 1)]
        got = []

        async def wait_for_records() -> None:
            got.append(await call(broker, fetch_req("m2", 0, tid, max_wait_ms=WAIT_MS)))
            got.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_records)
            await trio.sleep(1)
            assert not got, "the window is full: m2 waits"
            t0 = trio.current_time()
            r = await call(broker, ack_req("m1", 1, tid, {0: [(0, 9, (ACCEPT,))]}))
            assert r.error_code == 0
        assert acquired(got[0]) == [(10, 19, 1)]
        assert got[1] - t0 < 0.5, f"woken {got[1] - t0:.2f} s after the accept (max_wait {WAIT_MS} ms)"
