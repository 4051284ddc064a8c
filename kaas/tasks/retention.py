"""Retention and producer-state expiry of the partitions this broker leads, every
``--retention-check-ms``. Both go by the broker's wall clock: retention.ms against the
segments' max record timestamps, expiry against each producer's last append as this
broker (or the leader before it) saw it.

Retention deletes only below the durable offset (kaas's high watermark for deletion, as
Apache deletes only below the replicated high watermark). When more would be due were the
log end durable (the active segment is past retention but acks=0/1 appends in it are not
fsynced yet), the partition's group commit runs first, off the trio thread."""

from __future__ import annotations

import structlog
import trio

from kaas.broker import Broker, Partition
from kaas.errors import KaasError

log = structlog.get_logger()


async def serve_retention(broker: Broker, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    task_status.started()
    while True:
        settings = broker.settings  # anew each pass: dynamic broker configs replace it
        await trio.sleep(settings.retention_check_ms / 1000)
        now = broker.clock.wall_ms()
        for part in list(broker.partitions.values()):
            if part.syncing or part.closed:
                continue
            try:
                n = await _apply(part, now)
            except (OSError, KaasError) as exc:
                log.error("retention_failed", topic=part.topic, partition=part.index, error=str(exc))
                continue
            limit = settings.producer_id_expiration_ms
            for entry in part.log.producers.expire(now, limit):
                # Once per producer (the entry is gone after this), with the reason: idle
                # by the broker's clock since its last append here, past the limit.
                log.info("producer_state_expired", topic=part.topic, partition=part.index,
                         producer_id=entry.producer_id, producer_epoch=entry.epoch,
                         last_append_ms=entry.last_append_ms, idle_ms=now - entry.last_append_ms,
                         producer_id_expiration_ms=limit)
            if n:
                log.info("retention_deleted_segments", topic=part.topic, partition=part.index,
                         segments=n, log_start_offset=part.log_start_offset)


async def _apply(part: Partition, now: int) -> int:
    plog = part.log
    if plog.retention_due(now, high_watermark=plog.log_end_offset) > plog.retention_due(now):
        await part.wait_durable(plog.log_end_offset)
        if part.closed or part.syncing:
            return 0
    return plog.apply_retention(now)
