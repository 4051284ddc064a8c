"""Listeners (every one of ``Settings.all_listeners``, TLS where the protocol asks) and the
broker process's root nursery; SIGTERM/SIGINT drain."""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from functools import partial

import structlog
import trio

from kaas.broker import Broker
from kaas.handlers.session import ANONYMOUS, Session
from kaas.listeners import Listener
from kaas.net import tls
from kaas.net.connection import peer_name, serve_connection
from kaas.settings import Settings
from kaas.tasks import serve_broker as serve_broker_tasks

log = structlog.get_logger()


def listener_handler(broker: Broker, entry: Listener) -> Callable[[trio.SocketStream], Awaitable[None]]:
    """The connection handler of one listener: TLS first on SSL/SASL_SSL (the listener's
    own context: its ``ssl.client.auth``), then a Session naming the listener (on SASL_* not
    authenticated until the SASL exchange succeeds).

    Raises:
        TLSConfigError, RuleError: a TLS listener whose options do not make a context
            (at start, before anything listens).
    """
    if not entry.tls:
        async def plain(stream: trio.SocketStream) -> None:
            await serve_connection(broker, stream, Session(entry.name, entry.protocol,
                                                           authenticated=not entry.sasl))
        return plain
    s = broker.settings
    ctx = tls.server_context(s, entry)
    rules = tls.principal_rules(s)
    timeout = s.ssl_handshake_timeout_ms / 1000

    async def secure(stream: trio.SocketStream) -> None:
        peer = peer_name(stream)
        try:
            opened = await tls.open_server_stream(stream, ctx, rules, timeout, peer, entry.name)
        except Exception as exc:  # a bug: never take the broker down with one connection
            log.exception("connection_crashed", peer=peer, listener=entry.name, error=repr(exc))
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()
            return
        if opened is None:
            return
        ssl_stream, principal = opened
        # SSL: authenticated by TLS (a client certificate's principal, else ANONYMOUS);
        # SASL_SSL: the SASL exchange sets the principal (Apache ignores the certificate)
        session = Session(entry.name, entry.protocol, principal=principal if not entry.sasl else ANONYMOUS,
                          authenticated=not entry.sasl)
        await serve_connection(broker, ssl_stream, session)
    return secure


CLOSE_RESERVE_S = 2.0  # of the shutdown grace: kept for relinquishing and the death notice
CONNECTIONS_LINGER_S = 1.0  # after the drain: answers still being written may go out


async def serve_broker(settings: Settings, *,
                       task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED) -> None:
    """Run one broker until SIGTERM/SIGINT; serves every listener of ``settings`` and
    reports the first one's bound (host, port) via task_status.

    The graceful shutdown, all of it within ``shutdown_grace_ms`` of the signal: stop
    accepting connections; finish the transactions whose EndTxn was answered; drain (the
    controller moves this broker's partitions and transaction slots away while it still
    serves them, so clients meet NOT_LEADER and move on); let the last answers go out;
    relinquish what is left; stop every loop; then write this incarnation's death notice,
    so peers take anything left over at once instead of waiting out the session timeout."""
    broker = Broker(settings)
    broker.connections = 0
    handlers = [(entry, listener_handler(broker, entry)) for entry in settings.all_listeners]
    grace = settings.shutdown_grace_ms / 1000
    async with trio.open_nursery() as root:
        async with trio.open_nursery() as loops:
            await loops.start(serve_broker_tasks, broker)
            if settings.metrics_port:
                from kaas.net.metrics_http import serve_metrics

                await loops.start(serve_metrics, broker, settings.listen_host, settings.metrics_port)
            opened = []
            for entry, handler in handlers:
                sockets = await trio.open_tcp_listeners(entry.port, host=entry.host or None)
                opened.append((entry, handler, sockets))
            bound = opened[0][2][0].socket.getsockname()[:2]
            async with trio.open_nursery() as conns:
                async with trio.open_nursery() as accept:
                    for entry, handler, sockets in opened:
                        await accept.start(partial(trio.serve_listeners, handler, sockets,
                                                   handler_nursery=conns))
                        at = sockets[0].socket.getsockname()[:2]
                        log.info("broker_listening", listener=entry.name, protocol=entry.protocol, host=at[0],
                                 port=at[1], broker_id=settings.broker_id, incarnation=broker.incarnation[:8])
                    task_status.started(bound)
                    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                        async for signum in signals:
                            log.info("broker_draining", signal=signal.Signals(signum).name, grace_s=grace)
                            break
                    accept.cancel_scope.cancel()
                deadline = trio.current_time() + grace
                await broker.drain_wait(max(0.0, grace - CLOSE_RESERVE_S - CONNECTIONS_LINGER_S))
                broker.notify_data()
                conns.cancel_scope.deadline = min(trio.current_time() + CONNECTIONS_LINGER_S,
                                                  deadline - CLOSE_RESERVE_S)
            with trio.CancelScope(shield=True), trio.move_on_at(deadline):
                await broker.close()
            loops.cancel_scope.cancel()  # nothing of this incarnation writes after this
        with trio.CancelScope(shield=True), trio.move_on_at(deadline):
            await broker.record_own_death()
        log.info("broker_stopped")
        root.cancel_scope.cancel()
