"""The ``streams`` scenario: a Kafka Streams 4.4 application with
``processing.guarantee=exactly_once_v2`` (``compat/streams/EosStreamsApp.java``: a repartition
by key, a join with a table, a windowed aggregate, a running aggregate per region, every
store with its changelog), 2 instances of 2 stream threads each, on a fresh 3-broker cluster
(kaas or Apache 4.4, ``targets``), while a broker is SIGKILLed every 4 s in rotation and one
instance is SIGKILLed and started again (same state directory: under exactly-once an
unclean stop discards the local state, which the changelogs restore).

The instances are static members of the group (``group.instance.id`` ``eos-streams-<i>``,
KIP-345), as a Streams deployment that restarts its instances in place runs them: the
restarted instance takes its threads' places at once. ``KAAS_CHAOS_STREAMS_MEMBERSHIP=dynamic``
runs them as dynamic members instead; the killed instance's threads then stay in the group
until their 45 s session ends, and that run needs each group coordinator to live through
one whole session. Apache 4.4 does not, under this scenario's kills: a coordinator that
loads a classic group starts every member's session afresh
(``GroupMetadataManager.onLoaded``), and each Apache node is killed every 40 s or so, so
the dead members are never removed and the group never completes a rebalance.

The input (``streams_model.generate``: 500 customers in the ``customers`` table, then
``MESSAGES`` orders) is written before the application starts, by an idempotent producer.
A consumer by assignment (no group: nothing re-read) reads the three output topics
``read_committed`` from the start while the application runs; once every order is in
``enriched`` and nothing new has come for ``SETTLE_S`` (or nothing new has come for
``STALL_S``, ``KAAS_CHAOS_STREAMS_STALL_S``: a stall, which fails), the faults stop, the instances are
stopped (SIGTERM: they close), and the reader reads to the end. The verdict is
``streams_model.verdict`` against ``streams_model.expected``, computed from the input alone,
and every input, output and changelog log still starting at offset 0 (``_log_starts``): the
orders' event times lie in the hour before the run (``streams_model.recent_base``), so no
broker's time retention may delete any of it.

Progress: the longest stretch without a new order in ``enriched`` (``longest_no_commit_s``)
between the first and the last, or, in a run that did not complete, to the end of the run;
and the rate over that span.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from . import streams_model as model
from .faults import Faults
from .jvm import REPO, JavaProc, java_cmd, json_event, streams_classpath
from .report import longest_stretch
from .targets import Target, kill_rotation, spread, start_target

MESSAGES = 200_000
APP_ID = "eos-streams"
INSTANCES = 2
THREADS = 2
PARTITIONS = 6
OUTPUTS = ("enriched", "windowed-totals", "region-totals")
KILL_EVERY_S = float(os.environ.get("KAAS_CHAOS_KILL_EVERY_S", "4"))
INSTANCE_KILL_AT = 0.3  # the instance is SIGKILLed once this share of the orders is in `enriched`...
INSTANCE_DOWN_S = 3.0  # ...and started again this much later
SETTLE_S = 15.0  # after the last order: this long without a new output record
RUN_TIMEOUT_S = float(os.environ.get("KAAS_CHAOS_STREAMS_TIMEOUT_S", "2400"))
STALL_S = float(os.environ.get("KAAS_CHAOS_STREAMS_STALL_S", "300"))  # no new output this long: stalled, stop
DRAIN_IDLE_S = 10.0
PROGRESS_EVERY_S = 30.0
MEMBERSHIP = os.environ.get("KAAS_CHAOS_STREAMS_MEMBERSHIP", "static")
if MEMBERSHIP not in ("static", "dynamic"):
    raise ValueError(f"KAAS_CHAOS_STREAMS_MEMBERSHIP: static or dynamic, not {MEMBERSHIP!r}")
APP = REPO / "compat" / "streams" / "EosStreamsApp.java"


class Reader:
    """A librdkafka consumer assigned every partition of the outputs, read_committed."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": "streams-verifier", "enable.auto.commit": False,
                           "isolation.level": "read_committed", "reconnect.backoff.max.ms": 1000, "log_level": 2,
                           "auto.offset.reset": "earliest"})
        self.c.assign([TopicPartition(t, p, 0) for t in OUTPUTS for p in range(PARTITIONS)])
        self.reads: dict[str, list[model.Record]] = {t: [] for t in OUTPUTS}
        self.orders: set[str] = set()
        self.order_times: list[float] = []  # when each new order first showed in `enriched`
        self.last_new = time.monotonic()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="streams-reader", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for m in self.c.consume(1000, 0.5):
                topic, partition, offset = m.topic(), m.partition(), m.offset()
                if m.error() is not None or topic is None or partition is None or offset is None:
                    continue
                r = model.Record(partition, offset, (m.key() or b"").decode(), (m.value() or b"").decode())
                with self.lock:
                    self.reads[topic].append(r)
                    self.last_new = time.monotonic()
                    oid = r.value.split(",", 1)[0]
                    if topic == "enriched" and oid not in self.orders:
                        self.orders.add(oid)
                        self.order_times.append(time.time())
        self.c.close()

    def snapshot(self) -> tuple[int, float]:
        with self.lock:
            return len(self.orders), time.monotonic() - self.last_new

    def finish(self, timeout: float) -> dict[str, list[model.Record]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.snapshot()[1] < DRAIN_IDLE_S:
            time.sleep(0.5)
        self.stop.set()
        self.thread.join(30)
        return self.reads


class Instances:
    """The application's instances and their events (restores, replaced threads)."""

    def __init__(self, target: Target, workdir: Path, cp: str) -> None:
        self.target, self.dir, self.cp = target, workdir, cp
        self.procs: dict[int, JavaProc] = {}
        self.incarnations: dict[int, int] = {}
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.killed_at: float | None = None  # when an instance was SIGKILLed

    def start(self, i: int) -> None:
        inc = self.incarnations.get(i, -1) + 1
        self.incarnations[i] = inc
        static = [f"{APP_ID}-{i}"] if MEMBERSHIP == "static" else []
        cmd = java_cmd(self.dir, self.cp, str(APP), self.target.bootstrap, APP_ID, str(self.dir / f"state-{i}"),
                       str(THREADS), *static, heap="384m")

        def on_line(line: str, at: float) -> None:
            ev = json_event(line)
            if ev is not None:
                with self.lock:
                    self.events.append({**ev, "instance": i, "incarnation": inc, "at": at})

        self.procs[i] = JavaProc(f"streams-{i}.{inc}", cmd, self.dir, on_line).start()

    def restored_after(self, t: float) -> int:
        with self.lock:
            return sum(e.get("records", 0) for e in self.events if e.get("event") == "restore" and e["at"] >= t)


def _setup(target: Target, data: model.Data) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    cfg = {"min.insync.replicas": "2"}
    topics = [NewTopic(t, PARTITIONS, 3, config=cfg) for t in ("orders", *OUTPUTS)]
    topics.append(NewTopic("customers", PARTITIONS, 3, config={**cfg, "cleanup.policy": "compact"}))
    for f in admin.create_topics(topics, operation_timeout=30).values():
        f.result(60)
    # murmur2: Java's partitioner, which Streams repartitions with (the table must be
    # co-partitioned with the repartitioned orders for the join to find every customer)
    p = Producer({"bootstrap.servers": target.bootstrap, "enable.idempotence": True, "linger.ms": 20,
                  "partitioner": "murmur2_random", "log_level": 2})
    failed: list[str] = []

    def report(err, _msg) -> None:
        if err is not None:
            failed.append(str(err))

    first = data.base_ms - 3_600_000
    for cust, region in data.customers.items():
        p.produce("customers", region.encode(), cust.encode(), timestamp=first, on_delivery=report)
    p.flush(60)
    for order in data.orders:
        while True:
            try:
                p.produce("orders", model.order_value(order).encode(), order[0].encode(), timestamp=order[3],
                          on_delivery=report)
                break
            except BufferError:
                p.poll(0.1)
    if p.flush(120) or failed:
        raise RuntimeError(f"writing the input failed: {len(failed)} errors {failed[:3]}")


KEPT = ("orders", "customers", *OUTPUTS, *(f"{APP_ID}-{s}-changelog" for s in (
    "customers-store", "windowed-totals-store", "region-totals-store")))


def _log_starts(bootstrap: str) -> dict[str, dict[int, int]]:
    """The partitions of the input, output and changelog topics whose log no longer starts at
    offset 0 (``KEPT``; the repartition topics are left out: Streams deletes what it has
    consumed from them). Nothing in this run may be deleted by the brokers: deleted input is
    never processed, and a changelog missing its first records restores a store without
    them. Empty when every log is whole."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "streams-log-starts", "log_level": 2})
    try:
        starts: dict[str, dict[int, int]] = {}
        for topic in KEPT:
            for p in range(PARTITIONS):
                try:
                    low, _high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                except KafkaException:  # a changelog Streams never created: the verdict fails anyway
                    break
                if low > 0:
                    starts.setdefault(topic, {})[p] = low
        return starts
    finally:
        c.close()


def _faults(faults: Faults, apps: Instances, reader: Reader, n: int, stop: threading.Event,
            downtimes: list[float]) -> None:
    """A broker SIGKILLed every ``KILL_EVERY_S`` in rotation (``targets.kill_rotation``;
    0: none); instance 1 SIGKILLed once ``INSTANCE_KILL_AT`` of the orders are out, started
    again ``INSTANCE_DOWN_S`` later."""
    def instance_kill() -> None:
        if apps.killed_at is not None or reader.snapshot()[0] < INSTANCE_KILL_AT * n:
            return
        apps.killed_at = time.time()
        pid = apps.procs[1].pid
        apps.procs[1].kill()
        faults.log(f"SIGKILL streams instance 1 (pid {pid})", apps.killed_at, "copier-kill")

        def restart() -> None:
            if not stop.wait(INSTANCE_DOWN_S):
                apps.start(1)
                faults.log("streams instance 1 started again (same state directory)", kind="copier-restart")
        threading.Thread(target=restart, daemon=True).start()

    if KILL_EVERY_S > 0:
        kill_rotation(faults, apps.target, stop, KILL_EVERY_S, downtimes, instance_kill)
        return
    while not stop.wait(1.0):  # KAAS_CHAOS_KILL_EVERY_S=0: no broker kills (a baseline)
        instance_kill()


def run_streams(target_name: str, seed: int, messages: int, tmp: Path, echo) -> dict:
    cp = streams_classpath()
    data = model.generate(seed, messages, model.recent_base(int(time.time() * 1000), messages))
    exp = model.expected(data)
    workdir = tmp / "jvm"
    workdir.mkdir(parents=True, exist_ok=True)
    target = start_target(target_name, tmp)
    faults = Faults(target, echo)  # type: ignore[arg-type] # a duck-typed cluster
    faults.watch_restarts()
    apps = Instances(target, workdir, cp)
    stop = threading.Event()
    downtimes: list[float] = []
    try:
        t0 = time.monotonic()
        _setup(target, data)
        echo(f"  input written: {len(data.customers)} customers, {messages} orders in {time.monotonic() - t0:.1f} s")
        reader = Reader(target.bootstrap)
        started = time.time()
        for i in range(INSTANCES):
            apps.start(i)
        chaos = None
        completed = False
        shown = 0.0
        while time.time() - started < RUN_TIMEOUT_S:
            n, idle = reader.snapshot()
            if time.monotonic() - shown >= PROGRESS_EVERY_S:
                shown = time.monotonic()
                echo(f"  {time.time() - started:.0f} s: {n} of {messages} orders in enriched")
            if chaos is None and n > 0:
                chaos = threading.Thread(target=_faults, args=(faults, apps, reader, messages, stop, downtimes),
                                         daemon=True)
                chaos.start()
            if n >= messages and idle >= SETTLE_S:
                completed = True
                break
            if idle >= STALL_S:
                faults.log(f"stalled: nothing new in any output for {STALL_S:.0f} s")
                break
            time.sleep(1.0)
        stop.set()
        faults.log("faults over" if completed else f"not every order came out in {RUN_TIMEOUT_S:.0f} s")
        ended = time.time()
        for p in apps.procs.values():
            p.stop(60.0)
        faults.done = True
        reads = reader.finish(120.0)
        deleted = _log_starts(target.bootstrap)
    finally:
        stop.set()
        faults.done = True
        for p in apps.procs.values():
            p.kill()
        target.stop()
    with open(tmp / "reads.json", "w") as f:  # the evidence a verdict's examples point into
        json.dump({t: [list(r) for r in rs] for t, rs in reads.items()}, f)
    v = model.verdict(exp, reads)
    times = sorted(reader.order_times)
    gap, gap_at = longest_stretch(times if completed else [*times, ended])
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    killed_at = apps.killed_at
    with apps.lock:
        replaced = [e for e in apps.events if e.get("event") == "thread-replaced"]
    return {
        "scenario": "streams", "target": target_name, "seed": seed, "messages": messages, "membership": MEMBERSHIP,
        "ok": v["ok"] and completed and not deleted, "completed": completed, "verdict": v,
        "deleted_by_brokers": deleted,
        "kills": sum(1 for e in faults.events if e.kind == "kill"),
        "broker_restarts": sum(1 for e in faults.events if e.kind == "restart"),
        "broker_down_s": spread(downtimes), "instance_killed": killed_at is not None,
        "restored_after_instance_kill": None if killed_at is None else apps.restored_after(killed_at),
        "threads_replaced": len(replaced), "thread_errors": sorted({e["error"][:200] for e in replaced})[:5],
        "longest_no_commit_s": gap, "longest_no_commit_at_s": None if gap_at is None else round(gap_at - started, 1),
        "seconds": round(ended - started, 1), "msgs_per_s": round(messages / span, 1) if span > 0 else None,
        "commit_times": times, "copy_started_at": started, "copy_ended_at": ended,
        "events": [[round(f.at - started, 3), f.kind, f.label] for f in faults.events], "faults": faults.faults,
    }
