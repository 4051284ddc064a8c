"""The ``connect`` scenario: Kafka Connect 4.4's exactly-once source support (KIP-618)
under chaos, on a fresh 3-broker cluster (kaas or Apache 4.4, ``targets``).

Two distributed workers (``connect_workers``: ``exactly.once.source.support=enabled``, their
config, offsets and status topics created by themselves, compacted, rolled every 10 s so the
cleaner compacts them during the run) run two connectors of ``compat/connect``:

- ``seq``: ``SequenceSource``, 2 tasks writing the numbers 0..N-1 (``MESSAGES``, paced to
  ``RATE`` per task and second) to the topic ``sequence`` (3 partitions), in transactions
  the connector defines (``transaction.boundary=connector``, 100 numbers each), each
  task's source offset the next number it writes;
- ``rec``: ``RecordingSink``, 2 tasks consuming ``sequence`` (``read_committed``) and
  appending each record with the time to a file, fsynced before the worker commits.

Once the first numbers are out, a broker is SIGKILLed every 4 s in rotation; once
``WORKER_KILL_AT`` of them are out, one worker (by the seed) is SIGKILLed and started
again ``WORKER_DOWN_S`` later. A task that fails is restarted through the REST API, as an
operator would (``task_restarts``). When every number is out and the sink's group has
committed past the last record, the faults stop, the workers stop (SIGTERM) and the
verdicts of ``connect_verdict`` are taken over:

- the output, read ``read_committed`` by assignment as it comes (every number once, in order
  per task and partition);
- the sink's files and its group's offsets, sampled every second (never ahead of the sink,
  never back, past every record at the end);
- reads of the compacted internal topics to their end every ``ROUND_EVERY_S`` and after the
  run (readable, the connectors kept, no source offset going back, the last offsets where
  the output ends), and their ``cleanup.policy`` (compact).

Progress: the longest stretch without a new number in the output (and in the sink).
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

from . import connect_verdict as verdict
from .connect_internal import InternalReader, cleanup_policies
from .connect_workers import TOPICS, Workers, connect_classpath
from .faults import Faults
from .report import longest_stretch
from .targets import Target, start_target

MESSAGES = 60_000
RATE = 500  # numbers per second per source task
TASKS = 2
OUTPUT = "sequence"
PARTITIONS = 3
SINK_GROUP = "connect-rec"
KILL_EVERY_S = float(os.environ.get("KAAS_CHAOS_KILL_EVERY_S", "4"))
WORKER_KILL_AT = (0.25, 0.45)  # a worker is SIGKILLed once this share (drawn by the seed) is out...
WORKER_DOWN_S = 3.0  # ...and started again this much later
SETTLE_S = 5.0
RUN_TIMEOUT_S = float(os.environ.get("KAAS_CHAOS_CONNECT_TIMEOUT_S", "900"))
DRAIN_IDLE_S = 5.0


class OutputReader:
    """A librdkafka consumer assigned every partition of the output, read_committed, no group."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": "connect-verifier", "enable.auto.commit": False,
                           "isolation.level": "read_committed", "reconnect.backoff.max.ms": 1000, "log_level": 2})
        self.c.assign([TopicPartition(OUTPUT, p, 0) for p in range(PARTITIONS)])
        self.reads: list[verdict.Rec] = []
        self.values: set[str] = set()
        self.last_offset: dict[int, int] = {}
        self.new_times: list[float] = []  # when each new number first showed
        self.last_new = time.monotonic()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="connect-reader", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for m in self.c.consume(1000, 0.5):
                if m.error() is not None:
                    continue
                r = verdict.Rec(m.partition(), m.offset(), (m.value() or b"").decode())
                with self.lock:
                    self.reads.append(r)
                    self.last_offset[r.partition] = max(r.offset, self.last_offset.get(r.partition, -1))
                    if r.value not in self.values:
                        self.values.add(r.value)
                        self.new_times.append(time.time())
                        self.last_new = time.monotonic()
        self.c.close()

    def snapshot(self) -> tuple[int, float, dict[int, int]]:
        with self.lock:
            return len(self.values), time.monotonic() - self.last_new, dict(self.last_offset)

    def finish(self, timeout: float) -> list[verdict.Rec]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.snapshot()[1] < DRAIN_IDLE_S:
            time.sleep(0.5)
        self.stop.set()
        self.thread.join(30)
        return self.reads


class GroupSampler:
    """The sink group's committed offsets, asked every second (``Sample``: the answer's
    time), by a consumer of the group that never joins it (OffsetFetch; librdkafka 2.16's
    admin ListConsumerGroupOffsets crashes on a coordinator error)."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": SINK_GROUP, "enable.auto.commit": False,
                           "log_level": 2, "reconnect.backoff.max.ms": 1000})
        self.tps = [TopicPartition(OUTPUT, p) for p in range(PARTITIONS)]
        self.samples: list[verdict.Sample] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="connect-group-sampler", daemon=True)
        self.thread.start()

    def ask(self, timeout: float = 10.0) -> dict[int, int] | None:
        from confluent_kafka import KafkaException

        try:
            got = self.c.committed(self.tps, timeout=timeout)
        except KafkaException:
            return None
        return {tp.partition: tp.offset for tp in got if tp.error is None and tp.offset >= 0}

    def _run(self) -> None:
        while not self.stop.wait(1.0):
            offsets = self.ask()
            if offsets is not None:
                with self.lock:
                    self.samples.append(verdict.Sample(int(time.time() * 1000), offsets))

    def latest(self) -> dict[int, int]:
        with self.lock:
            return dict(self.samples[-1].offsets) if self.samples else {}

    def close(self) -> list[verdict.Sample]:
        """Stops the sampling; the consumer stays for ``ask`` until ``release``."""
        self.stop.set()
        self.thread.join(30)
        return self.samples

    def release(self) -> None:
        self.c.close()


def _create_output(target: Target) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": target.bootstrap, "log_level": 2})
    for f in admin.create_topics([NewTopic(OUTPUT, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
                                 operation_timeout=30).values():
        f.result(60)


def _connectors(messages: int, sink_dir: Path) -> dict[str, dict[str, str]]:
    return {
        "seq": {"connector.class": "io.kaas.compat.connect.SequenceSource", "tasks.max": str(TASKS),
                "topic": OUTPUT, "count": str(messages), "rate": str(RATE), "batch": "100",
                "transaction.boundary": "connector", "exactly.once.support": "required"},
        "rec": {"connector.class": "io.kaas.compat.connect.RecordingSink", "tasks.max": str(TASKS),
                "topics": OUTPUT, "dir": str(sink_dir)},
    }


def _restart_failed(workers: Workers, faults: Faults) -> int:
    """Restart (REST) every FAILED task or connector; how many were."""
    status = workers.status() or {}
    n = 0
    for name, st in status.items():
        s = st.get("status", {})
        failed = [t for t in s.get("tasks", []) if t.get("state") == "FAILED"]
        if s.get("connector", {}).get("state") == "FAILED" or failed:
            trace = (failed[0] if failed else s["connector"]).get("trace", "")[:300]
            for i in workers.procs:
                try:
                    workers.rest(i, "POST", f"/connectors/{name}/restart?includeTasks=true&onlyFailed=true")
                    break
                except Exception:  # noqa: BLE001 - a worker down or rebalancing: the next one
                    continue
            faults.log(f"{name}: {len(failed)} failed tasks restarted ({trace.splitlines()[0] if trace else ''})")
            n += len(failed) or 1
    return n


class Chaos:
    """By the clock: a broker SIGKILLed every ``KILL_EVERY_S`` in rotation, each kill once
    every broker answers ApiVersions again (a JVM broker restarting for longer than the
    period is not killed again before it serves: ``kill_wait_s``); one worker SIGKILLed
    once ``kill_at`` of the numbers are out, started again later; failed tasks restarted."""

    def __init__(self, faults: Faults, workers: Workers, reader: OutputReader, messages: int, seed: int) -> None:
        rnd = random.Random(seed)
        self.faults, self.workers, self.reader = faults, workers, reader
        self.ports = [int(hp.rsplit(":", 1)[1]) for hp in workers.bootstrap.split(",")]
        self.kill_at = rnd.uniform(*WORKER_KILL_AT) * messages
        self.victim = rnd.randrange(len(workers.ports))
        self.worker_killed_at: float | None = None
        self.task_restarts = 0
        self.kill_wait_s = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="connect-chaos", daemon=True)

    def _run(self) -> None:
        k = 0
        while not self.stop.wait(KILL_EVERY_S):
            self._all_serving()
            if self.stop.is_set():
                return
            self.faults.kill_broker(k % self.faults.cluster.n)
            k += 1
            if self.worker_killed_at is None and self.reader.snapshot()[0] >= self.kill_at:
                self._kill_worker()
            self.task_restarts += _restart_failed(self.workers, self.faults)

    def _all_serving(self) -> None:
        from kaas.testing import api_versions_ok

        t0 = time.monotonic()
        while not self.stop.is_set() and not all(api_versions_ok("127.0.0.1", p, 1.0) for p in self.ports):
            self.stop.wait(0.2)
        self.kill_wait_s += time.monotonic() - t0

    def _kill_worker(self) -> None:
        p = self.workers.procs[self.victim]
        pid = p.pid
        self.worker_killed_at = time.time()
        p.kill()
        self.faults.log(f"SIGKILL connect worker {self.victim} (pid {pid})", self.worker_killed_at, "copier-kill")
        if not self.stop.wait(WORKER_DOWN_S):
            self.workers.start(self.victim)
            self.faults.log(f"connect worker {self.victim} started again", kind="copier-restart")

def _sink_lines(sink_dir: Path) -> list[verdict.SinkLine]:
    out = []
    for f in sorted(sink_dir.glob("sink-*.log")):
        for line in f.read_text(errors="replace").splitlines():
            parts = line.split("\t")
            if len(parts) == 5 and parts[0] == OUTPUT and parts[4].isdigit():  # a torn last line is skipped
                out.append(verdict.SinkLine(int(parts[1]), int(parts[2]), parts[3], int(parts[4])))
    return out


def _ends(target: Target) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": target.bootstrap, "group.id": "connect-ends", "log_level": 2})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(OUTPUT, p), timeout=30, cached=False)[1]
                for p in range(PARTITIONS)}
    finally:
        c.close()


def _wait_done(reader: OutputReader, sampler: GroupSampler, chaos: Chaos, messages: int, started: float) -> bool:
    """Until every number is out, the sink group past every record, and nothing new for
    ``SETTLE_S``; starts the faults with the first number out."""
    while time.time() - started < RUN_TIMEOUT_S:
        n, idle, last = reader.snapshot()
        if chaos.thread.ident is None and n > 0:  # not started yet
            chaos.thread.start()
        committed = sampler.latest()
        if n >= messages and idle >= SETTLE_S and all(committed.get(p, -1) > o for p, o in last.items()):
            return True
        time.sleep(1.0)
    return False


def run_connect(target_name: str, seed: int, messages: int, tmp: Path, echo) -> dict:
    cp = connect_classpath()
    workdir, sink_dir = tmp / "jvm", tmp / "sink"
    workdir.mkdir(parents=True, exist_ok=True)
    sink_dir.mkdir()
    target = start_target(target_name, tmp)
    faults = Faults(target, echo)  # type: ignore[arg-type] # a duck-typed cluster
    faults.watch_restarts()
    workers = Workers(target.bootstrap, workdir, cp)
    internal = InternalReader(target.bootstrap)
    run: dict = {}
    try:
        _create_output(target)
        t0 = time.monotonic()
        for i in range(len(workers.ports)):
            workers.start(i)
        workers.wait_up(180.0)
        echo(f"  workers up in {time.monotonic() - t0:.1f} s")
        reader, sampler = OutputReader(target.bootstrap), GroupSampler(target.bootstrap)
        internal.start()
        for name, config in _connectors(messages, sink_dir).items():
            workers.put_connector(name, config)
        created_at = time.time()
        chaos = Chaos(faults, workers, reader, messages, seed)
        completed = _wait_done(reader, sampler, chaos, messages, created_at)
        chaos.stop.set()
        faults.log("faults over" if completed else f"not every number came out in {RUN_TIMEOUT_S:.0f} s")
        ended = time.time()
        if chaos.thread.is_alive():
            chaos.thread.join(30)
        run |= {"status": workers.status(), "reads": reader.finish(60.0)}
        workers.stop_all()
        faults.done = True
        samples = sampler.close()
        run |= {"final_offsets": sampler.ask(30.0) or {}, "samples": samples, "ends": _ends(target),
                "rounds": internal.close(final=True), "policies": cleanup_policies(target.bootstrap, TOPICS.values())}
        sampler.release()
    finally:
        faults.done = True
        internal.stop.set()
        for p in workers.procs.values():
            p.kill()
        target.stop()
    return _report(target_name, seed, messages, completed, run, workers, reader, chaos, faults, created_at, ended,
                   _sink_lines(sink_dir))


def _report(target_name: str, seed: int, messages: int, completed: bool, run: dict, workers: Workers,
            reader: OutputReader, chaos: Chaos, faults: Faults, started: float, ended: float,
            lines: list[verdict.SinkLine]) -> dict:
    src = verdict.source_verdict(messages, TASKS, run["reads"])
    records = list({(r.partition, r.offset): r for r in run["reads"]}.values())
    sink = verdict.sink_verdict(records, run["ends"], lines, run["samples"], run["final_offsets"])
    final_next = {t: verdict.final_next(t, TASKS, messages) for t in range(TASKS)}
    internal = verdict.internal_verdict(run["rounds"], ["seq", "rec"], {"seq": TASKS, "rec": TASKS}, final_next)
    compact = all(p == "compact" for p in run["policies"].values())
    times = sorted(reader.new_times)
    gap, gap_at = longest_stretch(times)
    sink_gap, _ = longest_stretch(sorted({ln.at_ms / 1000 for ln in lines}))
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    resumes = [{"task": e["task"], "next": e["next"], "worker": e["worker"], "at": e["at"]}
               for e in workers.events_of("source-start") if e.get("stored") == "offset"]
    resumed = verdict.resume_verdict(resumes, run["reads"], run["rounds"], TASKS, messages)
    return {
        "scenario": "connect", "target": target_name, "seed": seed, "messages": messages,
        "ok": completed and src["ok"] and sink["ok"] and internal["ok"] and resumed["ok"] and compact,
        "completed": completed, "source": src, "sink": sink, "internal": internal, "resumes": resumed,
        "cleanup_policies": run["policies"],
        "kills": sum(1 for e in faults.events if e.kind == "kill"),
        "broker_restarts": sum(1 for e in faults.events if e.kind == "restart"),
        "worker_killed": chaos.worker_killed_at is not None, "task_restarts": chaos.task_restarts,
        "kill_wait_s": round(chaos.kill_wait_s, 1),
        "source_resumes": [{**r, "at": round(r["at"] - started, 1)} for r in resumes],
        "connector_status": _states(run.get("status")),
        "longest_no_commit_s": gap, "longest_no_commit_at_s": None if gap_at is None else round(gap_at - started, 1),
        "longest_sink_gap_s": sink_gap,
        "seconds": round(ended - started, 1), "msgs_per_s": round(messages / span, 1) if span > 0 else None,
        "commit_times": times, "copy_started_at": started, "copy_ended_at": ended,
        "events": [[round(f.at - started, 3), f.kind, f.label] for f in faults.events], "faults": faults.faults,
    }


def _states(status: dict | None) -> dict[str, list[str]] | None:
    if status is None:
        return None
    return {name: [st["status"]["connector"]["state"], *(t["state"] for t in st["status"]["tasks"])]
            for name, st in status.items()}

