"""Writing markers on the partitions this broker leads: for its own coordinator's
transactions (``write_local``), for a peer coordinator's WriteTxnMarkers (``apply_request``,
the leader's side of ``kaas.peers``) and for the marker queue's entries; and the offset
hook of a group this broker coordinates (``group_hook``), whichever way it arrived.

Each marker is appended on the trio thread (``Partition.append_control``) with no await
in between, then waited durable (``wait_durable``), one wait per partition.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog
import trio
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic

from kaas import failpoints
from kaas.coord.ports import LedPartition, MarkerResult, TxnBroker
from kaas.coord.txn._common import Stats, coordinator_epoch
from kaas.coord.txn.verify import Verifier
from kaas.errors import CorruptState, KaasError

__all__ = ["GROUP_HOOK_PREFIX", "MarkerWriter"]

log = structlog.get_logger()

# WriteTxnMarkers between kaas brokers also carries the offset hook of a group the receiver
# coordinates (Apache's marker on the group's __consumer_offsets partition): a "topic"
# named GROUP_HOOK_PREFIX + group id, partition 0. A colon is not allowed in a topic name,
# so the name cannot be a topic's.
GROUP_HOOK_PREFIX = "__kaas_group:"


class MarkerWriter:
    """Markers on led partitions, and offset hooks of groups coordinated here."""

    def __init__(self, broker: TxnBroker, verifier: Verifier, stats: Stats) -> None:
        self.broker = broker
        self.verifier = verifier
        self.stats = stats

    def partition_exists(self, topic: str, partition: int) -> bool:
        topics = self.broker.topics
        meta = topics.get(topic)
        if meta is None:
            try:
                topics.refresh()
            except (OSError, CorruptState) as exc:
                log.warning("txn_topics_unreadable", error=str(exc))
                return True  # unsure: keep the marker owed rather than drop it
            meta = topics.get(topic)
        return meta is not None and 0 <= partition < meta.partitions

    def led(self, topic: str, partition: int) -> tuple[int, LedPartition | None]:
        """(leader id, the open Partition when this broker leads it, else None)."""
        leader, _epoch = self.broker.leader(topic, partition)
        part = self.broker.partitions.get((topic, partition))
        if leader == self.broker.id and part is not None and not part.closed:
            return leader, part
        return leader, None

    def _append(self, part: LedPartition, producer_id: int, producer_epoch: int, commit: bool) -> int:
        """Append one marker (skipped when it would change nothing). Returns the offset to
        wait durable for."""
        self.verifier.forget(producer_id, part)
        entry = part.log.producers.get(producer_id)
        if entry is not None and entry.txn_first_offset is None and entry.epoch >= producer_epoch:
            # No transaction of this pid is open here and the epoch is already at least the
            # marker's: a marker would change nothing (a retry, or a partition added
            # without data). Only wait for what is already written to be durable.
            return part.log.log_end_offset
        if failpoints.hit("marker.before_append", commit=commit, topic=part.topic, partition=part.index):
            log.error("txn_marker_dropped_by_failpoint", topic=part.topic, partition=part.index,
                      producer_id=producer_id, commit=commit)
            return part.log.log_end_offset
        res = part.append_control(producer_id, producer_epoch, commit, coordinator_epoch(self.broker))
        if res is None:
            return part.log.log_end_offset
        self.stats["markers_written"] += 1
        return res.next_offset

    def _append_all(self, parts: list[LedPartition], producer_id: int, producer_epoch: int, commit: bool,
                    failed: dict[LedPartition, ErrorCode]) -> list[tuple[LedPartition, int]]:
        """Append the markers on led partitions, with no await in between. Returns the
        (partition, offset) pairs to wait durable for; failures go into ``failed``."""
        waits: list[tuple[LedPartition, int]] = []
        for part in parts:
            try:
                waits.append((part, self._append(part, producer_id, producer_epoch, commit)))
            except KaasError as exc:
                log.warning("txn_marker_append_failed", topic=part.topic, partition=part.index,
                            producer_id=producer_id, error=exc.code.name)
                failed[part] = exc.code
        return waits

    async def _await_durable(self, waits: list[tuple[LedPartition, int]], producer_id: int,
                             failed: dict[LedPartition, ErrorCode]) -> None:
        """Wait until every (partition, offset) is durable; failures go into ``failed``. On
        tmpfs one after the other (each fsync runs inline: nothing to overlap, and a task
        per partition cost more than the fsync), elsewhere at once."""
        async def wait(part: LedPartition, offset: int) -> None:
            try:
                await part.wait_durable(offset)
            except KaasError as exc:
                log.warning("txn_marker_not_durable", topic=part.topic, partition=part.index,
                            producer_id=producer_id, error=exc.code.name)
                failed[part] = exc.code

        if len(waits) == 1 or self.broker.memory_backed:
            for part, offset in waits:
                await wait(part, offset)
        elif waits:
            async with trio.open_nursery() as nursery:
                for part, offset in waits:
                    nursery.start_soon(wait, part, offset)

    async def write_local(self, parts: list[LedPartition], producer_id: int, producer_epoch: int,
                          commit: bool) -> list[LedPartition]:
        """Write markers on led partitions and wait until durable. Returns the failed ones."""
        failed: dict[LedPartition, ErrorCode] = {}
        waits = self._append_all(parts, producer_id, producer_epoch, commit, failed)
        await self._await_durable(waits, producer_id, failed)
        return list(failed)

    async def apply_request(self, markers: Sequence[WritableTxnMarker]) -> list[MarkerResult]:
        """WriteTxnMarkers from a peer's coordinator: append every marker on the partitions
        this broker leads before the first await (so a request is applied when it is read,
        never later), then wait until they are durable. Per marker, the code of each
        partition: NONE, NOT_LEADER_OR_FOLLOWER (not led here: the sender queues it),
        UNKNOWN_TOPIC_OR_PARTITION (no such partition any more), or the append's error."""
        failed: dict[LedPartition, ErrorCode] = {}
        codes: list[MarkerResult] = []
        owed: list[list[LedPartition]] = []
        hooks: list[list[WritableTxnMarkerTopic]] = []
        waits: list[tuple[LedPartition, int]] = []
        for m in markers:
            mine: MarkerResult = {}
            parts: list[LedPartition] = []
            hooks.append([t for t in m.topics if t.name.startswith(GROUP_HOOK_PREFIX)])
            for t in m.topics:
                if t.name.startswith(GROUP_HOOK_PREFIX):
                    continue
                for index in t.partition_indexes:
                    _leader, part = self.led(t.name, index)
                    if part is not None:
                        parts.append(part)
                        mine[(t.name, index)] = ErrorCode.none
                    elif self.partition_exists(t.name, index):
                        mine[(t.name, index)] = ErrorCode.not_leader_or_follower
                    else:
                        mine[(t.name, index)] = ErrorCode.unknown_topic_or_partition
            waits += self._append_all(parts, m.producer_id, m.producer_epoch, m.transaction_result, failed)
            codes.append(mine)
            owed.append(parts)
        # one durability wait per partition: the highest offset any marker needs
        highest: dict[LedPartition, int] = {}
        for part, offset in waits:
            highest[part] = max(offset, highest.get(part, 0))
        await self._await_durable(list(highest.items()), -1, failed)
        for mine, parts in zip(codes, owed, strict=True):
            for part in parts:
                if part in failed:
                    mine[(part.topic, part.index)] = failed[part]
        for m, mine, group_topics in zip(markers, codes, hooks, strict=True):
            for t in group_topics:
                code = await self.group_hook(t.name[len(GROUP_HOOK_PREFIX):], m.producer_id,
                                             m.transaction_result)
                for index in t.partition_indexes:
                    mine[(t.name, index)] = code
        self.stats["marker_requests_applied"] += 1
        return codes

    async def group_hook(self, group: str, producer_id: int, commit: bool) -> ErrorCode:
        """The offset hook of one group, whichever way it arrived (this coordinator's own
        EndTxn, a peer's link, a queue entry): commit or discard the group's staged offsets
        of ``producer_id`` when this broker coordinates the group. NOT_COORDINATOR when it
        does not (send it on); another code when it cannot write the group now (keep it)."""
        if not self.broker.owns_group(group):
            return ErrorCode.not_coordinator
        try:
            await self.broker.groups.complete_txn(group, producer_id, commit)
        except KaasError as exc:
            log.warning("txn_offset_hook_failed", group=group, error=exc.code.name)
            return exc.code
        self.stats["offset_hooks_applied"] += 1
        return ErrorCode.none
