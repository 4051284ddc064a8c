"""Listeners and the broker process's root nursery; SIGTERM/SIGINT drain."""

from __future__ import annotations

import signal
from functools import partial

import structlog
import trio

from kaas.broker import Broker
from kaas.net.connection import serve_connection
from kaas.settings import Settings
from kaas.tasks import serve_broker as serve_broker_tasks

log = structlog.get_logger()


async def serve_broker(settings: Settings, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run one broker until SIGTERM/SIGINT; reports the bound (host, port) via task_status."""
    broker = Broker(settings)
    broker.connections = 0
    async with trio.open_nursery() as root:
        await root.start(serve_broker_tasks, broker)
        if settings.metrics_port:
            from kaas.net.metrics_http import serve_metrics

            await root.start(serve_metrics, broker, settings.listen_host, settings.metrics_port)
        listeners = await trio.open_tcp_listeners(settings.listen_port, host=settings.listen_host)
        bound = listeners[0].socket.getsockname()[:2]
        async with trio.open_nursery() as conns:
            async with trio.open_nursery() as accept:
                await accept.start(partial(trio.serve_listeners, partial(serve_connection, broker), listeners,
                                           handler_nursery=conns))
                log.info("broker_listening", host=bound[0], port=bound[1], broker_id=settings.broker_id)
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
