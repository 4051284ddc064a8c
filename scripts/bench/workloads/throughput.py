"""Produce, idempotence on/off, fetch (assign) and group consume."""

from __future__ import annotations

import time
import uuid

import click

from ..common import (
    MIB,
    _payloads,
    _percentile,
    _r,
    consumer_conf,
    ensure_topic,
    producer_conf,
    topic_partitions,
    txn_producer_conf,
)
from ..metering import BrokerPids, CpuMeter, cpu_fields, tmpfs_write_floor


def run_produce(bootstrap: str, topic: str, messages: int, size: int, partitions: int, acks: str = "all",
                idempotence: bool = True, linger_ms: float = 5.0, compression: str = "none", create: bool = True,
                pids: BrokerPids | None = None, seconds: float | None = None, warmup: bool = True,
                keyless: bool = False) -> dict:
    """Produce ``messages`` values of ``size`` bytes round-robin over the partitions (stopping
    early after ``seconds`` if given); msgs/s, MiB/s, delivery latency p50/p99. With
    ``warmup``, one untimed message per partition goes first (connections, metadata). With
    ``keyless``, no partition is named: librdkafka's default partitioner places the keyless
    values (sticky: one partition for ``sticky.partitioning.linger.ms``, then another)."""
    from confluent_kafka import Producer

    if create:
        ensure_topic(bootstrap, topic, partitions)
        partitions = topic_partitions(bootstrap, topic)
    p = Producer(producer_conf(bootstrap, acks, idempotence, linger_ms, compression))
    payloads = _payloads(size)
    npay = len(payloads)
    latencies: list[float] = []
    errors: list[str] = []
    lat_append = latencies.append

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            lat_append(msg.latency())

    # Warm up the connections and metadata so the timed part is steady-state.
    for part in range(partitions if warmup else 0):
        p.produce(topic, value=payloads[0], partition=part, on_delivery=lambda e, m: None)
    p.flush(30)

    produce = p.produce
    poll = p.poll
    meter = CpuMeter(pids or BrokerPids()).start()
    t0 = time.perf_counter()
    stop_at = t0 + seconds if seconds else None
    sent = 0
    for i in range(messages):
        while True:
            try:
                if keyless:
                    produce(topic, value=payloads[i % npay], on_delivery=on_delivery)
                else:
                    produce(topic, value=payloads[i % npay], partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                poll(0.01)
        sent += 1
        if i & 1023 == 0:
            poll(0)
            if stop_at is not None and time.perf_counter() > stop_at:
                break
    remaining = p.flush(300)
    elapsed = time.perf_counter() - t0
    cpu_s = meter.stop()
    if remaining or errors:
        raise click.ClickException(f"produce failed: {remaining} undelivered, errors: {errors[:3]}")
    latencies.sort()
    nbytes = sent * size
    floor = {}
    if pids is not None and pids.kaas_data is not None:
        # the same bytes appended to a scratch file on the same file system, right after them;
        # beside the data directory, not in it (nothing but the brokers writes there)
        floor["tmpfs_write_cpu_s_per_gib"] = _r(tmpfs_write_floor(pids.kaas_data.parent, nbytes))
    return {
        "bench": "produce", "msgs_per_s": round(sent / elapsed, 1), "mb_per_s": round(nbytes / 1e6 / elapsed, 3),
        "mib_per_s": round(nbytes / MIB / elapsed, 3),
        "p50_ms": _r(_percentile(latencies, 0.50) * 1000), "p99_ms": _r(_percentile(latencies, 0.99) * 1000),
        "messages": sent, "size": size, "partitions": partitions, "acks": acks,
        "idempotence": idempotence, "linger_ms": linger_ms, "compression": compression, "keyless": keyless,
        "seconds": round(elapsed, 3), "topic": topic, "bootstrap": bootstrap,
        **cpu_fields(cpu_s, nbytes, sys_s=meter.system, faults=meter.faults), **floor,
    }


def run_idempotence(bootstrap: str, messages: int, size: int, partitions: int, pairs: int,
                    pids: BrokerPids | None = None) -> dict:
    """Produce runs with and without idempotence, alternating (on, off, off, on, on, off, ...)
    on one topic so each pair sees the same machine: the medians, and the median over pairs of
    on / off (the issue's target: under 5% apart; a ratio above 1 is noise, idempotence
    cannot make a broker faster). ``pids`` is accepted like the other benchmarks' and not
    used: this one compares throughput only."""
    topic = f"bench-idem-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, partitions)
    on: list[float] = []
    off: list[float] = []
    for i in range(pairs):
        order = ((True, on), (False, off)) if i % 2 == 0 else ((False, off), (True, on))  # no order bias
        for idem, into in order:
            res = run_produce(bootstrap, topic, messages, size, partitions, "all", idem, create=False)
            into.append(res["msgs_per_s"])
    ratios = sorted(a / b for a, b in zip(on, off, strict=True) if b)
    return {"bench": "idempotence", "pairs": pairs, "messages": messages, "size": size, "partitions": partitions,
            "idem_msgs_per_s": _percentile(sorted(on), 0.5), "plain_msgs_per_s": _percentile(sorted(off), 0.5),
            "idem_runs": on, "plain_runs": off, "on_off_ratio": _r(_percentile(ratios, 0.5)),
            "topic": topic, "bootstrap": bootstrap}


def _end_offsets(consumer, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    from confluent_kafka import TopicPartition

    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            for p in range(partitions)}


def run_fetch(bootstrap: str, topic: str, messages: int, size: int, partitions: int, acks: str = "all",
              idempotence: bool = True, linger_ms: float = 5.0, compression: str = "none",
              pids: BrokerPids | None = None) -> dict:
    """assign() + read ``messages`` records from the beginning (filling the topic first)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    ensure_topic(bootstrap, topic, partitions)
    partitions = topic_partitions(bootstrap, topic)
    conf = consumer_conf(bootstrap, f"bench-{uuid.uuid4()}", read_committed=False)
    probe = Consumer(conf)
    try:
        marks = _end_offsets(probe, topic, partitions)
    finally:
        probe.close()
    # Count what was ever written (high watermarks): a peer may trim old records (the
    # librdkafka mock keeps about 5 MB per partition), and refilling would not help.
    have = sum(hi for _lo, hi in marks.values())
    if have < messages:
        run_produce(bootstrap, topic, messages - have, size, partitions, acks, idempotence, linger_ms,
                    compression, create=False)

    c = Consumer(conf)
    try:
        marks = _end_offsets(c, topic, partitions)
        target = sum(hi - lo for lo, hi in marks.values())
        want = min(messages, target)
        count = 0
        nbytes = 0
        batch_lat: list[float] = []
        meter = CpuMeter(pids or BrokerPids()).start()
        t0 = time.perf_counter()
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        first_ms = None
        deadline = time.monotonic() + 300
        while count < want:
            if time.monotonic() > deadline:
                raise click.ClickException(f"fetch stalled at {count}/{want}")
            t1 = time.perf_counter()
            msgs = c.consume(min(10_000, want - count), 1.0)
            if not msgs:
                continue
            batch_lat.append(time.perf_counter() - t1)
            if first_ms is None:
                first_ms = (time.perf_counter() - t0) * 1000
            for m in msgs:
                if m.error() is not None:
                    raise click.ClickException(f"fetch error: {m.error()}")
                nbytes += len(m.value() or b"")
            count += len(msgs)
        elapsed = time.perf_counter() - t0
        cpu_s = meter.stop()
    finally:
        c.close()
    batch_lat.sort()
    return {
        "bench": "fetch", "msgs_per_s": round(count / elapsed, 1), "mb_per_s": round(nbytes / 1e6 / elapsed, 3),
        "mib_per_s": round(nbytes / MIB / elapsed, 3),
        "p50_ms": _r((_percentile(batch_lat, 0.50) or 0) * 1000),
        "p99_ms": _r((_percentile(batch_lat, 0.99) or 0) * 1000),
        "first_msg_ms": _r(first_ms), "messages": count, "partitions": partitions,
        "seconds": round(elapsed, 3), "topic": topic, "bootstrap": bootstrap,
        **cpu_fields(cpu_s, nbytes, basis="consumed"),
    }


# ---------------------------------------------------------------------------- consume


def fill_topic(bootstrap: str, topic: str, messages: int, size: int, partitions: int, txn_size: int = 0) -> int:
    """Write ``messages`` values round-robin: plainly (idempotent) or in transactions of
    ``txn_size`` messages each. Returns the number of transactions."""
    from confluent_kafka import Producer

    payloads = _payloads(size)
    if not txn_size:
        run_produce(bootstrap, topic, messages, size, partitions, create=False, warmup=False)
        return 0
    p = Producer(txn_producer_conf(bootstrap, f"bench-fill-{uuid.uuid4().hex[:8]}"))
    p.init_transactions(30)
    txns = 0
    for start in range(0, messages, txn_size):
        p.begin_transaction()
        for i in range(start, min(messages, start + txn_size)):
            while True:
                try:
                    p.produce(topic, value=payloads[i % len(payloads)], partition=i % partitions)
                    break
                except BufferError:
                    p.poll(0.01)
        p.commit_transaction(60)
        txns += 1
    return txns


def run_consume(bootstrap: str, messages: int, size: int, partitions: int, txn_size: int, passes: int,
                pids: BrokerPids | None = None, topic: str | None = None) -> dict:
    """A group consumer (subscribe, read_committed) reads a topic of ``messages`` records
    ``passes`` times (seeking back to the beginning after each pass). Throughput is timed
    from the first message received, so the group join (initial rebalance delay) is not in
    it; it is reported as join_s."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    kind = f"txn{txn_size}" if txn_size else "plain"
    topic = topic or f"bench-consume-{kind}-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, partitions)
    partitions = topic_partitions(bootstrap, topic)
    fill_txns = fill_topic(bootstrap, topic, messages, size, partitions, txn_size)
    # fetch.wait.max.ms: at the end of each pass the seek waits for the fetches in flight,
    # which the broker holds up to this long when there is nothing new (default 500 ms).
    c = Consumer(consumer_conf(bootstrap, f"bench-consume-{uuid.uuid4().hex[:8]}", **{"fetch.wait.max.ms": 10}))
    try:
        marks = _end_offsets(c, topic, partitions)
        if any(lo > 0 for lo, _hi in marks.values()):
            raise click.ClickException(f"the peer trimmed {topic} ({marks}); lower --messages")
        c.subscribe([topic])
        t_sub = time.perf_counter()
        deadline = time.monotonic() + 120
        total = 0
        in_pass = 0
        pass_no = 0
        first_batch = 0
        nbytes = 0
        t0 = None
        meter = CpuMeter(pids or BrokerPids())
        while pass_no < passes:
            if time.monotonic() > deadline:
                raise click.ClickException(f"consume stalled at pass {pass_no}, {in_pass}/{messages}")
            # Never ask for more than the pass holds: consume() waits for the count or the timeout.
            msgs = c.consume(min(10_000, messages - in_pass), 1.0)
            if not msgs:
                continue
            for m in msgs:
                if m.error() is not None:
                    raise click.ClickException(f"consume error: {m.error()}")
                nbytes += len(m.value() or b"")
            if t0 is None:
                t0 = time.perf_counter()
                meter.start()
                first_batch = len(msgs)
                nbytes = 0
            total += len(msgs)
            in_pass += len(msgs)
            if in_pass >= messages:
                pass_no += 1
                in_pass -= messages
                if pass_no < passes:
                    for tp in c.assignment():
                        c.seek(TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING))
        elapsed = time.perf_counter() - t0
        cpu_s = meter.stop()
        c.commit(asynchronous=False)
    finally:
        c.close()
    timed = total - first_batch
    return {
        "bench": "consume", "kind": kind, "msgs_per_s": round(timed / elapsed, 1),
        "mib_per_s": round(nbytes / MIB / elapsed, 3), "join_s": _r(t0 - t_sub),
        "messages": messages, "passes": passes, "consumed": total, "size": size, "partitions": partitions,
        "txn_size": txn_size, "fill_txns": fill_txns, "isolation": "read_committed",
        "seconds": round(elapsed, 3), "topic": topic, "bootstrap": bootstrap,
        **cpu_fields(cpu_s, nbytes, basis="consumed"),
    }
