"""Helpers of the share-partition component tests: a real broker in-process (its loops on
trio's MockClock through ``TrioClock``), ShareFetch/ShareAcknowledge requests built with
kio, encoded, decoded, handled by the handler module and the answer encoded and decoded
again (the handlers are not in the dispatch registry until ShareGroupHeartbeat exists)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.share_acknowledge.v1 import request as ack1
from kio.schema.share_acknowledge.v2 import request as ack2
from kio.schema.share_fetch.v1 import request as fetch1
from kio.schema.share_fetch.v2 import request as fetch2

from kaas.broker import Broker
from kaas.domain.groups.share.group import ShareHeartbeat
from kaas.errors import KaasError
from kaas.handlers import share_acknowledge, share_fetch
from kaas.handlers.context import Context
from kaas.handlers.session import Session
from kaas.wire import batch as wb
from kaas.wire import codec
from kaas.wire.build import build

Acks = dict[int, list[tuple[int, int, tuple[int, ...]]]]  # partition -> [(first, last, types)]


def fetch_req(member: str, epoch: int, topic_id: uuid.UUID | None, partitions: tuple[int, ...] = (0,),
              acks: Acks | None = None, *, group: str = "g", max_records: int = 500, max_wait_ms: int = 0,
              min_bytes: int = 1, max_bytes: int = 0x7FFFFFFF, version: int = 1, forget: tuple[int, ...] = (),
              batch_size: int = 500, **v2: Any) -> Any:
    m = fetch1 if version == 1 else fetch2
    acks = acks or {}
    parts = tuple(m.FetchPartition(partition_index=p, acknowledgement_batches=tuple(
        m.AcknowledgementBatch(first_offset=f, last_offset=la, acknowledge_types=t) for f, la, t in acks.get(p, ())))
        for p in sorted(set(partitions) | set(acks)))
    topics = (m.FetchTopic(topic_id=topic_id, partitions=parts),) if parts else ()
    forgotten = (m.ForgottenTopic(topic_id=topic_id, partitions=forget),) if forget else ()
    return m.ShareFetchRequest(group_id=group, member_id=member, share_session_epoch=epoch,
                               max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
                               max_bytes=max_bytes, max_records=max_records, batch_size=batch_size, topics=topics,
                               forgotten_topics_data=forgotten, **v2)


def ack_req(member: str, epoch: int, topic_id: uuid.UUID | None, acks: Acks, *, group: str = "g",
            version: int = 1, **v2: Any) -> Any:
    m = ack1 if version == 1 else ack2
    parts = tuple(m.AcknowledgePartition(partition_index=p, acknowledgement_batches=tuple(
        m.AcknowledgementBatch(first_offset=f, last_offset=la, acknowledge_types=t) for f, la, t in batches))
        for p, batches in sorted(acks.items()))
    return m.ShareAcknowledgeRequest(group_id=group, member_id=member, share_session_epoch=epoch,
                                     topics=(m.AcknowledgeTopic(topic_id=topic_id, partitions=parts),), **v2)


async def call(broker: Broker, req: Any, *, join: bool = True, connection: int = 0) -> Any:
    """Encode ``req``, decode it as the broker would, handle it, and decode the answer
    (``connection``: the number of the connection it came over; 0, none)."""
    key, version = req.__api_key__, req.__version__
    if join:
        await joined(broker, req.group_id, req.member_id)
    frame = codec.encode_request(key, version, 7, "share-test", req)
    decoded = codec.decode_request(memoryview(frame)[4:]).body
    ctx = Context(broker, key, version, 7, "share-test", "127.0.0.1:9", session=Session(conn_id=connection))
    handler = share_fetch if key == share_fetch.API_KEY else share_acknowledge
    answer = await handler.handle(ctx, decoded)
    wire = bytes(codec.encode_response(key, version, 7, build(codec.response_class(key, version), answer)))
    corr, resp = codec.decode_response(key, version, memoryview(wire)[4:])
    assert corr == 7
    return resp


def is_member(broker: Broker, group: str, member: str) -> bool:
    """``member`` is in the share group ``group`` (as its coordinator, this broker, says)."""
    try:
        return member in {m["member_id"] for m in broker.groups.shares.describe(group)["members"]}
    except KaasError:
        return False


async def joined(broker: Broker, group: str, member: str) -> None:
    """Make ``member`` a member of the share group ``group`` (ShareGroupHeartbeat, epoch 0,
    subscribed to every topic) unless it is one, as a share consumer joins before it
    fetches (the handlers themselves do not ask, as in Apache)."""
    if group and member and not is_member(broker, group, member):
        hb = ShareHeartbeat(member, 0, subscribed_topic_names=tuple(m.name for m in broker.topics.topics.values()))
        reply, _ = await broker.groups.shares.heartbeat(group, hb)
        assert reply.error_code == ErrorCode.none, reply


def part_of(resp: Any, index: int = 0) -> Any:
    """The response's entry for partition ``index`` (of its only topic)."""
    found = [p for t in resp.responses for p in t.partitions if p.partition_index == index]
    assert len(found) == 1, resp
    return found[0]


def acquired(resp: Any, index: int = 0) -> list[tuple[int, int, int]]:
    assert resp.error_code == ErrorCode.none, resp
    found = [p for t in resp.responses for p in t.partitions if p.partition_index == index]
    if not found:
        return []
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in found[0].acquired_records]


def offsets_in(records: bytes) -> list[int]:
    """The offsets of the records (data batches only) in a fetched record set."""
    out = []
    for _, h in wb.iter_headers(records):
        if not h.is_control:
            out.extend(range(h.base_offset, h.last_offset + 1))
    return out


async def produce(broker: Broker, topic: str, n: int, *, partition: int = 0, producer_id: int = -1,
                  producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False) -> int:
    """Append one batch of ``n`` records straight to the led partition; its base offset."""
    part = broker.get_partition(topic, partition)
    batch = wb.build_batch(base_timestamp=broker.clock.wall_ms(), producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=base_sequence,
                           attributes=wb.ATTR_TRANSACTIONAL if transactional else 0,
                           records=[(None, b"v%d" % i) for i in range(n)])
    res = part.append(batch, wb.parse_header(batch))
    await part.wait_durable(res.next_offset)
    return res.base_offset
