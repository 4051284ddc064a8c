"""Requests from this broker to a peer that wait for their answer, over one persistent
connection per peer: what a partition leader and a group coordinator send to a transaction
coordinator under transaction.version 2 (AddPartitionsToTxn in its broker form,
AddOffsetsToTxn; ``coord.txn.adder``), as Apache's brokers send them over their
inter-broker channel.

Invariants:
    - one request in flight per peer; callers queue on the peer's lock (the caller batches
      what it can into one request, as ``coord.txn.adder`` does);
    - the connection is opened as the marker links open theirs (``peers.open_peer_stream``:
      the inter-broker listener, TLS and SASL as configured) and kept for the next request;
    - a request unanswered after its timeout, or answered with a frame that does not match,
      fails with ``LinkFailed`` and its connection is reset (SO_LINGER 0), so that the
      request can never reach the peer later: the caller answers a retriable error and
      the client's retry is the only copy that can still arrive.
"""

from __future__ import annotations

from typing import Any

import structlog
import trio

from kaas.aio import Lock, held
from kaas.peers import MAX_RESPONSE, LinkFailed, PeerLinks, open_peer_stream, reset_on_close
from kaas.wire import codec
from kaas.wire.framing import MIN_RESPONSE, FrameDecoder, FramingError

__all__ = ["PeerCalls"]

log = structlog.get_logger()

CONNECT_TIMEOUT_S = 2.0


class _Conn:
    """One peer's connection (opened on first use) and the lock its callers queue on."""

    def __init__(self) -> None:
        self.lock = Lock()
        self.stream: trio.abc.Stream | None = None
        self.decoder = FrameDecoder(MAX_RESPONSE, MIN_RESPONSE)
        self.renew_at: float | None = None
        self.corr = 0

    def reset(self) -> None:
        """Make the coming close a reset: what the kernel did not deliver is discarded."""
        reset_on_close(self.stream)

    async def close(self) -> None:
        stream, self.stream, self.renew_at = self.stream, None, None
        self.decoder = FrameDecoder(MAX_RESPONSE, MIN_RESPONSE)
        if stream is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()


class PeerCalls:
    """This broker's request/answer connections to its peers (beside ``PeerLinks``, whose
    endpoints, TLS context and SASL hook they use)."""

    def __init__(self, links: PeerLinks) -> None:
        self.links = links
        self._conns: dict[int, _Conn] = {}
        self.stats = {"calls": 0, "failed": 0}

    async def call(self, broker_id: int, api_key: int, version: int, body: Any, timeout: float) -> Any:
        """Send ``body`` (a kio request object of ``api_key`` at ``version``) to
        ``broker_id`` and return the decoded response body.

        Raises:
            LinkFailed: the peer is unknown or unreachable, closed the connection, did not
                answer within ``timeout`` seconds, or answered something that does not
                match (its connection is reset then).
        """
        conn = self._conns.get(broker_id)
        if conn is None:
            conn = self._conns[broker_id] = _Conn()
        self.stats["calls"] += 1
        async with held(conn.lock):
            try:
                with trio.fail_after(max(0.1, timeout)):
                    return await self._exchange(conn, broker_id, api_key, version, body)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                    FramingError, codec.DecodeError, LinkFailed) as exc:
                self.stats["failed"] += 1
                log.warning("peer_call_failed", to_broker=broker_id, api_key=api_key,
                            error=f"{type(exc).__name__}: {exc}")
                conn.reset()
                await conn.close()
                raise LinkFailed(f"{type(exc).__name__}: {exc}") from None
            except BaseException:  # cancelled mid-exchange: nobody can use this connection now
                conn.reset()
                await conn.close()
                raise

    async def _exchange(self, conn: _Conn, broker_id: int, api_key: int, version: int, body: Any) -> Any:
        if conn.stream is not None and conn.renew_at is not None and trio.current_time() >= conn.renew_at:
            await conn.close()  # its SASL session is nearly over (KIP-368): a fresh one
        if conn.stream is None:
            with trio.fail_after(CONNECT_TIMEOUT_S):
                conn.stream, conn.renew_at = await open_peer_stream(self.links, broker_id)
        assert conn.stream is not None
        conn.corr += 1
        await conn.stream.send_all(codec.encode_request(api_key, version, conn.corr, self.links.client_id, body))
        while True:
            frame = next(iter(conn.decoder.frames()), None)
            if frame is not None:
                break
            data = await conn.stream.receive_some(65536)
            if not data:
                raise LinkFailed("peer closed the connection")
            conn.decoder.feed(data)
        if conn.decoder.buffered:
            raise LinkFailed("more bytes than one response")
        corr, response = codec.decode_response(api_key, version, bytes(frame))
        if corr != conn.corr:
            raise LinkFailed(f"response for correlation {corr}, expected {conn.corr}")
        return response
