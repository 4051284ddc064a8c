"""A partition this broker leads, for the trio world.

A ``Partition`` wraps one ``PartitionLog``: appends happen on the trio thread (no await
between validation and the write, so they are serialised), fsyncs run in a worker thread
as a group commit, and readers park on ``Broker.wait_for_data`` for long-polls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import trio
from kio.schema.errors import ErrorCode

from kaas import failpoints
from kaas.domain.producer_state import Duplicate, Reject
from kaas.errors import KaasError
from kaas.storage.partition_log import AppendResult, PartitionLog, ReadResult
from kaas.storage.segment import SpanRead
from kaas.wire import batch as wb

if TYPE_CHECKING:
    from kaas.broker.ports import PartitionHost

NEVER = 2**63 - 1  # flush.messages / flush.ms left at their defaults


class ProduceResult(NamedTuple):
    """A produced batch's place (a named tuple: one per batch)."""

    base_offset: int
    next_offset: int
    duplicate: bool
    log_append_time: int = -1  # the batch's append time on a LogAppendTime topic, else -1


class Partition:
    """A partition this broker leads."""

    def __init__(self, topic: str, index: int, plog: PartitionLog, broker: PartitionHost[Partition]) -> None:
        self.topic = topic
        self.index = index
        self.log = plog
        self.broker = broker
        self._syncing = False
        self._sync_done: trio.Event | None = None  # made by the first to wait for a running fsync
        self.closed = False
        self.offline: str | None = None  # why the log failed (KAFKA_STORAGE_ERROR until reopened)
        self._abandon_after_sync = False
        self.append_listeners: list[Callable[[wb.BatchHeader, AppendResult], None]] = []

    def abandon(self) -> None:
        """Give the log's files up without writing (the log failed): at once, or, while a
        group-commit fsync runs in a worker thread on its fds, right after it."""
        if self._syncing:
            self._abandon_after_sync = True
        else:
            self.log.abandon()

    @property
    def syncing(self) -> bool:
        """A group-commit fsync of this partition is running (in a worker thread)."""
        return self._syncing

    @property
    def epoch(self) -> int:
        return self.log.epoch

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset()

    def check_open(self) -> None:
        if self.offline is not None:
            raise KaasError(ErrorCode.kafka_storage_error, f"partition offline: {self.offline}")
        if self.closed:
            raise KaasError(ErrorCode.not_leader_or_follower, "partition relinquished")
        if not self.broker.cluster.lease_valid():
            raise KaasError(ErrorCode.not_leader_or_follower, "write lease lapsed (self-fenced)")

    def append(self, records: bytes, header: wb.BatchHeader) -> AppendResult:
        """Append a validated batch on the trio thread; readers are woken."""
        self.check_open()
        try:
            res = self.log.append(records, header)
        except KaasError:
            if self.log.failed is not None:
                self.broker.take_offline(self)
            raise
        for listener in self.append_listeners:
            listener(header, res)
        self.broker.notify_data()
        log, cfg = self.log, self.log.config
        if log.log_end_offset - log.durable_offset >= cfg.flush_messages or (
                cfg.flush_ms < NEVER and log.durable_offset == res.base_offset):
            # flush.messages reached: tasks.flush fsyncs now; or the first append since the
            # last fsync on a flush.ms topic: it counts the time from here
            self.broker.flush_wakeup.set()
        return res

    async def wait_durable(self, offset: int) -> None:
        """Return once every byte below ``offset`` is fsynced (group commit).

        Raises:
            KaasError: NOT_LEADER_OR_FOLLOWER when leadership was lost before the ack
                (check-before-ack), KAFKA_STORAGE_ERROR when the fsync failed.
        """
        while self.log.durable_offset < offset:
            self.check_open()
            if self._syncing:
                if self._sync_done is None:
                    self._sync_done = trio.Event()
                await self._sync_done.wait()
                continue
            end, fds = self.log.take_dirty()
            self._syncing = True
            try:
                if failpoints.ARMED:
                    await failpoints.hit_async("append.after_write_before_fsync")
                if self.log.config.fsync and fds:
                    t0 = time.perf_counter()
                    if self.broker.memory_backed:
                        # tmpfs: fsync is a no-op syscall; a worker-thread round trip would
                        # cost more than it (measured: ~25% of broker CPU under produce load)
                        self.log.fsync_fds(fds)
                    else:
                        await trio.to_thread.run_sync(self.log.fsync_fds, fds)
                    self.broker.stats_fsync(time.perf_counter() - t0)
                self.log.mark_durable(end)
            except OSError as exc:
                # Never retried as if it had succeeded: the log is failed, every waiter gets
                # KAFKA_STORAGE_ERROR and the partition is reopened through recovery.
                self.log.fail(f"fsync failed: {exc}")
                self.broker.take_offline(self)
                raise KaasError(ErrorCode.kafka_storage_error, str(exc)) from None
            finally:
                self._syncing = False
                done, self._sync_done = self._sync_done, None
                if done is not None:
                    done.set()
                if self._abandon_after_sync:
                    self._abandon_after_sync = False
                    self.log.abandon()
        self.broker.check_before_ack(self)

    def append_control(self, producer_id: int, producer_epoch: int, commit: bool,
                       coordinator_epoch: int) -> AppendResult | None:
        """Append a COMMIT/ABORT marker for ``producer_id`` (the caller then awaits
        ``wait_durable(result.next_offset)``). Returns None when the marker is stale
        (the partition knows a newer epoch whose transaction this cannot close)."""
        self.check_open()
        d = self.log.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if isinstance(d, Reject):
            return None
        records = wb.control_batch(producer_id=producer_id, producer_epoch=producer_epoch, commit=commit,
                                   coordinator_epoch=coordinator_epoch, timestamp=self.broker.clock.wall_ms())
        return self.append(records, wb.parse_header(records))

    def read(self, offset: int, max_bytes: int, limit: int, min_one: bool = True) -> ReadResult:
        return self.log.read(offset, max_bytes, limit, min_one=min_one)

    def read_span(self, offset: int, max_bytes: int, limit: int, min_one: bool, span_min: int) -> SpanRead:
        """``read`` for a Fetch answer: records of ``span_min`` bytes or more as a span of
        the segment file (sent with ``sendfile``), and their count."""
        return self.log.read_span(offset, max_bytes, limit, min_one=min_one, span_min=span_min)

    def aborted_transactions(self, start: int, end: int) -> list[dict[str, int]]:
        """Aborted transactions overlapping [start, end) for read_committed fetches."""
        return [{"producer_id": pid, "first_offset": first} for pid, first in self.log.aborted_in(start, end)]

    async def produce(self, records: bytes, header: wb.BatchHeader, transactional_id: str | None,
                      *, log_append_time: bool = False) -> ProduceResult:
        """Classify (idempotence, docs/transactions.rst) and append one validated batch from a Produce request.

        Runs without an await between the check and the append, so the classification and
        the write are atomic with respect to every other producer of this partition.

        With ``log_append_time`` (message.timestamp.type=LogAppendTime) the batch is stamped
        with the broker's clock before it is written; a duplicate is answered with the time
        its original was stamped with (the dedupe ring keeps each batch's max timestamp).

        Raises:
            KaasError: 45/47/48/87 from the dedupe ring, or NOT_LEADER_OR_FOLLOWER.
        """
        self.check_open()
        pid = header.producer_id
        if pid >= 0:
            if header.is_transactional:
                await self.broker.verify_txn_partition(self, transactional_id, header)
                self.check_open()
            d = self.log.producers.check(pid, header.producer_epoch, header.base_sequence,
                                         header.records_count, header.is_transactional)
            if isinstance(d, Duplicate):
                return ProduceResult(d.base_offset, d.base_offset + header.records_count, True,
                                     d.timestamp if log_append_time else -1)
            if isinstance(d, Reject):
                raise KaasError(ErrorCode(int(d.code)), d.reason)
        append_time = -1
        if log_append_time:
            append_time = self.broker.clock.wall_ms()
            records = wb.stamp_log_append_time(records, append_time)
            header = wb.parse_header(records)
        res = self.append(records, header)
        return ProduceResult(res.base_offset, res.next_offset, False, append_time)
