"""A real connection, dispatch and handlers over an in-process stream pair, with a real
``Broker`` on a tmp data directory started the way ``net.server`` starts it
(``tasks.serve_broker``: its membership tick, coordinators and timers in a nursery). No
process, no listener: the test is the client, encoding requests with kio classes and
reading framed responses.

Like hypercorn's ``tests/trio/test_sanity.py``, every test runs twice: over
``trio.testing.memory_stream_pair`` (the connection's generic stream path), and over two
ends of one loopback TCP connection made in this process (its socket fast path: responses
written straight to the file descriptor, large frames received with ``recv_into``).
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from kaas.broker import Broker
from kaas.clock import SYSTEM, Clock
from kaas.handlers.registry import versions_table
from kaas.net.connection import serve_connection
from kaas.settings import Settings
from kaas.tasks import serve_broker
from kaas.wire import batch as wb
from kaas.wire import codec
from kaas.wire import records as wr

MAX_REQUEST = 64 * 1024


@asynccontextmanager
async def open_broker_in(tmp_path, before: Callable[[Broker], None] | None = None, clock: Clock = SYSTEM,
                         **settings: Any) -> AsyncIterator[tuple[Broker, trio.Nursery]]:
    """One broker on ``tmp_path`` with ``settings``, joined to its (one-broker) cluster: the
    controller, holding its lease, coordinating every group and slot; and the nursery its
    loops run in. ``before`` sees the broker before its loops start (files to write);
    ``clock``, its time (``TrioClock(autojump_clock)`` runs its timers on trio's MockClock)."""
    broker = Broker(Settings(**{"broker_id": 0, "data": tmp_path / "data", "fsync": False, "advertise_port": 19092,
                                "auto_create_topics": False, **settings}), clock)
    if before is not None:
        before(broker)
    async with trio.open_nursery() as root:
        await root.start(serve_broker, broker)
        assert broker.cluster.is_controller and broker.cluster.lease_valid()
        try:
            yield broker, root
        finally:
            with trio.CancelScope(shield=True):
                await broker.close()
            root.cancel_scope.cancel()


@asynccontextmanager
async def open_broker(tmp_path) -> AsyncIterator[Broker]:
    async with open_broker_in(tmp_path, max_request_size=MAX_REQUEST) as (broker, _nursery):
        yield broker


@pytest.fixture(autouse=True, params=["memory", "socket"])
def stream_kind(request, monkeypatch):
    """Which stream pair ``open_client`` makes (every test runs over both)."""
    monkeypatch.setattr(Client, "kind", request.param)
    return request.param


async def open_stream_pair(kind: str) -> tuple[trio.abc.Stream, trio.abc.Stream]:
    """(client end, broker end): a memory stream pair, or one loopback connection (the
    listener is closed at once)."""
    if kind == "memory":
        return trio.testing.memory_stream_pair()
    with trio.socket.socket() as listener:
        await listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = trio.socket.socket()
        await client.connect(listener.getsockname())
        server, _addr = await listener.accept()
    return trio.SocketStream(client), trio.SocketStream(server)


class Client:
    """The client end: kio request objects out, (correlation id, kio response) in."""

    kind = "memory"  # the stream pair open_client makes (see stream_kind)

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.corr = 0
        self.buf = bytearray()

    def frame(self, req: Any) -> tuple[int, bytes]:
        self.corr += 1
        return self.corr, codec.encode_request(req.__api_key__, req.__version__, self.corr, "component", req)

    async def send(self, *reqs: Any) -> list[int]:
        """Send ``reqs`` in one write (pipelined); their correlation ids."""
        corrs, frames = zip(*(self.frame(r) for r in reqs))
        await self.stream.send_all(b"".join(frames))
        return list(corrs)

    async def _fill(self, n: int) -> bool:
        while len(self.buf) < n:
            data = await self.stream.receive_some(65536)
            if not data:
                return False
            self.buf += data
        return True

    async def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        """The next response frame, decoded as (key, version)."""
        assert await self._fill(4), "connection closed"
        (size,) = struct.unpack_from(">i", self.buf)
        assert await self._fill(4 + size), "connection closed mid-frame"
        payload = bytes(self.buf[4:4 + size])
        del self.buf[:4 + size]
        return codec.decode_response(api_key, version, payload)

    async def call(self, req: Any) -> Any:
        (corr,) = await self.send(req)
        got, resp = await self.receive(req.__api_key__, req.__version__)
        assert got == corr
        return resp

    async def wait_closed(self) -> bytes:
        """Everything the broker sends until it closes its end."""
        out = bytes(self.buf)
        try:
            while data := await self.stream.receive_some(65536):
                out += data
        except trio.BrokenResourceError:  # closed with our bytes unread: a reset
            pass
        return out


@asynccontextmanager
async def open_client(broker: Broker, nursery: trio.Nursery) -> AsyncIterator[Client]:
    ours, theirs = await open_stream_pair(Client.kind)
    nursery.start_soon(serve_connection, broker, theirs)
    async with ours:
        yield Client(ours)


def metadata(*topics: str) -> MetadataRequest:
    return MetadataRequest(topics=tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics),
                           allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def create_topic(name: str, partitions: int) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=(CreatableTopic(name=name, num_partitions=partitions, replication_factor=-1,
                                                      assignments=(), configs=()),),
                               timeout=datetime.timedelta(seconds=10), validate_only=False)


def produce(topic: str, partition: int, batch: bytes, acks: int = -1) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5),
                          topic_data=(TopicProduceData(name=topic, partition_data=(
                              PartitionProduceData(index=partition, records=batch),)),))


def fetch(topic: str, partition: int, offset: int, max_wait_ms: int = 0, min_bytes: int = 1) -> FetchRequest:
    return FetchRequest(max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
                        topics=(FetchTopic(topic=topic, partitions=(
                            FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20),)),),
                        forgotten_topics_data=())


API_VERSIONS = ApiVersionsRequest(client_software_name="kaas-component", client_software_version="1.0")


def fetched_values(part) -> list[tuple[int, bytes | None, bytes]]:
    """(offset, key, record bytes) of every record of a fetched partition."""
    out = []
    for pos, h in wb.iter_headers(part.records):
        assert wb.crc_ok(part.records, pos, h)
        for rec in wr.records(memoryview(part.records)[pos:pos + h.batch_length + 12], h):
            out.append((h.base_offset + rec.offset_delta, rec.key, rec.raw))
    return out


async def test_api_versions_lists_the_registry_and_answers_a_newer_version_in_v0(tmp_path):
    with trio.fail_after(20):
        async with open_broker(tmp_path) as broker, trio.open_nursery() as nursery:
            async with open_client(broker, nursery) as client:
                resp = await client.call(API_VERSIONS)
                assert isinstance(resp, ApiVersionsResponse)
                assert resp.error_code == ErrorCode.none
                assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == \
                    [(v["api_key"], v["min_version"], v["max_version"]) for v in versions_table()]
                assert (18, 0, 4) in [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys]

                # A client newer than the broker asks at a version we do not know: the answer
                # is in the v0 layout (header v0), UNSUPPORTED_VERSION, and our key-18 range,
                # and the connection stays open for the retry at a version we know.
                corr, frame = client.frame(API_VERSIONS)
                frame = frame[:6] + struct.pack(">h", 9) + frame[8:]
                await client.stream.send_all(frame)
                got, resp = await client.receive(18, 0)
                assert got == corr
                assert isinstance(resp, ApiVersionsResponseV0)
                assert resp.error_code == ErrorCode.unsupported_version
                assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == [(18, 0, 4)]

                resp = await client.call(API_VERSIONS)
                assert resp.error_code == ErrorCode.none and len(resp.api_keys) == len(versions_table())
            nursery.cancel_scope.cancel()


async def test_metadata_names_this_broker_and_the_created_topic(tmp_path):
    with trio.fail_after(20):
        async with open_broker(tmp_path) as broker, trio.open_nursery() as nursery:
            async with open_client(broker, nursery) as client:
                md = await client.call(metadata("nope"))
                assert [(b.node_id, b.host, b.port) for b in md.brokers] == [(0, "127.0.0.1", 19092)]
                assert md.controller_id == 0 and md.cluster_id == "kaas-cluster"
                assert [(t.name, t.error_code) for t in md.topics] == [("nope", ErrorCode.unknown_topic_or_partition)]
                assert not (tmp_path / "data" / "data" / "nope").exists()  # no auto-creation

                created = await client.call(create_topic("two", 2))
                assert [(t.name, t.error_code, t.num_partitions, t.replication_factor) for t in created.topics] == \
                    [("two", ErrorCode.none, 2, 1)]
                again = await client.call(create_topic("two", 2))
                assert again.topics[0].error_code == ErrorCode.topic_already_exists

                md = await client.call(metadata("two"))
                (topic,) = md.topics
                assert topic.error_code == ErrorCode.none and topic.name == "two"
                assert sorted((p.partition_index, p.error_code, p.leader_id, tuple(p.replica_nodes))
                              for p in topic.partitions) == [(0, ErrorCode.none, 0, (0,)), (1, ErrorCode.none, 0, (0,))]
            nursery.cancel_scope.cancel()


async def test_metadata_by_topic_id_ignores_an_empty_name(tmp_path):
    """Apache's Java consumer (4.x, a broker-side regex subscription) asks for its assigned
    topics by id with the name "" (the schema's default), not null: the id is what counts."""
    import uuid

    with trio.fail_after(20):
        async with open_broker(tmp_path) as broker, trio.open_nursery() as nursery:
            async with open_client(broker, nursery) as client:
                await client.call(create_topic("by-id", 2))
                (known,) = (await client.call(metadata("by-id"))).topics
                unknown = uuid.uuid4()
                md = await client.call(MetadataRequest(
                    topics=(MetadataRequestTopic(topic_id=known.topic_id, name=""),
                            MetadataRequestTopic(topic_id=unknown, name=""),
                            MetadataRequestTopic(topic_id=known.topic_id, name=None)),
                    allow_auto_topic_creation=False, include_topic_authorized_operations=False))
                assert [(t.name, t.error_code, t.topic_id, len(t.partitions)) for t in md.topics] == [
                    ("by-id", ErrorCode.none, known.topic_id, 2),
                    (None, ErrorCode.unknown_topic_id, unknown, 0),
                    ("by-id", ErrorCode.none, known.topic_id, 2)]
            nursery.cancel_scope.cancel()


async def test_many_topics_in_one_create_topics_are_served_together(tmp_path):
    """A request for many topics writes every topic file first and waits for them all
    together (one placement by the controller), so 60 topics are served well within a
    timeout one topic at a time would need several ticks each to meet (librdkafka's 0045
    creates 100 in one request with a 25 s timeout)."""
    names = [f"many{i}" for i in range(60)]
    req = CreateTopicsRequest(topics=tuple(CreatableTopic(name=n, num_partitions=4, replication_factor=-1,
                                                          assignments=(), configs=()) for n in names),
                              timeout=datetime.timedelta(seconds=10), validate_only=False)
    with trio.fail_after(30):
        async with open_broker(tmp_path) as broker, trio.open_nursery() as nursery:
            async with open_client(broker, nursery) as client:
                before = broker.cluster.assignment.version
                created = await client.call(req)
                assert [(t.name, t.error_code, t.num_partitions) for t in created.topics] == \
                    [(n, ErrorCode.none, 4) for n in names]
                assert all(broker.admin.serves_topic(n, 4) for n in names)
                # placed in a few assignments, not one (and one wait for it) per topic
                assert broker.cluster.assignment.version - before < len(names) // 4
            nursery.cancel_scope.cancel()


async def test_create_produce_fetch_round_trip(tmp_path):
    with trio.fail_after(20):
        async with open_broker(tmp_path) as broker, trio.open_nursery() as nursery:
            async with open_client(broker, nursery) as client:
                assert (await client.call(create_topic("rt", 1))).topics[0].error_code == ErrorCode.none
                first = wb.build_batch(base_timestamp=1_000, records=[(b"k0", b"v0"), (None, b"v1")])
                second = wb.build_batch(base_timestamp=2_000, records=[(b"k2", b"v2")])

                out = []
                for batch in (first, second):
                    resp = await client.call(produce("rt", 0, batch))
                    (p,) = resp.responses[0].partition_responses
                    out.append((resp.responses[0].name, p.index, p.error_code, p.base_offset))
                assert out == [("rt", 0, ErrorCode.none, 0), ("rt", 0, ErrorCode.none, 2)]

                resp = await client.call(fetch("rt", 0, 0))
                assert resp.error_code == ErrorCode.none
                (part,) = resp.responses[0].partitions
                assert (resp.responses[0].topic, part.partition_index, part.error_code) == ("rt", 0, ErrorCode.none)
                assert part.high_watermark == 3 and part.log_start_offset == 0
                # the stored batches are the produced bytes, base offsets (and the
                # leader epoch) patched by the broker
                assert [h.base_offset for _pos, h in wb.iter_headers(part.records)] == [0, 2]
                stored_first = part.records[:len(first)]
                assert stored_first[8:12] == first[8:12] and stored_first[16:] == first[16:]
                values = fetched_values(part)
                assert [(o, k) for o, k, _raw in values] == [(0, b"k0"), (1, None), (2, b"k2")]
                assert all(raw.endswith(v + b"\x00") for (_o, _k, raw), v in zip(values, [b"v0", b"v1", b"v2"]))

                resp = await client.call(fetch("rt", 0, 2))
                assert [(o, k) for o, k, _raw in fetched_values(resp.responses[0].partitions[0])] == [(2, b"k2")]
                resp = await client.call(fetch("rt", 0, 9))
                assert resp.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
            nursery.cancel_scope.cancel()


async def test_pipelined_requests_are_answered_in_request_order(tmp_path):
    """A long-polling Fetch first, then requests that finish before it: their responses
    wait for its, and acks=0 Produce gets none."""
    with trio.fail_after(20):
        async with open_broker(tmp_path) as broker, trio.open_nursery() as nursery:
            async with open_client(broker, nursery) as client:
                assert (await client.call(create_topic("pipe", 1))).topics[0].error_code == ErrorCode.none
                batch = wb.build_batch(base_timestamp=5, records=[(b"a", b"1")])
                corrs = await client.send(
                    fetch("pipe", 0, 0, max_wait_ms=3000, min_bytes=1),  # parks until the produce below
                    API_VERSIONS,
                    metadata("pipe"),
                    produce("pipe", 0, batch, acks=0),  # no response
                    produce("pipe", 0, batch, acks=-1),
                    API_VERSIONS,
                )
                answers = []
                for key, version in [(1, 12), (18, 3), (3, 12), (0, 9), (18, 3)]:
                    corr, resp = await client.receive(key, version)
                    answers.append((corr, resp))
                assert [c for c, _ in answers] == [corrs[0], corrs[1], corrs[2], corrs[4], corrs[5]]
                fetched = answers[0][1].responses[0].partitions[0]
                # woken by the acks=0 batch; the acks=-1 one may have landed by then too
                assert [(o, k) for o, k, _ in fetched_values(fetched)] in ([(0, b"a")], [(0, b"a"), (1, b"a")])
                assert answers[1][1].error_code == ErrorCode.none
                assert answers[2][1].topics[0].name == "pipe"
                assert answers[3][1].responses[0].partition_responses[0].base_offset == 1
                assert answers[4][1].error_code == ErrorCode.none
            nursery.cancel_scope.cancel()


async def test_pipelined_produce_appends_in_arrival_order_when_the_first_parks(tmp_path, monkeypatch):
    """Five idempotent batches of a new producer (sequences 0-4) pipelined on one
    connection, the first of which parks before its append (as a transactional batch's
    KIP-890 check parks for the slot file off tmpfs): they are appended in arrival order,
    each answered with its own offset. Were a later one appended first, the unknown
    producer would start at its sequence and the first batch would be refused
    OUT_OF_ORDER_SEQUENCE_NUMBER (librdkafka's test 0103 saw this; fatal for a producer)."""
    from kaas.broker.partition import Partition

    real = Partition.produce
    parked = []

    async def produce_parking_first(self, records, header, transactional_id, **kw):
        if not parked:
            parked.append(header.base_sequence)
            await trio.sleep(0.05)  # every later request is running meanwhile
        return await real(self, records, header, transactional_id, **kw)

    monkeypatch.setattr(Partition, "produce", produce_parking_first)
    with trio.fail_after(20):
        async with open_broker(tmp_path) as broker, trio.open_nursery() as nursery:
            async with open_client(broker, nursery) as client:
                assert (await client.call(create_topic("order", 1))).topics[0].error_code == ErrorCode.none
                batches = [wb.build_batch(base_timestamp=5, producer_id=4242, producer_epoch=0, base_sequence=i,
                                          records=[(None, b"v%d" % i)]) for i in range(5)]
                corrs = await client.send(*(produce("order", 0, b, acks=-1) for b in batches))
                answers = [await client.receive(0, 9) for _ in batches]
                assert [c for c, _ in answers] == corrs
                parts = [r.responses[0].partition_responses[0] for _, r in answers]
                assert [(p.error_code, p.base_offset) for p in parts] == [(ErrorCode.none, i) for i in range(5)]
                assert parked == [0]
            nursery.cancel_scope.cancel()


async def test_a_pipelined_produce_burst_is_answered_in_one_send(tmp_path, monkeypatch):
    """librdkafka pipelines up to five Produce requests per connection. They append in
    arrival order, so when trio runs their tasks in reverse (half its passes) one finishes
    per pass; the writer waits while the ready answers keep coming and sends the burst
    whole, one send and one client wake-up instead of five. Ten bursts, so both orders
    occur."""
    from kaas.net import connection

    sends: list[int] = []
    real_send_now = connection.send_now

    async def counting_send_now(stream, fd, data):
        sends.append(len(bytes(data)))
        await real_send_now(stream, fd, data)

    monkeypatch.setattr(connection, "send_now", counting_send_now)
    with trio.fail_after(30):
        async with open_broker(tmp_path) as broker, trio.open_nursery() as nursery:
            async with open_client(broker, nursery) as client:
                assert (await client.call(create_topic("burst", 5))).topics[0].error_code == ErrorCode.none
                batch = wb.build_batch(base_timestamp=5, records=[(None, b"v")])
                for rnd in range(10):
                    sends.clear()
                    corrs = await client.send(*(produce("burst", p, batch, acks=-1) for p in range(5)))
                    answers = [await client.receive(0, 9) for _ in corrs]
                    assert [c for c, _ in answers] == corrs
                    offsets = [r.responses[0].partition_responses[0].base_offset for _, r in answers]
                    assert offsets == [rnd] * 5
                    assert len(sends) == 1, sends
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("bad", [
    pytest.param(struct.pack(">i", MAX_REQUEST + 1) + b"\0" * 64, id="frame-over-max-size"),
    pytest.param(struct.pack(">i", -5), id="negative-size"),
    pytest.param(struct.pack(">i", 12) + b"\x7f\x7f\0\0\0\0\0\x07garb", id="unknown-api-key"),
    pytest.param(struct.pack(">i", 9) + b"\0\x03\0\x0c\0\0\0\x07\xff", id="truncated-metadata-body"),
    # only ApiVersions is answered at a version the broker does not know (in v0)
    pytest.param(struct.pack(">i", 10) + b"\0\x03\0\x63\0\0\0\x07\0\0", id="unsupported-metadata-version"),
])
async def test_bad_bytes_close_the_connection_and_the_broker_serves_others(tmp_path, bad):
    with trio.fail_after(20):
        async with open_broker(tmp_path) as broker, trio.open_nursery() as nursery:
            async with open_client(broker, nursery) as bad_client, open_client(broker, nursery) as good:
                assert (await good.call(API_VERSIONS)).error_code == ErrorCode.none
                assert broker.connections == 2

                # one good request answered, then the bad bytes: the connection closes
                # without executing what follows them
                corr, ok = bad_client.frame(API_VERSIONS)
                _corr, after = bad_client.frame(create_topic("never", 1))
                await bad_client.stream.send_all(ok + bad + after)
                rest = await bad_client.wait_closed()
                (size,) = struct.unpack_from(">i", rest)
                assert len(rest) == 4 + size  # the first answer and nothing else
                got, resp = codec.decode_response(18, 3, rest[4:])
                assert got == corr and resp.error_code == ErrorCode.none

                md = await good.call(metadata("never"))
                assert md.topics[0].error_code == ErrorCode.unknown_topic_or_partition
                assert (await good.call(create_topic("after", 1))).topics[0].error_code == ErrorCode.none
                with trio.fail_after(5):
                    while broker.connections != 1:
                        await trio.sleep(0.01)
            nursery.cancel_scope.cancel()


async def test_a_socket_that_is_never_empty_still_lets_others_run(monkeypatch):
    """SocketReader skips trio's checkpoint when data is already there, but after
    YIELD_EVERY receives in a row that did not wait it yields: a client that keeps the
    socket full cannot hold the loop. Bytes arrive in order, whole, then the end."""
    import socket

    from kaas.aio import SocketReader

    yields = []
    real = trio.lowlevel.checkpoint

    async def counted() -> None:
        yields.append(1)
        await real()

    monkeypatch.setattr(trio.lowlevel, "checkpoint", counted)
    a, b = socket.socketpair()
    a.setblocking(False)
    b.sendall(b"".join(bytes([i]) * 10 for i in range(200)))
    reader = SocketReader(a.fileno())
    got = bytearray()
    for _ in range(SocketReader.YIELD_EVERY - 1):
        got += await reader.receive(10)
    assert yields == []  # no checkpoint while data was there
    got += await reader.receive(10)
    assert yields == [1]  # the YIELD_EVERY-th yields
    view = memoryview(bytearray(2000))
    while len(got) < 2000:
        k = await reader.receive_into(view)
        got += view[:k]
    assert bytes(got) == b"".join(bytes([i]) * 10 for i in range(200))
    b.close()
    assert await reader.receive(10) == b""
    a.close()
