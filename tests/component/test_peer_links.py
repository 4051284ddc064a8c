"""A peer link to a broker that is alive on the volume but unreachable on the network (the
packets dropped, no reset): the marker request fails after ``ANSWER_TIMEOUT_S`` (its markers
go through the queue on the volume), the connection is reset so the request can never
arrive later, and the link rests for ``SILENT_BACKOFF_S`` before it tries again."""

from __future__ import annotations

from functools import partial

import trio

from kaas.peers import ANSWER_TIMEOUT_S, SILENT_BACKOFF_S, PeerLinks


class _Peer:
    protocol = "PLAINTEXT"
    incarnation = "1" * 32

    def __init__(self, port: int) -> None:
        self.host, self.port = "127.0.0.1", port

    def peer_endpoint(self, listener: str):
        return self


class _Directory:
    """Broker 1 alive (its heartbeat moves on the volume) at ``port``."""

    me = 0

    def __init__(self, port: int) -> None:
        self.peers = {1: _Peer(port)}

    def alive_any(self) -> list[int]:
        return [0, 1]

    def is_alive_any(self, broker_id: int) -> bool:
        return True

    def suspect(self, broker_id: int, incarnation: str) -> None:
        pass


async def test_a_silent_live_peer_fails_the_request_and_the_link_rests(autojump_clock):
    accepted: list[trio.SocketStream] = []

    async def silent(stream: trio.SocketStream) -> None:  # reads nothing, answers nothing
        accepted.append(stream)
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listener = (await nursery.start(partial(trio.serve_tcp, silent, 0, host="127.0.0.1")))[0]
        links = PeerLinks(0, _Directory(listener.socket.getsockname()[1]))
        t0 = trio.current_time()
        assert await links.write_markers(1, []) is None  # failed: the caller queues the markers
        assert ANSWER_TIMEOUT_S <= trio.current_time() - t0 < ANSWER_TIMEOUT_S + 1
        assert len(accepted) == 1 and links._links[1].stream is None
        t1 = trio.current_time()
        assert await links.write_markers(1, []) is None  # resting: no connect, no wait
        assert trio.current_time() == t1 and len(accepted) == 1
        await trio.sleep(SILENT_BACKOFF_S)
        assert await links.write_markers(1, []) is None  # tried again after the rest
        assert len(accepted) == 2 and links.stats["failed"] == 3
        nursery.cancel_scope.cancel()
