"""ShareFetch (78, versions 1-2; librdkafka 2.15 sends 1, Apache 4.2 serves 1-2): a share
consumer's fetch (KIP-932). Acknowledgements piggybacked on it are applied first (each
partition's outcome in ``acknowledge_error_code``); then records are acquired for the
member from the partitions of its share session, durably, and returned with the
acquired ranges. A request that acquires nothing waits up to ``max_wait`` for records to
arrive or be released. ``max_records`` or ``max_bytes`` 0 asks for no records: the answer
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

from kaas.domain.share_sessions import FINAL_EPOCH
from kaas.errors import KaasError
from kaas.handlers._auth import TOPIC, Op, authorize
from kaas.handlers._share import Answers, Call, Key
from kaas.wire.build import ms

if TYPE_CHECKING:
    from kio.schema.share_fetch import v1, v2

    from kaas.handlers import Context

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
    something was acquired, a partition failed, or ``max_wait`` passed."""
    shares = ctx.broker.shares
    record_limit = isinstance(req, ShareFetchV2) and req.share_acquire_mode == RECORD_LIMIT
    shift = req.share_session_epoch % len(keys)
    keys = keys[shift:] + keys[:shift]
    deadline = trio.current_time() + max(0, ms(req.max_wait)) / 1000
    budget = req.max_bytes
    while True:
        left = int(req.max_records)
        taken = 0
        failed = False
        for key in keys:
            if left <= 0 or taken >= budget:
                break
            name = answers.names.get(key[0])
            if name is None:
                answers.entry(key, **EMPTY)["error_code"] = ErrorCode.unknown_topic_id
                failed = True
                continue
            if not authorize(ctx, Op.READ, TOPIC, name):
                answers.entry(key, **EMPTY)["error_code"] = ErrorCode.topic_authorization_failed
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
                entry = answers.entry(key, **EMPTY)
                entry["records"] = got.records
                entry["acquired_records"] = [{"first_offset": f, "last_offset": la, "delivery_count": c}
                                             for f, la, c in got.acquired]
                left -= sum(la - f + 1 for f, la, _ in got.acquired)
                taken += len(got.records)
        if taken or failed or req.min_bytes <= 0 or trio.current_time() >= deadline or ctx.broker.draining:
            return
        with trio.move_on_at(deadline):
            await shares.wait_for_work()
