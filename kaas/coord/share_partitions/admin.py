"""The operator's side of the share partitions this broker leads (KIP-932 admin): what a
share group's state of a partition is (its start offset, what is in flight, the lag), and
the two changes an operator makes while the group has no members: a new start offset
(AlterShareGroupOffsets, ``kaas groups reset-offsets``) and no state at all
(DeleteShareGroupOffsets, DeleteGroups). The group's coordinator asks them of each
partition's leader (``coord.group.share.offsets``), over a peer connection when that is
another broker (InitializeShareGroupState, ReadShareGroupState, ReadShareGroupStateSummary,
DeleteShareGroupState).

Only the leader writes a partition's share files (design section 11): a change drops the
machine held here (``ShareRuntime.locked``: the next ShareFetch reads the files again),
writes as the leader of the partition's epoch after checking the lease and the manifest's
epoch (``check_before_ack``), and is answered only once the manifest still carries that
epoch, as an acknowledgement is.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import structlog
from kio.schema.errors import ErrorCode

from kaas.coord.share_partitions.ports import SharedLog
from kaas.coord.share_partitions.runtime import ShareRuntime
from kaas.domain.share_partition import Persisted, Range, RecordState, SharePartition
from kaas.errors import CorruptState, KaasError
from kaas.storage import share_state
from kaas.storage.share_state import NewerWriter, ShareJournal

__all__ = ["ShareState", "ShareStateAdmin", "share_lag"]

log = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class ShareState:
    """One share partition as its leader sees it: the window [start, end), the (first,
    last, state, delivery count) ranges in it, the partition's leader epoch and high
    watermark."""

    start: int
    end: int
    ranges: tuple[Range, ...]
    leader_epoch: int
    high_watermark: int

    def count(self, *states: RecordState) -> int:
        """Offsets of the window in any of ``states``."""
        return sum(last - first + 1 for first, last, state, _ in self.ranges if state in states)

    @property
    def delivery_complete(self) -> int:
        """Offsets at or past the start whose delivery is complete (acknowledged or
        archived): KIP-1226's ``DeliveryCompleteCount``."""
        return self.count(RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)

    @property
    def lag(self) -> int:
        return share_lag(self.high_watermark, self.start, self.delivery_complete)


def share_lag(high_watermark: int, start: int, delivery_complete: int) -> int:
    """A share partition's lag (KIP-1226): the records from its start offset to the high
    watermark whose delivery is not complete; -1 when a part is unknown (negative)."""
    if min(high_watermark, start, delivery_complete) < 0:
        return -1
    return max(0, high_watermark - start - delivery_complete)


def _state(part: SharedLog, machine: SharePartition) -> ShareState:
    snap = machine.snapshot()
    return ShareState(snap.start, snap.end, snap.ranges, part.epoch, part.high_watermark)


class ShareStateAdmin:
    """The share-state calls of this broker as a partition leader (``broker.share_state``)."""

    def __init__(self, runtime: ShareRuntime) -> None:
        self.runtime = runtime

    async def read(self, group_id: str, topic: str, index: int) -> ShareState | None:
        """The group's share partition as held here, else as its files hold it (what a
        load would make of them: locks released, the log start applied); None when it has
        no state.

        Raises:
            KaasError: not led here (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION),
                its files are corrupt or unreadable (KAFKA_STORAGE_ERROR).
        """
        rt = self.runtime
        async with rt.locked(group_id, topic, index) as (part, machine):
            if machine is not None:
                return _state(part, machine)
            limits = rt.settings_of(group_id).limits
            try:
                machine, _ = await rt.host.run_io(share_state.load_window, part.log.path / share_state.DIR,
                                                  group_id, limits)
            except (CorruptState, OSError) as exc:
                raise KaasError(ErrorCode.kafka_storage_error, str(exc)) from None
            if machine is None:
                return None
            machine.restore()
            machine.advance_log_start(part.log_start_offset)
            return _state(part, machine)

    async def initialize(self, group_id: str, topic: str, index: int, start: int) -> None:
        """Make the group's share partition start afresh at ``start`` (nothing in flight);
        a negative ``start`` (Apache's -1, uninitialised) removes its state instead, so the
        next ShareFetch starts where ``share.auto.offset.reset`` says.

        Raises:
            KaasError: as ``read``; NOT_LEADER_OR_FOLLOWER once deposed.
        """
        if start < 0:
            await self.delete(group_id, topic, index)
            return
        rt = self.runtime
        async with rt.locked(group_id, topic, index, forget=True) as (part, _):
            rt.host.check_before_ack(part)
            journal = ShareJournal(part.log.path / share_state.DIR, group_id, part.epoch,
                                   fsync=rt.host.settings.fsync)
            try:
                for failure in await rt.host.run_io(journal.begin, Persisted(start, start)):
                    log.warning("share_journal_not_removed", group=group_id, topic=topic, partition=index,
                                error=failure)
            except OSError as exc:
                log.error("share_state_write_failed", group=group_id, topic=topic, partition=index, error=str(exc))
                raise KaasError(ErrorCode.kafka_storage_error, str(exc)) from None
            finally:
                journal.close()
            rt.host.check_before_ack(part)
        log.info("share_partition_reset", group=group_id, topic=topic, partition=index, start=start,
                 epoch=part.epoch)

    async def delete(self, group_id: str, topic: str, index: int) -> None:
        """Remove the group's share state of the partition (none is no error).

        Raises:
            KaasError: as ``initialize``.
        """
        rt = self.runtime
        async with rt.locked(group_id, topic, index, forget=True) as (part, _):
            rt.host.check_before_ack(part)
            try:
                await rt.host.run_io(partial(share_state.remove, fsync=rt.host.settings.fsync),
                                     part.log.path / share_state.DIR, group_id, part.epoch)
            except NewerWriter as exc:
                raise KaasError(ErrorCode.not_leader_or_follower, str(exc)) from None
            except OSError as exc:
                log.error("share_state_remove_failed", group=group_id, topic=topic, partition=index, error=str(exc))
                raise KaasError(ErrorCode.kafka_storage_error, str(exc)) from None
            rt.host.check_before_ack(part)
        log.info("share_partition_deleted", group=group_id, topic=topic, partition=index, epoch=part.epoch)
