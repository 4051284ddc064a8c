"""Listeners and the broker process's root nursery; SIGTERM/SIGINT drain."""

from __future__ import annotations

import signal
from functools import partial

import structlog
import trio

from kaas.broker import Broker
from kaas.handlers.session import Session
from kaas.net.connection import serve_connection
from kaas.settings import Listener, Settings
from kaas.tasks import serve_broker as serve_broker_tasks

log = structlog.get_logger()


def session_factory(listener: Listener):
    """The Session maker of a listener's connections: a SASL_* listener's start
    unauthenticated. (The TLS branch replaces this with its per-listener version.)"""
    sasl = listener.security_protocol.startswith("SASL_")

    def make(peer_host: str) -> Session:
        return Session(listener=listener.name, security_protocol=listener.security_protocol,
                       authenticated=not sasl, peer_host=peer_host)
    return make


def listeners_of(settings: Settings) -> tuple[Listener, ...]:
    return settings.listeners or (Listener("PLAINTEXT", settings.listen_host, settings.listen_port, "PLAINTEXT"),)


async def serve_broker(settings: Settings, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run one broker until SIGTERM/SIGINT; reports the bound (host, port) via task_status."""
    broker = Broker(settings)
    broker.connections = 0
    async with trio.open_nursery() as root:
        await root.start(serve_broker_tasks, broker)
        if settings.metrics_port:
            from kaas.net.metrics_http import serve_metrics

            await root.start(serve_metrics, broker, settings.listen_host, settings.metrics_port)
        served = []
        for listener in listeners_of(settings):
            sockets = await trio.open_tcp_listeners(listener.port, host=listener.host)
            served.append((listener, sockets))
        bound = served[0][1][0].socket.getsockname()[:2]
        async with trio.open_nursery() as conns:
            async with trio.open_nursery() as accept:
                for listener, sockets in served:
                    handler = partial(serve_connection, broker, session_factory=session_factory(listener))
                    await accept.start(partial(trio.serve_listeners, handler, sockets, handler_nursery=conns))
                    host, port = sockets[0].socket.getsockname()[:2]
                    log.info("broker_listening", host=host, port=port, broker_id=settings.broker_id,
                             listener=listener.name)
                task_status.started(bound)
                with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        log.info("broker_draining", signal=signal.Signals(signum).name)
                        break
                accept.cancel_scope.cancel()
            await broker.drain_wait()
            broker.notify_data()
            conns.cancel_scope.deadline = trio.current_time() + 1.0
        with trio.CancelScope(shield=True):
            await broker.close()
        log.info("broker_stopped")
        root.cancel_scope.cancel()
