"""The transaction slots: files ``txn_state/slot-N.json`` (``storage.txn_store``), written
only by the slot's owner (``broker.owns_slot``), served from memory while it owns them.

Concurrency: one lock (``aio.Lock``) per transactional id serialises every operation on that id
(handlers, reaper, reconcile). The writes of one slot file go out one at a time, each
carrying every change that came while the one before it ran (group commit,
``Slots._commit``): each change replaces only its own id's entry.
"""

from __future__ import annotations

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas import log as klog
from kaas.aio import Lock, acquire
from kaas.coord.ports import TxnBroker
from kaas.coord.txn._common import Stats, Unreadable, hit
from kaas.domain.routing import txn_slot
from kaas.domain.txn import SlotState, TxnMetadata
from kaas.errors import CorruptState, KaasError
from kaas.storage.txn_store import TxnStore

__all__ = ["Slots"]

log = structlog.get_logger()


class Slots:
    """The slot files of one coordinator, their in-memory copies and the locks."""

    def __init__(self, broker: TxnBroker, store: TxnStore, unreadable: Unreadable, stats: Stats) -> None:
        self.broker = broker
        self.stats = stats
        self.store = store
        self.unreadable = unreadable
        self._id_locks: dict[str, _Held] = {}
        self._pending: dict[int, _Batch] = {}  # slot -> changes waiting for its next write
        # slot -> set when its write in progress ends (made by the first caller to wait)
        self._writing: dict[int, trio.Event | None] = {}
        self.cache: dict[int, SlotState] = {}
        self.unwritten: set[int] = set()  # slots whose cached state is newer than the file

    def owned(self, transactional_id: str) -> int:
        """The slot of ``transactional_id``.

        Raises:
            KaasError: NOT_COORDINATOR when this broker does not own it.
        """
        slot = txn_slot(transactional_id)
        if not self.broker.owns_slot(slot):
            raise KaasError(ErrorCode.not_coordinator)
        return slot

    def still_owned(self, transactional_id: str) -> int:
        """``owned`` again, after a wait (the id's lock, the last EndTxn's background
        half, queued markers): a broker paused or starved meanwhile wakes up deposed, with
        its lease lapsed, and must send the client to the new coordinator at once rather
        than act on what it held (design section 4, hand-off rule).

        Raises:
            KaasError: NOT_COORDINATOR.
        """
        return self.owned(transactional_id)

    def locked(self, transactional_id: str) -> IdLock:
        """``async with slots.locked(id)``: hold the lock of ``transactional_id``."""
        return IdLock(self._id_locks, transactional_id)

    def forget_cache(self) -> None:
        """Drop every cached slot (our lease lapsed: another broker may have written)."""
        self.cache.clear()
        self.unwritten.clear()
        self.store.encoder.forget_all()

    def drop_unowned(self) -> None:
        """Forget slots that are not ours any more, so a slot that comes back is read
        afresh from the file its interim owner wrote."""
        for slot in [s for s in self.cache if not self.broker.owns_slot(s)]:
            del self.cache[slot]
            self.unwritten.discard(slot)
            self.store.encoder.forget(slot)

    def cached(self, slot: int) -> SlotState | None:
        """The slot's state in memory while this broker owns it (the file's content)."""
        cached = self.cache.get(slot)
        if cached is not None and self.broker.owns_slot(slot):
            return cached
        return None

    async def load(self, slot: int, *, fill_cache: bool = False) -> SlotState:
        """The slot's state. The coordinator is the slot file's only writer, so while it owns
        the slot its last write is the file's content: served from memory, read from the file
        on the first use after a takeover. Only callers holding the slot lock fill the cache
        (``fill_cache``): a read racing a write must not put an older state back."""
        cached = self.cached(slot)
        if cached is not None:
            return cached
        try:
            state = await self.broker.run_io(self.store.load, slot)
        except (CorruptState, OSError) as exc:
            self.unreadable.report(("slot", slot), exc)
            raise KaasError(ErrorCode.coordinator_not_available,
                            f"transaction slot {slot} is unreadable") from None
        if self.unreadable.readable_again(("slot", slot)):
            log.info("txn_slot_readable_again", slot=slot)
        if fill_cache and self.broker.owns_slot(slot):
            self.cache[slot] = state
        return state

    async def get(self, slot: int, transactional_id: str) -> TxnMetadata | None:
        return (await self.load(slot)).get(transactional_id)

    async def persist(self, slot: int, meta: TxnMetadata, *, deferred: bool = False) -> None:
        """Write ``meta`` into its slot file (tmp + fsync + rename); returns once it is
        durable (``_commit``: concurrent writes of one slot share a file write).

        ``deferred`` (only for the Complete* transition): update the owner's in-memory slot
        and leave the file write to the next write of the slot (normally the producer's
        next AddPartitions) or to the sweep. The durability pivot is Prepare*: a crash
        before the Complete* reaches the file leaves Prepare*, which the next owner
        finishes again in the same direction (markers and the offset hook are idempotent),
        so the outcome the client was told cannot change. One file write per transaction
        saved.

        Raises:
            KaasError: COORDINATOR_NOT_AVAILABLE (the write failed, or a failpoint after
                it), NOT_COORDINATOR (the slot moved).
        """
        if deferred:
            state = await self.load(slot, fill_cache=True)
            if slot in self.cache and self.broker.owns_slot(slot):
                self.cache[slot] = state.with_changes({meta.transactional_id: meta})
                self.unwritten.add(slot)
                return
        await self._commit(slot, {meta.transactional_id: meta})
        if klog.DEBUG:
            log.debug("txn_state", transactional_id=meta.transactional_id, state=meta.state.value,
                      producer_id=meta.producer_id, producer_epoch=meta.producer_epoch, txn_seq=meta.txn_seq)

    async def remove(self, slot: int, transactional_id: str) -> None:
        """Drop the entry of ``transactional_id`` from its slot file (tmp + fsync + rename);
        the caller holds the id's lock (an expired id: ``domain.txn.expired``)."""
        state = await self.load(slot, fill_cache=True)
        if transactional_id in state.entries:
            await self._commit(slot, {transactional_id: None})

    async def _commit(self, slot: int, changes: dict[str, TxnMetadata | None]) -> None:
        """Group commit: put ``changes`` into the slot's pending batch and return once a
        write holding them is durable.

        One write of a slot at a time. A caller that finds none in progress writes the
        pending batch itself; one that finds a write in progress waits for its end, then
        finds its own batch written by the caller that started the next write, or starts
        it. So the changes of every request that came while a write ran (EndTxn and
        AddPartitionsToTxn of other ids of the slot) go out in the next tmp + fsync +
        rename together, and each caller returns (its request is answered) only once the
        write that held its changes succeeded. The file keeps one writer, this broker,
        and ``TxnStore.save`` checks ownership right before each write.

        Raises:
            KaasError: the write of the batch failed (every caller of the batch gets it).
        """
        batch = self._pending.get(slot)
        if batch is None:
            batch = self._pending[slot] = _Batch()
        batch.changes.update(changes)
        while not batch.written:
            if slot not in self._writing:
                # the pending batch is this caller's: not written, and no write runs
                assert self._pending.get(slot) is batch
                del self._pending[slot]
                await self._write(slot, batch)
            else:
                ending = self._writing[slot]
                if ending is None:  # the first to wait for this write makes its event
                    ending = self._writing[slot] = trio.Event()
                await ending.wait()
        if batch.error is not None:
            raise KaasError(batch.error.code, batch.error.message)

    async def _write(self, slot: int, batch: _Batch) -> None:
        """Write ``batch`` into the slot file: the slot's state with its changes."""
        self._writing[slot] = None
        try:
            state = await self.load(slot, fill_cache=True)
            new_state = state.with_changes(batch.changes)
            await hit("slot.before_write")
            try:
                await self.broker.run_io(self.store.save, slot, new_state)
            except OSError as exc:
                self._failed(slot, batch)
                log.error("txn_slot_write_failed", slot=slot, error=str(exc))
                raise KaasError(ErrorCode.coordinator_not_available, str(exc)) from None
            except BaseException:
                self._failed(slot, batch)
                raise
            current = self.cache.get(slot)
            if current is state:
                self.cache[slot] = new_state
                self.unwritten.discard(slot)
            elif current is not None:  # a deferred Complete* came meanwhile: keep it, unwritten
                self.cache[slot] = current.with_changes(batch.changes)
            if len(batch.changes) > 1:
                self.stats["slot_writes_shared"] += 1
            await hit("slot.after_write", entries=len(batch.changes))  # written, nobody answered yet
        except KaasError as exc:
            batch.error = exc
        except BaseException:
            batch.error = KaasError(ErrorCode.coordinator_not_available, f"transaction slot {slot} write interrupted")
            raise
        finally:
            batch.written = True
            ending = self._writing.pop(slot)
            if ending is not None:
                ending.set()

    def _failed(self, slot: int, batch: _Batch) -> None:
        """A write of ``batch`` failed: the file is the old one, or (a failure after the
        rename) the new one. With changes, the slot is read afresh next time (the memory
        must not run ahead of the file: Complete* states kept only in memory go with it,
        and the sweep finishes their Prepare* again). Without (a flush of the memory), the
        memory is the newer of the two either way: kept, still to be written."""
        if batch.changes:
            self.cache.pop(slot, None)
            self.unwritten.discard(slot)

    async def flush(self) -> None:
        """Write the slots whose last change (a Complete*) is only in memory."""
        for slot in sorted(self.unwritten):
            if slot not in self.unwritten or slot not in self.cache or not self.broker.owns_slot(slot):
                self.unwritten.discard(slot)
                continue
            try:
                await self._commit(slot, {})
            except KaasError as exc:
                log.warning("txn_slot_flush_failed", slot=slot, error=str(exc))


class _Batch:
    """The changes to one slot file that go out in one write (``Slots._commit``): an entry
    per transactional id, None to drop the id."""

    __slots__ = ("changes", "written", "error")

    def __init__(self) -> None:
        self.changes: dict[str, TxnMetadata | None] = {}
        self.written = False
        self.error: KaasError | None = None


class _Held:
    """One transactional id's lock and how many hold or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = Lock()
        self.users = 0


class IdLock:
    """The lock of one transactional id, made on first use and dropped when nobody holds
    or waits for it; taken without a checkpoint when free (``aio.acquire``). A class rather than
    an ``asynccontextmanager`` generator: every AddPartitions and EndTxn takes it."""

    __slots__ = ("locks", "transactional_id", "holder")

    def __init__(self, locks: dict[str, _Held], transactional_id: str) -> None:
        self.locks = locks
        self.transactional_id = transactional_id
        self.holder: _Held | None = None

    async def __aenter__(self) -> None:
        holder = self.locks.get(self.transactional_id)
        if holder is None:
            holder = self.locks[self.transactional_id] = _Held()
        holder.users += 1
        self.holder = holder
        try:
            await acquire(holder.lock)
        except BaseException:  # cancelled while waiting: not held, but no longer waiting
            self._leave()
            raise

    async def __aexit__(self, *exc: object) -> None:
        assert self.holder is not None
        self.holder.lock.release()
        self._leave()

    def _leave(self) -> None:
        holder = self.holder
        assert holder is not None
        holder.users -= 1
        if holder.users == 0:
            del self.locks[self.transactional_id]
