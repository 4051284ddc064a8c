"""The same application with aiokafka (asyncio): consume, add VAT, produce, and commit the
input offsets in the same transaction (``send_offsets_to_transaction``)."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from app import transform


async def run(bootstrap: str, source: str, sink: str, group: str, transactional_id: str, *,
              idle: float = 2.0, batch: int = 50) -> int:
    """Copy ``source`` to ``sink`` until the input has been idle for ``idle`` seconds after
    the first record.
    Returns the transactions committed."""
    consumer = AIOKafkaConsumer(source, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                auto_offset_reset="earliest", isolation_level="read_committed",
                                session_timeout_ms=6000, heartbeat_interval_ms=500)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                transaction_timeout_ms=10000, request_timeout_ms=10000)
    await producer.start()
    await consumer.start()
    commits = 0
    loop = asyncio.get_running_loop()
    last = float("inf")  # nothing read yet: joining the group may take a while
    try:
        while True:
            got = await consumer.getmany(timeout_ms=500, max_records=batch)
            if not got:
                if loop.time() - last > idle:
                    return commits
                continue
            last = loop.time()
            try:
                async with producer.transaction():
                    for tp, msgs in got.items():
                        for m in msgs:
                            await producer.send(sink, transform(m.value), key=m.key)
                    await producer.send_offsets_to_transaction(
                        {tp: msgs[-1].offset + 1 for tp, msgs in got.items()}, group)
                commits += 1
            except KafkaError:  # aborted: read again from the committed offsets
                for tp in got:
                    committed = await consumer.committed(tp)
                    if committed is None:
                        await consumer.seek_to_beginning(tp)
                    else:
                        consumer.seek(tp, committed)
    finally:
        await consumer.stop()
        await producer.stop()
