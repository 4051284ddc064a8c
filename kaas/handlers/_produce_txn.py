"""The transactional part of Produce that runs before any append (docs/transactions.rst,
"The partition leader under transaction.version 2"):

* a request whose transactional batches come from more than one producer is refused
  whole, INVALID_PRODUCER_ID_MAPPING on every partition (as Apache's leader refuses it);
* Produce v12+ (a transaction.version 2 producer, which sends no AddPartitionsToTxn):
  every partition this broker leads whose transactional batch is not yet in the producer's
  open transaction here is added to it through the coordinator, all of them in one add
  (``coord.txn.adder``), before the appends. A partition whose add failed is answered the
  error (``domain.txn_add.produce_answer``) and nothing of it is appended; the others
  then append as below v12, their verification answered by the add's cached answer.

The failpoint ``produce.before_txn_check`` (context: topic, partition, transactional_id)
holds a transactional request here, before anything of it is checked: a Produce delayed on
its way to the leader, as in the hanging-transaction tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas import failpoints
from kaas.domain import txn_add
from kaas.handlers._auth import TOPIC, Op, authorize
from kaas.wire import batch as wb

if TYPE_CHECKING:
    from collections.abc import Sequence

    from kaas.handlers.context import Context

__all__ = ["ADD_FROM", "Refusal", "before_appends"]

ADD_FROM = 12  # the first Produce version whose transactional batches add their partitions

Refusal = tuple[ErrorCode, str | None]

_MANY = (ErrorCode.invalid_producer_id_mapping, "Transactional records contained more than one producer ID")


def _transactional(records: bytes | None) -> wb.BatchHeader | None:
    """The header of a transactional batch with a producer id, else None (not
    transactional, or not a batch at all: the append refuses that one)."""
    if records is None or len(records) < 61 or not records[22] & wb.ATTR_TRANSACTIONAL:
        return None
    try:
        header = wb.parse_header(records)
    except wb.BatchError:
        return None
    return header if header.producer_id >= 0 else None


async def before_appends(ctx: Context, transactional_id: str | None,
                         topics: Sequence[tuple[str | None, Sequence[tuple[int, bytes | None]]]]
                         ) -> dict[tuple[str, int], Refusal]:
    """The partitions refused before any append, with their answer (see the module).

    Args:
        topics: per topic of the request, its name (None: an unknown topic id) and its
            (partition index, records).
    """
    found: dict[tuple[str, int], wb.BatchHeader] = {}
    for name, parts in topics:
        if name is None:
            continue
        for index, records in parts:
            header = _transactional(records)
            if header is not None:
                found[(name, index)] = header
    if not found or not transactional_id:
        return {}
    if failpoints.ARMED:
        for topic, index in found:
            await failpoints.hit_async("produce.before_txn_check", topic=topic, partition=index,
                                       transactional_id=transactional_id)
    producers = {(h.producer_id, h.producer_epoch) for h in found.values()}
    if len(producers) > 1:
        return dict.fromkeys(found, _MANY)
    if ctx.api_version < ADD_FROM:
        return {}
    [(pid, epoch)] = producers
    return await _add(ctx, transactional_id, pid, epoch, list(found))


async def _add(ctx: Context, transactional_id: str, pid: int, epoch: int,
               candidates: list[tuple[str, int]]) -> dict[tuple[str, int], Refusal]:
    """Add the candidates this broker leads and that need it; the refused ones."""
    broker = ctx.broker
    txn = broker.txn
    if txn is None:  # no coordinator runtime: nothing can be added (the append refuses)
        return {}
    wanted: list[tuple[str, int]] = []
    allowed: dict[str, bool] = {}
    for tp in candidates:
        part = broker.partitions.get(tp)
        if part is None or part.closed:
            continue  # not led here: the append answers NOT_LEADER_OR_FOLLOWER
        if tp[0] not in allowed:
            allowed[tp[0]] = authorize(ctx, Op.WRITE, TOPIC, tp[0])
        if allowed[tp[0]] and not txn.verifier.verified(pid, epoch, part):
            wanted.append(tp)
    if not wanted:
        return {}
    op = txn_add.produce_operation(ctx.api_version)
    codes = await broker.txn_adder.add_partitions(transactional_id, pid, epoch, wanted, op)
    return {tp: txn_add.produce_answer(code, op) for tp, code in codes.items() if code != ErrorCode.none}
