"""Transactions: one transactional producer (``txn``) and a consume-process-produce copier (``eos``)."""

from __future__ import annotations

import time
import uuid

import click

from ..common import _ms_pcts, _payloads, _r, consumer_conf, ensure_topic, topic_partitions, txn_producer_conf
from ..metering import BrokerPids, CpuMeter, cpu_fields
from .throughput import fill_topic


def commit_one(p, topic: str, payloads: list[bytes], k: int, n: int, partitions: int) -> tuple[int, float]:
    """One transaction of producer ``p``: ``n`` values round robin over ``partitions`` from
    the ``k``-th on, then commit. Returns (the next k, commit_transaction()'s seconds)."""
    p.begin_transaction()
    for _ in range(n):
        p.produce(topic, value=payloads[k % len(payloads)], partition=k % partitions)
        k += 1
    t1 = time.perf_counter()
    p.commit_transaction(60)
    return k, time.perf_counter() - t1


def run_txn(bootstrap: str, txn_messages: int, count: int, seconds: float, size: int, partitions: int,
            pids: BrokerPids | None = None) -> dict:
    """One transactional producer: begin, produce ``txn_messages`` values round-robin, commit;
    ``count`` times or until ``seconds`` pass. transactions/s and commit_transaction() latency."""
    from confluent_kafka import Producer

    topic = f"bench-txn-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, partitions)
    partitions = topic_partitions(bootstrap, topic)
    payloads = _payloads(size)
    p = Producer(txn_producer_conf(bootstrap, f"bench-txn-{uuid.uuid4().hex[:8]}"))
    t_init = time.perf_counter()
    p.init_transactions(30)
    init_s = time.perf_counter() - t_init
    # One warm-up transaction over every partition (connections, AddPartitions paths).
    p.begin_transaction()
    for part in range(partitions):
        p.produce(topic, value=payloads[0], partition=part)
    p.commit_transaction(30)
    commits: list[float] = []
    k = 0
    meter = CpuMeter(pids or BrokerPids()).start()
    t0 = time.perf_counter()
    stop_at = t0 + seconds
    while len(commits) < count and time.perf_counter() < stop_at:
        k, seconds_ = commit_one(p, topic, payloads, k, txn_messages, partitions)
        commits.append(seconds_)
    elapsed = time.perf_counter() - t0
    cpu_s = meter.stop()
    n = len(commits)
    return {
        "bench": "txn", "txn_messages": txn_messages, "txn_per_s": round(n / elapsed, 1),
        "msgs_per_s": round(k / elapsed, 1), **_ms_pcts(commits, "commit"),
        "init_ms": _r(init_s * 1000), "txns_done": n, "messages": k, "size": size, "partitions": partitions,
        "seconds": round(elapsed, 3), "topic": topic, "bootstrap": bootstrap,
        **cpu_fields(cpu_s, k * size, n, sys_s=meter.system),
    }


def run_eos(bootstrap: str, messages: int, size: int, partitions: int, batch: int, seconds: float = 60.0,
            pids: BrokerPids | None = None) -> dict:
    """Consume-process-produce copier: a read_committed group consumer and a transactional
    producer; per batch of up to ``batch`` records: begin, produce the copies, send the
    consumer's positions with send_offsets_to_transaction, commit. Timed from the first
    record received (the group join is join_s); stops early ``seconds`` after that."""
    from confluent_kafka import Consumer, Producer

    tag = uuid.uuid4().hex[:8]
    src, dst, group = f"bench-eos-in-{tag}", f"bench-eos-out-{tag}", f"bench-eos-{tag}"
    ensure_topic(bootstrap, src, partitions)
    ensure_topic(bootstrap, dst, partitions)
    partitions = topic_partitions(bootstrap, src)
    fill_topic(bootstrap, src, messages, size, partitions)
    c = Consumer(consumer_conf(bootstrap, group))
    p = Producer(txn_producer_conf(bootstrap, f"bench-eos-{tag}"))
    p.init_transactions(30)
    commits: list[float] = []
    sends: list[float] = []
    copied = 0
    nbytes = 0
    try:
        c.subscribe([src])
        t_sub = time.perf_counter()
        t0 = None
        meter = CpuMeter(pids or BrokerPids())
        deadline = time.monotonic() + 180
        while copied < messages:
            if time.monotonic() > deadline:
                raise click.ClickException(f"eos stalled at {copied}/{messages}")
            if t0 is not None and time.perf_counter() - t0 > seconds:
                break
            msgs = c.consume(min(batch, messages - copied), 1.0)
            if not msgs:
                continue
            if t0 is None:
                t0 = time.perf_counter()
                meter.start()
            p.begin_transaction()
            for m in msgs:
                if m.error() is not None:
                    raise click.ClickException(f"eos consume error: {m.error()}")
                v = m.value()
                nbytes += len(v)
                p.produce(dst, value=v, key=m.key(), partition=m.partition())
            positions = [tp for tp in c.position(c.assignment()) if tp.offset >= 0]
            t1 = time.perf_counter()
            p.send_offsets_to_transaction(positions, c.consumer_group_metadata(), 30)
            sends.append(time.perf_counter() - t1)
            t1 = time.perf_counter()
            p.commit_transaction(60)
            commits.append(time.perf_counter() - t1)
            copied += len(msgs)
        elapsed = time.perf_counter() - t0
        cpu_s = meter.stop()
    finally:
        c.close()
    return {
        "bench": "eos", "msgs_per_s": round(copied / elapsed, 1), **_ms_pcts(commits, "commit"),
        **_ms_pcts(sends, "send_offsets"),
        "txn_per_s": round(len(commits) / elapsed, 1), "join_s": _r(t0 - t_sub), "messages": copied,
        "txns_done": len(commits), "batch": batch, "size": size, "partitions": partitions,
        "seconds": round(elapsed, 3), "bootstrap": bootstrap,
        **cpu_fields(cpu_s, nbytes, len(commits)),
    }
