"""ShareFetch's ``BatchSize``, ``MinBytes`` and ``MaxWait`` over a real broker in-process
(trio's autojumping MockClock): first deliveries come in acquired batches cut at log
batch boundaries once ``BatchSize`` is reached (Apache's ``SharePartition.createBatches``),
none in ``record_limit`` mode; an answer waits for ``MinBytes`` (capped at ``MaxBytes``)
until ``MaxWait``, adding what arrives meanwhile, each log batch once."""

from __future__ import annotations

import trio

from tests.component.share_calls import acquired, call, fetch_req, offsets_in, part_of, produce
from tests.component.test_share_fetch import broker_with_topic


async def test_batch_size_cuts_first_deliveries_at_log_batches(shm_path, thread_safe_autojump_clock):
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, tid):
        for _ in range(4):
            await produce(broker, "q", 2)  # log batches at 0, 2, 4, 6
        r = await call(broker, fetch_req("m", 0, tid, batch_size=3))
        assert acquired(r) == [(0, 3, 1), (4, 7, 1)]
        assert offsets_in(part_of(r).records) == list(range(8))
        await produce(broker, "q", 5)  # one log batch of 5 (8-12): never cut
        await produce(broker, "q", 1)  # 13
        assert acquired(await call(broker, fetch_req("m", 1, tid, batch_size=2))) == [(8, 12, 1), (13, 13, 1)]
        # a batch size past what was taken, and record_limit mode: one range
        await produce(broker, "q", 2)
        await produce(broker, "q", 2)
        assert acquired(await call(broker, fetch_req("m", 2, tid, batch_size=10))) == [(14, 17, 1)]
        await produce(broker, "q", 2)
        await produce(broker, "q", 2)
        r = await call(broker, fetch_req("o", 0, tid, group="other", batch_size=1, version=2, share_acquire_mode=1,
                                         is_renew_ack=False, max_records=4))
        assert acquired(r) == [(0, 3, 1)]


async def test_an_answer_waits_for_min_bytes_until_max_wait(shm_path, thread_safe_autojump_clock):
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, tid):
        await produce(broker, "q", 2)
        one = len(part_of(await call(broker, fetch_req("probe", 0, tid, group="other"))).records)
        got = []

        async def consume() -> None:
            got.append(await call(broker, fetch_req("m", 0, tid, min_bytes=2 * one + 1, max_wait_ms=10_000)))

        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            await trio.sleep(1)
            assert not got  # 2 records acquired, fewer bytes than asked: waits
            await produce(broker, "q", 2)
            await trio.sleep(1)
            assert not got
            await produce(broker, "q", 2)  # now past min_bytes
        assert trio.current_time() - t0 < 3
        r = got[0]
        assert acquired(r) == [(0, 5, 1)]  # the three acquisitions, merged as one range
        assert offsets_in(part_of(r).records) == list(range(6))  # each log batch once
        # min_bytes never reached: the answer comes at max_wait with what was acquired
        await produce(broker, "q", 1)
        t0 = trio.current_time()
        r = await call(broker, fetch_req("m", 1, tid, min_bytes=1 << 20, max_wait_ms=700))
        assert acquired(r) == [(6, 6, 1)] and trio.current_time() - t0 >= 0.7
        # min_bytes is capped at max_bytes (Apache): no wait once max_bytes worth is taken
        await produce(broker, "q", 1)
        t0 = trio.current_time()
        r = await call(broker, fetch_req("m", 2, tid, min_bytes=1 << 20, max_bytes=1, max_wait_ms=5_000))
        assert acquired(r) == [(7, 7, 1)] and trio.current_time() - t0 < 1


async def test_acquired_records_are_answered_before_half_their_lock(shm_path, thread_safe_autojump_clock):
    """An answer waiting for MinBytes holds what it acquired at most half a record lock:
    the records go out locked, never after their lock ended."""
    async with broker_with_topic(shm_path, thread_safe_autojump_clock,
                                 group_share_record_lock_duration_ms=2_000,
                                 group_share_min_record_lock_duration_ms=1000) as (broker, tid):
        await produce(broker, "q", 2)
        t0 = trio.current_time()
        r = await call(broker, fetch_req("m", 0, tid, min_bytes=1 << 20, max_wait_ms=30_000))
        assert acquired(r) == [(0, 1, 1)] and 1.0 <= trio.current_time() - t0 < 1.5
