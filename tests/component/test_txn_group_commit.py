"""Group commit of the transaction slot files (``coord.txn.slots.Slots._commit``): the
EndTxn and AddPartitionsToTxn requests of other transactional ids of a slot that arrive
while its file is being written go out together in the next write, and each is answered
only once that write succeeded."""

from __future__ import annotations

import errno

import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode

from kaas import failpoints
from kaas.coord.txn import TxnCoordinator
from kaas.domain.routing import txn_slot
from kaas.domain.txn import TxnState
from kaas.errors import KaasError
from tests.component.test_txn_coordinator import FakeBroker, V, World, begin, produce, state_on_file
from tests.kafka import ids_in_one_slot


class GatedBroker(FakeBroker):
    """Slot writes wait for ``gate`` while it is set, and are recorded (the ids whose
    entries each write carried, by state); the writes numbered in ``failing`` (counted
    from 1 over every attempt) fail as a failing disk does."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.gate: trio.Event | None = None
        self.at_gate = trio.Event()  # a write waits at the gate
        self.writes: list[dict[str, str]] = []
        self.events: list[str] = []
        self.attempts = 0
        self.failing: set[int] = set()

    async def run_io(self, fn, *args):
        if getattr(fn, "__name__", "") == "save":
            if self.gate is not None:
                self.at_gate.set()
                await self.gate.wait()
            self.attempts += 1
            if self.attempts in self.failing:
                raise OSError(errno.EIO, "Input/output error", "slot file (test)")
            slot, state = args
            self.writes.append({k: m.state.value for k, m in state.entries.items()})
            self.events.append(f"write {len(self.writes)}")
        return await super().run_io(fn, *args)


@pytest.fixture
def coordinator(tmp_path):
    world = World(slot_owner=0)
    b0 = GatedBroker(world, 0, tmp_path)
    b0.txn = TxnCoordinator(b0)
    yield b0
    for key in list(b0.partitions):
        b0.unlead(*key)


async def two_open_and_a_third(b0: GatedBroker) -> tuple[list[str], dict[str, tuple[int, int]]]:
    """Transactions of ids A and B open (a record each on t-0), C initialised."""
    part = b0.lead("t", 0)
    ids = ids_in_one_slot(3, "gc")
    producers = {}
    for txn_id in ids[:2]:
        producers[txn_id] = pid, epoch = await begin(b0.txn, txn_id, [("t", 0)])
        await produce(part, txn_id, pid, epoch)
    producers[ids[2]] = await b0.txn.init_producer_id(ids[2], 60_000, -1, -1, 4)
    b0.writes.clear()
    return ids, producers


async def until(condition) -> None:
    while not condition():
        await trio.testing.wait_all_tasks_blocked()


def pending(b0: GatedBroker, txn_id: str) -> set[str]:
    batch = b0.txn.slots._pending.get(txn_slot(txn_id))
    return set() if batch is None else set(batch.changes)


async def test_two_end_txns_share_one_write(coordinator):
    b0 = coordinator
    (a, b, c), producers = await two_open_and_a_third(b0)
    b0.gate = trio.Event()
    codes = {}

    async def end(txn_id: str) -> None:
        codes[txn_id] = await b0.txn.end_txn(txn_id, *producers[txn_id], True, V)
        b0.events.append(f"answered {txn_id}")

    async def add_c() -> None:
        codes[c] = await b0.txn.add_partitions(c, *producers[c], [("t", 0)], V)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(add_c)  # its write starts and waits at the gate
        await b0.at_gate.wait()
        nursery.start_soon(end, a)
        nursery.start_soon(end, b)
        await until(lambda: pending(b0, a) == {a, b})  # both wait for the next write
        assert b0.writes == [] and not codes  # nobody answered, nothing written yet
        b0.gate.set()
    assert codes == {a: ErrorCode.none, b: ErrorCode.none, c: ErrorCode.none}
    # C's write, then one write that carried both prepares
    assert b0.writes[0][c] == "Ongoing" and b0.writes[0][a] == b0.writes[0][b] == "Ongoing"
    assert b0.writes[1][a] == b0.writes[1][b] == "PrepareCommit"
    assert b0.txn.stats["slot_writes_shared"] == 1
    # each EndTxn was answered after that write (no later write was needed: Complete* is
    # kept in memory until the next write of the slot)
    assert b0.events.index("write 2") < min(b0.events.index(f"answered {x}") for x in (a, b))
    assert len(b0.writes) == 2
    for txn_id in (a, b):
        assert state_on_file(b0, txn_id).state is TxnState.PrepareCommit


async def test_a_failure_after_the_shared_write_answers_neither(coordinator):
    """``slot.after_write`` fails: both prepares are on the file, yet neither EndTxn is
    answered NONE; the clients' retries find them prepared and finish them."""
    b0 = coordinator
    (a, b, c), producers = await two_open_and_a_third(b0)
    failpoints.set_in_process({"slot.after_write": {"action": "error", "match": {"entries": 2}}})
    try:
        b0.gate = trio.Event()
        codes = {}

        async def end(txn_id: str) -> None:
            try:
                codes[txn_id] = await b0.txn.end_txn(txn_id, *producers[txn_id], True, V)
            except KaasError as exc:  # the handler answers its code
                codes[txn_id] = exc.code

        async with trio.open_nursery() as nursery:
            nursery.start_soon(b0.txn.add_partitions, c, *producers[c], [("t", 0)], V)
            await b0.at_gate.wait()
            nursery.start_soon(end, a)
            nursery.start_soon(end, b)
            await until(lambda: pending(b0, a) == {a, b})
            b0.gate.set()
    finally:
        failpoints.set_in_process({})
    assert codes == {a: ErrorCode.coordinator_not_available, b: ErrorCode.coordinator_not_available}
    for txn_id in (a, b):
        assert state_on_file(b0, txn_id).state is TxnState.PrepareCommit
    for txn_id in (a, b):  # the clients retry: the prepared transactions are finished
        assert await b0.txn.end_txn(txn_id, *producers[txn_id], True, V) == ErrorCode.none
        assert b0.txn.slots.cache[txn_slot(txn_id)].get(txn_id).state is TxnState.CompleteCommit


async def test_a_failed_shared_write_refuses_every_request_it_carried(coordinator):
    """A flush of A's memory-only Complete* is being written; B's EndTxn and C's
    AddPartitionsToTxn meanwhile share the next write, which fails: both are refused, the
    memory does not run ahead of the file, and both retries go through."""
    b0 = coordinator
    (a, b, c), producers = await two_open_and_a_third(b0)
    assert await b0.txn.end_txn(a, *producers[a], True, V) == ErrorCode.none
    slot = txn_slot(a)
    assert slot in b0.txn.slots.unwritten  # A's Complete* is only in memory
    b0.gate = trio.Event()
    b0.attempts = len(b0.writes)
    b0.failing = {b0.attempts + 2}  # the flush's write succeeds, the shared one fails
    codes = {}

    async def call(txn_id: str, request) -> None:
        try:
            codes[txn_id] = await request
        except KaasError as exc:  # the handler answers its code
            codes[txn_id] = exc.code

    async with trio.open_nursery() as nursery:
        nursery.start_soon(b0.txn.flush_slots)  # its write waits at the gate
        await b0.at_gate.wait()
        nursery.start_soon(call, b, b0.txn.end_txn(b, *producers[b], True, V))
        nursery.start_soon(call, c, b0.txn.add_partitions(c, *producers[c], [("t", 0)], V))
        await until(lambda: pending(b0, b) == {b, c})
        b0.gate.set()
    assert codes == {b: ErrorCode.coordinator_not_available, c: ErrorCode.coordinator_not_available}
    assert state_on_file(b0, a).state is TxnState.CompleteCommit  # the flush's write
    assert state_on_file(b0, b).state is TxnState.Ongoing
    assert state_on_file(b0, c).partitions == frozenset()
    assert slot not in b0.txn.slots.cache and slot not in b0.txn.slots.unwritten  # read afresh next
    b0.gate = None
    assert await b0.txn.end_txn(b, *producers[b], True, V) == ErrorCode.none  # the clients retry
    assert state_on_file(b0, b).state is TxnState.PrepareCommit  # its Complete* in memory
    assert await b0.txn.add_partitions(c, *producers[c], [("t", 0)], V) == ErrorCode.none
    assert state_on_file(b0, b).state is TxnState.CompleteCommit  # written with C's change
    assert state_on_file(b0, c).partitions == frozenset({("t", 0)})
