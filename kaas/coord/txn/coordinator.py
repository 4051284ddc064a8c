"""The transaction coordinator of one broker (``broker.txn``; docs/transactions.rst, "Idempotence and
idempotence", design section 7): the request API and the sweep, over its parts.

Carries out the effects of the pure ``domain.txn`` machine on the shared volume:

* slot files, read afresh after a takeover and written only by the slot's owner
  (``slots``);
* two-phase EndTxn: Persist Prepare*, then the markers and the offset hook (``dispatch``,
  ``markers``) and the Complete* transition (``finish``);
* fencing through the fence logs (``fencing``);
* KIP-890 part 1 produce verification (``verify``);
* the one-shot operations of the background loops in ``kaas.tasks.txn``: ``apply_queue``
  (``marker_queue``), ``poll_fences``, ``sweep`` (the timeout reaper + marker reconcile,
  gated on slot ownership).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

import structlog
import trio
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker

from kaas import log as klog
from kaas.aio import Wakeup
from kaas.coord.ports import MarkerResult, TxnBroker
from kaas.coord.txn._common import Unreadable, coordinator_epoch, hit, new_stats
from kaas.coord.txn.dispatch import Dispatch
from kaas.coord.txn.fencing import Fencing
from kaas.coord.txn.finish import Finisher
from kaas.coord.txn.marker_queue import QueueApplier
from kaas.coord.txn.markers import MarkerWriter
from kaas.coord.txn.slots import Slots
from kaas.coord.txn.verify import Verifier
from kaas.domain import txn as dtxn
from kaas.domain.routing import TXN_SLOTS, txn_slot
from kaas.domain.txn import Fence, Persist, Reply, TxnMetadata, TxnResult, TxnState, WriteMarkers
from kaas.errors import KaasError
from kaas.storage.fences import FenceLog
from kaas.storage.markers import MarkerQueue
from kaas.storage.txn_store import TxnStore

__all__ = ["BEGIN_POLL_S", "BEGIN_WAIT_S", "Described", "TxnCoordinator"]

log = structlog.get_logger()

Described = tuple[str, ErrorCode, dtxn.TxnDescription | None]

BEGIN_WAIT_S = 0.25  # how long a new transaction waits for the last one's queued markers
BEGIN_POLL_S = 0.002  # the longest pause between two looks at the queue (first: 0.2 ms)


class TxnCoordinator:
    """Transaction coordinator of one broker (``broker.txn``)."""

    def __init__(self, broker: TxnBroker) -> None:
        self.broker = broker
        s = broker.settings
        layout = broker.layout
        self.store = TxnStore(layout.txn_state, broker.owns_slot, fsync=s.fsync)
        self.queue = MarkerQueue(layout.marker_queue, fsync=s.fsync)
        self.fence_log = FenceLog(layout.fence_log(broker.id), fsync=s.fsync)
        self.stats = new_stats()
        unreadable = Unreadable()
        self.slots = Slots(broker, self.store, unreadable, self.stats)
        self.verifier = Verifier(broker, self.slots)
        self.fencing = Fencing(broker, self.fence_log, self.verifier, self.stats)
        self.markers = MarkerWriter(broker, self.verifier, self.stats)
        self.inbox = QueueApplier(broker, self.queue, self.markers, unreadable, self.stats)
        self.marker_wakeup = Wakeup()  # the marker watcher's (``kaas.tasks.txn.serve_markers``)
        self.sweep_wakeup = Wakeup()  # the sweeps' (``kaas.tasks.txn.serve_sweeps``)
        self.doorbell_live = False  # the inotify watch on this broker's queue is open
        self.dispatch = Dispatch(broker, self.markers, self.queue, self.wake_markers, self.stats,
                                 self.inbox.queueing)
        self.finisher = Finisher(broker, self.slots, self.dispatch, self.stats)
        # Commits this coordinator prepared while it owned the id's slot without a break:
        # transactional id -> (pid, epoch, txn_seq). EndTxn(abort) on the CompleteCommit of
        # one of them is INVALID_TXN_STATE (``dtxn.prepare_end_txn``). Dropped with the slot.
        self.committed_here: dict[str, tuple[int, int, int]] = {}

    # ------------------------------------------------------------------ for the loops and the broker

    @property
    def coordinator_epoch(self) -> int:
        """The coordinator epoch written into markers: the controller epoch, else 0."""
        return coordinator_epoch(self.broker)

    def wake_markers(self) -> None:
        """Run the marker watcher now (after enqueueing to this broker's own queue)."""
        self.marker_wakeup.set()

    def wake_sweeps(self) -> None:
        """Run a sweep now (slots moved to this broker)."""
        self.sweep_wakeup.set()

    def owned_slot(self, transactional_id: str) -> int:
        """The slot of ``transactional_id``.

        Raises:
            KaasError: NOT_COORDINATOR when this broker does not own it.
        """
        return self.slots.owned(transactional_id)

    def forget_cache(self) -> None:
        """Drop every cached slot (our lease lapsed: another broker may have written)."""
        self.slots.forget_cache()
        self.inbox.forget()
        self.committed_here.clear()

    def drop_unowned_slots(self) -> None:
        """Called after each assignment is applied: forget slots that are not ours any more,
        so a slot that comes back is read afresh from the file its interim owner wrote
        (and the queues are read again for the producer ids of its transactional ids:
        their next coordinators may queue entries)."""
        self.slots.drop_unowned()
        self.committed_here = {t: c for t, c in self.committed_here.items() if self.broker.owns_slot(txn_slot(t))}
        if not all(self.broker.owns_slot(slot) for slot in self.inbox.clear_slots):
            self.inbox.forget()

    async def flush_slots(self) -> None:
        """Write the slots whose last change (a Complete*) is only in memory."""
        await self.slots.flush()

    async def wait_finishing(self, timeout: float) -> bool:
        """Wait until no early-answered EndTxn is still being finished in the background
        (a drain, before ``flush_slots``); False when ``timeout`` ran out first."""
        return await self.finisher.wait_all(timeout)

    async def apply_queue(self) -> None:
        """One pass of the marker watcher: claim dead brokers' queues, then apply own entries."""
        await self.inbox.apply()

    async def queue_stamp(self) -> tuple[int, int, int] | None:
        """A cheap stat of this broker's queue directory (the watcher's change check)."""
        return await self.inbox.stamp()

    async def load_fences(self) -> None:
        """Read every fence log to know the highest fenced epoch of each pid."""
        await self.fencing.load()

    async def poll_fences(self) -> None:
        """Apply the bumps new in the other brokers' fence logs (and every bump seen to
        partitions taken over since the last poll)."""
        await self.fencing.poll()

    async def apply_marker_request(self, markers: Sequence[WritableTxnMarker]) -> list[MarkerResult]:
        """WriteTxnMarkers from a peer's coordinator (``MarkerWriter.apply_request``)."""
        return await self.markers.apply_request(markers)

    async def verify_partition(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                               topic: str, partition: int) -> None:
        """KIP-890 part 1 (``Verifier.verify_partition``).

        Raises:
            KaasError: INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, KAFKA_STORAGE_ERROR.
        """
        await self.verifier.verify_partition(transactional_id, producer_id, producer_epoch, topic, partition)

    # ------------------------------------------------------------------ effects

    async def _carry_out(self, slot: int, res: TxnResult, *, answer_early: bool = False) -> ErrorCode:
        """Carry out a result's effects in order; returns the code to answer with
        (``answer_early``: see ``Finisher.finish``)."""
        for effect in res.effects:
            if isinstance(effect, Persist):
                await self.slots.persist(slot, effect.meta)
                if effect.meta.state.is_prepared:
                    await hit("endtxn.after_prepare")
            elif isinstance(effect, Fence):
                await self.fencing.fence(effect.producer_id, effect.producer_epoch)
            elif isinstance(effect, WriteMarkers):
                code = await self.finisher.finish(slot, effect, answer_early=answer_early)
                if res.reply is None:
                    return code
            elif isinstance(effect, Reply):
                return effect.error_code
            else:  # OffsetHook only comes from complete_end_txn, handled by the Finisher
                raise AssertionError(f"unexpected effect {effect!r}")
        return res.error_code

    # ------------------------------------------------------------------ requests

    async def _settled(self, transactional_id: str) -> bool:
        """Under the id's lock: wait (up to ``BEGIN_WAIT_S``) for the last EndTxn's
        background half; False when it is still being finished.

        Raises:
            KaasError: NOT_COORDINATOR when this broker was deposed meanwhile.
        """
        settled = await self.finisher.settled(transactional_id, BEGIN_WAIT_S)
        self.slots.still_owned(transactional_id)
        return settled

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
        slot = self.slots.owned(transactional_id)
        async with self.slots.locked(transactional_id):
            if not await self._settled(transactional_id):
                raise KaasError(ErrorCode.concurrent_transactions, "the last EndTxn is still being completed")
            meta = await self.slots.get(slot, transactional_id)
            if (meta is not None and meta.state.can_begin
                    and await self.inbox.pending_for(meta.producer_id, slot)):
                raise KaasError(ErrorCode.concurrent_transactions, "markers of the last transaction are queued")
            was_ongoing = meta is not None and meta.state is TxnState.Ongoing
            try:
                res = dtxn.init_producer_id(
                    meta, transactional_id, timeout_ms, self.broker.settings.transaction_max_timeout_ms,
                    producer_id, producer_epoch, self.broker.clock.wall_ms(), self.broker.allocate_pid, version)
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

    async def _begin_guard(self, slot: int, meta: TxnMetadata | None, producer_id: int, producer_epoch: int) -> bool:
        """True when a new transaction may not begin yet (markers of the last one queued).

        Instead of answering CONCURRENT_TRANSACTIONS at once (librdkafka then retries after
        20 ms, or 100 ms for AddOffsetsToTxn), wait up to ``BEGIN_WAIT_S`` for the peers to
        apply the markers: they are normally done within a few milliseconds."""
        if not (meta is not None and meta.producer_id == producer_id and meta.producer_epoch == producer_epoch
                and meta.state.can_begin):
            return False
        deadline = trio.current_time() + BEGIN_WAIT_S
        pause = BEGIN_POLL_S / 10  # a peer usually applies a marker within a millisecond
        while await self.inbox.pending_for(producer_id, slot):
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
                                                                self.broker.clock.wall_ms(), version))

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                          version: int, *, txn_version: int = dtxn.TV1) -> ErrorCode:
        """AddOffsetsToTxn (25); ``txn_version`` TV2 for TxnOffsetCommit v5's implicit add
        (a transaction begun by it runs under transaction.version 2).

        Raises:
            KaasError: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE.
        """
        return await self._add(transactional_id, producer_id, producer_epoch,
                               lambda meta: dtxn.add_offsets(meta, producer_id, producer_epoch, group_id,
                                                             self.broker.clock.wall_ms(), version,
                                                             txn_version=txn_version))

    async def _add(self, transactional_id: str, producer_id: int, producer_epoch: int,
                   step: Callable[[TxnMetadata | None], TxnResult]) -> ErrorCode:
        """The shared shape of AddPartitions/AddOffsets: under the id's lock, wait for the last
        transaction's markers (the begin guard), then run the domain ``step`` and carry it out."""
        slot = self.slots.owned(transactional_id)
        async with self.slots.locked(transactional_id):
            if not await self._settled(transactional_id):
                return ErrorCode.concurrent_transactions
            meta = await self.slots.get(slot, transactional_id)
            guarded = await self._begin_guard(slot, meta, producer_id, producer_epoch)
            self.slots.still_owned(transactional_id)
            if guarded:
                return ErrorCode.concurrent_transactions
            return await self._carry_out(slot, step(meta))

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                      version: int) -> ErrorCode:
        """EndTxn (26): ``end_transaction``'s code."""
        return (await self.end_transaction(transactional_id, producer_id, producer_epoch, commit, version))[0]

    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                              version: int) -> tuple[ErrorCode, int, int]:
        """EndTxn (26), both phases.

        Returns:
            (code, producer id, epoch): NONE once every marker is durable (or queued) and
            the entry is Complete* (answered early on a running broker: once Prepare* is
            durable); COORDINATOR_NOT_AVAILABLE when a dispatch failed (the entry stays
            prepared); the domain's codes otherwise. The pair is the one the client
            continues with (EndTxn v5, transaction.version 2; ``dtxn.continues_with``),
            -1/-1 with an error or below v5.

        Raises:
            KaasError: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE.
        """
        slot = self.slots.owned(transactional_id)
        tv = dtxn.version_of_end_txn(version)
        self.stats["end_txn_tv2" if tv == dtxn.TV2 else "end_txn_tv1"] += 1
        async with self.slots.locked(transactional_id):
            if not await self._settled(transactional_id):
                return ErrorCode.concurrent_transactions, -1, -1
            meta = await self.slots.get(slot, transactional_id)
            here = meta is not None and self.committed_here.get(transactional_id) == \
                (meta.producer_id, meta.producer_epoch, meta.txn_seq)
            try:
                res = dtxn.prepare_end_txn(meta, producer_id, producer_epoch, commit, self.broker.clock.wall_ms(),
                                           version, committed_here=here, allocate_pid=self.broker.allocate_pid)
            except OSError as exc:  # an exhausted epoch's new pid: its block file could not be written
                log.error("pid_block_write_failed", transactional_id=transactional_id, error=str(exc))
                return ErrorCode.coordinator_load_in_progress, -1, -1
            if res.meta is not None:
                if res.meta.state is TxnState.PrepareCommit:
                    self.committed_here[transactional_id] = \
                        (res.meta.producer_id, res.meta.producer_epoch, res.meta.txn_seq)
                if klog.DEBUG:
                    log.debug("txn_prepared", transactional_id=transactional_id, state=res.meta.state.value,
                              partitions=len(res.meta.partitions), groups=len(res.meta.groups),
                              producer_epoch=res.meta.producer_epoch, transaction_version=res.meta.txn_version)
            code = await self._carry_out(slot, res, answer_early=True)
            if code != ErrorCode.none or tv != dtxn.TV2:
                return code, -1, -1
            reply = res.reply
            if reply is not None and reply.producer_id != -1:
                return code, reply.producer_id, reply.producer_epoch
            target = res.meta if res.meta is not None else meta
            assert target is not None  # NONE without a Reply pair: a (re-)prepared entry
            pid, epoch = dtxn.continues_with(target)
            return code, pid, epoch

    async def check_txn_offset_commit(self, transactional_id: str, producer_id: int,
                                      producer_epoch: int, group_id: str) -> ErrorCode:
        """TxnOffsetCommit's KIP-890 verification (``Verifier.verify_group``), on whichever
        broker coordinates the group: INVALID_PRODUCER_EPOCH (47) for a fenced or replaced
        producer, INVALID_TXN_STATE (48) when its transaction is not Ongoing with the group
        added by AddOffsetsToTxn, KAFKA_STORAGE_ERROR when the slot file is unreadable."""
        try:
            await self.verifier.verify_group(transactional_id, producer_id, producer_epoch, group_id)
        except KaasError as exc:
            return exc.code
        return ErrorCode.none

    async def describe(self, transactional_ids: Iterable[str]) -> list[Described]:
        """DescribeTransactions (65): per id, (id, code, description or None). Like every
        other request on an id, it first waits (bounded) for an early-answered EndTxn of the
        id to finish, so a client that just committed sees Complete*, not Prepare*."""
        out: list[Described] = []
        for txn_id in transactional_ids:
            try:
                slot = self.slots.owned(txn_id)
                await self.finisher.settled(txn_id, BEGIN_WAIT_S)
                meta = await self.slots.get(slot, txn_id)
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
        now = self.broker.clock.wall_ms()
        out = []
        for slot in range(TXN_SLOTS):
            if not self.broker.owns_slot(slot):
                continue
            try:
                state = await self.slots.load(slot)
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

    # ------------------------------------------------------------------ reaper + reconcile

    async def sweep(self) -> bool:
        """One pass: abort timed-out Ongoing entries, finish every prepared one, drop ids
        idle past ``transactional.id.expiration.ms`` with no transaction open, then write
        the Complete* states left in memory (by clients' EndTxn since the last pass, and by
        this pass). Only slots this broker owns.

        Returns:
            True when a transaction was left unfinished (e.g. a partition between leaders
            for a moment, right after a failover): the caller tries again shortly.
        """
        again = False
        for slot in range(TXN_SLOTS):
            if not self.broker.owns_slot(slot):
                continue
            await trio.lowlevel.checkpoint()  # run_io does not yield on tmpfs
            try:
                if not self.store.path(slot).exists():
                    continue
                state = await self.slots.load(slot)
            except KaasError:
                continue
            now = self.broker.clock.wall_ms()
            limit = self.broker.settings.transactional_id_expiration_ms
            for txn_id in sorted(state.entries):
                meta = state.entries[txn_id]
                if meta.state.is_prepared or dtxn.timed_out(meta, now):
                    again = not await self._sweep_one(slot, txn_id) or again
                elif dtxn.expired(meta, now, limit):
                    await self._expire_one(slot, txn_id, limit)
        await self.flush_slots()
        return again

    async def _expire_one(self, slot: int, transactional_id: str, limit: int) -> None:
        """Drop one transactional id idle past ``limit`` by this coordinator's clock (checked
        again under the id's lock: a request may have come in since the pass read it)."""
        try:
            async with self.slots.locked(transactional_id):
                if not self.broker.owns_slot(slot) or not await self.finisher.settled(transactional_id, 0):
                    return
                meta = await self.slots.get(slot, transactional_id)
                now = self.broker.clock.wall_ms()
                if meta is None or not dtxn.expired(meta, now, limit):
                    return
                await self.slots.remove(slot, transactional_id)
                self.committed_here.pop(transactional_id, None)
        except KaasError as exc:
            log.warning("transactional_id_expiry_failed", transactional_id=transactional_id,
                        error=exc.code.name)
            return
        self.stats["expired_ids"] += 1
        log.info("transactional_id_expired", transactional_id=transactional_id, producer_id=meta.producer_id,
                 producer_epoch=meta.producer_epoch, state=meta.state.value,
                 last_update_ms=meta.last_update_ms, idle_ms=now - meta.last_update_ms,
                 transactional_id_expiration_ms=limit)

    async def _sweep_one(self, slot: int, transactional_id: str) -> bool:
        """Abort one timed-out transaction, or finish one prepared; False when left unfinished."""
        try:
            async with self.slots.locked(transactional_id):
                if not self.broker.owns_slot(slot) or not await self.finisher.settled(transactional_id, 0):
                    return True  # an early-answered EndTxn is still being finished: its task retries
                meta = await self.slots.get(slot, transactional_id)
                if meta is None:
                    return True
                now = self.broker.clock.wall_ms()
                if dtxn.timed_out(meta, now):
                    try:
                        res = dtxn.reaper_abort(meta, now, allocate_pid=self.broker.allocate_pid)
                    except OSError as exc:  # a TV2 abort of an exhausted epoch: no new pid yet
                        log.error("pid_block_write_failed", transactional_id=transactional_id, error=str(exc))
                        return False
                    log.info("txn_timed_out_aborting", transactional_id=transactional_id,
                             producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                             ongoing_ms=now - meta.ongoing_since_ms, transaction_version=meta.txn_version)
                    self.stats["reaped"] += 1
                    code = await self._carry_out(slot, res)
                elif meta.state.is_prepared:
                    [wm] = dtxn.pending_dispatches(dtxn.SlotState({transactional_id: meta}))
                    self.stats["reconciled"] += 1
                    code = await self.finisher.finish(slot, wm)
                    if code == ErrorCode.none:
                        log.info("txn_reconciled", transactional_id=transactional_id, commit=wm.commit,
                                 producer_id=wm.producer_id, producer_epoch=wm.producer_epoch)
                else:
                    return True
            if code != ErrorCode.none:
                log.warning("txn_reconcile_incomplete", transactional_id=transactional_id, error=code.name)
                return False
        except KaasError as exc:
            log.warning("txn_sweep_failed", transactional_id=transactional_id, error=exc.code.name)
            return False
        return True
