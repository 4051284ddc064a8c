"""``coord.txn.adder.TxnAdder`` toward a coordinator on another broker, with the peer call
scripted: one request in flight per coordinator and the adds that arrive meanwhile
batched into the next; two adds of one transactional id in a batch; the coordinator's
answers (per partition, request-level, a failed link) in Apache's terms; AddOffsetsToTxn
for a group."""

from __future__ import annotations

from types import SimpleNamespace

import trio
import trio.testing
from kio.schema.errors import ErrorCode as E

from kaas.coord.txn.adder import TxnAdder
from kaas.errors import PeerUnavailable
from kaas.wire import codec
from kaas.wire.build import build


class Coordinator:
    """Broker 0 as the peer call reaches it: each request recorded; answered once
    ``release`` is set, per partition with ``code_of(transactional id)``."""

    def __init__(self) -> None:
        self.requests: list[object] = []
        self.release = trio.Event()
        self.code_of = lambda txn_id: E.none
        self.top = E.none
        self.fail = False

    async def call(self, broker_id: int, api_key: int, version: int, body, timeout: float):
        assert broker_id == 0
        self.requests.append(body)
        await self.release.wait()
        if self.fail:
            raise PeerUnavailable("link failed")
        if api_key == 25:
            return build(codec.response_class(25, version), {"throttle_time": 0, "error_code": self.top})
        return build(codec.response_class(24, version), {"throttle_time": 0, "error_code": self.top,
                                                         "results_by_transaction": [] if self.top else [
            {"transactional_id": t.transactional_id, "topic_results": [
                {"name": tp.name, "results_by_partition": [
                    {"partition_index": p, "partition_error_code": self.code_of(t.transactional_id)}
                    for p in tp.partitions]} for tp in t.topics]}
            for t in body.transactions]})


def adder(coord: Coordinator) -> TxnAdder:
    broker = SimpleNamespace(id=1, txn=None, txn_owner=lambda txn_id: 0)
    return TxnAdder(broker, coord)


async def test_adds_are_batched_behind_the_request_in_flight():
    coord = Coordinator()
    a = adder(coord)
    got: dict[str, dict] = {}

    async def add(name: str, txn_id: str, epoch: int, parts) -> None:
        got[name] = await a.add_partitions(txn_id, 7, epoch, parts)

    async with trio.open_nursery() as n:
        n.start_soon(add, "first", "a", 0, [("t", 0)])
        await trio.testing.wait_all_tasks_blocked()
        assert len(coord.requests) == 1  # in flight: the next ones wait and batch
        n.start_soon(add, "b", "b", 0, [("t", 1)])
        await trio.testing.wait_all_tasks_blocked()
        n.start_soon(add, "c", "c", 3, [("t", 2), ("u", 0)])
        await trio.testing.wait_all_tasks_blocked()
        n.start_soon(add, "b-again", "b", 0, [("t", 1), ("t", 3)])  # the client retried
        await trio.testing.wait_all_tasks_blocked()
        n.start_soon(add, "b-older", "b", -1, [("t", 1)])
        await trio.testing.wait_all_tasks_blocked()
        coord.release.set()
    assert len(coord.requests) == 2
    second = coord.requests[1]
    assert [(t.transactional_id, t.producer_epoch, t.verify_only) for t in second.transactions] == \
        [("b", 0, False), ("c", 3, False)]
    assert {(tp.name, tuple(tp.partitions)) for t in second.transactions for tp in t.topics} == \
        {("t", (1, 3)), ("t", (2,)), ("u", (0,))}
    assert got["first"] == {("t", 0): E.none}
    assert got["b"] == {("t", 1): E.network_exception}  # replaced by the retry at the same epoch
    assert got["b-older"] == {("t", 1): E.invalid_producer_epoch}  # a lower epoch than the one waiting
    assert got["b-again"] == {("t", 1): E.none, ("t", 3): E.none}
    assert got["c"] == {("t", 2): E.none, ("u", 0): E.none}


async def test_a_higher_epoch_fences_the_waiting_add():
    coord = Coordinator()
    a = adder(coord)
    got: dict[str, dict] = {}

    async def add(name: str, epoch: int) -> None:
        txn_id = "other" if name == "first" else "x"  # the first only puts a request in flight
        got[name] = await a.add_partitions(txn_id, 7, epoch, [("t", 0)])

    async with trio.open_nursery() as n:
        n.start_soon(add, "first", 0)
        await trio.testing.wait_all_tasks_blocked()
        n.start_soon(add, "old", 4)
        await trio.testing.wait_all_tasks_blocked()
        n.start_soon(add, "new", 5)
        await trio.testing.wait_all_tasks_blocked()
        coord.release.set()
    assert got == {"first": {("t", 0): E.none}, "old": {("t", 0): E.invalid_producer_epoch},
                   "new": {("t", 0): E.none}}


async def test_coordinator_answers_in_apaches_terms():
    coord = Coordinator()
    coord.release.set()
    a = adder(coord)
    coord.code_of = lambda txn_id: E.producer_fenced
    assert await a.add_partitions("x", 7, 0, [("t", 0)]) == {("t", 0): E.invalid_producer_epoch}
    coord.code_of = lambda txn_id: E.invalid_producer_id_mapping
    assert await a.add_partitions("x", 7, 0, [("t", 0)]) == {("t", 0): E.invalid_producer_id_mapping}
    coord.top = E.cluster_authorization_failed  # the broker's own right: never shown to the client
    assert await a.add_partitions("x", 7, 0, [("t", 0), ("t", 1)]) == \
        {("t", 0): E.invalid_txn_state, ("t", 1): E.invalid_txn_state}
    coord.top, coord.fail = E.none, True
    assert await a.add_partitions("x", 7, 0, [("t", 0)]) == {("t", 0): E.network_exception}
    assert await a.add_offsets("x", 7, 0, "g") == E.network_exception
    coord.fail = False
    assert await a.add_offsets("x", 7, 0, "g") == E.none
    assert coord.requests[-1].group_id == "g"
    coord.top = E.producer_fenced
    assert await a.add_offsets("x", 7, 0, "g") == E.invalid_producer_epoch
    coord.top = E.group_authorization_failed
    assert await a.add_offsets("x", 7, 0, "g") == E.invalid_txn_state


async def test_no_coordinator_is_coordinator_not_available():
    broker = SimpleNamespace(id=1, txn=None, txn_owner=lambda txn_id: None)
    a = TxnAdder(broker, Coordinator())
    assert await a.add_partitions("x", 7, 0, [("t", 0)]) == {("t", 0): E.coordinator_not_available}
    assert await a.add_offsets("x", 7, 0, "g") == E.coordinator_not_available
    mine = TxnAdder(SimpleNamespace(id=1, txn=None, txn_owner=lambda txn_id: 1), Coordinator())
    assert await mine.add_partitions("x", 7, 0, [("t", 0)]) == {("t", 0): E.coordinator_not_available}
