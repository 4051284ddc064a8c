"""message.timestamp.type=LogAppendTime through the Produce and ListOffsets handlers of an
in-process broker: batches are stamped with the broker's clock when appended, the response
carries that time, an idempotent retry gets the original time, ListOffsets finds records
by append time; CreateTime topics keep the producer's bytes. Also the replication factor
and min.insync.replicas as the handlers see them on one broker."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from kaas.handlers import create_topics, list_offsets, metadata, produce
from kaas.handlers.context import Context
from kaas.wire import batch as wb
from kaas.wire import codec
from kaas.wire.build import build
from tests.clocks import SteppedWall
from tests.component.test_coordinator_disk_faults import started_broker
from tests.component.ticks import tick


async def open_topic(broker, name: str, configs: dict[str, str], replication_factor: int = 1):
    broker.topics.create(name, 1, configs, replication_factor)
    for _ in range(3):
        await tick(broker)
        if (name, 0) in broker.partitions:
            return broker.partitions[(name, 0)]
    raise AssertionError(f"{name} not taken over")


def ctx(broker, api_key: int, version: int) -> Context:
    return Context(broker=broker, api_key=api_key, api_version=version, correlation_id=1, client_id="t",
                   peer="test")


async def produce_one(broker, topic: str, batch: bytes, acks: int = -1) -> dict:
    req = build(codec.request_class(0, 9), {
        "transactional_id": None, "acks": acks, "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    resp = await produce.handle(ctx(broker, 0, 9), req)
    if isinstance(resp, dict):
        return resp["responses"][0]["partition_responses"][0]
    # an answer patched into its template (a shape seen before): decode what goes out
    _corr, body = codec.decode_response(0, 9, bytes(codec.encode_response(0, 9, 1, resp))[4:])
    part = body.responses[0].partition_responses[0]
    append_time = part.log_append_time
    return {"error_code": part.error_code, "base_offset": part.base_offset, "log_start_offset": part.log_start_offset,
            "log_append_time": -1 if append_time is None else round(append_time.timestamp() * 1000)}


async def offset_for(broker, topic: str, ts: int) -> tuple[int, int]:
    req = build(codec.request_class(2, 7), {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                   "timestamp": ts}]}]})
    out = (await list_offsets.handle(ctx(broker, 2, 7), req))["topics"][0]["partitions"][0]
    assert out["error_code"] == ErrorCode.none
    return out["offset"], out["timestamp"]


def stored_headers(part) -> list[wb.BatchHeader]:
    data = part.read(0, 1 << 20, part.high_watermark).records
    out = []
    for pos, h in wb.iter_headers(data):
        assert wb.crc_ok(data, pos, h)
        out.append(h)
    return out


@pytest.fixture
def clock() -> SteppedWall:
    """The broker's wall clock at append, stepped by hand."""
    return SteppedWall(5_000)


async def test_log_append_time_stamps_answers_and_finds_by_append_time(tmp_path, clock):
    broker = await started_broker(tmp_path, clock)
    part = await open_topic(broker, "lat", {"message.timestamp.type": "LogAppendTime"})
    create_time = 10**12  # far in the future of the fake clock: the stamp must win
    times = []
    for i in range(3):
        clock.now_ms = 5_000 + 1_000 * i
        batch = wb.build_batch(base_timestamp=create_time - i, records=[(b"k", b"v%d" % i), (None, b"w")])
        out = await produce_one(broker, "lat", batch)
        assert out["error_code"] == ErrorCode.none
        assert out["base_offset"] == 2 * i
        assert out["log_append_time"] == clock.now_ms
        times.append(clock.now_ms)

    heads = stored_headers(part)
    assert [h.max_timestamp for h in heads] == times
    assert all(h.attributes & wb.ATTR_LOG_APPEND_TIME for h in heads)
    assert [h.base_timestamp for h in heads] == [create_time, create_time - 1, create_time - 2]

    # ListOffsets by timestamp follows the append time (batch max timestamps)
    assert await offset_for(broker, "lat", 0) == (0, 5_000)
    assert await offset_for(broker, "lat", 5_001) == (2, 6_000)
    assert await offset_for(broker, "lat", 7_000) == (4, 7_000)
    assert await offset_for(broker, "lat", 7_001) == (-1, -1)
    # MAX_TIMESTAMP: the first record carrying it (KIP-734 since Kafka 3.8); on a
    # LogAppendTime batch every record carries the append time, so the batch's first
    assert await offset_for(broker, "lat", list_offsets.MAX_TIMESTAMP) == (4, 7_000)


async def test_an_idempotent_retry_gets_the_original_append_time(tmp_path, clock):
    broker = await started_broker(tmp_path, clock)
    part = await open_topic(broker, "lat-idem", {"message.timestamp.type": "LogAppendTime"})
    batch = wb.build_batch(base_timestamp=1, producer_id=77, producer_epoch=0, base_sequence=0,
                           records=[(None, b"a"), (None, b"b")])
    first = await produce_one(broker, "lat-idem", batch)
    assert (first["error_code"], first["base_offset"], first["log_append_time"]) == (ErrorCode.none, 0, 5_000)
    clock.now_ms = 9_000
    retry = await produce_one(broker, "lat-idem", batch)
    assert (retry["error_code"], retry["base_offset"], retry["log_append_time"]) == (ErrorCode.none, 0, 5_000)
    assert part.high_watermark == 2  # written once


async def test_create_time_topics_keep_the_producers_bytes(tmp_path, clock):
    broker = await started_broker(tmp_path, clock)
    part = await open_topic(broker, "ct", {})
    batch = wb.build_batch(base_timestamp=123, max_timestamp=123, records=[(None, b"x")])
    out = await produce_one(broker, "ct", batch, acks=1)
    assert (out["error_code"], out["log_append_time"]) == (ErrorCode.none, -1)
    data = part.read(0, 1 << 20, 1).records
    assert data[16:] == batch[16:]  # only the base offset and leader epoch were patched
    assert await offset_for(broker, "ct", 100) == (0, 123)
    assert await offset_for(broker, "ct", 400) == (-1, -1)
    # a header whose maxTimestamp disagrees with its records is normalised (wire.validate)
    wrong = wb.build_batch(base_timestamp=200, max_timestamp=456, records=[(None, b"y")])
    out = await produce_one(broker, "ct", wrong, acks=1)
    assert out["error_code"] == ErrorCode.none
    h = stored_headers(part)[1]
    assert (h.base_timestamp, h.max_timestamp) == (200, 200)


async def test_min_insync_replicas_above_the_replication_factor_does_not_block_acks_all(tmp_path):
    """As Apache since 3.7: acks=all needs min(min.insync.replicas, replicas) in sync."""
    broker = await started_broker(tmp_path)
    await open_topic(broker, "misr", {"min.insync.replicas": "2"})
    out = await produce_one(broker, "misr", wb.build_batch(records=[(None, b"x")]))
    assert out["error_code"] == ErrorCode.none


async def test_create_topics_replication_factor_and_min_insync_replicas(tmp_path):
    broker = await started_broker(tmp_path)

    async def create(name: str, rf: int, cfg: dict[str, str] | None = None) -> dict:
        req = build(codec.request_class(19, 7), {
            "topics": [{"name": name, "num_partitions": 1, "replication_factor": rf, "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (cfg or {}).items()]}],
            "timeout": 1000, "validate_only": True})
        return (await create_topics.handle(ctx(broker, 19, 7), req))["topics"][0]

    ok = await create("t-default", -1)
    assert (ok["error_code"], ok["replication_factor"]) == (ErrorCode.none, 1)
    two = await create("t-two", 2)
    assert two["error_code"] == ErrorCode.invalid_replication_factor
    assert two["error_message"] == ("Unable to replicate the partition 2 time(s): The target replication factor "
                                    "of 2 cannot be reached because only 1 broker(s) are registered.")
    assert (await create("t-zero", 0))["error_code"] == ErrorCode.invalid_replication_factor
    assert (await create("t-neg", -2))["error_code"] == ErrorCode.invalid_replication_factor
    bad = await create("t-isr", 1, {"min.insync.replicas": "0"})
    assert bad["error_code"] == ErrorCode.invalid_config and "at least 1" in bad["error_message"]
    assert (await create("t-isr-high", 1, {"min.insync.replicas": "3"}))["error_code"] == ErrorCode.none


async def test_topic_file_keeps_the_replication_factor_and_old_files_read_as_one(tmp_path):
    broker = await started_broker(tmp_path)
    meta = broker.topics.create("rf3", 2, {}, 3)
    assert meta.replication_factor == 3
    import json

    path = broker.layout.topics / "rf3.json"
    obj = json.loads(path.read_text())
    assert obj["format"] == 1 and obj["replication_factor"] == 3
    del obj["replication_factor"]  # a file written before the field existed
    path.write_text(json.dumps(obj))
    from kaas.storage.topics import TopicStore

    fresh = TopicStore(broker.layout.topics)
    fresh.refresh()
    assert fresh.get("rf3").replication_factor == 1

    # Metadata names at most the brokers there are (one here), the leader first
    await open_topic(broker, "rf-meta", {}, replication_factor=3)
    req = build(codec.request_class(3, 12), {"topics": [{"name": "rf-meta", "topic_id": None}],
                                             "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False})
    (p,) = (await metadata.handle(ctx(broker, 3, 12), req))["topics"][0]["partitions"]
    assert (list(p["replica_nodes"]), list(p["isr_nodes"]), list(p["offline_replicas"])) == ([0], [0], [])
