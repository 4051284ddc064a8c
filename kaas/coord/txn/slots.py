"""The transaction slots: files ``txn_state/slot-N.json`` (``storage.txn_store``), written
only by the slot's owner (``broker.owns_slot``), served from memory while it owns them.

Concurrency: one lock (``aio.Lock``) per transactional id serialises every operation on that id
(handlers, reaper, reconcile); a lock per slot serialises the read-modify-write of a slot
file, which replaces only the entry of the id being changed.
"""

from __future__ import annotations

from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from kaas.aio import Lock, acquire, held
from kaas.coord.ports import TxnBroker
from kaas.coord.txn._common import Unreadable, hit
from kaas.domain.routing import TXN_SLOTS, txn_slot
from kaas.domain.txn import SlotState, TxnMetadata
from kaas.errors import CorruptState, KaasError
from kaas.storage.txn_store import TxnStore

__all__ = ["Slots"]

log = structlog.get_logger()


class Slots:
    """The slot files of one coordinator, their in-memory copies and the locks."""

    def __init__(self, broker: TxnBroker, store: TxnStore, unreadable: Unreadable) -> None:
        self.broker = broker
        self.store = store
        self.unreadable = unreadable
        self._id_locks: dict[str, list[Any]] = {}
        self._slot_locks = [Lock() for _ in range(TXN_SLOTS)]
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
        """Write ``meta`` into its slot file (tmp + fsync + rename).

        ``deferred`` (only for the Complete* transition): update the owner's in-memory slot
        and leave the file write to the next write of the slot (normally the producer's
        next AddPartitions) or to the sweep. The durability pivot is Prepare*: a crash
        before the Complete* reaches the file leaves Prepare*, which the next owner
        finishes again in the same direction (markers and the offset hook are idempotent),
        so the outcome the client was told cannot change. One file write per transaction
        saved."""
        async with held(self._slot_locks[slot]):
            state = await self.load(slot, fill_cache=True)
            new_state = state.with_entry(meta)
            if deferred and slot in self.cache and self.broker.owns_slot(slot):
                self.cache[slot] = new_state
                self.unwritten.add(slot)
                return
            await self._save(slot, new_state)
        log.debug("txn_state", transactional_id=meta.transactional_id, state=meta.state.value,
                  producer_id=meta.producer_id, producer_epoch=meta.producer_epoch, txn_seq=meta.txn_seq)

    async def remove(self, slot: int, transactional_id: str) -> None:
        """Drop the entry of ``transactional_id`` from its slot file (tmp + fsync + rename);
        the caller holds the id's lock (an expired id: ``domain.txn.expired``)."""
        async with held(self._slot_locks[slot]):
            state = await self.load(slot, fill_cache=True)
            if transactional_id in state.entries:
                await self._save(slot, state.without(transactional_id))

    async def _save(self, slot: int, new_state: SlotState) -> None:
        """Write the slot file with ``new_state``; the caller holds the slot lock.

        Raises:
            KaasError: COORDINATOR_NOT_AVAILABLE when the write failed.
        """
        await hit("slot.before_write")
        try:
            await self.broker.run_io(self.store.save, slot, new_state)
        except OSError as exc:
            self.cache.pop(slot, None)
            self.unwritten.discard(slot)
            log.error("txn_slot_write_failed", slot=slot, error=str(exc))
            raise KaasError(ErrorCode.coordinator_not_available, str(exc)) from None
        except BaseException:
            self.cache.pop(slot, None)  # unknown whether the file changed
            self.unwritten.discard(slot)
            raise
        self.cache[slot] = new_state
        self.unwritten.discard(slot)

    async def flush(self) -> None:
        """Write the slots whose last change (a Complete*) is only in memory."""
        for slot in sorted(self.unwritten):
            async with held(self._slot_locks[slot]):
                state = self.cache.get(slot)
                if slot not in self.unwritten or state is None or not self.broker.owns_slot(slot):
                    self.unwritten.discard(slot)
                    continue
                try:
                    await self.broker.run_io(self.store.save, slot, state)
                except (OSError, KaasError) as exc:
                    log.warning("txn_slot_flush_failed", slot=slot, error=str(exc))
                    continue
                self.unwritten.discard(slot)


class IdLock:
    """The lock of one transactional id, made on first use and dropped when nobody holds
    or waits for it; taken without a checkpoint when free (``aio.acquire``). A class rather than
    an ``asynccontextmanager`` generator: every AddPartitions and EndTxn takes it."""

    __slots__ = ("locks", "transactional_id", "holder")

    def __init__(self, locks: dict[str, list[Any]], transactional_id: str) -> None:
        self.locks = locks
        self.transactional_id = transactional_id
        self.holder: list[Any] | None = None

    async def __aenter__(self) -> None:
        holder = self.locks.get(self.transactional_id)
        if holder is None:
            holder = self.locks[self.transactional_id] = [Lock(), 0]
        holder[1] += 1
        self.holder = holder
        try:
            await acquire(holder[0])
        except BaseException:  # cancelled while waiting: not held, but no longer waiting
            self._leave()
            raise

    async def __aexit__(self, *exc: object) -> None:
        assert self.holder is not None
        self.holder[0].release()
        self._leave()

    def _leave(self) -> None:
        holder = self.holder
        assert holder is not None
        holder[1] -= 1
        if holder[1] == 0:
            del self.locks[self.transactional_id]
