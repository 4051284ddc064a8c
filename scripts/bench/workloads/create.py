"""CreateTopics: the answer, readiness on every broker, and a topic of many partitions."""

from __future__ import annotations

import statistics
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from ..common import CLIENT_COMMON, _r


def _wait_ready_through(bootstrap: str, topic: str, partitions: int, t_answer: float, producer, consumer,
                        deadline: float) -> dict:
    """Through clients bootstrapped at one broker only (made and connected beforehand): the
    ms after ``t_answer`` until a Produce (acks=all) to every partition was acknowledged,
    and until ``get_watermark_offsets`` answered for every partition."""
    from confluent_kafka import TopicPartition

    out: dict = {"broker": bootstrap, "produce_ms": None, "watermarks_ms": None, "errors": []}
    pending = set(range(partitions))
    acked: set[int] = set()

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.add(msg.partition())
        elif len(out["errors"]) < 3:
            out["errors"].append(str(err))

    for p in range(partitions):
        producer.produce(topic, value=b"ready?", partition=p, on_delivery=on_delivery)
    while len(acked) < partitions and time.monotonic() < deadline:
        producer.poll(0.002)
        for p in list(pending - acked):  # a failed delivery: send again
            if len(producer) == 0:
                producer.produce(topic, value=b"ready?", partition=p, on_delivery=on_delivery)
    if len(acked) == partitions:
        out["produce_ms"] = _r((time.monotonic() - t_answer) * 1000, 1)
    todo = set(range(partitions))
    while todo and time.monotonic() < deadline:
        for p in sorted(todo):
            try:
                lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=1.0)
                if hi >= 0:
                    todo.discard(p)
            except Exception as exc:  # noqa: BLE001 - not known there yet: ask again
                if len(out["errors"]) < 3:
                    out["errors"].append(str(exc))
                time.sleep(0.002)
    if not todo:
        out["watermarks_ms"] = _r((time.monotonic() - t_answer) * 1000, 1)
    return out


def run_create(bootstrap: str, partitions: int, big_partitions: int, rounds: int, timeout: float = 30.0) -> dict:
    """CreateTopics through the whole bootstrap (AdminClient ``create_topics``, with
    ``operation_timeout``): the answer's latency; then, for each broker of the bootstrap, a
    producer and a consumer bootstrapped at that broker only (created and connected before
    the CreateTopics) produce to every partition and read its watermarks: "ready on every
    broker" is the slowest of them, in ms after the answer. ``rounds`` fresh topics; then
    one topic of ``big_partitions`` partitions: its answer and the time until every
    broker's Metadata shows all its partitions with a leader."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    brokers = [b.strip() for b in bootstrap.split(",") if b.strip()]
    fast = {"topic.metadata.refresh.fast.interval.ms": 10, "retry.backoff.ms": 10, "retry.backoff.max.ms": 50,
            **CLIENT_COMMON}
    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_COMMON})
    admin.list_topics(timeout=10)
    rows = []
    for r in range(rounds):
        topic = f"bench-create-{uuid.uuid4().hex[:8]}"
        clients = []
        for b in brokers:
            prod = Producer({"bootstrap.servers": b, "acks": "all", "linger.ms": 0, "enable.idempotence": True,
                             "message.timeout.ms": int(timeout * 1000), **fast})
            cons = Consumer({"bootstrap.servers": b, "group.id": f"bench-create-{r}", **fast})
            prod.list_topics(timeout=10)  # connected, before the clock starts
            cons.list_topics(timeout=10)
            clients.append((b, prod, cons))
        t0 = time.monotonic()
        fut = admin.create_topics([NewTopic(topic, partitions)], operation_timeout=timeout)[topic]
        fut.result(timeout + 5)
        t_answer = time.monotonic()
        deadline = t_answer + timeout
        with ThreadPoolExecutor(len(clients)) as ex:
            per_broker = list(ex.map(lambda c: _wait_ready_through(c[0], topic, partitions, t_answer, c[1], c[2],
                                                                   deadline), clients))
        for _, prod, cons in clients:
            prod.flush(5)
            cons.close()
        ready = [max(x["produce_ms"], x["watermarks_ms"]) if x["produce_ms"] is not None and
                 x["watermarks_ms"] is not None else None for x in per_broker]
        rows.append({"answer_ms": _r((t_answer - t0) * 1000, 1),
                     "ready_every_broker_ms": None if None in ready else max(ready), "per_broker": per_broker})
    big = f"bench-create-big-{uuid.uuid4().hex[:8]}"
    per_admin = [AdminClient({"bootstrap.servers": b, **CLIENT_COMMON}) for b in brokers]
    for a in per_admin:
        a.list_topics(timeout=10)
    t0 = time.monotonic()
    admin.create_topics([NewTopic(big, big_partitions)], operation_timeout=timeout)[big].result(timeout + 5)
    t_answer = time.monotonic()
    big_ready = None
    todo = set(range(len(per_admin)))
    while todo and time.monotonic() < t_answer + timeout:
        for i in sorted(todo):
            try:
                t = per_admin[i].list_topics(big, timeout=5).topics.get(big)
            except Exception:  # noqa: BLE001 - ask again
                continue
            if t is not None and t.error is None and len(t.partitions) == big_partitions and \
                    all(p.leader >= 0 for p in t.partitions.values()):
                todo.discard(i)
        if todo:
            time.sleep(0.005)
    if not todo:
        big_ready = _r((time.monotonic() - t_answer) * 1000, 1)
    answers = sorted(x["answer_ms"] for x in rows)
    readies = [x["ready_every_broker_ms"] for x in rows]
    return {
        "bench": "create", "bootstrap": bootstrap, "brokers": len(brokers), "partitions": partitions,
        "rounds": rounds, "answer_ms_median": _r(statistics.median(answers), 1), "answer_ms_max": answers[-1],
        "ready_every_broker_ms_median": None if None in readies else _r(statistics.median(readies), 1),
        "ready_every_broker_ms_max": None if None in readies else max(readies),
        "big_partitions": big_partitions, "big_answer_ms": _r((t_answer - t0) * 1000, 1),
        "big_ready_every_broker_metadata_ms": big_ready,
        "runs": rows,
    }
