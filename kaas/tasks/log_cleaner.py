"""The log cleaner loop: every ``log_cleaner_backoff_ms`` it rolls idle active segments of
compacted partitions (segment.ms) and runs one cleaning pass per partition that is dirty
enough (storage/cleaner.py); a partition the broker has just taken over (its start, a
restart, a leader move) gets that look within ``NEW_PARTITION_CHECK_S``, as Apache's
cleaner starts on a broker's logs when it starts. The reading, planning and writing run in a worker thread
(bounded by ``log_cleaner_io_max_bytes_per_second``), so appends and fetches go on; the
swap is a few renames, and the in-memory segments change on the trio thread.
"""

from __future__ import annotations

import weakref

import structlog
import trio

from kaas.broker import Broker, Partition
from kaas.errors import CorruptState, KaasError
from kaas.storage import cleaner

log = structlog.get_logger()

__all__ = ["serve_log_cleaner", "clean_partition", "Stats", "NEW_PARTITION_CHECK_S"]

NEW_PARTITION_CHECK_S = 1.0
"""How soon a newly taken-over partition is looked at. Waiting a whole backoff (15 s by
default) meant that a broker restarted more often than that never compacted anything."""


class Stats:
    """Counters for the metrics endpoint."""

    bytes_cleaned = 0
    records_removed = 0
    passes = 0
    failures = 0


async def serve_log_cleaner(broker: Broker, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    task_status.started()
    seen: weakref.WeakSet[Partition] = weakref.WeakSet()  # the Partition objects looked at (a takeover makes a new one)
    next_sweep = trio.current_time() + broker.settings.log_cleaner_backoff_ms / 1000
    while True:
        backoff = broker.settings.log_cleaner_backoff_ms / 1000  # dynamic: read each pass
        await trio.sleep(min(backoff, NEW_PARTITION_CHECK_S))
        sweep = trio.current_time() >= next_sweep
        for part in list(broker.partitions.values()):
            if part.closed or not part.log.config.compact or (not sweep and part in seen):
                continue
            seen.add(part)
            await clean_partition(broker, part)
        if sweep:
            next_sweep = trio.current_time() + backoff


async def clean_partition(broker: Broker, part: Partition) -> cleaner.Prepared | None:
    """Roll an idle active segment and run one pass if the partition is dirty enough."""
    plog = part.log
    now = broker.clock.wall_ms()
    try:
        if plog.maybe_roll_idle(now):
            log.debug("segment_rolled_idle", topic=part.topic, partition=part.index)
    except (OSError, KaasError) as exc:
        log.warning("segment_roll_failed", topic=part.topic, partition=part.index, error=str(exc))
        return None
    job = plog.clean_job(now, broker.settings.log_cleaner_io_max_bytes_per_second)
    if job is None:
        return None
    t0 = broker.clock.monotonic()
    try:
        with plog.cleaning_pass():
            prepared = await trio.to_thread.run_sync(cleaner.prepare, job, abandon_on_cancel=False)
            if part.closed or plog.failed is not None:
                await trio.to_thread.run_sync(cleaner.discard, prepared)
                return None
            state = plog.next_cleaner_state(prepared)
            await broker.run_io(cleaner.commit, plog, prepared, state)
            plog.apply_clean(prepared, state)
    except (OSError, CorruptState, KaasError) as exc:
        Stats.failures += 1
        log.error("log_clean_failed", topic=part.topic, partition=part.index, error=str(exc))
        return None
    Stats.passes += 1
    Stats.bytes_cleaned += prepared.bytes_read
    Stats.records_removed += prepared.records_removed
    log.info("log_cleaned", topic=part.topic, partition=part.index, segments=len(job.segments),
             rewritten=len(prepared.changed), bytes_read=prepared.bytes_read,
             bytes_written=prepared.bytes_written, records_removed=prepared.records_removed,
             clean_offset=state["clean_offset"], seconds=round(broker.clock.monotonic() - t0, 3))
    return prepared
