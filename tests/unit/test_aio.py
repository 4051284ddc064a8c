"""``held``: a free lock is taken without a checkpoint; a held one is waited for, in order."""

from __future__ import annotations

import trio
import trio.testing

from kaas.aio import held


async def test_free_lock_is_taken_without_a_checkpoint():
    lock = trio.Lock()
    with trio.testing.assert_no_checkpoints():
        async with held(lock):
            assert lock.locked()
    assert not lock.locked()


async def test_held_lock_is_waited_for_and_released_on_error():
    lock = trio.Lock()
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
