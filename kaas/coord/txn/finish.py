"""The second phase of EndTxn: dispatch a prepared transaction's markers (``Dispatch``),
then the offset hook and the Complete* transition.

On a running broker the client is answered once Prepare* is durable and the rest runs
in a background task (``Finisher.finish`` with ``answer_early``); without one, any
dispatch failure answers COORDINATOR_NOT_AVAILABLE and leaves it prepared.
"""

from __future__ import annotations

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas import log as klog
from kaas.coord.ports import TxnBroker
from kaas.coord.txn._common import Stats, hit
from kaas.coord.txn.dispatch import Dispatch
from kaas.coord.txn.slots import Slots
from kaas.domain import txn as dtxn
from kaas.domain.txn import OffsetHook, Persist, Reply, WriteMarkers
from kaas.errors import KaasError

__all__ = ["FINISH_RETRY_MAX_S", "FINISH_RETRY_S", "Finisher"]

log = structlog.get_logger()

FINISH_RETRY_S = 0.05  # an early-answered EndTxn's background half retries after this, doubling
FINISH_RETRY_MAX_S = 1.6  # ... up to this pause; then the sweep takes over


class Finisher:
    """Finishes prepared transactions, in the background after an early answer."""

    def __init__(self, broker: TxnBroker, slots: Slots, dispatch: Dispatch, stats: Stats) -> None:
        self.broker = broker
        self.slots = slots
        self.dispatch = dispatch
        self.stats = stats
        # for the background half of EndTxn (``kaas.tasks.txn.serve_txn`` sets it); None:
        # EndTxn is answered once the markers are written
        self.nursery: trio.Nursery | None = None
        self._inflight: dict[str, trio.Event] = {}  # txn id -> its EndTxn's background half is done

    async def finish(self, slot: int, wm: WriteMarkers, *, answer_early: bool = False) -> ErrorCode:
        """Dispatch a prepared transaction's markers, then complete it (hook + Persist).

        ``answer_early`` (EndTxn from a client, on a running broker): answer NONE at once
        and write the markers and complete in a background task, as Apache answers EndTxn
        once PrepareCommit/PrepareAbort is written. The Prepare* on file is the decision;
        every other operation on the id waits for the background task (``settled``), and
        it retries, then leaves the rest to the sweep."""
        if answer_early and self.nursery is not None:
            done = trio.Event()
            self._inflight[wm.transactional_id] = done
            self.nursery.start_soon(self._finish_later, slot, wm, done)
            self.stats["answered_before_markers"] += 1
            return ErrorCode.none
        placed = await self.dispatch.local(wm)
        if placed is None:
            return ErrorCode.coordinator_not_available
        remote, complete = placed
        hook = dtxn.offset_hook_of(wm) if complete else None
        delivered, hooked = await self._remote_and_hook(wm, remote, hook)
        if not delivered or not complete:
            return ErrorCode.coordinator_not_available
        return await self._complete(slot, wm, hooked=hooked)

    async def _remote_and_hook(self, wm: WriteMarkers, remote: dict[int, set[tuple[str, int]]],
                               hook: OffsetHook | None) -> tuple[bool, bool]:
        """Hand the peer-led markers to their leaders and, at the same time, carry out the
        offset hook (``dtxn.offset_hook_of``: Prepare* is the decision, so the hook need not
        wait for the markers; each is a peer round trip when another broker leads or
        coordinates, and the id's next transaction waits for both). Returns (every marker
        delivered or queued, the hook done)."""
        if hook is None or not remote:
            delivered = await self.dispatch.remote(wm, remote)
            return delivered, bool(delivered and hook is not None and await self.dispatch.offset_hook(hook, wm))
        done: dict[str, bool] = {}

        async def markers() -> None:
            done["markers"] = await self.dispatch.remote(wm, remote)

        async def offsets() -> None:
            done["hook"] = await self.dispatch.offset_hook(hook, wm)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(markers)
            nursery.start_soon(offsets)
        self.stats["offset_hooks_beside_markers"] += 1
        return done["markers"], done["hook"]

    async def _finish_later(self, slot: int, wm: WriteMarkers, done: trio.Event) -> None:
        """The background half of an early-answered EndTxn (see ``finish``): markers,
        offset hook and Complete*, retried after 50 ms, doubling up to 1.6 s."""
        txn_id = wm.transactional_id
        try:
            delay = 0.0
            while True:
                try:
                    code = await self.finish(slot, wm)
                except KaasError as exc:
                    code = exc.code
                if code == ErrorCode.none:
                    return
                delay = delay * 2 if delay else FINISH_RETRY_S
                if delay > FINISH_RETRY_MAX_S or not self.broker.owns_slot(slot):
                    break
                await trio.sleep(delay)
                try:
                    meta = await self.slots.get(slot, txn_id)
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

    async def settled(self, transactional_id: str, timeout: float) -> bool:
        """Wait (under the id's lock) until no early-answered EndTxn of this id is still
        being finished in the background; False when ``timeout`` ran out first."""
        done = self._inflight.get(transactional_id)
        if done is None:
            return True
        with trio.move_on_after(timeout):
            await done.wait()
        return done.is_set()

    async def wait_all(self, timeout: float) -> bool:
        """Wait until no early-answered EndTxn is still being finished in the background;
        False when ``timeout`` ran out first."""
        with trio.move_on_after(timeout):
            while self._inflight:
                await next(iter(self._inflight.values())).wait()
            return True
        return False

    async def _complete(self, slot: int, wm: WriteMarkers, *, hooked: bool = False) -> ErrorCode:
        """The Complete* transition of a dispatched transaction: offset hook (unless it was
        carried out beside the markers, ``hooked``), then Persist."""
        meta = await self.slots.get(slot, wm.transactional_id)
        res = dtxn.complete_end_txn(meta, self.broker.clock.wall_ms(), dispatched=wm)
        for effect in res.effects:
            if isinstance(effect, OffsetHook):
                if not hooked and not await self.dispatch.offset_hook(effect, wm):
                    return ErrorCode.coordinator_not_available
            elif isinstance(effect, Persist):
                await hit("endtxn.before_complete")
                await self.slots.persist(slot, effect.meta, deferred=True)
                if klog.DEBUG:
                    log.debug("txn_completed", transactional_id=wm.transactional_id, state=effect.meta.state.value,
                              producer_id=wm.producer_id, producer_epoch=wm.producer_epoch,
                              partitions=len(wm.partitions), groups=len(wm.groups))
            elif isinstance(effect, Reply):
                return effect.error_code
        return res.error_code
