"""flush.messages and flush.ms (``tasks.flush``): a partition written with acks=1 is
fsynced once that many offsets, or an append that old, wait for a group commit. A real
broker over an in-process connection, on trio's autojumping MockClock (its data on tmpfs:
``shm_path``), so flush.ms passes in no real time."""

from __future__ import annotations

import datetime

import trio
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.errors import ErrorCode

from kaas.broker import Broker
from kaas.clock import TrioClock
from kaas.wire import batch as wb
from tests.component.test_connection import open_broker_in, open_client, produce


def topic_with(name: str, **configs: str) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=(CreatableTopic(
        name=name, num_partitions=1, replication_factor=-1, assignments=(),
        configs=tuple(CreatableTopicConfig(name=k.replace("_", "."), value=v) for k, v in configs.items())),),
        timeout=datetime.timedelta(seconds=10), validate_only=False)


def unflushed(broker: Broker, topic: str) -> int:
    log = broker.partitions[(topic, 0)].log
    return log.log_end_offset - log.durable_offset


async def test_flush_messages_and_flush_ms(shm_path, thread_safe_autojump_clock):
    batch = wb.build_batch(base_timestamp=1, records=[(None, b"x")])
    clock = TrioClock(thread_safe_autojump_clock)
    async with open_broker_in(shm_path, clock=clock) as (broker, nursery), \
            open_client(broker, nursery) as client:
        for name, configs in (("by-count", {"flush_messages": "3"}), ("by-time", {"flush_ms": "500"}),
                              ("never", {})):
            assert (await client.call(topic_with(name, **configs))).topics[0].error_code == ErrorCode.none

        async def put(topic: str) -> None:
            r = await client.call(produce(topic, 0, batch, acks=1))
            assert r.responses[0].partition_responses[0].error_code == ErrorCode.none

        # flush.messages=3: two offsets wait; the third makes the flusher fsync at once
        await put("by-count")
        await put("by-count")
        await trio.sleep(0.1)
        assert unflushed(broker, "by-count") == 2
        await put("by-count")
        await trio.sleep(0.01)
        assert unflushed(broker, "by-count") == 0

        # flush.ms=500: an append waits at most that long for its fsync
        await put("by-time")
        await put("never")
        await trio.sleep(0.4)
        assert unflushed(broker, "by-time") == 1
        await trio.sleep(0.2)
        assert unflushed(broker, "by-time") == 0
        # the defaults: acks=1 batches wait for the next group commit, however long
        await trio.sleep(5)
        assert unflushed(broker, "never") == 1
