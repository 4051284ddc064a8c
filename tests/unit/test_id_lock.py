"""The per-transactional-id lock of the coordinator (``coord.txn.slots.IdLock``): one
holder at a time, and the lock is forgotten once nobody holds or waits for it, also
when a waiter is cancelled."""

from __future__ import annotations

import trio
import trio.testing

from kaas.coord.txn.slots import IdLock


async def test_one_holder_at_a_time_and_nothing_left_behind():
    locks: dict = {}
    order: list[str] = []
    release = trio.Event()  # (no real sleep: a loaded machine must not let "a" go early)

    async def hold(name: str, until: trio.Event | None) -> None:
        async with IdLock(locks, "t"):
            order.append(f"{name}+")
            if until is not None:
                await until.wait()
            order.append(f"{name}-")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold, "a", release)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(hold, "b", None)
        await trio.testing.wait_all_tasks_blocked()
        assert locks["t"].users == 2  # a holds, b waits
        release.set()
    assert order == ["a+", "a-", "b+", "b-"]
    assert locks == {}


async def test_a_cancelled_waiter_leaves_no_count():
    locks: dict = {}
    cancelled = []

    async def wait_briefly() -> None:
        with trio.move_on_after(0.01) as scope:
            async with IdLock(locks, "t"):
                raise AssertionError("taken while held")
        cancelled.append(scope.cancelled_caught)

    async with IdLock(locks, "t"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_briefly)
        assert cancelled == [True]
        assert locks["t"].users == 1
    assert locks == {}


async def test_ids_do_not_share_a_lock():
    locks: dict = {}
    async with IdLock(locks, "t"), IdLock(locks, "u"):
        assert set(locks) == {"t", "u"}
    assert locks == {}
