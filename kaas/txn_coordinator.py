"""The transaction coordinator runtime (seed "Transactions & idempotence", DESIGN section 7).

Carries out the effects of the pure ``domain.txn`` machine on the shared volume:

* slot files ``txn_state/slot-N.json`` (``storage.txn_store``), read afresh for every
  operation and written only by the slot's owner (``broker.owns_slot``);
* two-phase EndTxn: Persist Prepare*, write the markers of self-led partitions
  (``Partition.append_control`` + ``wait_durable``), hand the peer-led ones to their
  leaders with WriteTxnMarkers (``kaas.peers``; ``apply_marker_request`` is the leader's
  side) and enqueue whatever a link did not deliver (``storage.markers``), then the offset
  hook (local groups directly, peer-coordinated ones over the same links, queued when a
  link does not take them) and the Complete* transition. On a running broker the client is answered
  once Prepare* is durable and the rest runs in a background task (``_finish``); without
  one, any dispatch failure answers COORDINATOR_NOT_AVAILABLE and leaves it prepared;
* fencing: a rejoin's epoch bump is applied to every led partition that knows the pid
  and appended to this broker's fence log (``storage.fences``); peers poll the logs;
* KIP-890 part 1 produce verification (``verify_partition``);
* background loops, started by ``install``: the marker watcher (own queue every 2 s, on a
  wake, or when a 50 ms stat of the queue directory shows a change; claims the queues of
  dead brokers), the fence watcher (500 ms), and the 10 s timeout reaper + marker
  reconcile, both gated on slot ownership (``$KAAS_TXN_SWEEP_MS`` overrides the tick).

Concurrency: one ``trio.Lock`` per transactional id serialises every operation on that id
(handlers, reaper, reconcile); a lock per slot serialises the read-modify-write of a slot
file, which replaces only the entry of the id being changed.

Extra rule (not in the seed, needed because a queued marker counts as dispatched): a new
transaction of a pid (AddPartitions/AddOffsets from Empty/Complete*, or an InitProducerId
bump) is answered CONCURRENT_TRANSACTIONS while any queue entry of that pid is still
outstanding. Otherwise the first batches of the next transaction could land before the
previous transaction's marker on a peer-led partition and be committed or aborted with it.
"""

from __future__ import annotations

import os
import re
import time
import weakref
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import structlog
import trio
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic

from kaas import dirwatch, failpoints
from kaas.aio import held
from kaas.domain import txn as dtxn
from kaas.domain.routing import TXN_SLOTS, txn_slot
from kaas.domain.txn import Fence, OffsetHook, Persist, Reply, TxnMetadata, TxnResult, TxnState, WriteMarkers
from kaas.errors import CorruptState, KaasError
from kaas.storage.fences import FenceLog, FenceReader
from kaas.storage.markers import MarkerEntry, MarkerQueue
from kaas.storage.txn_store import TxnStore

__all__ = [
    "FENCE_POLL_S",
    "MARKER_POLL_S",
    "MARKER_STAT_S",
    "SWEEP_INTERVAL_MS",
    "TxnCoordinator",
    "install",
    "sweep_interval_ms",
]

log = structlog.get_logger()

# WriteTxnMarkers between kaas brokers also carries the offset hook of a group the receiver
# coordinates (Apache's marker on the group's __consumer_offsets partition): a "topic"
# named GROUP_HOOK_PREFIX + group id, partition 0. A colon is not allowed in a topic name,
# so the name cannot be a topic's.
GROUP_HOOK_PREFIX = "__kaas_group:"

Described = tuple[str, ErrorCode, dtxn.TxnDescription | None]

SWEEP_INTERVAL_MS = 10_000
"""Reaper + reconcile tick (Apache transaction.abort.timed.out.transaction.cleanup.interval.ms)."""
SWEEP_ENV = "KAAS_TXN_SWEEP_MS"
RETRY_SWEEP_S = 0.02  # the first retry of a sweep that left a prepared or timed-out transaction unfinished
MARKER_POLL_S = 2.0
MARKER_STAT_S = 0.05
BEGIN_WAIT_S = 0.25  # how long a new transaction waits for the last one's queued markers
BEGIN_POLL_S = 0.002  # the longest pause between two looks at the queue (first: 0.2 ms)
FINISH_RETRY_S = 0.05  # an early-answered EndTxn's background half retries after this, doubling
FINISH_RETRY_MAX_S = 1.6  # ... up to this pause; then the sweep takes over
FENCE_POLL_S = 0.5


def sweep_interval_ms() -> int:
    """The reaper/reconcile tick: ``SWEEP_INTERVAL_MS``, or ``$KAAS_TXN_SWEEP_MS`` (tests)."""
    raw = os.environ.get(SWEEP_ENV)
    if raw:
        try:
            value = int(raw)
        except ValueError:
            log.warning("txn_sweep_env_ignored", value=raw)
        else:
            if value > 0:
                return value
    return SWEEP_INTERVAL_MS


def now_ms() -> int:
    return int(time.time() * 1000)


async def _hit(name: str) -> None:
    """Fire a named failpoint (DESIGN section 9); an ``error`` action becomes the retriable
    COORDINATOR_NOT_AVAILABLE, like a failing disk would."""
    try:
        await failpoints.hit_async(name)
    except OSError as exc:
        raise KaasError(ErrorCode.coordinator_not_available, str(exc)) from None


def install(broker: Any, nursery: trio.Nursery) -> TxnCoordinator:
    """Create the coordinator, set it as ``broker.txn`` and start its background loops.

    Idempotent: when ``broker.txn`` is set already, that coordinator is returned.

    Args:
        broker: the ``Broker`` (partitions, ownership, groups, layout).
        nursery: the broker's root nursery.

    Returns:
        The installed coordinator.
    """
    if broker.txn is not None:
        return broker.txn
    coordinator = TxnCoordinator(broker)
    broker.txn = coordinator
    nursery.start_soon(coordinator.serve)
    return coordinator


class TxnCoordinator:
    """Transaction coordinator of one broker (``broker.txn``)."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        s = broker.settings
        layout = broker.layout
        self.store = TxnStore(layout.txn_state, broker.owns_slot, fsync=s.fsync)
        self.queue = MarkerQueue(layout.marker_queue, fsync=s.fsync)
        self.fence_log = FenceLog(layout.fence_log(broker.id), fsync=s.fsync)
        self.sweep_ms = sweep_interval_ms()
        self._sweep_wake = trio.Event()
        self._sweep_again_soon = False
        self._id_locks: dict[str, list[Any]] = {}
        self._slot_locks = [trio.Lock() for _ in range(TXN_SLOTS)]
        # pid -> {(epoch, topic, partition): Partition} of positive KIP-890 verifications
        self._verified: dict[int, dict[tuple[int, str, int], Any]] = {}
        # highest fenced epoch per pid seen in any fence log (applied on takeover too)
        self._fences: dict[int, int] = {}
        self._fenced_parts: weakref.WeakSet[Any] = weakref.WeakSet()  # partitions seen by a fence poll
        self._fence_reader: FenceReader | None = None
        self._corrupt: dict[Any, str] = {}
        self._slot_cache: dict[int, dtxn.SlotState] = {}
        self._unwritten: set[int] = set()  # slots whose cached state is newer than the file
        self._marker_wake = trio.Event()
        self._doorbell_live = False  # the inotify watch on this broker's queue is open
        self._nursery: trio.Nursery | None = None  # for the background half of EndTxn
        self._inflight: dict[str, trio.Event] = {}  # txn id -> its EndTxn's background half is done
        self.stats = {"markers_written": 0, "entries_applied": 0, "fences_applied": 0,
                      "reaped": 0, "reconciled": 0, "markers_sent": 0, "marker_requests_applied": 0,
                      "answered_before_markers": 0, "offset_hooks_sent": 0, "offset_hooks_applied": 0}

    # ------------------------------------------------------------------ lifecycle

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the marker watcher, the fence watcher and the reaper/reconcile forever."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.serve_fences)
            nursery.start_soon(self.serve_markers)
            nursery.start_soon(self.serve_sweeps)
            nursery.start_soon(self.serve_queue_doorbell)
            task_status.started()

    async def serve_queue_doorbell(self) -> None:
        """Wake the marker watcher as soon as an entry lands in ``to-<self>/`` (inotify on a
        local data directory; on NFS this sees nothing and the stat poll does the work).
        A commit touching a peer-led partition then costs the peer a millisecond, not a poll
        interval, before the producer's next transaction may begin."""
        if not self.broker.settings.inotify:
            return
        watch = dirwatch.open_watch(self.broker.layout.marker_dir(self.broker.id))
        if watch is None:
            return
        self._doorbell_live = True
        try:
            while True:
                await watch.wait()
                self.wake_markers()
        finally:
            self._doorbell_live = False
            watch.close()

    def wake_markers(self) -> None:
        """Run the marker watcher now (after enqueueing to this broker's own queue)."""
        self._marker_wake.set()

    # ------------------------------------------------------------------ helpers

    @property
    def coordinator_epoch(self) -> int:
        """The coordinator epoch written into markers: the controller epoch, else 0."""
        value = getattr(self.broker, "controller_epoch", 0)
        if callable(value):
            value = value()
        return value if isinstance(value, int) and 0 <= value < 2**31 else 0

    def owned_slot(self, transactional_id: str) -> int:
        """The slot of ``transactional_id``.

        Raises:
            KaasError: NOT_COORDINATOR when this broker does not own it.
        """
        slot = txn_slot(transactional_id)
        if not self.broker.owns_slot(slot):
            raise KaasError(ErrorCode.not_coordinator)
        return slot

    def _still_owned(self, transactional_id: str) -> int:
        """``owned_slot`` again, after a wait (the id's lock, the last EndTxn's background
        half, queued markers): a broker paused or starved meanwhile wakes up deposed, with
        its lease lapsed, and must send the client to the new coordinator at once rather
        than act on what it held (DESIGN section 4, hand-off rule).

        Raises:
            KaasError: NOT_COORDINATOR.
        """
        return self.owned_slot(transactional_id)

    @asynccontextmanager
    async def _locked(self, transactional_id: str) -> AsyncIterator[None]:
        holder = self._id_locks.get(transactional_id)
        if holder is None:
            holder = self._id_locks[transactional_id] = [trio.Lock(), 0]
        holder[1] += 1
        try:
            async with held(holder[0]):
                yield
        finally:
            holder[1] -= 1
            if holder[1] == 0:
                del self._id_locks[transactional_id]

    def _report_corrupt(self, key: Any, exc: Exception) -> None:
        if self._corrupt.get(key) != str(exc):
            self._corrupt[key] = str(exc)
            log.error("txn_state_unreadable", key=str(key), error=str(exc))

    def forget_cache(self) -> None:
        """Drop every cached slot (our lease lapsed: another broker may have written)."""
        self._slot_cache.clear()
        self._unwritten.clear()

    def drop_unowned_slots(self) -> None:
        """Called after each assignment is applied: forget slots that are not ours any more,
        so a slot that comes back is read afresh from the file its interim owner wrote."""
        for slot in [s for s in self._slot_cache if not self.broker.owns_slot(s)]:
            del self._slot_cache[slot]
            self._unwritten.discard(slot)

    async def _load(self, slot: int, *, fill_cache: bool = False) -> dtxn.SlotState:
        """The slot's state. The coordinator is the slot file's only writer, so while it owns
        the slot its last write is the file's content: served from memory, read from the file
        on the first use after a takeover. Only callers holding the slot lock fill the cache
        (``fill_cache``): a read racing a write must not put an older state back."""
        cached = self._slot_cache.get(slot)
        if cached is not None and self.broker.owns_slot(slot):
            return cached
        try:
            state = await self.broker.run_io(self.store.load, slot)
        except (CorruptState, OSError) as exc:
            self._report_corrupt(("slot", slot), exc)
            raise KaasError(ErrorCode.coordinator_not_available,
                            f"transaction slot {slot} is unreadable") from None
        if self._corrupt.pop(("slot", slot), None) is not None:
            log.info("txn_slot_readable_again", slot=slot)
        if fill_cache and self.broker.owns_slot(slot):
            self._slot_cache[slot] = state
        return state

    async def _get(self, slot: int, transactional_id: str) -> TxnMetadata | None:
        return (await self._load(slot)).get(transactional_id)

    async def _persist(self, slot: int, meta: TxnMetadata, *, deferred: bool = False) -> None:
        """Write ``meta`` into its slot file (tmp + fsync + rename).

        ``deferred`` (only for the Complete* transition): update the owner's in-memory slot
        and leave the file write to the next write of the slot (normally the producer's
        next AddPartitions) or to the sweep. The durability pivot is Prepare*: a crash
        before the Complete* reaches the file leaves Prepare*, which the next owner
        finishes again in the same direction (markers and the offset hook are idempotent),
        so the outcome the client was told cannot change. One file write per transaction
        saved."""
        async with held(self._slot_locks[slot]):
            state = await self._load(slot, fill_cache=True)
            new_state = state.with_entry(meta)
            if deferred and slot in self._slot_cache and self.broker.owns_slot(slot):
                self._slot_cache[slot] = new_state
                self._unwritten.add(slot)
                return
            await _hit("slot.before_write")
            try:
                await self.broker.run_io(self.store.save, slot, new_state)
            except OSError as exc:
                self._slot_cache.pop(slot, None)
                self._unwritten.discard(slot)
                log.error("txn_slot_write_failed", slot=slot, error=str(exc))
                raise KaasError(ErrorCode.coordinator_not_available, str(exc)) from None
            except BaseException:
                self._slot_cache.pop(slot, None)  # unknown whether the file changed
                self._unwritten.discard(slot)
                raise
            self._slot_cache[slot] = new_state
            self._unwritten.discard(slot)
        log.debug("txn_state", transactional_id=meta.transactional_id, state=meta.state.value,
                  producer_id=meta.producer_id, producer_epoch=meta.producer_epoch, txn_seq=meta.txn_seq)

    async def wait_finishing(self, timeout: float) -> bool:
        """Wait until no early-answered EndTxn is still being finished in the background
        (a drain, before ``flush_slots``); False when ``timeout`` ran out first."""
        with trio.move_on_after(timeout):
            while self._inflight:
                await next(iter(self._inflight.values())).wait()
            return True
        return False

    async def flush_slots(self) -> None:
        """Write the slots whose last change (a Complete*) is only in memory."""
        for slot in sorted(self._unwritten):
            async with self._slot_locks[slot]:
                state = self._slot_cache.get(slot)
                if slot not in self._unwritten or state is None or not self.broker.owns_slot(slot):
                    self._unwritten.discard(slot)
                    continue
                try:
                    await self.broker.run_io(self.store.save, slot, state)
                except (OSError, KaasError) as exc:
                    log.warning("txn_slot_flush_failed", slot=slot, error=str(exc))
                    continue
                self._unwritten.discard(slot)

    async def _carry_out(self, slot: int, res: TxnResult, *, answer_early: bool = False) -> ErrorCode:
        """Carry out a result's effects in order; returns the code to answer with
        (``answer_early``: see ``_finish``)."""
        for effect in res.effects:
            if isinstance(effect, Persist):
                await self._persist(slot, effect.meta)
                if effect.meta.state.is_prepared:
                    await _hit("endtxn.after_prepare")
            elif isinstance(effect, Fence):
                await self._fence(effect.producer_id, effect.producer_epoch)
            elif isinstance(effect, WriteMarkers):
                code = await self._finish(slot, effect, answer_early=answer_early)
                if res.reply is None:
                    return code
            elif isinstance(effect, Reply):
                return effect.error_code
            else:  # OffsetHook only comes from complete_end_txn, handled by _finish
                raise AssertionError(f"unexpected effect {effect!r}")
        return res.error_code

    async def _markers_pending(self, producer_id: int) -> bool:
        try:
            return bool(await self.broker.run_io(self.queue.pending_for_pid, producer_id))
        except OSError as exc:
            log.warning("txn_marker_queue_unreadable", error=str(exc))
            return True

    def _partition_exists(self, topic: str, partition: int) -> bool:
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

    def _led(self, topic: str, partition: int) -> tuple[int, Any]:
        """(leader id, the open Partition when this broker leads it, else None)."""
        leader, _epoch = self.broker.leader(topic, partition)
        part = self.broker.partitions.get((topic, partition))
        if leader == self.broker.id and part is not None and not part.closed:
            return leader, part
        return leader, None

    # ------------------------------------------------------------------ markers

    def _append_marker(self, part: Any, producer_id: int, producer_epoch: int, commit: bool) -> int:
        """Append one marker (skipped when it would change nothing). Returns the offset to
        wait durable for."""
        self._forget_verified(producer_id, part)
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
        res = part.append_control(producer_id, producer_epoch, commit, self.coordinator_epoch)
        if res is None:
            return part.log.log_end_offset
        self.stats["markers_written"] += 1
        return res.next_offset

    def _append_markers(self, parts: list[Any], producer_id: int, producer_epoch: int, commit: bool,
                        failed: dict[Any, ErrorCode]) -> list[tuple[Any, int]]:
        """Append the markers on led partitions, with no await in between. Returns the
        (partition, offset) pairs to wait durable for; failures go into ``failed``."""
        waits: list[tuple[Any, int]] = []
        for part in parts:
            try:
                waits.append((part, self._append_marker(part, producer_id, producer_epoch, commit)))
            except KaasError as exc:
                log.warning("txn_marker_append_failed", topic=part.topic, partition=part.index,
                            producer_id=producer_id, error=exc.code.name)
                failed[part] = exc.code
        return waits

    async def _await_durable(self, waits: list[tuple[Any, int]], producer_id: int,
                             failed: dict[Any, ErrorCode]) -> None:
        """Wait until every (partition, offset) is durable; failures go into ``failed``."""
        async def wait(part: Any, offset: int) -> None:
            try:
                await part.wait_durable(offset)
            except KaasError as exc:
                log.warning("txn_marker_not_durable", topic=part.topic, partition=part.index,
                            producer_id=producer_id, error=exc.code.name)
                failed[part] = exc.code

        if len(waits) == 1:
            await wait(*waits[0])
        elif waits:
            async with trio.open_nursery() as nursery:
                for part, offset in waits:
                    nursery.start_soon(wait, part, offset)

    async def _write_local_markers(self, parts: list[Any], producer_id: int, producer_epoch: int,
                                   commit: bool) -> list[Any]:
        """Write markers on led partitions and wait until durable. Returns the failed ones."""
        failed: dict[Any, ErrorCode] = {}
        waits = self._append_markers(parts, producer_id, producer_epoch, commit, failed)
        await self._await_durable(waits, producer_id, failed)
        return list(failed)

    async def apply_marker_request(self, markers: Sequence[Any]) -> list[dict[tuple[str, int], ErrorCode]]:
        """WriteTxnMarkers from a peer's coordinator: append every marker on the partitions
        this broker leads before the first await (so a request is applied when it is read,
        never later), then wait until they are durable. Per marker, the code of each
        partition: NONE, NOT_LEADER_OR_FOLLOWER (not led here: the sender queues it),
        UNKNOWN_TOPIC_OR_PARTITION (no such partition any more), or the append's error."""
        failed: dict[Any, ErrorCode] = {}
        codes: list[dict[tuple[str, int], ErrorCode]] = []
        owed: list[list[Any]] = []
        hooks: list[list[Any]] = []
        waits: list[tuple[Any, int]] = []
        for m in markers:
            mine: dict[tuple[str, int], ErrorCode] = {}
            parts: list[Any] = []
            hooks.append([t for t in m.topics if t.name.startswith(GROUP_HOOK_PREFIX)])
            for t in m.topics:
                if t.name.startswith(GROUP_HOOK_PREFIX):
                    continue
                for index in t.partition_indexes:
                    _leader, part = self._led(t.name, index)
                    if part is not None:
                        parts.append(part)
                        mine[(t.name, index)] = ErrorCode.none
                    elif self._partition_exists(t.name, index):
                        mine[(t.name, index)] = ErrorCode.not_leader_or_follower
                    else:
                        mine[(t.name, index)] = ErrorCode.unknown_topic_or_partition
            waits += self._append_markers(parts, m.producer_id, m.producer_epoch, m.transaction_result, failed)
            codes.append(mine)
            owed.append(parts)
        # one durability wait per partition: the highest offset any marker needs
        highest: dict[Any, int] = {}
        for part, offset in waits:
            highest[part] = max(offset, highest.get(part, 0))
        await self._await_durable(list(highest.items()), -1, failed)
        for mine, parts in zip(codes, owed, strict=True):
            for part in parts:
                if part in failed:
                    mine[(part.topic, part.index)] = failed[part]
        for m, mine, group_topics in zip(markers, codes, hooks, strict=True):
            for t in group_topics:
                code = await self._complete_group_hook(t.name[len(GROUP_HOOK_PREFIX):], m.producer_id,
                                                       m.transaction_result)
                for index in t.partition_indexes:
                    mine[(t.name, index)] = code
        self.stats["marker_requests_applied"] += 1
        return codes

    async def _complete_group_hook(self, group: str, producer_id: int, commit: bool) -> ErrorCode:
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

    @staticmethod
    async def _ask_link(links: Any, broker_id: int, marker: Any) -> list[dict[tuple[str, int], ErrorCode]] | None:
        """One marker over the peer link to ``broker_id``: its per-partition codes, or None
        when the link failed (or the ``marker.before_send`` failpoint dropped it)."""
        try:
            skip = failpoints.hit("marker.before_send", to_broker=broker_id)
        except OSError:
            skip = True
        return None if skip else await links.write_markers(broker_id, [marker])

    async def _send_markers(self, wm: WriteMarkers, remote: dict[int, set[tuple[str, int]]]
                            ) -> dict[int, set[tuple[str, int]]]:
        """Hand peer-led markers to their leaders over the peer links. Returns what is still
        owed, by broker (a failed link, a partition that moved): the caller queues it."""
        links = getattr(self.broker, "peer_links", None)
        if links is None or not self.broker.settings.marker_rpc:
            return remote
        owed: dict[int, set[tuple[str, int]]] = {}
        if self.broker.id in remote:  # assigned here but not open yet (a takeover): our own queue
            owed[self.broker.id] = remote[self.broker.id]
            remote = {b: parts for b, parts in remote.items() if b != self.broker.id}
            if not remote:
                return owed

        async def send(broker_id: int, partitions: set[tuple[str, int]]) -> None:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for topic, index in sorted(partitions):
                by_topic[topic].append(index)
            marker = WritableTxnMarker(
                producer_id=wm.producer_id, producer_epoch=wm.producer_epoch, transaction_result=wm.commit,
                topics=tuple(WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ix))
                             for t, ix in by_topic.items()),
                coordinator_epoch=self.coordinator_epoch)
            res = await self._ask_link(links, broker_id, marker)
            if res is None:
                owed[broker_id] = set(partitions)
                return
            left = set()
            for tp in partitions:
                code = res[0].get(tp, ErrorCode.unknown_server_error)
                if code == ErrorCode.none:
                    continue
                if code == ErrorCode.unknown_topic_or_partition and not self._partition_exists(*tp):
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

    async def _dispatch_local(self, wm: WriteMarkers) -> tuple[dict[int, set[tuple[str, int]]], bool] | None:
        """Write the markers of the self-led partitions of a prepared transaction (durable).

        Returns:
            (the peer-led partitions by leader, False when a partition has no leader right
            now), or None when a local marker failed.
        """
        local: list[Any] = []
        remote: dict[int, set[tuple[str, int]]] = defaultdict(set)
        complete = True  # False: a partition has no leader right now; place the rest anyway
        for topic, partition in sorted(wm.partitions):
            leader, part = self._led(topic, partition)
            if part is not None:
                local.append(part)
            elif leader >= 0:
                remote[leader].add((topic, partition))
            elif not self._partition_exists(topic, partition):
                log.warning("txn_marker_partition_gone", transactional_id=wm.transactional_id,
                            topic=topic, partition=partition)
            else:
                log.warning("txn_marker_no_leader", transactional_id=wm.transactional_id,
                            topic=topic, partition=partition)
                complete = False
        failed = await self._write_local_markers(local, wm.producer_id, wm.producer_epoch, wm.commit)
        if failed:
            return None
        try:
            await _hit("endtxn.after_local_markers")
        except KaasError:
            return None
        return remote, complete

    async def _dispatch_remote(self, wm: WriteMarkers, remote: dict[int, set[tuple[str, int]]]) -> bool:
        """Hand the peer-led markers to their leaders, queueing what a link did not deliver.
        True when every one was delivered or queued."""
        if not remote:
            return True
        owed = await self._send_markers(wm, remote)
        for broker_id, partitions in sorted(owed.items()):
            entry = MarkerEntry(wm.transactional_id, wm.producer_id, wm.producer_epoch, wm.commit,
                                self.coordinator_epoch, frozenset(partitions), frozenset(), wm.txn_seq)
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
            await _hit("endtxn.after_enqueue")
        except KaasError:
            return False
        return True

    async def _send_offset_hooks(self, hook: OffsetHook, wm: WriteMarkers, remote: dict[int, set[str]]
                                 ) -> dict[int, set[str]]:
        """Hand the offset hook of peer-coordinated groups to their coordinators over the peer
        links (in a WriteTxnMarkers request, see ``GROUP_HOOK_PREFIX``). Returns what is
        still owed, by broker (a failed link, a group that moved): the caller queues it."""
        links = getattr(self.broker, "peer_links", None)
        if links is None or not self.broker.settings.marker_rpc:
            return remote
        owed: dict[int, set[str]] = {}
        for broker_id, groups in sorted(remote.items()):
            marker = WritableTxnMarker(
                producer_id=hook.producer_id, producer_epoch=wm.producer_epoch, transaction_result=hook.commit,
                topics=tuple(WritableTxnMarkerTopic(name=GROUP_HOOK_PREFIX + g, partition_indexes=(0,))
                             for g in sorted(groups)),
                coordinator_epoch=self.coordinator_epoch)
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

    async def _offset_hook(self, hook: OffsetHook, wm: WriteMarkers) -> bool:
        """Commit/discard staged offsets: directly for local groups, over the peer link for
        the others, queued on the volume for what a link did not take."""
        remote: dict[int, set[str]] = defaultdict(set)
        for group in sorted(hook.groups):
            code = await self._complete_group_hook(group, hook.producer_id, hook.commit)
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
                                self.coordinator_epoch, frozenset(), frozenset(groups), wm.txn_seq)
            try:
                await self.broker.run_io(self.queue.enqueue_groups, broker_id, entry)
            except OSError as exc:
                log.warning("txn_offset_hook_enqueue_failed", to_broker=broker_id, error=str(exc))
                return False
            if broker_id == self.broker.id:
                self.wake_markers()
        return True

    async def _finish(self, slot: int, wm: WriteMarkers, *, answer_early: bool = False) -> ErrorCode:
        """Dispatch a prepared transaction's markers, then complete it (hook + Persist).

        ``answer_early`` (EndTxn from a client, on a running broker): answer NONE at once
        and write the markers and complete in a background task, as Apache answers EndTxn
        once PrepareCommit/PrepareAbort is written. The Prepare* on file is the decision;
        every other operation on the id waits for the background task (``_settled``), and
        it retries, then leaves the rest to the sweep."""
        if answer_early and self._nursery is not None:
            done = trio.Event()
            self._inflight[wm.transactional_id] = done
            self._nursery.start_soon(self._finish_later, slot, wm, done)
            self.stats["answered_before_markers"] += 1
            return ErrorCode.none
        placed = await self._dispatch_local(wm)
        if placed is None:
            return ErrorCode.coordinator_not_available
        remote, complete = placed
        if not await self._dispatch_remote(wm, remote) or not complete:
            return ErrorCode.coordinator_not_available
        return await self._complete(slot, wm)

    async def _finish_later(self, slot: int, wm: WriteMarkers, done: trio.Event) -> None:
        """The background half of an early-answered EndTxn (see ``_finish``): markers,
        offset hook and Complete*, retried after 50 ms, doubling up to 1.6 s."""
        txn_id = wm.transactional_id
        try:
            delay = 0.0
            while True:
                try:
                    code = await self._finish(slot, wm)
                except KaasError as exc:
                    code = exc.code
                if code == ErrorCode.none:
                    return
                delay = delay * 2 if delay else FINISH_RETRY_S
                if delay > FINISH_RETRY_MAX_S or not self.broker.owns_slot(slot):
                    break
                await trio.sleep(delay)
                try:
                    meta = await self._get(slot, txn_id)
                except KaasError as exc:
                    code = exc.code
                    continue
                if meta is None or not meta.state.is_prepared:
                    return  # finished by somebody else (a takeover's reconcile)
            log.warning("txn_markers_incomplete", transactional_id=txn_id, error=code.name,
                        note="left prepared for the sweep")
        except Exception as exc:  # a bug must not take the coordinator's nursery (and broker) down
            log.exception("txn_finish_failed", transactional_id=txn_id, error=repr(exc),
                          note="left prepared for the sweep")
        finally:
            if self._inflight.get(txn_id) is done:
                del self._inflight[txn_id]
            done.set()

    async def _settled(self, transactional_id: str, timeout: float) -> bool:
        """Wait (under the id's lock) until no early-answered EndTxn of this id is still
        being finished in the background; False when ``timeout`` ran out first."""
        done = self._inflight.get(transactional_id)
        if done is None:
            return True
        with trio.move_on_after(timeout):
            await done.wait()
        return done.is_set()

    async def _complete(self, slot: int, wm: WriteMarkers) -> ErrorCode:
        """The Complete* transition of a dispatched transaction: offset hook, then Persist."""
        meta = await self._get(slot, wm.transactional_id)
        res = dtxn.complete_end_txn(meta, now_ms(), dispatched=wm)
        for effect in res.effects:
            if isinstance(effect, OffsetHook):
                if not await self._offset_hook(effect, wm):
                    return ErrorCode.coordinator_not_available
            elif isinstance(effect, Persist):
                await _hit("endtxn.before_complete")
                await self._persist(slot, effect.meta, deferred=True)
                log.debug("txn_completed", transactional_id=wm.transactional_id, state=effect.meta.state.value,
                          producer_id=wm.producer_id, producer_epoch=wm.producer_epoch,
                          partitions=len(wm.partitions), groups=len(wm.groups))
            elif isinstance(effect, Reply):
                return effect.error_code
        return res.error_code

    # ------------------------------------------------------------------ fencing

    def _apply_fence(self, producer_id: int, producer_epoch: int, now: int) -> int:
        if producer_epoch > self._fences.get(producer_id, -1):
            self._fences[producer_id] = producer_epoch
        verified = self._verified.get(producer_id)
        if verified:
            for key in [k for k in verified if k[0] < producer_epoch]:
                del verified[key]
        applied = 0
        for part in list(self.broker.partitions.values()):
            if part.closed:
                continue
            producers = part.log.producers
            if producer_id in producers and producers.fence(producer_id, producer_epoch, now_ms=now):
                applied += 1
        self.stats["fences_applied"] += applied
        return applied

    async def _fence(self, producer_id: int, producer_epoch: int) -> None:
        """Cross-partition fence here, then the broadcast through this broker's fence log.

        The local fence goes first even though the append may fail: the bump it applies
        is already on file in the slot (the ``Persist`` before this effect), and fences only
        raise epochs. A failed append answers COORDINATOR_NOT_AVAILABLE: the client's
        retry re-emits the fence (a KIP-360 retry of the same bump) or bumps again, which
        fences every lower epoch too.

        Raises:
            KaasError: COORDINATOR_NOT_AVAILABLE when the fence log could not be appended.
        """
        applied = self._apply_fence(producer_id, producer_epoch, now_ms())
        try:
            await self.broker.run_io(self.fence_log.append, producer_id, producer_epoch)
        except OSError as exc:
            log.error("fence_log_append_failed", producer_id=producer_id, producer_epoch=producer_epoch,
                      torn=self.fence_log.torn, error=str(exc))
            raise KaasError(ErrorCode.coordinator_not_available, str(exc)) from None
        log.info("producer_fenced", producer_id=producer_id, producer_epoch=producer_epoch, partitions=applied)

    async def serve_fences(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Poll the other brokers' fence logs every 500 ms (see ``poll_fences``)."""
        await self.load_fences()
        task_status.started()
        while True:
            await self.poll_fences()
            await trio.sleep(FENCE_POLL_S)

    async def load_fences(self) -> None:
        """Read every fence log (this broker's own too) to know the highest fenced epoch of
        each pid; later polls read only the other brokers' new lines."""
        directory = self.broker.layout.producer_fences
        everything = FenceReader(directory)
        for rec in await self.broker.run_io(everything.poll):
            if rec.producer_epoch > self._fences.get(rec.producer_id, -1):
                self._fences[rec.producer_id] = rec.producer_epoch
        own = self.broker.layout.fence_log(self.broker.id).name
        self._fence_reader = FenceReader(directory, skip=frozenset({self.broker.id}),
                                         offsets={k: v for k, v in everything.offsets.items() if k != own})

    async def poll_fences(self) -> None:
        """Apply the bumps new in the other brokers' fence logs to the partitions this broker
        leads, and every bump ever seen to partitions it took over since the last poll."""
        if self._fence_reader is None:
            await self.load_fences()
        reader = self._fence_reader
        assert reader is not None
        now = now_ms()
        try:
            records = await self.broker.run_io(reader.poll)
        except OSError as exc:
            log.warning("fence_logs_unreadable", error=str(exc))
            records = []
        for name, line in reader.errors:
            log.error("fence_log_bad_line", file=name, line=line)
        reader.errors.clear()
        for rec in records:
            n = self._apply_fence(rec.producer_id, rec.producer_epoch, now)
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
        for pid in list(self._verified):
            verified = self._verified[pid]
            for k in [k for k, p in verified.items() if p.closed]:
                del verified[k]
            if not verified:
                del self._verified[pid]

    # ------------------------------------------------------------------ KIP-890 verification

    def _forget_verified(self, producer_id: int, part: Any) -> None:
        verified = self._verified.get(producer_id)
        if verified:
            for key in [k for k in verified if k[1] == part.topic and k[2] == part.index]:
                del verified[key]

    async def verify_partition(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                               topic: str, partition: int) -> None:
        """KIP-890 part 1: may a transactional batch of (pid, epoch) go to this partition?

        Accepted when this pid's transaction is already open on the partition at this
        epoch, when a positive answer is cached, or when the slot file (read afresh: the
        coordinator may be another broker) shows the transaction Ongoing with this pid and
        epoch and holding the partition.

        Raises:
            KaasError: INVALID_PRODUCER_EPOCH for an older epoch (a fenced zombie),
                INVALID_TXN_STATE when the partition is not in the ongoing transaction,
                KAFKA_STORAGE_ERROR when the slot file cannot be read.
        """
        if not transactional_id:
            raise KaasError(ErrorCode.invalid_txn_state, "transactional batch without a transactional id")
        part = self.broker.partitions.get((topic, partition))
        if part is not None:
            entry = part.log.producers.get(producer_id)
            if entry is not None:
                if producer_epoch < entry.epoch:
                    raise KaasError(ErrorCode.invalid_producer_epoch,
                                    f"producer {producer_id} epoch {producer_epoch} is fenced by {entry.epoch}")
                if producer_epoch == entry.epoch and entry.txn_first_offset is not None:
                    return
            cached = self._verified.get(producer_id, {}).get((producer_epoch, topic, partition))
            if cached is part:
                return
        slot = txn_slot(transactional_id)
        if self.broker.owns_slot(slot) and slot in self._slot_cache:
            # this broker coordinates the id: its cached slot is the file's content
            state = self._slot_cache[slot]
        else:
            try:
                state = await self.broker.run_io(self.store.load, slot)
            except (CorruptState, OSError) as exc:
                self._report_corrupt(("slot", slot), exc)
                raise KaasError(ErrorCode.kafka_storage_error, f"transaction slot {slot} is unreadable") from None
        meta = state.get(transactional_id)
        if meta is None:
            raise KaasError(ErrorCode.invalid_txn_state, f"unknown transactional id {transactional_id!r}")
        if meta.producer_id != producer_id:
            if meta.last_producer_id == producer_id:
                raise KaasError(ErrorCode.invalid_producer_epoch, f"producer {producer_id} was replaced")
            raise KaasError(ErrorCode.invalid_txn_state,
                            f"producer {producer_id} is not the producer of {transactional_id!r}")
        if producer_epoch < meta.producer_epoch:
            raise KaasError(ErrorCode.invalid_producer_epoch,
                            f"producer {producer_id} epoch {producer_epoch} is fenced by {meta.producer_epoch}")
        if (producer_epoch != meta.producer_epoch or meta.state is not TxnState.Ongoing
                or (topic, partition) not in meta.partitions):
            raise KaasError(ErrorCode.invalid_txn_state,
                            f"{topic}-{partition} is not in an ongoing transaction of {transactional_id!r}")
        if part is not None:
            self._verified.setdefault(producer_id, {})[(producer_epoch, topic, partition)] = part

    # ------------------------------------------------------------------ requests

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int,
                               producer_epoch: int, version: int) -> tuple[int, int]:
        """InitProducerId (22) for a transactional id.

        Returns:
            (producer id, epoch) to answer with.

        Raises:
            KaasError: NOT_COORDINATOR, CONCURRENT_TRANSACTIONS (an Ongoing transaction was
                aborted first, or markers are still queued), PRODUCER_FENCED /
                INVALID_PRODUCER_EPOCH, INVALID_REQUEST, INVALID_TRANSACTION_TIMEOUT,
                COORDINATOR_NOT_AVAILABLE (a slot or fence log write failed),
                COORDINATOR_LOAD_IN_PROGRESS (the PID block file could not be written).
        """
        if transactional_id == "":
            raise KaasError(ErrorCode.invalid_request, "empty transactional id")
        slot = self.owned_slot(transactional_id)
        async with self._locked(transactional_id):
            settled = await self._settled(transactional_id, BEGIN_WAIT_S)
            self._still_owned(transactional_id)
            if not settled:
                raise KaasError(ErrorCode.concurrent_transactions, "the last EndTxn is still being completed")
            meta = await self._get(slot, transactional_id)
            if (meta is not None and meta.state.can_begin
                    and await self._markers_pending(meta.producer_id)):
                raise KaasError(ErrorCode.concurrent_transactions, "markers of the last transaction are queued")
            was_ongoing = meta is not None and meta.state is TxnState.Ongoing
            try:
                res = dtxn.init_producer_id(
                    meta, transactional_id, timeout_ms, self.broker.settings.transaction_max_timeout_ms,
                    producer_id, producer_epoch, now_ms(), self.broker.allocate_pid, version)
            except OSError as exc:  # the PID block file could not be written (nothing changed)
                log.error("pid_block_write_failed", transactional_id=transactional_id, error=str(exc))
                # Apache answers this when no PID block is available yet; clients retry it
                raise KaasError(ErrorCode.coordinator_load_in_progress, str(exc)) from None
            if was_ongoing and res.meta is not None:
                log.info("txn_fenced_aborting", transactional_id=transactional_id,
                         producer_id=res.meta.producer_id, producer_epoch=res.meta.producer_epoch)
            code = await self._carry_out(slot, res)
            if code != ErrorCode.none:
                raise KaasError(code)
            reply = res.reply
            assert reply is not None
            if res.meta is not None:
                log.debug("txn_producer_initialised", transactional_id=transactional_id,
                          producer_id=reply.producer_id, producer_epoch=reply.producer_epoch)
            return reply.producer_id, reply.producer_epoch

    async def _begin_guard(self, meta: TxnMetadata | None, producer_id: int, producer_epoch: int) -> bool:
        """True when a new transaction may not begin yet (markers of the last one queued).

        Instead of answering CONCURRENT_TRANSACTIONS at once (librdkafka then retries after
        20 ms, or 100 ms for AddOffsetsToTxn), wait up to ``BEGIN_WAIT_S`` for the peers to
        apply the markers: they are normally done within a few milliseconds."""
        if not (meta is not None and meta.producer_id == producer_id and meta.producer_epoch == producer_epoch
                and meta.state.can_begin):
            return False
        deadline = trio.current_time() + BEGIN_WAIT_S
        pause = BEGIN_POLL_S / 10  # a peer usually applies a marker within a millisecond
        while await self._markers_pending(producer_id):
            if trio.current_time() >= deadline:
                return True
            await trio.sleep(pause)
            pause = min(pause * 2, BEGIN_POLL_S)
        return False

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[tuple[str, int]], version: int) -> ErrorCode:
        """AddPartitionsToTxn (24): the request-level code (copied to every partition).

        Raises:
            KaasError: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE.
        """
        return await self._add(transactional_id, producer_id, producer_epoch,
                               lambda meta: dtxn.add_partitions(meta, producer_id, producer_epoch, partitions,
                                                                now_ms(), version))

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                          version: int) -> ErrorCode:
        """AddOffsetsToTxn (25).

        Raises:
            KaasError: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE.
        """
        return await self._add(transactional_id, producer_id, producer_epoch,
                               lambda meta: dtxn.add_offsets(meta, producer_id, producer_epoch, group_id,
                                                             now_ms(), version))

    async def _add(self, transactional_id: str, producer_id: int, producer_epoch: int,
                   step: Callable[[TxnMetadata | None], TxnResult]) -> ErrorCode:
        """The shared shape of AddPartitions/AddOffsets: under the id's lock, wait for the last
        transaction's markers (the begin guard), then run the domain ``step`` and carry it out."""
        slot = self.owned_slot(transactional_id)
        async with self._locked(transactional_id):
            settled = await self._settled(transactional_id, BEGIN_WAIT_S)
            self._still_owned(transactional_id)
            if not settled:
                return ErrorCode.concurrent_transactions
            meta = await self._get(slot, transactional_id)
            guarded = await self._begin_guard(meta, producer_id, producer_epoch)
            self._still_owned(transactional_id)
            if guarded:
                return ErrorCode.concurrent_transactions
            return await self._carry_out(slot, step(meta))

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                      version: int) -> ErrorCode:
        """EndTxn (26), both phases.

        Returns:
            NONE once every marker is durable (or queued) and the entry is Complete*;
            COORDINATOR_NOT_AVAILABLE when a dispatch failed (the entry stays prepared);
            the domain's codes otherwise.

        Raises:
            KaasError: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE.
        """
        slot = self.owned_slot(transactional_id)
        async with self._locked(transactional_id):
            settled = await self._settled(transactional_id, BEGIN_WAIT_S)
            self._still_owned(transactional_id)
            if not settled:
                return ErrorCode.concurrent_transactions
            meta = await self._get(slot, transactional_id)
            res = dtxn.prepare_end_txn(meta, producer_id, producer_epoch, commit, now_ms(), version)
            if res.meta is not None:
                log.debug("txn_prepared", transactional_id=transactional_id, state=res.meta.state.value,
                          partitions=len(res.meta.partitions), groups=len(res.meta.groups))
            return await self._carry_out(slot, res, answer_early=True)

    async def check_txn_offset_commit(self, transactional_id: str, producer_id: int,
                                      producer_epoch: int) -> ErrorCode:
        """TxnOffsetCommit's fencing check: when this broker coordinates the transactional
        id, a pid/epoch that is not the current one gets INVALID_PRODUCER_EPOCH (47);
        otherwise the request is trusted."""
        if self.broker.txn_owner(transactional_id) != self.broker.id:
            return ErrorCode.none
        try:
            meta = await self._get(txn_slot(transactional_id), transactional_id)
        except KaasError as exc:
            return exc.code
        if meta is None:
            return ErrorCode.none
        if meta.producer_id != producer_id or meta.producer_epoch != producer_epoch:
            return ErrorCode.invalid_producer_epoch
        return ErrorCode.none

    async def describe(self, transactional_ids: Iterable[str]) -> list[Described]:
        """DescribeTransactions (65): per id, (id, code, description or None). Like every
        other request on an id, it first waits (bounded) for an early-answered EndTxn of the
        id to finish, so a client that just committed sees Complete*, not Prepare*."""
        out: list[Described] = []
        for txn_id in transactional_ids:
            try:
                slot = self.owned_slot(txn_id)
                await self._settled(txn_id, BEGIN_WAIT_S)
                meta = await self._get(slot, txn_id)
            except KaasError as exc:
                out.append((txn_id, exc.code, None))
                continue
            if meta is None:
                out.append((txn_id, ErrorCode.transactional_id_not_found, None))
            else:
                out.append((txn_id, ErrorCode.none, dtxn.describe(meta)))
        return out

    async def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                   duration_ms: int = -1, pattern: str | None = None) -> tuple[list[str], list[dtxn.TxnDescription]]:
        """ListTransactions (66) over the slots this broker owns.

        Returns:
            (state filters that are not state names, matching descriptions by id).
        """
        known = {s.value for s in TxnState}
        wanted_states = set(states)
        unknown = sorted(wanted_states - known)
        pids = set(producer_ids)
        regex = re.compile(pattern) if pattern else None
        now = now_ms()
        out = []
        for slot in range(TXN_SLOTS):
            if not self.broker.owns_slot(slot):
                continue
            try:
                state = await self._load(slot)
            except KaasError:
                continue
            for txn_id in sorted(state.entries):
                meta = state.entries[txn_id]
                if wanted_states and meta.state.value not in wanted_states:
                    continue
                if pids and meta.producer_id not in pids:
                    continue
                if duration_ms >= 0 and now - meta.ongoing_since_ms < duration_ms:
                    continue
                if regex is not None and not regex.fullmatch(txn_id):
                    continue
                out.append(dtxn.describe(meta))
        return unknown, out

    # ------------------------------------------------------------------ marker watcher

    async def serve_markers(self) -> None:
        """Apply this broker's marker queue: a full pass (claims included) at least every
        ``MARKER_POLL_S`` (the seed's 2 s), at once when woken, and as soon as a cheap stat of
        the queue directory (every ``MARKER_STAT_S``) shows a change. The faster path keeps a
        peer-led commit off the 2 s interval: the producer's next transaction waits for
        these markers (CONCURRENT_TRANSACTIONS until they are applied).

        On tmpfs with the inotify doorbell open there is no stat poll: every writer of the
        queue is a process of this host, so the doorbell sees each entry (the stat poll is
        for NFS, where inotify misses other hosts' writes). That is 20 wake-ups a second
        fewer on an idle broker."""
        while True:
            self._marker_wake = trio.Event()
            stamp = await self._queue_stamp()
            try:
                await self.apply_queue()
            except (OSError, CorruptState) as exc:
                log.warning("txn_marker_queue_failed", error=str(exc))
            with trio.move_on_after(MARKER_POLL_S):
                while True:
                    if self._doorbell_live and self.broker.memory_backed:
                        await self._marker_wake.wait()
                        break
                    with trio.move_on_after(MARKER_STAT_S):
                        await self._marker_wake.wait()
                    if self._marker_wake.is_set() or await self._queue_stamp() != stamp:
                        break

    async def _queue_stamp(self) -> tuple[int, int, int] | None:
        def stat() -> tuple[int, int, int] | None:
            try:
                st = os.stat(self.queue.dir(self.broker.id))
            except OSError:
                return None
            return st.st_ino, st.st_mtime_ns, st.st_size

        return await self.broker.run_io(stat)

    async def apply_queue(self) -> None:
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

    async def _apply_entry(self, path: Any) -> None:
        me = self.broker.id
        if failpoints.hit("marker.before_apply"):
            return  # tests: leave every queue entry where it is
        taken = await self.broker.run_io(self.queue.take, path)
        if taken is None:
            return
        try:
            entry = await self.broker.run_io(self.queue.read, taken)
        except CorruptState as exc:
            self._report_corrupt(("marker", str(taken)), exc)
            return
        if entry is None:
            return
        keep_parts: set[tuple[str, int]] = set()
        keep_groups: set[str] = set()
        forward: dict[int, tuple[set[tuple[str, int]], set[str]]] = defaultdict(lambda: (set(), set()))
        local: list[Any] = []
        for topic, partition in sorted(entry.partitions):
            leader, part = self._led(topic, partition)
            if part is not None:
                local.append(part)
            elif leader >= 0 and leader != me:
                forward[leader][0].add((topic, partition))
            elif not self._partition_exists(topic, partition):
                log.warning("txn_marker_partition_gone", transactional_id=entry.transactional_id,
                            topic=topic, partition=partition)
            else:
                keep_parts.add((topic, partition))
        failed = await self._write_local_markers(local, entry.producer_id, entry.producer_epoch, entry.commit)
        keep_parts.update((p.topic, p.index) for p in failed)
        for group in sorted(entry.groups):
            code = await self._complete_group_hook(group, entry.producer_id, entry.commit)
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

    # ------------------------------------------------------------------ reaper + reconcile

    async def serve_sweeps(self) -> None:
        """The timeout reaper and the marker reconcile: once at start (a crash may have left
        prepared entries), then every ``sweep_ms``, and at once when slots move to this
        broker (``wake_sweeps``: a transaction its previous coordinator prepared is finished
        now, as Apache's coordinator does when it loads a partition, rather than at the next
        sweep while the producer's EndTxn retries meet CONCURRENT_TRANSACTIONS); only slots
        this broker owns."""
        retry = RETRY_SWEEP_S
        while True:
            self._sweep_wake = trio.Event()
            self._sweep_again_soon = False
            await self.sweep()
            # a transaction left unfinished (e.g. a partition between leaders for a moment,
            # right after a failover) is tried again shortly, not a whole sweep later; the
            # pause doubles while it stays unfinished
            pause = self.sweep_ms / 1000
            if self._sweep_again_soon:
                pause, retry = min(pause, retry), retry * 2
            else:
                retry = RETRY_SWEEP_S
            with trio.move_on_after(pause):
                await self._sweep_wake.wait()

    def wake_sweeps(self) -> None:
        """Run a sweep now (slots moved to this broker)."""
        self._sweep_wake.set()

    async def sweep(self) -> None:
        """One pass: abort timed-out Ongoing entries, finish every prepared one, then write
        the Complete* states left in memory (by clients' EndTxn since the last pass, and by
        this pass)."""
        for slot in range(TXN_SLOTS):
            if not self.broker.owns_slot(slot):
                continue
            await trio.lowlevel.checkpoint()  # run_io does not yield on tmpfs
            try:
                if not self.store.path(slot).exists():
                    continue
                state = await self._load(slot)
            except KaasError:
                continue
            now = now_ms()
            for txn_id in sorted(state.entries):
                meta = state.entries[txn_id]
                if meta.state.is_prepared or dtxn.timed_out(meta, now):
                    await self._sweep_one(slot, txn_id)
        await self.flush_slots()

    async def _sweep_one(self, slot: int, transactional_id: str) -> None:
        try:
            async with self._locked(transactional_id):
                if not self.broker.owns_slot(slot) or not await self._settled(transactional_id, 0):
                    return  # an early-answered EndTxn is still being finished: its task retries
                meta = await self._get(slot, transactional_id)
                if meta is None:
                    return
                now = now_ms()
                if dtxn.timed_out(meta, now):
                    res = dtxn.reaper_abort(meta, now)
                    log.info("txn_timed_out_aborting", transactional_id=transactional_id,
                             producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                             ongoing_ms=now - meta.ongoing_since_ms)
                    self.stats["reaped"] += 1
                    code = await self._carry_out(slot, res)
                elif meta.state.is_prepared:
                    [wm] = dtxn.pending_dispatches(dtxn.SlotState({transactional_id: meta}))
                    self.stats["reconciled"] += 1
                    code = await self._finish(slot, wm)
                    if code == ErrorCode.none:
                        log.info("txn_reconciled", transactional_id=transactional_id, commit=wm.commit,
                                 producer_id=wm.producer_id, producer_epoch=wm.producer_epoch)
                else:
                    return
            if code != ErrorCode.none:
                log.warning("txn_reconcile_incomplete", transactional_id=transactional_id, error=code.name)
                self._sweep_again_soon = True
        except KaasError as exc:
            log.warning("txn_sweep_failed", transactional_id=transactional_id, error=exc.code.name)
            self._sweep_again_soon = True
