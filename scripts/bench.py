#!/usr/bin/env python3
"""Produce/fetch throughput and latency benchmarks with confluent-kafka (librdkafka).

Works against any Kafka-compatible bootstrap. Every run prints ONE JSON line:

    {"bench": "produce", "msgs_per_s": ..., "mb_per_s": ..., "p50_ms": ..., "p99_ms": ..., ...}

    python scripts/bench.py produce --bootstrap 127.0.0.1:9092 --messages 200000 --size 100
    python scripts/bench.py fetch --bootstrap 127.0.0.1:9092 --messages 200000
    python scripts/bench.py compare --messages 200000 --rounds 3

``produce`` latency is per message, from the produce() call to the delivery report
(librdkafka's ``Message.latency()``). ``fetch`` creates and fills the topic when it holds
fewer than ``--messages`` records, then times assign() + reading them from the beginning;
its p50/p99 are the durations of the consume() calls that returned data (up to 10,000
messages each), a rough view of fetch pacing rather than a per-message latency.
The Python produce()/consume() loop itself costs about 1 us per message, so with small
messages both brokers can be client-bound; raise --size to load the broker more.
``compare`` starts a fresh kaas broker and the librdkafka mock cluster and alternates
between them (A B A B), then prints a summary line with medians and kaas/mock ratios.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import click

REPO = Path(__file__).resolve().parent.parent
MOCK_CLUSTER = Path("/work/shared/peers/mock_cluster.py")


# ---------------------------------------------------------------------------- helpers


def _percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


_NO_CREATE_TOPICS: set[str] = set()


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create the topic, ignoring TOPIC_ALREADY_EXISTS.

    When CreateTopics cannot be served (the librdkafka mock cluster does not implement it,
    and with one broker it names a controller that does not exist, so the AdminClient
    waits forever), fall back to auto-creation by a producer's Metadata request: the topic
    then gets the peer's default partition count.
    """
    from concurrent.futures import TimeoutError as FutureTimeout

    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if bootstrap not in _NO_CREATE_TOPICS:
        fut = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)[topic]
        try:
            fut.result(3)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        except FutureTimeout:
            _NO_CREATE_TOPICS.add(bootstrap)
    probe = Producer({"bootstrap.servers": bootstrap, "allow.auto.create.topics": True}) \
        if bootstrap in _NO_CREATE_TOPICS else admin
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # wait until every partition has a leader
        md = probe.list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) >= 1 and \
                all(p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.1)
    raise click.ClickException(f"topic {topic} has no leaders")


def topic_partitions(bootstrap: str, topic: str) -> int:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return len(md.topics[topic].partitions)


def _payloads(size: int, n: int = 64) -> list[bytes]:
    """Half random, half repeated: compressible about 2x, like typical messages."""
    out = []
    for _ in range(n):
        rnd = os.urandom(max(1, size // 4)).hex()[: size // 2]
        body = (rnd + "x" * size)[:size]
        out.append(body.encode())
    return out


def producer_conf(bootstrap: str, acks: str, idempotence: bool, linger_ms: float, compression: str) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "enable.idempotence": idempotence,
        "linger.ms": linger_ms,
        "compression.type": compression,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "batch.size": 1_000_000,
        "message.timeout.ms": 120_000,
    }


def run_produce(bootstrap: str, topic: str, messages: int, size: int, partitions: int, acks: str,
                idempotence: bool, linger_ms: float, compression: str, create: bool = True) -> dict:
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

    # Warm up the connection and metadata so the timed part is steady-state.
    p.produce(topic, value=payloads[0], partition=0, on_delivery=lambda e, m: None)
    p.flush(30)

    produce = p.produce
    poll = p.poll
    t0 = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                produce(topic, value=payloads[i % npay], partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                poll(0.01)
        if i & 1023 == 0:
            poll(0)
    remaining = p.flush(300)
    elapsed = time.perf_counter() - t0
    if remaining or errors:
        raise click.ClickException(f"produce failed: {remaining} undelivered, errors: {errors[:3]}")
    latencies.sort()
    mb = messages * size / 1e6
    return {
        "bench": "produce", "msgs_per_s": round(messages / elapsed, 1), "mb_per_s": round(mb / elapsed, 3),
        "p50_ms": _r(_percentile(latencies, 0.50) * 1000), "p99_ms": _r(_percentile(latencies, 0.99) * 1000),
        "messages": messages, "size": size, "partitions": partitions, "acks": acks,
        "idempotence": idempotence, "linger_ms": linger_ms, "compression": compression,
        "seconds": round(elapsed, 3), "topic": topic, "bootstrap": bootstrap,
    }


def _end_offsets(consumer, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    from confluent_kafka import TopicPartition

    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            for p in range(partitions)}


def run_fetch(bootstrap: str, topic: str, messages: int, size: int, partitions: int, acks: str,
              idempotence: bool, linger_ms: float, compression: str) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    ensure_topic(bootstrap, topic, partitions)
    partitions = topic_partitions(bootstrap, topic)
    conf = {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}", "enable.auto.commit": False,
            "enable.partition.eof": False, "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760, "queued.max.messages.kbytes": 262_144,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
    probe = Consumer(conf)
    try:
        marks = _end_offsets(probe, topic, partitions)
    finally:
        probe.close()
    # Count what was ever written (high watermarks): a peer may trim old records (the
    # librdkafka mock keeps a few MB per partition), and refilling would not help.
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
    finally:
        c.close()
    batch_lat.sort()
    return {
        "bench": "fetch", "msgs_per_s": round(count / elapsed, 1), "mb_per_s": round(nbytes / 1e6 / elapsed, 3),
        "p50_ms": _r((_percentile(batch_lat, 0.50) or 0) * 1000), "p99_ms": _r((_percentile(batch_lat, 0.99) or 0) * 1000),
        "first_msg_ms": _r(first_ms), "messages": count, "bytes": nbytes, "partitions": partitions,
        "seconds": round(elapsed, 3), "topic": topic, "bootstrap": bootstrap,
    }


# ---------------------------------------------------------------------------- CLI


def common_options(f):
    opts = [
        click.option("--bootstrap", default="127.0.0.1:9092", show_default=True, help="bootstrap.servers"),
        click.option("--messages", type=int, default=100_000, show_default=True),
        click.option("--size", type=int, default=100, show_default=True, help="Value size in bytes."),
        click.option("--partitions", type=int, default=3, show_default=True,
                     help="Partitions of the topic when it is created."),
        click.option("--topic", default=None, help="Topic (default: bench-produce-<random> / bench-fetch)."),
        click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="all", show_default=True),
        click.option("--idempotence/--no-idempotence", default=False, show_default=True),
        click.option("--linger-ms", type=float, default=5.0, show_default=True),
        click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
                     default="none", show_default=True),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Produce/fetch benchmarks for kaas or any Kafka-compatible bootstrap."""


@cli.command()
@common_options
def produce(bootstrap, messages, size, partitions, topic, acks, idempotence, linger_ms, compression) -> None:
    """Produce --messages values of --size bytes; msgs/s, MB/s, delivery latency p50/p99."""
    topic = topic or f"bench-produce-{uuid.uuid4().hex[:8]}"
    res = run_produce(bootstrap, topic, messages, size, partitions, acks, idempotence, linger_ms, compression)
    click.echo(json.dumps(res))


@cli.command()
@common_options
def fetch(bootstrap, messages, size, partitions, topic, acks, idempotence, linger_ms, compression) -> None:
    """Read --messages records from the beginning (filling the topic first if needed)."""
    topic = topic or "bench-fetch"
    res = run_fetch(bootstrap, topic, messages, size, partitions, acks, idempotence, linger_ms, compression)
    click.echo(json.dumps(res))


# ---------------------------------------------------------------------------- compare


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(bootstrap: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    admin = AdminClient({"bootstrap.servers": bootstrap})
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise click.ClickException(f"process exited with {proc.returncode}")
        try:
            admin.list_topics(timeout=1)
            return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.1)
    raise click.ClickException(f"{bootstrap} not ready")


class _Kaas:
    def __init__(self, extra: list[str]):
        base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
        self.dir = Path(tempfile.mkdtemp(prefix="kaas-bench-", dir=base))
        self.port = _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log = open(self.dir / "broker.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kaas.cli", "broker", "--data", str(self.dir / "data"),
             "--listen", self.bootstrap, "--log-level", "warning", *extra],
            cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _wait_ready(self.bootstrap, self.proc)

    def close(self, keep: bool) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if keep:
            click.echo(f"kaas data and log kept in {self.dir}", err=True)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class _Mock:
    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, str(MOCK_CLUSTER), "--brokers", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline().strip()
        if not line:
            raise click.ClickException("mock cluster printed no bootstrap")
        self.bootstrap = line
        _wait_ready(self.bootstrap, self.proc)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@cli.command()
@click.option("--messages", type=int, default=200_000, show_default=True)
@click.option("--rounds", type=int, default=3, show_default=True)
@click.option("--size", type=int, default=100, show_default=True)
@click.option("--partitions", type=int, default=3, show_default=True)
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="all", show_default=True)
@click.option("--idempotence/--no-idempotence", default=False, show_default=True)
@click.option("--linger-ms", type=float, default=5.0, show_default=True)
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
              default="none", show_default=True)
@click.option("--kaas-arg", "kaas_args", multiple=True, help="Extra argument for `kaas broker` (repeatable).")
@click.option("--keep", is_flag=True, help="Keep the kaas data directory and log.")
def compare(messages, rounds, size, partitions, acks, idempotence, linger_ms, compression, kaas_args, keep) -> None:
    """Start a fresh kaas broker and the librdkafka mock; run produce and fetch on each,
    alternating A B A B for --rounds rounds; one JSON line per run plus a summary."""
    targets: dict[str, object] = {}
    try:
        targets["kaas"] = _Kaas(list(kaas_args))
        targets["mock"] = _Mock()
        probe = f"bench-probe-{uuid.uuid4().hex[:6]}"
        ensure_topic(targets["mock"].bootstrap, probe, partitions)
        mock_parts = topic_partitions(targets["mock"].bootstrap, probe)
        if mock_parts != partitions:
            click.echo(f"note: the mock gives topics {mock_parts} partitions; using {mock_parts} on both",
                       err=True)
            partitions = mock_parts
        results: dict[tuple[str, str], list[dict]] = {}
        common = dict(messages=messages, size=size, partitions=partitions, acks=acks,
                      idempotence=idempotence, linger_ms=linger_ms, compression=compression)
        for rnd in range(rounds):
            for bench in ("produce", "fetch"):
                for name, target in targets.items():
                    if bench == "produce":
                        res = run_produce(target.bootstrap, f"bench-produce-{rnd}", **common)
                    else:
                        res = run_fetch(target.bootstrap, "bench-fetch", **common)
                    res.update(target=name, round=rnd)
                    results.setdefault((bench, name), []).append(res)
                    click.echo(json.dumps(res))
        summary: dict[str, object] = {"bench": "summary", "messages": messages, "rounds": rounds, "size": size,
                                      "partitions": partitions, "acks": acks, "idempotence": idempotence,
                                      "linger_ms": linger_ms, "compression": compression}
        for bench in ("produce", "fetch"):
            med = {}
            for name in targets:
                runs = results[(bench, name)]
                med[name] = {k: _r(statistics.median(r[k] for r in runs))
                             for k in ("msgs_per_s", "mb_per_s", "p50_ms", "p99_ms", "messages")}
            ratio = {k: (_r(med["kaas"][k] / med["mock"][k]) if med["mock"][k] else None)
                     for k in ("msgs_per_s", "mb_per_s", "p50_ms", "p99_ms")}
            summary[bench] = {"kaas": med["kaas"], "mock": med["mock"], "kaas_over_mock": ratio}
        click.echo(json.dumps(summary))
    finally:
        mock = targets.get("mock")
        if mock is not None:
            mock.close()
        k = targets.get("kaas")
        if k is not None:
            k.close(keep)


if __name__ == "__main__":
    cli()
