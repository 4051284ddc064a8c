"""flush.messages and flush.ms: fsync a led partition whose appends have waited long
enough, or are many enough, without a group commit (acks=0/1 produce does not wait for
one). Apache flushes after ``flush.messages`` messages and once the oldest unflushed one
is ``flush.ms`` old; kaas counts offsets not yet durable and the time of the first append
after the last fsync, by the broker's clock. The fsync is the partition's group commit
(``Partition.wait_durable``), so it also serves any acks=all produce waiting meanwhile.

With the defaults (2**63 - 1) nothing is due and the loop only sleeps.
"""

from __future__ import annotations

import structlog
import trio

from kaas.broker import Broker, Partition
from kaas.errors import KaasError

__all__ = ["serve_flush"]

log = structlog.get_logger()

NEVER = 2**63 - 1
IDLE_S = 1.0  # the longest sleep: a topic's flush.ms may be altered meanwhile


async def serve_flush(broker: Broker, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    task_status.started()
    while True:
        woken = broker.flush_wakeup.rearm()
        now = broker.clock.wall_ms()
        wait_s = IDLE_S
        for part in list(broker.partitions.values()):
            plog = part.log
            if part.closed or part.syncing or plog.failed is not None:
                continue
            if plog.flush_due(now):
                await _flush(part)
            elif plog.config.flush_ms < NEVER and plog.unflushed_since_ms is not None:
                wait_s = min(wait_s, max(0.0, (plog.unflushed_since_ms + plog.config.flush_ms - now) / 1000))
        with trio.move_on_after(wait_s):
            await woken.wait()


async def _flush(part: Partition) -> None:
    try:
        await part.wait_durable(part.log.log_end_offset)
    except KaasError as exc:  # taken offline or moved: its own log lines say why
        log.debug("flush_skipped", topic=part.topic, partition=part.index, error=exc.code.name)
