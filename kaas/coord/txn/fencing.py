"""Fencing: a rejoin's epoch bump is applied to every led partition that knows the pid
and appended to this broker's fence log (``storage.fences``); peers poll the logs
(``poll``, run by ``kaas.tasks.txn.serve_fences``) and apply every bump ever seen to the
partitions they take over."""

from __future__ import annotations

import weakref

import structlog
from kio.schema.errors import ErrorCode

from kaas.coord.ports import LedPartition, TxnBroker
from kaas.coord.txn._common import Stats
from kaas.coord.txn.verify import Verifier
from kaas.errors import KaasError
from kaas.storage.fences import FenceLog, FenceReader

__all__ = ["Fencing"]

log = structlog.get_logger()


class Fencing:
    """This broker's fence log, and the highest fenced epoch of each pid seen anywhere."""

    def __init__(self, broker: TxnBroker, fence_log: FenceLog, verifier: Verifier, stats: Stats) -> None:
        self.broker = broker
        self.fence_log = fence_log
        self.verifier = verifier
        self.stats = stats
        # highest fenced epoch per pid seen in any fence log (applied on takeover too)
        self._fences: dict[int, int] = {}
        self._fenced_parts: weakref.WeakSet[LedPartition] = weakref.WeakSet()  # partitions seen by a poll
        self._reader: FenceReader | None = None

    def _apply(self, producer_id: int, producer_epoch: int, now: int) -> int:
        if producer_epoch > self._fences.get(producer_id, -1):
            self._fences[producer_id] = producer_epoch
        self.verifier.forget_older(producer_id, producer_epoch)
        applied = 0
        for part in list(self.broker.partitions.values()):
            if part.closed:
                continue
            producers = part.log.producers
            if producer_id in producers and producers.fence(producer_id, producer_epoch, now_ms=now):
                applied += 1
        self.stats["fences_applied"] += applied
        return applied

    async def fence(self, producer_id: int, producer_epoch: int) -> None:
        """Cross-partition fence here, then the broadcast through this broker's fence log.

        The local fence goes first even though the append may fail: the bump it applies
        is already on file in the slot (the ``Persist`` before this effect), and fences only
        raise epochs. A failed append answers COORDINATOR_NOT_AVAILABLE: the client's
        retry re-emits the fence (a KIP-360 retry of the same bump) or bumps again, which
        fences every lower epoch too.

        Raises:
            KaasError: COORDINATOR_NOT_AVAILABLE when the fence log could not be appended.
        """
        applied = self._apply(producer_id, producer_epoch, self.broker.clock.wall_ms())
        try:
            await self.broker.run_io(self.fence_log.append, producer_id, producer_epoch)
        except OSError as exc:
            log.error("fence_log_append_failed", producer_id=producer_id, producer_epoch=producer_epoch,
                      torn=self.fence_log.torn, error=str(exc))
            raise KaasError(ErrorCode.coordinator_not_available, str(exc)) from None
        log.info("producer_fenced", producer_id=producer_id, producer_epoch=producer_epoch, partitions=applied)

    async def load(self) -> None:
        """Read every fence log (this broker's own too) to know the highest fenced epoch of
        each pid; later polls read only the other brokers' new lines."""
        directory = self.broker.layout.producer_fences
        everything = FenceReader(directory)
        for rec in await self.broker.run_io(everything.poll):
            if rec.producer_epoch > self._fences.get(rec.producer_id, -1):
                self._fences[rec.producer_id] = rec.producer_epoch
        own = self.broker.layout.fence_log(self.broker.id).name
        self._reader = FenceReader(directory, skip=frozenset({self.broker.id}),
                                   offsets={k: v for k, v in everything.offsets.items() if k != own})

    async def poll(self) -> None:
        """Apply the bumps new in the other brokers' fence logs to the partitions this broker
        leads, and every bump ever seen to partitions it took over since the last poll."""
        if self._reader is None:
            await self.load()
        reader = self._reader
        assert reader is not None
        now = self.broker.clock.wall_ms()
        try:
            records = await self.broker.run_io(reader.poll)
        except OSError as exc:
            log.warning("fence_logs_unreadable", error=str(exc))
            records = []
        for name, line in reader.errors:
            log.error("fence_log_bad_line", file=name, line=line)
        reader.errors.clear()
        for rec in records:
            n = self._apply(rec.producer_id, rec.producer_epoch, now)
            log.debug("producer_fence_applied", producer_id=rec.producer_id,
                      producer_epoch=rec.producer_epoch, partitions=n)
        self._fence_new_partitions(now)

    def _fence_new_partitions(self, now: int) -> None:
        led = [p for p in list(self.broker.partitions.values()) if not p.closed]
        for part in led:
            if part in self._fenced_parts:
                continue
            for entry in list(part.log.producers):
                epoch = self._fences.get(entry.producer_id)
                if epoch is not None and epoch > entry.epoch:
                    part.log.producers.fence(entry.producer_id, epoch, now_ms=now)
            self._fenced_parts.add(part)
        self.verifier.forget_closed()
