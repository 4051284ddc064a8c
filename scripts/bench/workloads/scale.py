"""Scale: 1,000 partitions, 1,000 transactional ids and 100 groups on one cluster."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from ..common import (
    MIB,
    _ms_pcts,
    _payloads,
    _r,
    consumer_conf,
    ensure_topic,
    topic_partitions,
    txn_producer_conf,
)
from ..metering import BrokerPids, CpuMeter, RssSampler
from .throughput import run_produce


def run_scale(bootstrap: str, partitions: int, messages: int, size: int, txn_ids: int, groups: int, workers: int,
              group_concurrency: int, phase_seconds: float, pids: BrokerPids | None = None) -> dict:
    """1,000 partitions, 1,000 transactional ids, 100 groups: produce over every partition
    (the produce benchmark's settings), one transaction per transactional id (init + one
    message + commit, ``workers`` producers at a time), and ``groups`` group consumers
    (subscribe to the topic, receive a record, commit an offset for every partition, leave),
    ``group_concurrency`` at a time. Each phase stops after ``phase_seconds``. Reports the
    throughput of each phase and the brokers' summed RSS (max over samples every 0.5 s)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    pids = pids or BrokerPids()
    tag = uuid.uuid4().hex[:8]
    topic = f"bench-scale-{tag}"
    out: dict[str, object] = {"bench": "scale", "partitions": partitions, "size": size}
    rss_start = pids.rss() if pids else 0
    lapses_start = _lease_lapses(pids)
    with RssSampler(pids) as rss:
        t = time.perf_counter()
        rss.phase = "create"
        ensure_topic(bootstrap, topic, partitions, timeout=120)
        out["create_s"] = _r(time.perf_counter() - t)
        partitions = topic_partitions(bootstrap, topic)
        rss.phase = "produce"
        prod = run_produce(bootstrap, topic, messages, size, partitions, create=False, pids=pids,
                           seconds=phase_seconds)
        out.update(produce_msgs_per_s=prod["msgs_per_s"], produce_mib_per_s=prod["mib_per_s"],
                   produce_p50_ms=prod["p50_ms"], produce_p99_ms=prod["p99_ms"], produce_messages=prod["messages"],
                   produce_cpu_s=prod["cpu_s"], cpu_s_per_gib=prod["cpu_s_per_gib"])

        # One transaction for each of txn_ids transactional ids.
        payload = _payloads(size, 1)[0]
        inits: list[float] = []
        commits: list[float] = []
        errors: list[str] = []
        stop_at = time.perf_counter() + phase_seconds

        def one_txn(i: int) -> None:
            if time.perf_counter() > stop_at:
                return
            try:
                p = Producer(txn_producer_conf(bootstrap, f"bench-scale-{tag}-{i}"))
                a = time.perf_counter()
                p.init_transactions(30)
                b = time.perf_counter()
                p.begin_transaction()
                p.produce(topic, value=payload, partition=i % partitions)
                c = time.perf_counter()
                p.commit_transaction(30)
                d = time.perf_counter()
                inits.append(b - a)
                commits.append(d - c)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                errors.append(str(exc))

        rss.phase = "txn"
        meter = CpuMeter(pids).start()
        t = time.perf_counter()
        with ThreadPoolExecutor(workers) as ex:
            list(ex.map(one_txn, range(txn_ids)))
        elapsed = time.perf_counter() - t
        txn_cpu = meter.stop()
        out.update(txn_ids=txn_ids, txns_done=len(commits), txn_per_s=round(len(commits) / elapsed, 1),
                   **_ms_pcts(inits, "init"), **_ms_pcts(commits, "commit"), txn_errors=len(errors),
                   txn_first_errors=errors[:3], txn_cpu_s=_r(txn_cpu),
                   cpu_s_per_1k_txn=_r(txn_cpu / (len(commits) / 1000)) if txn_cpu is not None and commits else None)

        # Groups: join, receive, commit offsets for every partition, leave.
        joins: list[float] = []
        gcommits: list[float] = []
        gerrors: list[str] = []
        stop_at = time.perf_counter() + phase_seconds
        offsets = [TopicPartition(topic, q, 1) for q in range(partitions)]

        def one_group(i: int) -> None:
            if time.perf_counter() > stop_at:
                return
            c = Consumer(consumer_conf(bootstrap, f"bench-scale-{tag}-g{i}", **{
                "fetch.max.bytes": 1_048_576, "max.partition.fetch.bytes": 65_536,
                "queued.max.messages.kbytes": 2048, "queued.min.messages": 10}))
            try:
                a = time.perf_counter()
                c.subscribe([topic])
                got = 0
                deadline = a + max(20.0, phase_seconds)
                while not got and time.perf_counter() < deadline:
                    got = len(c.consume(100, 0.2))
                if not got:
                    raise RuntimeError("no record within the deadline")
                b = time.perf_counter()
                c.commit(offsets=offsets, asynchronous=False)
                joins.append(b - a)
                gcommits.append(time.perf_counter() - b)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                gerrors.append(str(exc))
            finally:
                c.close()

        rss.phase = "groups"
        meter = CpuMeter(pids).start()
        t = time.perf_counter()
        with ThreadPoolExecutor(group_concurrency) as ex:
            list(ex.map(one_group, range(groups)))
        elapsed = time.perf_counter() - t
        gcpu = meter.stop()
        out.update(groups=groups, groups_done=len(joins), groups_per_s=round(len(joins) / elapsed, 2),
                   **_ms_pcts(joins, "group_first_record"), **_ms_pcts(gcommits, "group_commit"),
                   group_errors=len(gerrors), group_first_errors=gerrors[:3], group_cpu_s=_r(gcpu),
                   group_concurrency=group_concurrency)
    samples = rss.samples or [0]
    out.update(rss_mib_start=_r(rss_start / MIB, 1), rss_mib_max=_r(max(samples) / MIB, 1),
               rss_mib_end=_r(samples[-1] / MIB, 1), broker_processes=len(pids.current()) if pids else 0,
               rss_at_max_mib={k: (_r(v / MIB, 1) if isinstance(v, int) else [_r(x / MIB, 1) for x in v])
                               for k, v in rss.peak.items()},
               rss_mib_max_by_phase={k: _r(v / MIB, 1) for k, v in rss.phase_max.items()},
               cpu_s=_r(sum(x for x in (prod["cpu_s"], txn_cpu, gcpu) if x is not None)) if pids else None,
               gib_basis="produced", topic=topic, bootstrap=bootstrap)
    lapses_end = _lease_lapses(pids)
    if lapses_start is not None and lapses_end is not None:
        out["lease_lapses"] = lapses_end - lapses_start
    return out


def _lease_lapses(pids: BrokerPids | None) -> int | None:
    """``lease_lapsed`` lines in the kaas brokers' logs so far (None when the data directory
    is unknown): each is a broker that found its write lease run out (a starved event loop
    makes it stop acknowledging until its next heartbeat)."""
    if pids is None or pids.kaas_data is None:
        return None
    count = 0
    for f in (pids.kaas_data / "run").glob("kaas-*.log"):
        try:
            count += f.read_bytes().count(b"lease_lapsed")
        except OSError:
            continue
    return count
