"""``share`` and ``share-lock`` (issue 34): KIP-932 share groups, kaas against a classic
consumer group on kaas and against librdkafka's mock cluster.

``share``: a topic of ``--messages`` 1 KiB records (``--partitions``, written once per
target) read by a fresh group of 4 consumers per pass, each consumer a thread polling
its own client: on ``kaas-share`` and ``mock-share`` confluent-kafka ``ShareConsumer`` s
with explicit acknowledgement (every record accepted with ``acknowledge``; the
acknowledgements ride on the next poll's ShareFetch, a ``commit_sync`` at the end sends the
last ones), on ``kaas-classic`` ``Consumer`` s in a classic group. Timed from the first
record any consumer receives until every record was received (and, for share consumers,
each consumer's last ``commit_sync`` answered): records/s, and the time to the first
record. Targets alternated pass by pass (A B C A B C). Issue 34's targets: kaas share
>= 0.5x kaas classic and >= 0.5x the mock's share consumption (medians).

``share-lock``: a consumer acquires the records of a one-partition topic and never
acknowledges them (it stops polling, keeps its session); a second consumer of the group
polls meanwhile. The time from the first consumer's poll returning them until the second
receives them, against the group's ``share.record.lock.duration.ms`` (``--lock-ms``; on
the mock ``rd_kafka_mock_sharegroup_set_record_lock_duration``). kaas and the mock
alternated round by round; the target: within the lock duration + 1 s (kaas's median).

The kaas cluster (3 brokers, tmpfs) runs with share heartbeats of 1 s and the lock
minimum lowered to 1 s; share groups start at the earliest offset (the group config
``share.auto.offset.reset``; the mock's ``--share-auto-offset-reset earliest``).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from ..common import CLIENT_COMMON, _emit, _payloads, _r, ensure_topic, producer_conf
from ..metering import BrokerPids, CpuMeter
from ..targets import _KaasCluster
from .groups import _median, _mock_cluster, _nothing, _ratio, _target_names

CONSUMERS = 4
SHARE_TARGETS = ("kaas-share", "kaas-classic", "mock-share")
LOCK_TARGETS = ("kaas", "mock")
TARGET_VS_CLASSIC = 0.5
TARGET_VS_MOCK = 0.5
SETTLE_S = 3.0  # --start joined: the share group's 3 heartbeats to form (classic: until all are assigned)
LOCK_SLACK_MS = 1000  # share-lock: the second consumer gets the records within lock + this
KAAS_SHARE_ARGS = ["--group-share-heartbeat-interval-ms", "1000", "--group-share-min-heartbeat-interval-ms", "500",
                   "--group-share-min-record-lock-duration-ms", "1000"]
MOCK_SHARE_ARGS = ("--share-auto-offset-reset", "earliest", "--share-heartbeat-ms", "1000",
                   "--share-isolation-level", "read_committed")


def _group_configs(bootstrap: str, group: str, **configs: str) -> None:
    """GROUP configs on kaas (``share_record_lock_duration_ms="2000"``)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_COMMON})  # alive until the answer
    admin.incremental_alter_configs([res])[res].result(30)


def _fill(bootstrap: str, topic: str, messages: int, size: int, partitions: int, txn: bool = False):
    """``messages`` records, round robin (the mock trims a partition past ~5 MB). With
    ``txn``, in one transaction left open: returns the producer, to commit it."""
    from confluent_kafka import Producer

    conf = producer_conf(bootstrap)
    if txn:
        conf = {**conf, "transactional.id": f"bench-share-{uuid.uuid4().hex[:8]}", "transaction.timeout.ms": 120_000}
    p = Producer(conf)
    if txn:
        p.init_transactions(30)
        p.begin_transaction()
    values = _payloads(size)
    for i in range(messages):
        while True:
            try:
                p.produce(topic, values[i % len(values)], partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    if p.flush(120):
        raise click.ClickException(f"could not fill {topic}")
    return p


class _Reader:
    """One consumer in a thread: what it received (unique records, first-receipt time) and
    when it finished."""

    def __init__(self, kind: str, conf: dict, topic: str, want: int, seen: set, lock: threading.Lock,
                 done: threading.Event) -> None:
        from confluent_kafka import Consumer, ShareConsumer

        self.kind = kind
        self.client = (ShareConsumer({**conf, "share.acknowledgement.mode": "explicit"}) if kind == "share"
                       else Consumer({**conf, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                      "enable.partition.eof": False, "isolation.level": "read_committed"}))
        self.client.subscribe([topic])
        self.want, self.seen, self.lock, self.done = want, seen, lock, done
        self.first: float | None = None
        self.finished: float | None = None
        self.assigned = False  # classic: it holds partitions
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.done.is_set():
            msgs = self.client.poll(0.2) if self.kind == "share" else self.client.consume(1000, 0.2)
            now = time.monotonic()
            got = []
            for m in msgs:
                if m.error() is not None:
                    self.errors.append(str(m.error()))
                    continue
                if self.kind == "share":
                    self.client.acknowledge(m)
                got.append((m.partition(), m.offset()))
            if self.kind == "classic" and not self.assigned:
                self.assigned = bool(self.client.assignment())
            if got:
                self.first = self.first or now
                with self.lock:
                    self.seen.update(got)
                    if len(self.seen) >= self.want:
                        self.done.set()
        if self.kind == "share":
            self.client.commit_sync(30)  # the acknowledgements of the last poll
        self.finished = time.monotonic()

    def close(self) -> None:
        self.done.set()
        self.thread.join(60)
        self.client.close()


def measure_share(bootstrap: str, topic: str, kind: str, messages: int, timeout: float, group: str,
                  gate=None, consumers: int = CONSUMERS) -> dict:
    """A group of CONSUMERS ``kind`` (share, classic) consumers reads the ``messages``
    records of the topic. ``gate``: a producer whose open transaction holds them, committed
    once the group formed (share: ``SETTLE_S``; classic: every member assigned)."""
    seen: set = set()
    lock, done = threading.Lock(), threading.Event()
    conf = {"bootstrap.servers": bootstrap, "group.id": group, **CLIENT_COMMON}
    readers = [_Reader(kind, {**conf, "client.id": f"{group}-{i}"}, topic, messages, seen, lock, done)
               for i in range(consumers)]
    t0 = time.monotonic()
    for r in readers:
        r.thread.start()
    opened = t0
    try:
        if gate is not None:
            deadline = t0 + timeout
            time.sleep(SETTLE_S)
            while kind == "classic" and not all(r.assigned for r in readers) and time.monotonic() < deadline:
                time.sleep(0.05)
            gate.commit_transaction(60)
            opened = time.monotonic()
        if not done.wait(timeout):
            raise click.ClickException(f"{kind}: {len(seen)} of {messages} records in {timeout:.0f} s; "
                                       f"errors {sorted({e for r in readers for e in r.errors})[:3]}")
    finally:
        for r in readers:
            r.close()
    first = min(r.first for r in readers if r.first is not None)
    end = max(r.finished or time.monotonic() for r in readers)
    busy = sum(1 for r in readers if r.first is not None)
    return {"records": len(seen), "records_per_s": round(messages / (end - first), 1),
            "first_record_s": _r(first - opened), "formed_s": _r(opened - t0) if gate is not None else None,
            "consumers_with_records": busy}


@contextmanager
def _share_targets(names: tuple[str, ...], topics: list[str], partitions: int) -> Iterator[dict[str, tuple[str, str]]]:
    """target -> (bootstrap, consumer kind): the kaas cluster and the mock running as
    needed, ``topics`` made on each."""
    cluster = None
    try:
        where: dict[str, tuple[str, str]] = {}
        if any(n.startswith("kaas-") for n in names):
            cluster = _KaasCluster(3, KAAS_SHARE_ARGS)
            for topic in topics:
                ensure_topic(cluster.bootstrap, topic, partitions)
            where.update({"kaas-share": (cluster.bootstrap, "share"), "kaas-classic": (cluster.bootstrap, "classic")})
        more = tuple(a for t in topics[1:] for a in ("--topic", f"{t}:{partitions}"))
        with _mock_cluster(topics[0], partitions, extra=(*more, *MOCK_SHARE_ARGS)) \
                if "mock-share" in names else _nothing() as mock:
            if mock is not None:
                where["mock-share"] = (mock, "share")
            yield {n: where[n] for n in names}
    finally:
        if cluster is not None:
            cluster.close()


def run_share(rounds: int, messages: int, size: int, partitions: int, timeout: float, emit: Callable[[dict], None],
              names: tuple[str, ...] = SHARE_TARGETS, start: str = "joined") -> dict:
    started = time.monotonic()
    base = f"bench-share-{uuid.uuid4().hex[:8]}"
    topics = [f"{base}-{i}" for i in range(rounds * len(names))]  # one per run: every group reads it all
    gated = start == "joined"
    runs: dict[str, list[dict]] = {t: [] for t in SHARE_TARGETS}
    with _share_targets(names, topics, partitions) as targets:
        for rnd in range(rounds):
            for i, (name, (bootstrap, kind)) in enumerate(targets.items()):
                topic = topics[rnd * len(names) + i]
                group = f"bench-share-{uuid.uuid4().hex[:8]}"
                if name == "kaas-share":
                    _group_configs(bootstrap, group, share_auto_offset_reset="earliest",
                                   share_isolation_level="read_committed")
                gate = _fill(bootstrap, topic, messages, size, partitions, txn=gated)
                res = {"bench": "share", "target": name, "round": rnd, "start": start, "consumers": CONSUMERS,
                       "partitions": partitions, "size": size,
                       **measure_share(bootstrap, topic, kind, messages, timeout, group, gate if gated else None)}
                runs[name].append(res)
                emit(res)
    med = {t: _median(rs, "records_per_s") for t, rs in runs.items()}
    vs_classic = _ratio(med["kaas-share"], med["kaas-classic"])
    vs_mock = _ratio(med["kaas-share"], med["mock-share"])
    return {"bench": "share", "rounds": rounds, "start": start, "messages": messages, "size": size,
            "partitions": partitions, "consumers": CONSUMERS, "cpus": os.cpu_count(),
            "seconds": round(time.monotonic() - started, 1),
            "median_records_per_s": med, "share_over_classic": vs_classic, "share_over_mock": vs_mock,
            "target": {"share_over_classic": f">= {TARGET_VS_CLASSIC:g}", "share_over_mock": f">= {TARGET_VS_MOCK:g}",
                       "met": vs_classic is not None and vs_mock is not None
                       and vs_classic >= TARGET_VS_CLASSIC and vs_mock >= TARGET_VS_MOCK}}


def measure_lock(bootstrap: str, topic: str, lock_ms: int, timeout: float, kaas: bool) -> dict:
    """A holds what it acquired and never acknowledges; B polls: when B gets A's records."""
    from confluent_kafka import Producer, ShareConsumer

    group = f"bench-lock-{uuid.uuid4().hex[:8]}"
    if kaas:
        _group_configs(bootstrap, group, share_auto_offset_reset="earliest",
                       share_record_lock_duration_ms=str(lock_ms))
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **CLIENT_COMMON})
    for i in range(10):
        p.produce(topic, f"{group}-{i}".encode())
    p.flush(30)
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit",
            **CLIENT_COMMON}
    a, b = ShareConsumer({**conf, "client.id": f"{group}-a"}), ShareConsumer({**conf, "client.id": f"{group}-b"})
    try:
        a.subscribe([topic])
        deadline = time.monotonic() + timeout
        held: dict[int, int] = {}
        while not held and time.monotonic() < deadline:
            held = {m.offset(): m.delivery_count() for m in a.poll(0.2) if m.error() is None}
        if not held:
            raise click.ClickException("share-lock: the first consumer got no records")
        t_held = time.monotonic()
        deadline = t_held + timeout
        b.subscribe([topic])
        got: dict[int, tuple[float, int]] = {}
        while len(held.keys() & got.keys()) < len(held) and time.monotonic() < deadline:
            for m in b.poll(0.1):
                if m.error() is None:
                    got.setdefault(m.offset(), (time.monotonic(), m.delivery_count()))
                    b.acknowledge(m)
        again = [got[o] for o in held if o in got]
        early = sum(1 for o, (t, _) in got.items() if o in held and t - t_held < lock_ms / 1000 * 0.5)
        if len(again) < len(held):  # (the librdkafka 2.16 mock keeps a live session's locks)
            return {"held": len(held), "back": len(again), "first_back_ms": None, "all_back_ms": None,
                    "back_early": early}
        first, last = min(t for t, _ in again), max(t for t, _ in again)
        return {"held": len(held), "back": len(again), "first_back_ms": _r((first - t_held) * 1000, 1),
                "all_back_ms": _r((last - t_held) * 1000, 1),
                "delivery_counts": sorted({c for _, c in again}), "back_early": early}
    finally:
        b.close()
        a.close()


def run_share_lock(rounds: int, lock_ms: int, timeout: float, emit: Callable[[dict], None],
                   names: tuple[str, ...] = LOCK_TARGETS) -> dict:
    started = time.monotonic()
    topic = f"bench-lock-{uuid.uuid4().hex[:8]}"
    runs: dict[str, list[dict]] = {t: [] for t in LOCK_TARGETS}
    cluster = None
    try:
        where: dict[str, str] = {}
        if "kaas" in names:
            cluster = _KaasCluster(3, KAAS_SHARE_ARGS)
            ensure_topic(cluster.bootstrap, topic, 1)
            where["kaas"] = cluster.bootstrap
        mock_args = (*MOCK_SHARE_ARGS, "--share-record-lock-ms", str(lock_ms))
        with _mock_cluster(topic, 1, extra=mock_args) if "mock" in names else _nothing() as mock:
            if mock is not None:
                where["mock"] = mock
            for rnd in range(rounds):
                for name in names:
                    res = {"bench": "share-lock", "target": name, "round": rnd, "lock_ms": lock_ms,
                           **measure_lock(where[name], topic, lock_ms, timeout, name == "kaas")}
                    runs[name].append(res)
                    emit(res)
    finally:
        if cluster is not None:
            cluster.close()
    med = {t: _median(rs, "all_back_ms") for t, rs in runs.items()}
    limit = lock_ms + LOCK_SLACK_MS
    return {"bench": "share-lock", "rounds": rounds, "lock_ms": lock_ms, "cpus": os.cpu_count(),
            "seconds": round(time.monotonic() - started, 1), "median_all_back_ms": med,
            "median_first_back_ms": {t: _median(rs, "first_back_ms") for t, rs in runs.items()},
            "worst_all_back_ms": {t: max((r["all_back_ms"] for r in rs), key=lambda v: float("inf") if v is None else v)
                                  for t, rs in runs.items() if rs},
            "rounds_not_back": {t: sum(1 for r in rs if r["all_back_ms"] is None) for t, rs in runs.items()},
            "target": {"all_back_ms": f"<= {limit} (lock duration + {LOCK_SLACK_MS} ms)",
                       "met": med.get("kaas") is not None and med["kaas"] <= limit}}


@click.command("share")
@click.option("--rounds", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--messages", type=click.IntRange(min=1), default=16_000, show_default=True,
              help="Records in the topic (the librdkafka mock keeps only ~5 MB per partition).")
@click.option("--size", type=click.IntRange(min=1), default=1024, show_default=True)
@click.option("--partitions", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds per pass.")
@click.option("--targets", "names", default=",".join(SHARE_TARGETS), show_default=True,
              callback=_target_names(SHARE_TARGETS), help="The targets, comma-separated.")
@click.option("--start", type=click.Choice(["joined", "backlog"]), default="joined", show_default=True,
              help="joined: the records are one open transaction, committed once the group formed; "
                   "backlog: a fresh group meets them committed.")
def share(rounds: int, messages: int, size: int, partitions: int, timeout: float, names: tuple[str, ...],
          start: str) -> None:
    """Issue 34: 4 share consumers (explicit acknowledgement) read a 1 KiB-record topic: kaas,
    a classic group of 4 on kaas, the mock's share groups, A B C A B C; records/s; the
    targets: kaas share >= 0.5x classic and >= 0.5x the mock."""
    _emit(run_share(rounds, messages, size, partitions, timeout, _emit, names, start))


@click.command("share-once", hidden=True)
@click.option("--bootstrap", required=True)
@click.option("--consumers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--messages", type=click.IntRange(min=1), default=16_000, show_default=True)
@click.option("--size", type=click.IntRange(min=1), default=1024, show_default=True)
@click.option("--partitions", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--timeout", type=float, default=120.0, show_default=True)
@click.option("--kaas-data", type=click.Path(path_type=Path), default=None, help="Broker pid files (CPU).")
@click.option("--cpu-pid", "cpu_pids", type=int, multiple=True)
def share_once(bootstrap, consumers, messages, size, partitions, timeout, kaas_data, cpu_pids) -> None:
    """``suite``'s share run against any broker: a fresh topic and share group (its
    ``share.auto.offset.reset`` set to earliest), ``--consumers`` share consumers joined
    before the records are committed (``--start joined``); records acknowledged per second."""
    topic, group = f"bench-share-{uuid.uuid4().hex[:8]}", f"bench-share-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, partitions)
    _group_configs(bootstrap, group, share_auto_offset_reset="earliest", share_isolation_level="read_committed")
    gate = _fill(bootstrap, topic, messages, size, partitions, txn=True)
    meter = CpuMeter(BrokerPids(cpu_pids, kaas_data)).start()
    res = measure_share(bootstrap, topic, "share", messages, timeout, group, gate, consumers)
    cpu_s = meter.stop()
    _emit({"bench": "share", "consumers": consumers, "partitions": partitions, "size": size, **res,
           "cpu_s": _r(cpu_s), "cpu_s_per_gib": _r(cpu_s / (messages * size / 2**30)) if cpu_s is not None else None})


@click.command("share-lock")
@click.option("--rounds", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--lock-ms", type=click.IntRange(min=1000), default=2000, show_default=True,
              help="The group's share.record.lock.duration.ms.")
@click.option("--timeout", type=float, default=20.0, show_default=True,
              help="Seconds a round waits for the records to come back.")
@click.option("--targets", "names", default=",".join(LOCK_TARGETS), show_default=True,
              callback=_target_names(LOCK_TARGETS), help="The targets, comma-separated.")
def share_lock(rounds: int, lock_ms: int, timeout: float, names: tuple[str, ...]) -> None:
    """Issue 34: records a consumer acquired and never acknowledges reach another consumer
    once their lock expires: the time against share.record.lock.duration.ms, kaas and the
    mock alternated; the target: within the lock duration + 1 s."""
    _emit(run_share_lock(rounds, lock_ms, timeout, _emit, names))


COMMANDS = (share, share_lock, share_once)
