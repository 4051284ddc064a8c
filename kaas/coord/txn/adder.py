"""transaction.version 2 on the partition leader's and the group coordinator's side
(KIP-890 part 2): a TV2 producer sends no AddPartitionsToTxn and no AddOffsetsToTxn; the
broker that receives its first transactional batch for a partition (Produce v12+), or its
TxnOffsetCommit v5+, adds the partition or the group to the transaction itself, through the
transactional id's coordinator, before it appends or stages anything. This is Apache 4.4's
``AddPartitionsToTxnManager`` with VerifyOnly false.

* The coordinator is this broker: its ``TxnCoordinator`` is called directly.
* Another broker: AddPartitionsToTxn v5, the broker form, over ``peer_calls``. Adds for one
  coordinator are batched: one request in flight per coordinator, and every add that
  arrives meanwhile goes in the next one, several transactional ids to a request.
  Two adds of one transactional id in one batch: the older is answered at once,
  NETWORK_EXCEPTION at the same epoch (the client retried), INVALID_PRODUCER_EPOCH when
  the newer has a higher epoch; a newer add of a lower epoch is itself INVALID_PRODUCER_EPOCH.
* A group (TxnOffsetCommit v5): AddOffsetsToTxn to the coordinator (the broker form of
  AddPartitionsToTxn names partitions only, and kaas's transactions hold groups, not
  offsets-topic partitions).
* CONCURRENT_TRANSACTIONS (the last transaction's markers are still being written) is
  asked again every 20 ms for up to 100 ms, as Apache's leader does, then answered.

Errors come back per partition in Apache's terms (``domain.txn_add.from_coordinator``):
NETWORK_EXCEPTION when the coordinator could not be asked or did not answer,
COORDINATOR_NOT_AVAILABLE when no broker coordinates the id, INVALID_PRODUCER_EPOCH for a
fenced epoch. What a Produce or TxnOffsetCommit answers then is the caller's
(``domain.txn_add.produce_answer`` / ``group_answer``).

A successful add is remembered by the verifier (``Verifier.remember``), so that the append
right after it does not read the slot file again; a marker that lands while an add is out
keeps it from being remembered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas.aio import Lock, held
from kaas.domain import txn as dtxn
from kaas.domain import txn_add
from kaas.domain.txn_add import Operation
from kaas.errors import KaasError, PeerUnavailable
from kaas.wire import codec
from kaas.wire.build import build

if TYPE_CHECKING:
    from kaas.coord.txn.coordinator import TxnCoordinator

__all__ = ["ADD_OFFSETS_VERSION", "ADD_VERSION", "TxnAdder"]

log = structlog.get_logger()

ADD_PARTITIONS = 24
ADD_VERSION = 5  # the broker form with TRANSACTION_ABORTABLE (Apache's leaders send their latest)
ADD_OFFSETS = 25
ADD_OFFSETS_VERSION = 4
CALL_TIMEOUT_S = 5.0  # an add unanswered this long: NETWORK_EXCEPTION (the client retries)

TopicPartition = tuple[str, int]
Codes = dict[TopicPartition, ErrorCode]


class Caller(Protocol):
    """``peer_calls.PeerCalls``: one request to a peer, its answer."""

    async def call(self, broker_id: int, api_key: int, version: int, body: Any, timeout: float) -> Any: ...


class AdderBroker(Protocol):
    """The broker as the adder sees it."""

    @property
    def id(self) -> int: ...

    @property
    def txn(self) -> TxnCoordinator | None: ...

    def txn_owner(self, transactional_id: str) -> int | None: ...


class _Ask:
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "partitions", "codes")

    def __init__(self, transactional_id: str, producer_id: int, producer_epoch: int,
                 partitions: Sequence[TopicPartition]) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.partitions = partitions
        self.codes: Codes | None = None  # set once answered

    def answer(self, code: ErrorCode) -> None:
        self.codes = dict.fromkeys(self.partitions, code)

    def body(self) -> dict[str, object]:
        topics: dict[str, list[int]] = {}
        for topic, index in self.partitions:
            topics.setdefault(topic, []).append(index)
        return {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "verify_only": False,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


class TxnAdder:
    """Adds partitions and groups to transactions on behalf of TV2 producers (``broker.txn_adder``)."""

    def __init__(self, broker: AdderBroker, calls: Caller) -> None:
        self.broker = broker
        self.calls = calls
        self._pending: dict[int, dict[str, _Ask]] = {}  # coordinator -> the next request's adds
        self._locks: dict[int, Lock] = {}  # coordinator -> held while its request is out
        self.stats = {"adds": 0, "requests": 0, "retries": 0}

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Sequence[TopicPartition], op: Operation = Operation.ADD_PARTITION) -> Codes:
        """Add ``partitions`` to the ongoing transaction of ``transactional_id`` (beginning it
        if need be); the code of each, in Apache's terms (``from_coordinator``). The ones
        answered NONE are remembered by this broker's verifier."""
        self.stats["adds"] += 1
        began = trio.current_time()
        txn = self.broker.txn
        forgets = txn.verifier.forgets if txn is not None else 0
        while True:
            codes = await self._add_once(transactional_id, producer_id, producer_epoch, partitions)
            codes = {tp: txn_add.from_coordinator(c, op) for tp, c in codes.items()}
            elapsed_ms = int((trio.current_time() - began) * 1000)
            if not any(txn_add.retry_concurrent(c, op, elapsed_ms) for c in codes.values()):
                break
            self.stats["retries"] += 1
            await trio.sleep(txn_add.RETRY_BACKOFF_MS / 1000)
        txn = self.broker.txn
        if txn is not None:
            added = [tp for tp, c in codes.items() if c == ErrorCode.none]
            txn.verifier.remember(producer_id, producer_epoch, added, since=forgets)
        return codes

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str) -> ErrorCode:
        """Add the group's offsets to the ongoing transaction (AddOffsetsToTxn on its
        coordinator); the code in Apache's terms (``from_coordinator``)."""
        owner = self.broker.txn_owner(transactional_id)
        txn = self.broker.txn
        if owner is None or owner < 0 or (owner == self.broker.id and txn is None):
            return ErrorCode.coordinator_not_available
        if owner == self.broker.id and txn is not None:
            try:
                code = await txn.add_offsets(transactional_id, producer_id, producer_epoch, group_id,
                                             ADD_OFFSETS_VERSION, txn_version=dtxn.TV2)
            except KaasError as exc:
                code = exc.code
        else:
            req = build(codec.request_class(ADD_OFFSETS, ADD_OFFSETS_VERSION), {
                "transactional_id": transactional_id, "producer_id": producer_id,
                "producer_epoch": producer_epoch, "group_id": group_id})
            try:
                resp = await self.calls.call(owner, ADD_OFFSETS, ADD_OFFSETS_VERSION, req, CALL_TIMEOUT_S)
            except PeerUnavailable:
                return ErrorCode.network_exception
            code = resp.error_code
            if code in (ErrorCode.transactional_id_authorization_failed, ErrorCode.group_authorization_failed):
                code = ErrorCode.cluster_authorization_failed  # the broker's own right, not the client's
            code = txn_add.from_request(code)
        return txn_add.from_coordinator(code, Operation.ADD_PARTITION)

    async def _add_once(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        partitions: Sequence[TopicPartition]) -> Codes:
        owner = self.broker.txn_owner(transactional_id)
        txn = self.broker.txn
        if owner is None or owner < 0 or (owner == self.broker.id and txn is None):
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        if owner == self.broker.id and txn is not None:
            try:
                code = await txn.add_partitions(transactional_id, producer_id, producer_epoch, partitions, ADD_VERSION)
            except KaasError as exc:
                code = exc.code
            return dict.fromkeys(partitions, code)
        ask = _Ask(transactional_id, producer_id, producer_epoch, partitions)
        batch = self._pending.setdefault(owner, {})
        older = batch.get(transactional_id)
        if older is not None:
            if older.producer_epoch > producer_epoch:
                return dict.fromkeys(partitions, ErrorCode.invalid_producer_epoch)
            older.answer(ErrorCode.invalid_producer_epoch if older.producer_epoch < producer_epoch
                         else ErrorCode.network_exception)
        batch[transactional_id] = ask
        lock = self._locks.get(owner)
        if lock is None:
            lock = self._locks[owner] = Lock()
        async with held(lock):
            if ask.codes is None:
                await self._send(owner, list(self._pending.pop(owner, {}).values()))
        assert ask.codes is not None
        return ask.codes

    async def _send(self, owner: int, asks: list[_Ask]) -> None:
        """One AddPartitionsToTxn to ``owner`` carrying ``asks``; each gets its codes."""
        self.stats["requests"] += 1
        req = build(codec.request_class(ADD_PARTITIONS, ADD_VERSION),
                    {"transactions": [a.body() for a in asks]})
        try:
            resp = await self.calls.call(owner, ADD_PARTITIONS, ADD_VERSION, req, CALL_TIMEOUT_S)
        except PeerUnavailable:
            for a in asks:
                a.answer(ErrorCode.network_exception)
            return
        except BaseException:
            for a in asks:
                a.answer(ErrorCode.network_exception)
            raise
        if resp.error_code != ErrorCode.none:
            log.warning("txn_add_refused", to_broker=owner, error=resp.error_code.name)
            for a in asks:
                a.answer(txn_add.from_request(resp.error_code))
            return
        by_id = {r.transactional_id: r for r in resp.results_by_transaction}
        for a in asks:
            result = by_id.get(a.transactional_id)
            if result is None:  # the coordinator left it out: as a lost answer
                a.answer(ErrorCode.network_exception)
                continue
            got = {(t.name, p.partition_index): p.partition_error_code
                   for t in result.topic_results for p in t.results_by_partition}
            a.codes = {tp: got.get(tp, ErrorCode.network_exception) for tp in a.partitions}
