"""A consume-transform-produce application with exactly-once semantics (confluent-kafka).

It reads orders (``{"id": ..., "amount": ...}``) from an input topic, adds VAT, and writes
the result to an output topic. Each batch of records read is written and its input
offsets committed in one Kafka transaction (KIP-447: ``send_offsets_to_transaction``), so
after any crash or failover every order appears exactly once in the output.

``--broken`` (``run(..., broken=True)``) is the classic mistake: the consumer commits the
offsets itself (auto-commit, every 30 s here: the window is there at any interval),
outside the transaction. A crash after a transaction committed and before the offsets
were then copies those orders again; the example's tests show the verdict catching it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer

VAT = 0.2


def transform(value: bytes) -> bytes:
    order = json.loads(value)
    return json.dumps({"id": order["id"], "amount": order["amount"],
                       "gross": round(order["amount"] * (1 + VAT), 2)}).encode()


def run(config: Mapping[str, Any], source: str, sink: str, group: str, transactional_id: str, *,
        stop: Callable[[], bool], on_batch: Callable[[], None] = lambda: None, batch: int = 50,
        broken: bool = False) -> int:
    """Copy ``source`` to ``sink`` until ``stop()`` is true when nothing is left to read
    (``on_batch`` is called for each batch read). Returns the transactions committed."""
    consumer = Consumer({**config, "group.id": group, "group.instance.id": transactional_id,
                         "enable.auto.commit": broken,  # the bug: offsets auto-committed, apart
                         "auto.commit.interval.ms": 30_000,  # (librdkafka's 5 s, widened for the demonstration)
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    producer = Producer({**config, "transactional.id": transactional_id, "transaction.timeout.ms": 10000,
                         "socket.timeout.ms": 5000})
    producer.init_transactions(30)
    consumer.subscribe([source])
    commits = 0
    try:
        while True:
            msgs = [m for m in consumer.consume(batch, 0.5) if not m.error()]
            if not msgs:
                if stop():
                    return commits
                continue
            on_batch()
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, transform(m.value()), key=m.key())
            try:
                if broken:  # the bug: the offsets are auto-committed apart, not in the transaction
                    producer.commit_transaction(30)
                else:
                    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                         consumer.consumer_group_metadata(), 30)
                    producer.commit_transaction(30)
                commits += 1
            except KafkaException as exc:
                err = exc.args[0]
                if err.txn_requires_abort():
                    producer.abort_transaction(30)
                    _rewind(consumer)
                elif err.retriable():
                    producer.commit_transaction(30)  # the outcome is unknown: committing again tells it
                    commits += 1
                else:
                    raise
    finally:
        consumer.close()
        producer.flush(10)


def _rewind(consumer: Consumer) -> None:
    """After an abort, read again from the last committed offsets."""
    committed = consumer.committed(consumer.assignment(), 30)
    for tp in committed:
        if tp.offset >= 0:
            consumer.seek(tp)
        else:
            tp.offset = -2  # OFFSET_BEGINNING
            consumer.seek(tp)


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> None:
    """``python app.py --bootstrap HOST:PORT --source IN --sink OUT --group G --transactional-id T``:
    copy until the input has been idle for ``--idle`` seconds after the first record."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--idle", type=float, default=2.0,
                    help="stop after this long without input, once something was read")
    ap.add_argument("--broken", action="store_true", help="commit offsets outside the transaction (the bug)")
    args = ap.parse_args(argv)
    last = [float("inf")]  # nothing read yet: joining the group may take a while

    def stop() -> bool:
        return time.monotonic() - last[0] > args.idle

    def seen() -> None:
        last[0] = time.monotonic()

    n = run({"bootstrap.servers": args.bootstrap}, args.source, args.sink, args.group, args.transactional_id,
            stop=stop, on_batch=seen, broken=args.broken)
    print(f"committed {n} transactions", flush=True)


if __name__ == "__main__":
    main()
