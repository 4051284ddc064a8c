"""The ``share`` scenario (KIP-932 share groups under faults): share consumers with explicit
acknowledgement over a topic written by an idempotent producer and transactional producers
that abort some of their transactions, on a fresh 3-broker cluster (``kaas.testing.cluster``)
while brokers are SIGKILLed (the share group's coordinator, partition leaders, any), the
volume is paused (every broker's segment and state writes and fsyncs stall) and a consumer
is SIGKILLed and started again. The group runs with ``share.isolation.level=read_committed``
and ``share.auto.offset.reset=earliest`` (IncrementalAlterConfigs on the GROUP resource).

After the faults the producers stop, the topic is read back (a read_committed consumer by
assignment), the consumers drain it, stop, the cluster stops, and the share-partition files
are read. The verdict, per record, is ``share_verdict.verdict``. Clients are processes of
their own (``share_clients.py``), each reporting through a JSON-lines file.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from kaas import failpoints
from kaas.domain.groups import sessions
from kaas.testing.clusters import Cluster, cluster

from .scenarios import CHURN_KILL_EVERY_S
from .share_verdict import Ack, Delivery, Evidence, verdict

CLIENTS = Path(__file__).resolve().parent / "share_clients.py"
PARTITIONS = 6
CONSUMERS = 4
LOCK_MS = 4000  # the group's share.record.lock.duration.ms
RELEASE_PCT = 2.0  # the consumers of a releasing run release this share of their deliveries
DELIVERY_LIMIT = 5  # the brokers' group.share.delivery.count.limit (Apache's default)
SHARE_SECONDS = 60.0  # default length of the faults
FAULT_EVERY_S = 5.0
VOLUME_PAUSE_S = 4.0  # how long the volume stalls...
VOLUME_PAUSE_MS = 500  # ...as one pause of this long at every write and fsync meanwhile
STOP_S = 6.0  # a SIGSTOPped leader is resumed this much later (its lease lapses after 3 s)
CONSUMER_DOWN_S = 3.0  # a SIGKILLed consumer is started again this much later
HOLD_MS = 50  # a consumer holds each poll's records up to this long before it commits
IDLE_S = 2 * LOCK_MS / 1000 + 15  # the drain ends after this long without a new delivery...
DRAIN_S = 180.0  # ...or this long at most
PLAIN_RATE = 100.0  # records/s of the idempotent producer
TXN_PRODUCERS = 2
TXN_RATE = 40.0  # records/s of each transactional producer (transactions of 10)
BROKER_ARGS = [
    "--group-initial-rebalance-delay-ms", "0",
    "--group-share-heartbeat-interval-ms", "1000", "--group-share-min-heartbeat-interval-ms", "500",
    "--group-share-session-timeout-ms", "10000", "--group-share-min-session-timeout-ms", "6000",
    "--group-share-min-record-lock-duration-ms", "1000",
    "--group-share-delivery-count-limit", str(DELIVERY_LIMIT),
]
IO_POINTS = ("append.write", "append.fsync", "state.write", "state.fsync")
# share-churn (issue 42): the brokers' default share session (45 s) and heartbeat, a broker
# SIGKILLed every CHURN_KILL_EVERY_S in rotation, and one consumer SIGKILLed and restarted
CHURN_BROKER_ARGS = [
    "--group-initial-rebalance-delay-ms", "0",
    "--group-share-min-record-lock-duration-ms", "1000",
    "--group-share-delivery-count-limit", str(DELIVERY_LIMIT),
]
SHARE_SESSION_S = 45.0  # Apache's group.share.session.timeout.ms, what share-churn runs with


@dataclass
class Clients:
    """The client processes of one run and their report files."""

    dir: Path
    bootstrap: str
    topic: str
    group: str
    seed: int
    release_pct: float
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    incarnations: dict[str, int] = field(default_factory=dict)

    def start(self, role: str, name: str, *extra: str) -> None:
        n = self.incarnations.get(name, -1) + 1
        self.incarnations[name] = n
        tag = f"{name}.{n}"
        stop = self.dir / ("stop-consumers" if role == "consume" else "stop-producers")
        log = open(self.dir / f"{tag}.log", "ab")
        self.procs[name] = subprocess.Popen(
            [sys.executable, str(CLIENTS), role, "--bootstrap", self.bootstrap, "--topic", self.topic,
             "--group", self.group, "--name", tag, "--report", str(self.dir / f"{tag}.jsonl"), "--stop", str(stop),
             "--seed", str(self.seed * 1000 + zlib.crc32(tag.encode()) % 1000), *extra],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()

    def consumer(self, i: int) -> None:
        self.start("consume", f"c{i}", "--release-pct", str(self.release_pct), "--limit", str(DELIVERY_LIMIT),
                   "--hold-ms", str(HOLD_MS))

    def kill(self, name: str) -> int:
        p = self.procs[name]
        p.kill()
        p.wait()
        return p.pid

    def stop(self, kind: str, timeout: float) -> list[str]:
        """Touch the stop file of ``kind`` (consumers, producers) and wait for them; the
        names of those that had to be killed."""
        (self.dir / f"stop-{kind}").touch()
        mine = [n for n in self.procs if n.startswith("c") == (kind == "consumers")]
        deadline = time.monotonic() + timeout
        killed = []
        for n in mine:
            try:
                self.procs[n].wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(n)
                killed.append(n)
        return killed

    def stop_all(self) -> None:
        for n, p in self.procs.items():
            if p.poll() is None:
                self.kill(n)

    def lines(self, prefix: str = "") -> list[tuple[str, list]]:
        """Every report line (name, item) of the clients whose names start with ``prefix``;
        a torn last line is skipped."""
        out = []
        for f in sorted(self.dir.glob(f"{prefix}*.jsonl")):
            for raw in f.read_text().splitlines():
                try:
                    out.append((f.stem, json.loads(raw)))
                except ValueError:
                    continue
        return out


def set_group_configs(c: Cluster, group: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    configs = {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed",
               "share.record.lock.duration.ms": str(LOCK_MS)}
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin = AdminClient(c.client_config())
    admin.incremental_alter_configs([res])[res].result(30)


class Faults:
    """The fault plan, by the clock, in a thread of its own: every ``FAULT_EVERY_S`` the next
    of: SIGKILL the group coordinator, SIGKILL a partition leader, pause the volume,
    SIGSTOP a partition leader for ``STOP_S`` (past its lease: a deposed leader that wakes
    up), SIGKILL any broker; once, a consumer SIGKILLed and started again
    ``CONSUMER_DOWN_S`` later."""

    def __init__(self, c: Cluster, clients: Clients, rnd: random.Random, seconds: float, echo,
                 churn: bool = False) -> None:
        self.c, self.clients, self.rnd, self.seconds, self.echo = c, clients, rnd, seconds, echo
        self.churn = churn  # share-churn: only brokers killed in rotation, and the consumer
        self.kills = 0
        self.events: list[tuple[float, str]] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="share-faults", daemon=True)
        self.t0 = time.monotonic()

    def log(self, what: str) -> None:
        self.events.append((round(time.monotonic() - self.t0, 2), what))
        self.echo(f"  chaos: {what}", err=True)

    def _kill(self, bid: int, why: str) -> None:
        try:
            pid = self.c.broker(bid).kill()
            self.log(f"SIGKILL broker {bid} ({why}, pid {pid})")
        except (OSError, ValueError) as exc:
            self.log(f"could not kill broker {bid}: {exc}")

    def _pause_volume(self) -> None:
        run = self.c.data / "run"
        spec = {p: {"action": "pause", "ms": VOLUME_PAUSE_MS} for p in IO_POINTS}
        for b in self.c.brokers:
            failpoints.arm(run, b.id, spec)
        self.log(f"volume paused for {VOLUME_PAUSE_S:.0f} s (every write and fsync stalls {VOLUME_PAUSE_MS} ms)")
        self.done.wait(VOLUME_PAUSE_S)
        for b in self.c.brokers:
            failpoints.disarm(run, b.id)
        self.log("volume resumed")

    def _step(self, kind: str) -> None:
        c = self.c
        try:
            if kind == "kill-coordinator":
                self._kill(c.coordinator_of(group_id=self.clients.group, timeout=10).id, "share group coordinator")
            elif kind == "kill-leader":
                p = self.rnd.randrange(PARTITIONS)
                self._kill(c.leader_of(self.clients.topic, p, timeout=10).id, f"leader of partition {p}")
            elif kind == "kill-any":
                self._kill(self.rnd.randrange(len(c.brokers)), "random")
            elif kind == "kill-rotate":
                self._kill(self.kills % len(c.brokers), "in rotation")
                self.kills += 1
            elif kind == "pause-volume":
                self._pause_volume()
            elif kind == "stop-leader":
                p = self.rnd.randrange(PARTITIONS)
                b = c.leader_of(self.clients.topic, p, timeout=10)
                pid = b.pause()
                self.log(f"SIGSTOP broker {b.id} (leader of partition {p}, pid {pid}) for {STOP_S:.0f} s")
                self.done.wait(STOP_S)
                b.resume()
                self.log(f"SIGCONT broker {b.id}")
            elif kind == "kill-consumer":
                victim = f"c{self.rnd.randrange(CONSUMERS)}"
                pid = self.clients.kill(victim)
                self.log(f"SIGKILL consumer {victim} (pid {pid})")
                self.done.wait(CONSUMER_DOWN_S)
                self.clients.consumer(int(victim[1:]))
                self.log(f"consumer {victim} started again")
        except (AssertionError, OSError) as exc:  # no coordinator/leader found in time
            self.log(f"{kind}: skipped ({exc})")

    def _run(self) -> None:
        cycle = ["kill-rotate"] if self.churn else ["kill-coordinator", "kill-leader", "pause-volume",
                                                     "stop-leader", "kill-any"]
        every = CHURN_KILL_EVERY_S if self.churn else FAULT_EVERY_S
        steps = int(self.seconds / every) - 1
        plan = [cycle[i % len(cycle)] for i in range(steps)]
        if self.churn:  # the consumer dies between two broker kills, in a thread of its own
            at = self.t0 + (steps // 3 + 0.5) * every
            threading.Thread(target=lambda: self.done.wait(max(0.0, at - time.monotonic())) or
                             self._step("kill-consumer"), daemon=True).start()
        else:
            plan.insert(min(len(plan), max(1, steps // 2)), "kill-consumer")
        for i, kind in enumerate(plan):
            if self.done.wait(max(0.0, self.t0 + (i + 1) * every - time.monotonic())):
                return
            self._step(kind)
        self.log("faults over")

    def start(self) -> Faults:
        self.t0 = time.monotonic()
        self.thread.start()
        return self

    def stop(self) -> None:
        self.done.set()
        self.thread.join(30)
        for b in self.c.brokers:
            failpoints.disarm(self.c.data / "run", b.id)
            b.resume()


def read_back(bootstrap: str, topic: str, timeout: float = 90.0) -> dict[tuple[int, int], str]:
    """Every committed record of ``topic``: a read_committed consumer by assignment from the
    beginning to each partition's high watermark (waiting while a transaction is open)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "share-chaos-readback", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "reconnect.backoff.max.ms": 1000})
    out: dict[tuple[int, int], str] = {}
    try:
        ends = {p: _high_watermark(c, TopicPartition(topic, p), time.monotonic() + 30) for p in range(PARTITIONS)}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + timeout
        pos = dict.fromkeys(ends, 0)
        while any(pos[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error() is None:
                    out[(m.partition(), m.offset())] = m.value().decode()
            for tp in c.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= 0:
                    pos[tp.partition] = tp.offset
        short = {p: (pos[p], ends[p]) for p in ends if pos[p] < ends[p]}
        if short:
            raise RuntimeError(f"read-back stopped short of the high watermarks (position, end): {short}")
    finally:
        c.close()
    return out


def _high_watermark(c, tp, deadline: float) -> int:
    """``tp``'s high watermark, asked again while librdkafka answers a local error (a
    consumer made a moment ago may not know the partition yet: "Unknown partition"); each
    error is printed, so a broker whose Metadata left the topic out shows."""
    from confluent_kafka import KafkaException

    while True:
        try:
            return int(c.get_watermark_offsets(tp, timeout=10, cached=False)[1])
        except KafkaException as exc:
            print(f"read-back: watermarks of {tp.topic}/{tp.partition}: {exc}; asking again", file=sys.stderr)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def share_files(data: Path, topic: str, group: str) -> tuple[dict, list[str]]:
    """Per partition (start, runs) of the group's share state files, and the problems
    (a corrupt state) met reading them."""
    from kaas.domain.share_partition import ShareLimits
    from kaas.errors import CorruptState
    from kaas.storage import share_state
    from kaas.storage.paths import Layout

    out, problems = {}, []
    limits = ShareLimits(delivery_count_limit=DELIVERY_LIMIT, record_lock_duration_ms=LOCK_MS, max_record_locks=2000)
    for p in range(PARTITIONS):
        try:
            m, _ = share_state.load_window(Layout(data).partition_dir(topic, p) / share_state.DIR, group, limits)
        except CorruptState as exc:
            problems.append(f"partition {p}: {exc}")
            continue
        if m is not None:
            out[p] = (m.start, [(f, la, s.name, n) for f, la, s, n, _m, _d in m.runs()])
    return out, problems


def evidence(clients: Clients, committed: dict[tuple[int, int], str]) -> Evidence:
    deliveries, acks, aborted, produced = [], [], set(), set()
    for name, item in clients.lines():
        kind = item[0]
        if kind == "d":
            deliveries.append(Delivery(name, item[1], item[2], item[3], item[4]))
        elif kind == "a":
            acks += [Ack(name, item[1], o, t, n, item[3]) for o, t, n in item[2]]
        elif kind == "x":
            aborted.update(item[1])
        elif kind == "c":
            produced.update(item[1])
        elif kind == "p" and item[2] is None:
            produced.add(item[1])
    return Evidence(committed, deliveries, acks, aborted, produced, DELIVERY_LIMIT)


def _accepted(clients: Clients) -> set[tuple[int, int]]:
    return {(item[1], o) for _n, item in clients.lines("c") if item[0] == "a" and item[3] is None
            for o, t, _c in item[2] if t == 1}


def drain(clients: Clients, committed: dict[tuple[int, int], str], echo) -> float:
    """Wait until every committed record was accepted, or nothing new was delivered for
    ``IDLE_S``, or ``DRAIN_S`` passed. Returns the seconds it took."""
    t0 = time.monotonic()
    seen, since = -1, t0
    while time.monotonic() - t0 < DRAIN_S:
        missing = len(committed.keys() - _accepted(clients))
        if not missing:
            break
        n = sum(1 for _n, item in clients.lines("c") if item[0] == "d")
        if n != seen:
            seen, since = n, time.monotonic()
        elif time.monotonic() - since > IDLE_S:
            echo(f"  drain: nothing new for {IDLE_S:.0f} s, {missing} records not accepted")
            break
        time.sleep(1.0)
    return round(time.monotonic() - t0, 1)


def run_share(seed: int, seconds: float, echo, release: bool | None = None, churn: bool = False) -> dict:
    """One run of the scenario (``churn``: share-churn's); returns the report (``ok`` when
    no anomaly)."""
    rnd = random.Random(seed)
    release_pct = RELEASE_PCT if (seed % 2 == 1 if release is None else release) else 0.0
    t_start = time.monotonic()
    ctx = cluster(3, broker_args=CHURN_BROKER_ARGS if churn else BROKER_ARGS, keep_data=True)
    c = ctx.start()
    try:
        result = _run_on(c, ctx, seed, seconds, rnd, release_pct, echo, churn)
    finally:
        ctx.stop()
        if os.environ.get("KAAS_CHAOS_KEEP"):
            echo(f"data directory and client reports kept: {c.root}")
        else:
            shutil.rmtree(c.root, ignore_errors=True)
    result["seconds"] = round(time.monotonic() - t_start, 1)
    return result


def _run_on(c: Cluster, ctx, seed: int, seconds: float, rnd: random.Random, release_pct: float, echo,
            churn: bool = False) -> dict:
    work = c.root / "clients"
    work.mkdir()
    topic, group = f"share-chaos-{seed}", f"share-chaos-g{seed}"
    clients = Clients(work, c.bootstrap, topic, group, seed, release_pct)
    result: dict = {"scenario": "share-churn" if churn else "share", "seed": seed, "seconds_of_faults": seconds,
                    "release_pct": release_pct,
                    "consumers": CONSUMERS, "partitions": PARTITIONS, "lock_ms": LOCK_MS,
                    "delivery_count_limit": DELIVERY_LIMIT}
    faults = None
    try:
        c.create_topic(topic, PARTITIONS)
        set_group_configs(c, group)
        for i in range(CONSUMERS):
            clients.consumer(i)
        clients.start("produce", "p0", "--rate", str(PLAIN_RATE))
        for i in range(TXN_PRODUCERS):
            clients.start("txn", f"x{i}", "--rate", str(TXN_RATE), "--abort-pct", "25")
        faults = Faults(c, clients, rnd, seconds, echo, churn).start()
        faults_at = time.time()
        faults.thread.join(seconds + 60)
        faults.stop()
        result["faults"] = faults.events
        result["producers_killed"] = clients.stop("producers", 120)
        c.wait_healthy(60)
        committed = read_back(c.bootstrap, topic)
        result["drain_s"] = drain(clients, committed, echo)
        result["consumers_killed"] = clients.stop("consumers", 60)
    finally:
        if faults is not None:
            faults.stop()
        clients.stop_all()
    ctx.stop()  # the files are read once the brokers are gone
    final, problems = share_files(c.data, topic, group)
    ev = evidence(clients, committed)
    ev.final = final
    v = verdict(ev)
    if problems:
        v["anomalies"]["share state corrupt"] = len(problems)
        v["examples"]["share state corrupt"] = problems
        v["ok"] = False
    stretch = longest_without_accept(clients, faults_at)
    result["longest_no_accept_s"] = stretch
    if churn:  # progress: no stretch without an acceptance outlasts the session plus the grace
        bound = SHARE_SESSION_S + sessions.grace_ms(int(SHARE_SESSION_S * 1000)) / 1000
        result["stretch_bound_s"] = bound
        if stretch is None or stretch > bound:
            v["anomalies"]["stretch without an acceptance above session + grace"] = 1
            v["examples"]["stretch without an acceptance above session + grace"] = [f"{stretch} s > {bound} s"]
            v["ok"] = False
    errors = [item for _n, item in clients.lines() if item[0] == "e"]
    result.update(v, client_errors=len(errors), client_error_examples=sorted({str(e) for e in errors})[:5])
    return result


def longest_without_accept(clients: Clients, since: float) -> float | None:
    """The longest time, from ``since`` (the faults' start) to the last acceptance, without
    an acknowledgement that accepted a record (the consumers' answered commits)."""
    times = sorted(item[4] for _n, item in clients.lines("c") if item[0] == "a" and len(item) > 4
                   and item[3] is None and any(t == 1 for _o, t, _c in item[2]) and item[4] >= since)
    if not times:
        return None
    return round(max(b - a for a, b in zip([since, *times], times)), 2)


def run_share_runs(seed: int, runs: int, seconds: float, out: Path, echo, release: bool | None = None,
                   churn: bool = False) -> bool:
    """``runs`` runs (seeds ``seed``, ``seed + 1``, ...): each one's report in
    ``out/share-seedN.json``, a table of the counts, the anomalies; True when none."""
    results = []
    for i in range(runs):
        s = seed + i
        name = "share-churn" if churn else "share"
        echo(f"== scenario {name} (seed {s}, {seconds:.0f} s of faults, {CONSUMERS} consumers, "
             f"{PARTITIONS} partitions)")
        r = run_share(s, seconds, echo, release, churn)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{name}-seed{s}.json"
        path.write_text(json.dumps(r, indent=1) + "\n")
        echo(f"report: {path}")
        for kind, examples in r["examples"].items():
            echo(f"   {kind}: {r['anomalies'][kind]}, e.g. {'; '.join(examples[:3])}")
        if not r["ok"]:
            echo(f"!! scenario {name} FAILED — replay with: python scripts/chaos run --scenario {name} --seed {s}")
        results.append(r)
    cols = ("committed", "delivered", "accepted", "deliveries", "redeliveries", "max_delivery_count", "released",
            "ack_failures", "accept_answer_lost", "archived_at_limit", "aborted_values")
    echo(f"{'seed':>11} {'release':>7} {'faults':>6} " + " ".join(f"{c[:12]:>12}" for c in cols)
         + f" {'anomalies':>9} {'drain s':>7} {'stretch s':>9} {'secs':>6}  result")
    for r in results:
        kills = sum(1 for _t, what in r.get("faults", []) if what.startswith(("SIGKILL", "SIGSTOP", "volume paused")))
        echo(f"{r['seed']:>11} {r['release_pct']:>7} {kills:>6} " + " ".join(f"{r['counts'][c]:>12}" for c in cols)
             + f" {sum(r['anomalies'].values()):>9} {r.get('drain_s', '-'):>7} {r.get('longest_no_accept_s', '-')!s:>9}"
             + f" {r['seconds']:>6}  "
             + ("ok" if r["ok"] else "FAILED"))
    for r in results:
        echo(json.dumps({k: v for k, v in r.items() if k not in ("faults", "examples")}))
    return all(r["ok"] for r in results)
