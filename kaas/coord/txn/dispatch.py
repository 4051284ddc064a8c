"""The coordinator's side of a prepared transaction's markers and offset hook.

Write the markers of self-led partitions (``MarkerWriter``), hand the peer-led ones to
their leaders with WriteTxnMarkers over the peer links (``broker.peer_links``; the leader's
side is ``MarkerWriter.apply_request``) and enqueue whatever a link did not deliver
(``storage.markers``); then the offset hook: local groups directly, peer-coordinated ones
over the same links, queued when a link does not take them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import structlog
import trio
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic

from kaas import failpoints
from kaas.coord.ports import LedPartition, MarkerLinks, MarkerResult, TxnBroker
from kaas.coord.txn._common import Stats, coordinator_epoch, hit
from kaas.coord.txn.markers import GROUP_HOOK_PREFIX, MarkerWriter
from kaas.domain.txn import OffsetHook, WriteMarkers
from kaas.errors import KaasError
from kaas.storage.markers import MarkerEntry, MarkerQueue
from kaas.wire import nominal

__all__ = ["MARKERS_KEPT", "Dispatch"]

MARKERS_KEPT = 4096  # WriteTxnMarkers entries kept for reuse (then the cache starts over)

log = structlog.get_logger()


class Dispatch:
    """Markers and offset hooks of this coordinator's prepared transactions."""

    def __init__(self, broker: TxnBroker, writer: MarkerWriter, queue: MarkerQueue,
                 wake_markers: Callable[[], None], stats: Stats,
                 queueing: Callable[[int], None] = lambda producer_id: None) -> None:
        self.broker = broker
        self.writer = writer
        self.queue = queue
        self.wake_markers = wake_markers  # after an entry went to this broker's own queue
        self.stats = stats
        self.queueing = queueing  # before an entry of a producer id is written (QueueApplier.queueing)
        self._markers: dict[tuple[int, int, bool, int, frozenset[tuple[str, int]]], WritableTxnMarker] = {}

    def _links(self) -> MarkerLinks | None:
        """The peer links, when markers go over them (``--marker-rpc``)."""
        if not self.broker.settings.marker_rpc:
            return None
        return self.broker.peer_links

    @staticmethod
    async def _ask_link(links: MarkerLinks, broker_id: int, marker: WritableTxnMarker) -> list[MarkerResult] | None:
        """One marker over the peer link to ``broker_id``: its per-partition codes, or None
        when the link failed (or the ``marker.before_send`` failpoint dropped it)."""
        try:
            skip = failpoints.hit("marker.before_send", to_broker=broker_id)
        except OSError:
            skip = True
        return None if skip else await links.write_markers(broker_id, [marker])

    def _marker(self, wm: WriteMarkers, partitions: set[tuple[str, int]]) -> WritableTxnMarker:
        """The WriteTxnMarkers entry of ``wm`` for ``partitions``: one object per producer,
        epoch, outcome, coordinator epoch and partitions, kept (the link encodes each
        object once: a producer's next transactions over the same partitions send it
        again)."""
        epoch = coordinator_epoch(self.broker)
        key = (wm.producer_id, wm.producer_epoch, wm.commit, epoch, frozenset(partitions))
        marker = self._markers.get(key)
        if marker is None:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for topic, index in sorted(partitions):
                by_topic[topic].append(index)
            marker = WritableTxnMarker(
                producer_id=nominal.producer_id(wm.producer_id), producer_epoch=nominal.i16(wm.producer_epoch),
                transaction_result=wm.commit,
                topics=tuple(WritableTxnMarkerTopic(name=nominal.topic(t),
                                                    partition_indexes=tuple(nominal.i32(i) for i in ix))
                             for t, ix in by_topic.items()),
                coordinator_epoch=nominal.i32(epoch))
            if len(self._markers) >= MARKERS_KEPT:
                self._markers.clear()
            self._markers[key] = marker
        return marker

    async def _send_markers(self, wm: WriteMarkers, remote: dict[int, set[tuple[str, int]]]
                            ) -> dict[int, set[tuple[str, int]]]:
        """Hand peer-led markers to their leaders over the peer links. Returns what is still
        owed, by broker (a failed link, a partition that moved): the caller queues it."""
        links = self._links()
        if links is None:
            return remote
        owed: dict[int, set[tuple[str, int]]] = {}
        if self.broker.id in remote:  # assigned here but not open yet (a takeover): our own queue
            owed[self.broker.id] = remote[self.broker.id]
            remote = {b: parts for b, parts in remote.items() if b != self.broker.id}
            if not remote:
                return owed

        async def send(broker_id: int, partitions: set[tuple[str, int]]) -> None:
            res = await self._ask_link(links, broker_id, self._marker(wm, partitions))
            if res is None:
                owed[broker_id] = set(partitions)
                return
            left = set()
            for tp in partitions:
                code = res[0].get(tp, ErrorCode.unknown_server_error)
                if code == ErrorCode.none:
                    continue
                if code == ErrorCode.unknown_topic_or_partition and not self.writer.partition_exists(*tp):
                    log.warning("txn_marker_partition_gone", transactional_id=wm.transactional_id,
                                topic=tp[0], partition=tp[1])
                    continue
                left.add(tp)
            if left:
                log.info("txn_markers_not_taken", transactional_id=wm.transactional_id, to_broker=broker_id,
                         partitions=len(left))
                owed[broker_id] = left
            self.stats["markers_sent"] += len(partitions) - len(left)

        if len(remote) == 1:
            [(broker_id, partitions)] = remote.items()
            await send(broker_id, partitions)
        else:
            async with trio.open_nursery() as nursery:
                for broker_id, partitions in sorted(remote.items()):
                    nursery.start_soon(send, broker_id, partitions)
        return owed

    async def local(self, wm: WriteMarkers) -> tuple[dict[int, set[tuple[str, int]]], bool] | None:
        """Write the markers of the self-led partitions of a prepared transaction (durable).

        Returns:
            (the peer-led partitions by leader, False when a partition has no leader right
            now), or None when a local marker failed.
        """
        local: list[LedPartition] = []
        remote: dict[int, set[tuple[str, int]]] = defaultdict(set)
        complete = True  # False: a partition has no leader right now; place the rest anyway
        for topic, partition in sorted(wm.partitions):
            leader, part = self.writer.led(topic, partition)
            if part is not None:
                local.append(part)
            elif leader >= 0:
                remote[leader].add((topic, partition))
            elif not self.writer.partition_exists(topic, partition):
                log.warning("txn_marker_partition_gone", transactional_id=wm.transactional_id,
                            topic=topic, partition=partition)
            else:
                log.warning("txn_marker_no_leader", transactional_id=wm.transactional_id,
                            topic=topic, partition=partition)
                complete = False
        failed = await self.writer.write_local(local, wm.producer_id, wm.producer_epoch, wm.commit)
        if failed:
            return None
        try:
            await hit("endtxn.after_local_markers")
        except KaasError:
            return None
        return remote, complete

    async def remote(self, wm: WriteMarkers, remote: dict[int, set[tuple[str, int]]]) -> bool:
        """Hand the peer-led markers to their leaders, queueing what a link did not deliver.
        True when every one was delivered or queued."""
        if not remote:
            return True
        owed = await self._send_markers(wm, remote)
        for broker_id, partitions in sorted(owed.items()):
            entry = MarkerEntry(wm.transactional_id, wm.producer_id, wm.producer_epoch, wm.commit,
                                coordinator_epoch(self.broker), frozenset(partitions), frozenset(), wm.txn_seq)
            self.queueing(wm.producer_id)
            try:
                await self.broker.run_io(self.queue.enqueue, broker_id, entry)
            except OSError as exc:
                log.warning("txn_marker_enqueue_failed", to_broker=broker_id, error=str(exc))
                return False
            log.debug("txn_markers_enqueued", transactional_id=wm.transactional_id, to_broker=broker_id,
                      partitions=len(partitions))
            if broker_id == self.broker.id:
                self.wake_markers()
        try:
            await hit("endtxn.after_enqueue")
        except KaasError:
            return False
        return True

    async def _send_offset_hooks(self, hook: OffsetHook, wm: WriteMarkers, remote: dict[int, set[str]]
                                 ) -> dict[int, set[str]]:
        """Hand the offset hook of peer-coordinated groups to their coordinators over the peer
        links (in a WriteTxnMarkers request, see ``GROUP_HOOK_PREFIX``). Returns what is
        still owed, by broker (a failed link, a group that moved): the caller queues it."""
        links = self._links()
        if links is None:
            return remote
        owed: dict[int, set[str]] = {}
        for broker_id, groups in sorted(remote.items()):
            marker = WritableTxnMarker(
                producer_id=nominal.producer_id(hook.producer_id), producer_epoch=nominal.i16(wm.producer_epoch),
                transaction_result=hook.commit,
                topics=tuple(WritableTxnMarkerTopic(name=nominal.topic(GROUP_HOOK_PREFIX + g),
                                                    partition_indexes=(nominal.i32(0),))
                             for g in sorted(groups)),
                coordinator_epoch=nominal.i32(coordinator_epoch(self.broker)))
            res = await self._ask_link(links, broker_id, marker)
            if res is None:
                owed[broker_id] = set(groups)
                continue
            left = {g for g in groups if res[0].get((GROUP_HOOK_PREFIX + g, 0)) != ErrorCode.none}
            if left:
                log.info("txn_offset_hooks_not_taken", transactional_id=wm.transactional_id, to_broker=broker_id,
                         groups=len(left))
                owed[broker_id] = left
            self.stats["offset_hooks_sent"] += len(groups) - len(left)
        return owed

    async def offset_hook(self, hook: OffsetHook, wm: WriteMarkers) -> bool:
        """Commit/discard staged offsets: directly for local groups, over the peer link for
        the others, queued on the volume for what a link did not take."""
        remote: dict[int, set[str]] = defaultdict(set)
        for group in sorted(hook.groups):
            code = await self.writer.group_hook(group, hook.producer_id, hook.commit)
            if code == ErrorCode.none:
                continue
            if code != ErrorCode.not_coordinator:
                return False
            owner = self.broker.group_owner(group)
            if owner is None:
                log.warning("txn_offset_hook_no_coordinator", group=group)
                return False
            remote[owner].add(group)
        for broker_id, groups in sorted((await self._send_offset_hooks(hook, wm, remote)).items()):
            entry = MarkerEntry(wm.transactional_id, hook.producer_id, wm.producer_epoch, hook.commit,
                                coordinator_epoch(self.broker), frozenset(), frozenset(groups), wm.txn_seq)
            self.queueing(hook.producer_id)
            try:
                await self.broker.run_io(self.queue.enqueue_groups, broker_id, entry)
            except OSError as exc:
                log.warning("txn_offset_hook_enqueue_failed", to_broker=broker_id, error=str(exc))
                return False
            if broker_id == self.broker.id:
                self.wake_markers()
        return True
