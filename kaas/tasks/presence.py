"""Presence: one idle connection from this broker to every live peer. The kernel closes a
process's sockets the moment it exits, so the end of that connection is the first sign of
a death (docs/control_plane.rst)."""

from __future__ import annotations

import structlog
import trio

from kaas.peers import CONNECT_TIMEOUT_S, PRESENCE_IDLE_S, PRESENCE_SCAN_S, LinkFailed, PeerDirectory, PeerLinks

log = structlog.get_logger()


async def serve_presence(cluster: PeerDirectory, links: PeerLinks | None = None, *,
                         task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Keep one idle connection open to every live peer. The kernel closes a process's
    sockets the moment it exits, so the end of that connection is the first sign of a
    death, milliseconds before its supervisor's notice and seconds before the heartbeat
    rule. It only makes the peer *suspected* (``ClusterView.suspect``): Metadata
    and FindCoordinator answer retriable errors for its keys, so clients look again
    shortly instead of waiting for a dead broker; nothing moves until a notice or the
    heartbeat rule says the peer is dead, and the suspicion ends with its next
    heartbeat (a live peer that closed the connection for its own reasons).

    The connection goes to the peer's inter-broker listener through ``links`` (TLS and the
    SASL hook as a peer link's); without ``links``, plain TCP to the heartbeat's host/port."""
    watched: set[int] = set()
    async with trio.open_nursery() as nursery:
        task_status.started()
        while True:
            for bid in cluster.alive_any():
                if bid != cluster.me and bid not in watched:
                    watched.add(bid)
                    nursery.start_soon(_watch_presence, cluster, links, bid, watched)
            await trio.sleep(PRESENCE_SCAN_S)


async def _watch_presence(cluster: PeerDirectory, links: PeerLinks | None, broker_id: int,
                          watched: set[int]) -> None:
    try:
        peer = cluster.peers.get(broker_id)
        if peer is None or peer.port <= 0:
            return
        try:
            with trio.fail_after(CONNECT_TIMEOUT_S):
                if links is not None:
                    stream = await links.open_stream(broker_id)
                else:
                    stream = await trio.open_tcp_stream(peer.host, peer.port)
        except (OSError, trio.TooSlowError, trio.BrokenResourceError, LinkFailed) as exc:
            log.debug("presence_connect_failed", to_broker=broker_id, error=f"{type(exc).__name__}: {exc}")
            await trio.sleep(PRESENCE_SCAN_S)  # not listening (yet): the scan tries again
            return
        incarnation = peer.incarnation  # the connection is to this incarnation
        try:
            while True:
                with trio.move_on_after(PRESENCE_IDLE_S):
                    if not await stream.receive_some(4096):
                        break
                    continue
                if not cluster.is_alive_any(broker_id):
                    return  # declared dead meanwhile: nothing left to tell
        except (OSError, trio.BrokenResourceError):
            pass
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()
        cluster.suspect(broker_id, incarnation)
    finally:
        watched.discard(broker_id)
