#!/usr/bin/env python3
"""Log compaction benchmarks (issue 18's targets), each on a fresh kaas cluster on tmpfs,
printing one JSON line per run:

    python scripts/bench_compaction.py keepup   # a compacted topic written at 50 MiB/s
    python scripts/bench_compaction.py cost     # produce on another topic, cleaner on/off, A B A B
    python scripts/bench_compaction.py read     # read 1 M updates over 10 k keys, compacted
    python scripts/bench_compaction.py all

keepup: keyed 1 KiB records over 10 k keys at a paced 50 MiB/s into one partition of a
compacted topic (64 MiB segments); every second it samples the partition's bytes on disk and
the cleaner's clean offset. The cleaner keeps up when the log stays bounded (it does not grow
with the bytes written) and the clean offset follows the log end.

cost: the same produce run on a delete-policy topic, twice per pair: while the cleaner
works through a 1 M-update dirty backlog of a compacted topic (B), and while the same backlog
sits there with the cleaner held back by min.compaction.lag.ms (A). The ratio B/A of the
produce throughput is the cleaner's cost (target: >= 0.9).

read: a changelog of 1 M updates (100 B values) over 10 k keys, cleaned, read from the start
by a consumer, against a topic of 10 k such records (target: < 3x).
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import MIB  # noqa: E402 — scripts/bench, the benchmark package
from bench.targets import tmp_base  # noqa: E402

from kaas.storage import cleaner  # noqa: E402
from kaas.testing import ClusterProcess  # noqa: E402


class Cluster:
    """A fresh kaas cluster on tmpfs (/dev/shm) for one benchmark."""

    def __init__(self, brokers: int = 3, backoff_ms: int = 1000) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="kaas-bench-compaction-", dir=tmp_base()))
        self.c = ClusterProcess(self.tmp / "data", brokers, extra=["--log-cleaner-backoff-ms", str(backoff_ms)])

    def __enter__(self) -> Cluster:
        self.c.start()
        return self

    def __exit__(self, *exc) -> None:
        self.c.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def bootstrap(self) -> str:
        return self.c.bootstrap

    def partition_dir(self, topic: str, p: int = 0) -> Path:
        return self.c.data / "data" / topic / str(p)

    def log_bytes(self, topic: str) -> int:
        d = self.partition_dir(topic)
        return sum(f.stat().st_size for f in d.glob("*.log")) if d.exists() else 0

    def clean_offset(self, topic: str) -> int:
        try:
            return int(cleaner.read_state(self.partition_dir(topic)).get("clean_offset", 0))
        except Exception:  # noqa: BLE001 - read while the leader rewrites it: try next sample
            return -1

    def cleaned_bytes(self) -> int:
        total = 0
        for i in range(self.c.n):
            for line in self.c.broker_log(i).splitlines():
                if "log_cleaned" in line and "bytes_read=" in line:
                    total += int(line.split("bytes_read=")[1].split()[0])
        return total


def create(bootstrap: str, topic: str, configs: dict[str, str], partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(30)
    time.sleep(0.5)


def alter(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource("topic", topic, set_config=configs)
    admin.alter_configs([res])[res].result(30)  # (deprecated in the client, still the simplest)


def produce_keyed(bootstrap: str, topic: str, n: int, size: int, keys: int, rate_mib: float = 0.0,
                  stop: threading.Event | None = None) -> dict:
    """``n`` keyed records (keys drawn at random from ``keys``), paced to ``rate_mib`` MiB/s."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": "all",
                  "queue.buffering.max.kbytes": 1 << 20})
    rnd = random.Random(7)
    value = b"v" * (size - 16)
    t0 = time.perf_counter()
    sent = 0
    for i in range(n):
        if stop is not None and stop.is_set():
            break
        while True:
            try:
                p.produce(topic, key=b"key-%08d" % rnd.randrange(keys), value=value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
        sent += 1
        if i & 255 == 0:
            p.poll(0)
            if rate_mib:
                ahead = sent * size / (rate_mib * MIB) - (time.perf_counter() - t0)
                if ahead > 0:
                    time.sleep(ahead)
    p.flush(300)
    elapsed = time.perf_counter() - t0
    return {"records": sent, "seconds": round(elapsed, 2), "mib_per_s": round(sent * size / MIB / elapsed, 1)}


def produce_plain(bootstrap: str, topic: str, seconds: float, size: int = 1024) -> float:
    """MiB/s of an idempotent acks=all producer over 4 partitions for ``seconds``."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, "acks": "all"})
    value = b"x" * size
    for part in range(4):
        p.produce(topic, value=value, partition=part)
    p.flush(30)
    t0 = time.perf_counter()
    sent = 0
    while time.perf_counter() - t0 < seconds:
        for _ in range(1000):
            try:
                p.produce(topic, value=value, partition=sent % 4)
                sent += 1
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(120)
    return sent * size / MIB / (time.perf_counter() - t0)


def read_all(bootstrap: str, topic: str) -> tuple[int, float]:
    """(records, seconds) for a consumer reading the partition from its start to its end."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "fetch.max.bytes": 64 * MIB})
    tp = TopicPartition(topic, 0)
    _low, high = c.get_watermark_offsets(tp, timeout=30)
    c.assign([TopicPartition(topic, 0, 0)])
    n = 0
    t0 = time.perf_counter()
    while True:
        msgs = c.consume(10_000, 1.0)
        n += sum(1 for m in msgs if not m.error())
        if msgs and msgs[-1].offset() >= high - 1:
            break
        if not msgs and c.position([tp])[0].offset >= high:
            break
    elapsed = time.perf_counter() - t0
    c.close()
    return n, elapsed


def wait_clean(cl: Cluster, topic: str, timeout: float) -> float:
    """Wait until the cleaner's clean offset stops moving after it moved; seconds waited."""
    t0 = time.monotonic()
    last, stable = -2, 0
    while time.monotonic() - t0 < timeout:
        off = cl.clean_offset(topic)
        if off > 0 and off == last:
            stable += 1
            if stable >= 6:
                break
        else:
            stable = 0
        last = off
        time.sleep(0.5)
    return time.monotonic() - t0


COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.5", "segment.ms": "2000"}


def run_keepup(seconds: float, rate_mib: float) -> dict:
    size, keys = 1024, 10_000
    with Cluster(backoff_ms=1000) as cl:
        topic = "compact-keepup"
        create(cl.bootstrap, topic, {**COMPACT, "segment.bytes": str(64 * MIB)})
        samples: list[tuple[float, int, int]] = []
        stop = threading.Event()
        result: dict = {}
        n = int(seconds * rate_mib * MIB / size)
        t = threading.Thread(target=lambda: result.update(produce_keyed(cl.bootstrap, topic, n, size, keys, rate_mib,
                                                                        stop)))
        t0 = time.monotonic()
        t.start()
        while t.is_alive():
            samples.append((round(time.monotonic() - t0, 1), cl.log_bytes(topic), cl.clean_offset(topic)))
            time.sleep(1.0)
        t.join()
        settle = wait_clean(cl, topic, 60)
        end_bytes = cl.log_bytes(topic)
        written = result["records"] * size
        peak = max(b for _, b, _ in samples) if samples else end_bytes
        return {"bench": "compaction-keepup", **result, "target_mib_per_s": rate_mib,
                "written_mib": round(written / MIB, 1), "peak_log_mib": round(peak / MIB, 1),
                "end_log_mib": round(end_bytes / MIB, 1), "settle_s": round(settle, 1),
                "cleaned_mib": round(cl.cleaned_bytes() / MIB, 1),
                "live_data_mib": round(keys * size / MIB, 1),
                "kept_up": peak < written / 2 and end_bytes < 4 * 64 * MIB,
                "samples": samples[:: max(1, len(samples) // 20)]}


def run_cost(pairs: int, seconds: float) -> dict:
    ratios, on_rates, off_rates = [], [], []
    for i in range(pairs):
        for cleaner_on in ((False, True) if i % 2 == 0 else (True, False)):
            with Cluster(backoff_ms=500) as cl:
                topic = "compact-backlog"
                create(cl.bootstrap, topic, {**COMPACT, "segment.bytes": str(16 * MIB), "min.compaction.lag.ms":
                                             str(3_600_000)})
                produce_keyed(cl.bootstrap, topic, 300_000, 512, 10_000)
                create(cl.bootstrap, "plain", {}, partitions=4)
                if cleaner_on:
                    alter(cl.bootstrap, topic, {**COMPACT, "segment.bytes": str(16 * MIB),
                                                "min.compaction.lag.ms": "0"})
                time.sleep(1.0)
                rate = produce_plain(cl.bootstrap, "plain", seconds)
                (on_rates if cleaner_on else off_rates).append(rate)
                cleaned = cl.cleaned_bytes()
                if cleaner_on and not cleaned:
                    raise click.ClickException("the cleaner did not run during the cleaner-on run")
        ratios.append(on_rates[-1] / off_rates[-1])
    return {"bench": "compaction-cost", "produce_mib_s_cleaner_off": [round(r, 1) for r in off_rates],
            "produce_mib_s_cleaner_on": [round(r, 1) for r in on_rates],
            "on_off_ratio_median": round(statistics.median(ratios), 3), "target": ">= 0.9"}


def run_read(updates: int, keys: int) -> dict:
    with Cluster(backoff_ms=500) as cl:
        changelog, small = "changelog", "ten-k"
        create(cl.bootstrap, changelog,
               {**COMPACT, "segment.bytes": str(16 * MIB), "min.cleanable.dirty.ratio": "0.01"})
        create(cl.bootstrap, small, {})
        t0 = time.perf_counter()
        produce_keyed(cl.bootstrap, changelog, updates, 100, keys)
        produced_s = time.perf_counter() - t0
        produce_keyed(cl.bootstrap, small, keys, 100, 1 << 60)
        alter(cl.bootstrap, changelog, {**COMPACT, "segment.bytes": str(16 * MIB), "min.cleanable.dirty.ratio": "0.01",
                                        "segment.ms": "1000"})
        settle = wait_clean(cl, changelog, 180)
        reads_c, reads_s = [], []
        for _ in range(3):  # alternate
            reads_c.append(read_all(cl.bootstrap, changelog))
            reads_s.append(read_all(cl.bootstrap, small))
        tc = statistics.median(s for _, s in reads_c)
        ts = statistics.median(s for _, s in reads_s)
        return {"bench": "compaction-read", "updates": updates, "keys": keys, "produce_s": round(produced_s, 1),
                "clean_settle_s": round(settle, 1), "changelog_records_read": reads_c[-1][0],
                "changelog_read_s": round(tc, 3), "ten_k_read_s": round(ts, 3), "ratio": round(tc / ts, 2),
                "target": "< 3", "log_mib_after_clean": round(cl.log_bytes(changelog) / MIB, 1)}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Log compaction benchmarks (one JSON line per run)."""


@cli.command()
@click.option("--seconds", type=float, default=30.0, show_default=True)
@click.option("--rate-mib", type=float, default=50.0, show_default=True)
def keepup(seconds: float, rate_mib: float) -> None:
    click.echo(json.dumps(run_keepup(seconds, rate_mib)))


@cli.command()
@click.option("--pairs", type=int, default=2, show_default=True)
@click.option("--seconds", type=float, default=8.0, show_default=True)
def cost(pairs: int, seconds: float) -> None:
    click.echo(json.dumps(run_cost(pairs, seconds)))


@cli.command()
@click.option("--updates", type=int, default=1_000_000, show_default=True)
@click.option("--keys", type=int, default=10_000, show_default=True)
def read(updates: int, keys: int) -> None:
    click.echo(json.dumps(run_read(updates, keys)))


@cli.command("all")
def all_() -> None:
    for res in (run_keepup(30.0, 50.0), run_cost(2, 8.0), run_read(1_000_000, 10_000)):
        click.echo(json.dumps(res))


if __name__ == "__main__":
    cli()
