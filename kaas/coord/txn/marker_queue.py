"""This broker's marker queue (``storage.markers``, ``to-<id>/``): the markers and offset
hooks other coordinators (or this one) could not hand over directly. ``apply`` is one
pass of the marker watcher (``kaas.tasks.txn.serve_markers``): claim the queues of dead
brokers, then write each entry's markers here, run its hooks, forward what moved.

Extra rule (not in docs/transactions.rst's outline, needed because a queued marker counts as dispatched): a new
transaction of a pid (AddPartitions/AddOffsets from Empty/Complete*, or an InitProducerId
bump) is answered CONCURRENT_TRANSACTIONS while any queue entry of that pid is still
outstanding (``pending_for``). Otherwise the first batches of the next transaction could
land before the previous transaction's marker on a peer-led partition and be committed or
aborted with it.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas import failpoints
from kaas.coord.ports import LedPartition, TxnBroker
from kaas.coord.txn._common import Stats, Unreadable
from kaas.coord.txn.markers import MarkerWriter
from kaas.errors import CorruptState
from kaas.storage.markers import MarkerQueue

__all__ = ["CLEAR_MAX", "QueueApplier"]

CLEAR_MAX = 100_000  # producer ids remembered as having nothing queued (then forgotten at once)

log = structlog.get_logger()


class QueueApplier:
    """Applies the entries of this broker's marker queue."""

    def __init__(self, broker: TxnBroker, queue: MarkerQueue, writer: MarkerWriter, unreadable: Unreadable,
                 stats: Stats) -> None:
        self.broker = broker
        self.queue = queue
        self.writer = writer
        self.unreadable = unreadable
        self.stats = stats
        # Producer ids with nothing queued: the queues held no entry of theirs when last
        # read, and this coordinator queued none since. Entries of a producer id are made
        # only by its coordinator (and by the forwarding or claiming of one that exists,
        # which never leaves the queues without it), so the queues need no reading for
        # them while their slot stays here; the set is emptied when the lease lapsed or a
        # slot of ``clear_slots`` went (``forget``): that slot's next coordinator may queue.
        self._clear: set[int] = set()
        self.clear_slots: set[int] = set()  # the slots of the ids whose producer ids are in _clear
        self._queued = 0  # entries this coordinator began to queue

    def queueing(self, producer_id: int) -> None:
        """This coordinator is about to queue an entry of ``producer_id``."""
        self._queued += 1
        self._clear.discard(producer_id)

    def forget(self) -> None:
        """Read the queues again for every producer id (a slot moved, the lease lapsed)."""
        self._clear.clear()
        self.clear_slots.clear()

    async def pending_for(self, producer_id: int, slot: int) -> bool:
        """Is any entry of ``producer_id`` (of a transactional id of ``slot``, which this
        broker coordinates) still queued (anywhere)? True when unsure."""
        if producer_id in self._clear:
            return False
        queued = self._queued
        try:
            pending = bool(await self.broker.run_io(self.queue.pending_for_pid, producer_id))
        except OSError as exc:
            log.warning("txn_marker_queue_unreadable", error=str(exc))
            return True
        if not pending and queued == self._queued:  # (nothing queued while the queues were read)
            if len(self._clear) >= CLEAR_MAX:
                self._clear.clear()
            self._clear.add(producer_id)
            self.clear_slots.add(slot)
        return pending

    async def stamp(self) -> tuple[int, int, int] | None:
        """A cheap stat of this broker's queue directory: changes when an entry lands."""
        return await self.broker.run_io(self.queue.stamp, self.broker.id)

    async def apply(self) -> None:
        """One pass of the watcher: claim dead brokers' queues, then apply own entries."""
        me = self.broker.id
        alive = set(self.broker.alive_brokers())
        if me in alive:
            for broker_id in await self.broker.run_io(self.queue.queues):
                if broker_id != me and broker_id not in alive:
                    won = await self.broker.run_io(self.queue.claim, broker_id, me)
                    if won:
                        log.info("txn_markers_claimed", from_broker=broker_id, entries=len(won))
        for path in await self.broker.run_io(self.queue.list, me):
            await trio.lowlevel.checkpoint()  # run_io does not yield on tmpfs; a long queue must
            try:
                await self._apply_entry(path)
            except OSError as exc:
                # a take, rewrite or delete failed (ENOSPC, EIO, ...): the entry's file is as
                # it was (whole-file writes), its markers and hooks are idempotent, and the
                # next pass applies it again; the other entries go on meanwhile
                log.warning("txn_marker_entry_failed", entry=path.name, error=str(exc))

    async def _apply_entry(self, path: Path) -> None:
        me = self.broker.id
        if failpoints.hit("marker.before_apply"):
            return  # tests: leave every queue entry where it is
        taken = await self.broker.run_io(self.queue.take, path)
        if taken is None:
            return
        try:
            entry = await self.broker.run_io(self.queue.read, taken)
        except CorruptState as exc:
            self.unreadable.report(("marker", str(taken)), exc)
            return
        if entry is None:
            return
        keep_parts: set[tuple[str, int]] = set()
        keep_groups: set[str] = set()
        forward: dict[int, tuple[set[tuple[str, int]], set[str]]] = defaultdict(lambda: (set(), set()))
        local: list[LedPartition] = []
        for topic, partition in sorted(entry.partitions):
            leader, part = self.writer.led(topic, partition)
            if part is not None:
                local.append(part)
            elif leader >= 0 and leader != me:
                forward[leader][0].add((topic, partition))
            elif not self.writer.partition_exists(topic, partition):
                log.warning("txn_marker_partition_gone", transactional_id=entry.transactional_id,
                            topic=topic, partition=partition)
            else:
                keep_parts.add((topic, partition))
        failed = await self.writer.write_local(local, entry.producer_id, entry.producer_epoch, entry.commit)
        keep_parts.update((p.topic, p.index) for p in failed)
        for group in sorted(entry.groups):
            code = await self.writer.group_hook(group, entry.producer_id, entry.commit)
            if code == ErrorCode.none:
                continue
            if code != ErrorCode.not_coordinator:
                keep_groups.add(group)
                continue
            owner = self.broker.group_owner(group)
            if owner is not None and owner != me:
                forward[owner][1].add(group)
            else:
                keep_groups.add(group)
        for broker_id, (parts, groups) in sorted(forward.items()):
            try:
                await self.broker.run_io(self.queue.forward, broker_id, entry.only(parts, groups), me)
            except OSError as exc:
                log.warning("txn_marker_forward_failed", to_broker=broker_id, error=str(exc))
                keep_parts.update(parts)
                keep_groups.update(groups)
                continue
            log.info("txn_markers_forwarded", transactional_id=entry.transactional_id, to_broker=broker_id,
                     partitions=len(parts), groups=len(groups))
        remaining = entry.only(keep_parts, keep_groups)
        await failpoints.hit_async("marker.after_apply_before_delete")
        if remaining.empty:
            await self.broker.run_io(self.queue.delete, taken)
            self.stats["entries_applied"] += 1
            log.debug("txn_marker_entry_applied", transactional_id=entry.transactional_id,
                      producer_id=entry.producer_id, commit=entry.commit, partitions=len(entry.partitions),
                      groups=len(entry.groups))
        elif remaining != entry:
            await self.broker.run_io(self.queue.rewrite, taken, remaining)
