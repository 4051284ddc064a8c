"""ShareFetch (78, versions 1-2; librdkafka 2.15 sends 1, Apache 4.2 serves 1-2): a share
consumer's fetch (KIP-932). Acknowledgements piggybacked on it are applied first (each
partition's outcome in ``acknowledge_error_code``); then records are acquired for the
member from the partitions of its share session, durably, and returned with the
acquired ranges, first deliveries in batches of about ``batch_size`` records cut at log
batch boundaries (Apache's ``SharePartition.createBatches``). A request that has not
acquired ``min_bytes`` waits up to ``max_wait`` for records to arrive or be released
(Apache's ``DelayedShareFetch``, which waits for ``min_bytes`` of the log before it
acquires: kaas acquires what there is and waits for more, so those records' locks start
up to ``max_wait`` sooner). ``max_records`` or ``max_bytes`` 0 asks for no records: the answer
leaves at once with none (Apache's ``SharePartitionManager.processShareFetch``).

Session epochs (``domain.share_sessions``): 0 opens a session (acknowledgements in it:
INVALID_REQUEST), -1 is the final request (acknowledgements only; the member's other
records are released and the session ends), n continues the session at epoch n. v2
(KIP-1206, KIP-1222): ``share_acquire_mode`` 1 caps the records at ``max_records``;
``is_renew_ack`` allows RENEW (4) acknowledgements and then fetches nothing (its fetch
fields must be 0).

Not advertised in ApiVersions until ShareGroupHeartbeat (76) exists: a share consumer
needs both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import trio
from kio.schema.errors import ErrorCode
from kio.schema.share_fetch.v2.request import ShareFetchRequest as ShareFetchV2

from kaas import counters
from kaas.domain.share_batches import join_acquired, split_acquired
from kaas.domain.share_sessions import FINAL_EPOCH
from kaas.errors import KaasError
from kaas.handlers._auth import TOPIC, Op, authorize
from kaas.handlers._share import Answers, Call, Key
from kaas.wire import batch as wb
from kaas.wire.build import ms

if TYPE_CHECKING:
    from kio.schema.share_fetch import v1, v2

    from kaas.handlers.context import Context

    ShareFetchRequest: TypeAlias = v1.ShareFetchRequest | v2.ShareFetchRequest

API_KEY = 78
VERSIONS = (1, 2)
RECORD_LIMIT = 1  # share_acquire_mode: record_limit
#: a partition's entry before anything was acknowledged or acquired
EMPTY: dict[str, object] = {"acknowledge_error_code": ErrorCode.none, "acknowledge_error_message": None,
                            "records": b"", "acquired_records": []}


async def handle(ctx: Context, req: ShareFetchRequest) -> dict[str, object]:
    call = Call.open(ctx, req, renew=isinstance(req, ShareFetchV2) and req.is_renew_ack)
    if not isinstance(call, Call):
        return call
    if call.renew and (req.max_bytes or req.min_bytes or req.max_records or ms(req.max_wait)):
        return call.reply(ErrorCode.invalid_request, "a renew request fetches nothing: its max_bytes, min_bytes,"
                          " max_records and max_wait must be 0")
    shares = ctx.broker.shares
    forgotten = [(t.topic_id, int(i)) for t in req.forgotten_topics_data if t.topic_id is not None
                 for i in t.partitions]
    session = shares.sessions.fetch(call.group, call.member, call.epoch, call.requested, forgotten, bool(call.acks),
                                    shares.now_ms(), ctx.session.conn_id)
    if session.error != ErrorCode.none:
        return call.reply(session.error)
    for key in call.requested if session.full else call.acks:
        call.answers.entry(key, **EMPTY)
    await call.acknowledge("acknowledge_error_code")
    if call.epoch == FINAL_EPOCH:
        call.close(session.partitions)
    elif not call.renew and session.partitions and req.max_records > 0 and req.max_bytes > 0:
        # (no records asked for: Apache answers at once)
        await _fetch(ctx, req, call.group, call.member, list(session.partitions), call.answers)
    return call.reply()


async def _fetch(ctx: Context, req: ShareFetchRequest, group: str, member: str, keys: list[Key],
                 answers: Answers) -> None:
    """Acquire from ``keys`` (rotated by the session's epoch, as Apache rotates them) until
    ``min_bytes`` (at most ``max_bytes``, as Apache caps it) were acquired, a partition
    failed, no more may be taken (``max_records``, ``max_bytes``), or ``max_wait`` passed;
    what was acquired meanwhile stays acquired and is answered then, at the latest half a
    record lock after the first acquisition (so no lock ends before the answer leaves). First deliveries
    come in acquired batches of about ``batch_size`` (``domain.share_batches``)."""
    shares = ctx.broker.shares
    record_limit = isinstance(req, ShareFetchV2) and req.share_acquire_mode == RECORD_LIMIT
    shift = req.share_session_epoch % len(keys)
    keys = keys[shift:] + keys[:shift]
    deadline = trio.current_time() + max(0, ms(req.max_wait)) / 1000
    budget, left, taken = req.max_bytes, int(req.max_records), 0
    min_bytes = min(req.min_bytes, req.max_bytes)
    batch_size = int(req.batch_size)
    covered: dict[Key, int] = {}  # the last offset of the records answered per partition
    held: dict[Key, tuple[bytes, tuple[tuple[int, int, int], ...]]] = {}  # what each has in the answer
    capped = False
    while True:
        failed = False
        for key in keys:
            if left <= 0 or taken >= budget:
                break
            name = answers.names.get(key[0])
            problem = ErrorCode.unknown_topic_id if name is None else (
                None if authorize(ctx, Op.READ, TOPIC, name) else ErrorCode.topic_authorization_failed)
            if problem is not None or name is None:
                answers.entry(key, **EMPTY)["error_code"] = problem
                failed = True
                continue
            try:
                got = await shares.acquire(group, member, name, key[1], max_records=left, max_bytes=budget - taken,
                                           min_one=taken == 0, record_limit=record_limit)
            except KaasError as exc:
                entry = answers.entry(key, **EMPTY)
                entry["error_code"], entry["error_message"] = exc.code, exc.message
                if exc.code == ErrorCode.not_leader_or_follower:
                    answers.not_here(entry, name, key[1])
                failed = True
                continue
            if got.acquired:
                records = _past(got.records, covered.get(key, -1))
                counters.record_fetched(name, len(records), sum(h.records_count for _, h in wb.iter_headers(records)))
                covered[key] = max(covered.get(key, -1), _last_offset(got.records))
                before = held.get(key, (b"", ()))
                held[key] = (before[0] + records, tuple(join_acquired(before[1], got.acquired)))
                ranges = held[key][1] if record_limit else split_acquired(
                    held[key][1], [hd.base_offset for _, hd in wb.iter_headers(held[key][0])], batch_size)
                entry = answers.entry(key, **EMPTY)
                entry["records"] = held[key][0]
                entry["acquired_records"] = [{"first_offset": f, "last_offset": la, "delivery_count": c}
                                             for f, la, c in ranges]
                left -= sum(la - f + 1 for f, la, _ in got.acquired)
                taken += len(records)
        if held and not capped:  # never hold records past half their lock (Apache acquires at the end)
            deadline, capped = min(deadline, trio.current_time() + shares.lock_ms(group) / 2000), True
        if failed or taken >= min_bytes or left <= 0 or taken >= budget or trio.current_time() >= deadline \
                or ctx.broker.draining:
            return
        with trio.move_on_at(deadline):
            await shares.wait_for_work()


def _past(records: bytes, last: int) -> bytes:
    """The batches of ``records`` holding offsets past ``last``: a later acquisition from
    a partition may cover a batch the answer holds already (part of it acquired before)."""
    for pos, hd in wb.iter_headers(records):
        if hd.last_offset > last:
            return records[pos:]
    return b""


def _last_offset(records: bytes) -> int:
    return max((hd.last_offset for _, hd in wb.iter_headers(records)), default=-1)
