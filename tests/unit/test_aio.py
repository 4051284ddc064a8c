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


async def _receive_all(sock: trio.socket.SocketType, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = await sock.recv(65536)
        assert chunk
        got += chunk
    return bytes(got)


@pytest.mark.parametrize("sizes", [[0, 5, 0], [70_000, 1, 3_000_000, 0, 17], [1] * 2500])
async def test_send_parts_sends_every_piece_in_order_past_a_full_socket(sizes):
    """``writev`` through partial writes (a socket buffer far smaller than the pieces),
    more pieces than one ``writev`` takes, empty pieces, views and bytearrays."""
    import socket

    from kaas.aio import send_parts

    parts = []
    for i, n in enumerate(sizes):
        raw = bytes((i + j) % 256 for j in range(min(n, 1000))) * (n // 1000 + 1)
        parts.append([bytes(raw[:n]), bytearray(raw[:n]), memoryview(raw)[:n]][i % 3])
    want = b"".join(parts)
    a, b = trio.socket.socketpair()
    with a, b:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        async with trio.open_nursery() as nursery:
            received = []

            async def reader():
                received.append(await _receive_all(b, len(want)))

            nursery.start_soon(reader)
            await send_parts(trio.SocketStream(a), a.fileno(), parts)
        assert received == [want]


async def test_send_parts_joins_for_a_stream_without_a_socket():
    from kaas.aio import send_parts

    left, right = trio.testing.memory_stream_pair()
    await send_parts(left, None, [b"ab", memoryview(b"cd"), bytearray(b"ef")])
    assert await right.receive_some(100) == b"abcdef"
