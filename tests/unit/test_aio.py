"""``aio.Lock`` and ``held``: a free lock is taken without a checkpoint; a held one is waited for,
in order, handed over on release, and a waiter cancelled meanwhile neither gets it nor
keeps it from the next one."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel
import trio.testing

from kaas.aio import Lock, held


async def test_free_lock_is_taken_without_a_checkpoint():
    lock = Lock()
    with trio.testing.assert_no_checkpoints():
        async with held(lock):
            assert lock.locked()
    assert not lock.locked()


async def test_held_lock_is_waited_for_and_released_on_error():
    lock = Lock()
    order = []

    async def second():
        async with held(lock):
            order.append("second")

    async with trio.open_nursery() as nursery:
        async with held(lock):
            nursery.start_soon(second)
            await trio.testing.wait_all_tasks_blocked()
            order.append("first")  # second is parked on the lock
            assert order == ["first"]
    assert order == ["first", "second"]

    try:
        async with held(lock):
            raise ValueError("boom")
    except ValueError:
        pass
    assert not lock.locked()


async def test_release_hands_over_in_order_past_a_cancelled_waiter():
    lock = Lock()
    order = []
    scopes = {}

    async def wait(name):
        with trio.CancelScope() as scopes[name]:
            async with held(lock):
                order.append(name)
                await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        async with held(lock):
            for name in ("b", "c", "d"):
                nursery.start_soon(wait, name)
                await trio.testing.wait_all_tasks_blocked()
            scopes["c"].cancel()  # leaves the queue while the lock is held
            await trio.testing.wait_all_tasks_blocked()
            order.append("a")
        assert lock.locked()  # handed to b, not freed in between
    assert order == ["a", "b", "d"]
    assert not lock.locked()
    with pytest.raises(RuntimeError):
        lock.release()
    lock.acquire_nowait()
    with pytest.raises(trio.WouldBlock):
        lock.acquire_nowait()
