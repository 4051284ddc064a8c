"""Time-based retention and producer-state expiry of the partitions this broker leads,
every ``--retention-check-ms``."""

from __future__ import annotations

import structlog
import trio

from kaas.broker import Broker
from kaas.clock import wall_ms

log = structlog.get_logger()


async def serve_retention(broker: Broker, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    task_status.started()
    while True:
        settings = broker.settings  # anew each pass: dynamic broker configs replace it
        await trio.sleep(settings.retention_check_ms / 1000)
        now = wall_ms()
        for part in list(broker.partitions.values()):
            if part.syncing or part.closed:
                continue
            try:
                n = part.log.apply_retention(now)
            except OSError as exc:
                log.error("retention_failed", topic=part.topic, partition=part.index, error=str(exc))
                continue
            expired = part.log.producers.expire(now, settings.producer_id_expiration_ms)
            if expired:
                log.info("producer_state_expired", topic=part.topic, partition=part.index, count=len(expired))
            if n:
                log.info("retention_deleted_segments", topic=part.topic, partition=part.index,
                         segments=n, log_start_offset=part.log_start_offset)
