"""The ``apache-eos`` scenario: Apache Kafka's own transactions system test
(``tests/kafkatest/tests/core/transactions_test.py`` and ``group_mode_transactions_test.py``)
run with Apache's own tools against a fresh 3-broker cluster, kaas or Apache 4.4
(``targets``), while a broker is SIGKILLed every 4 s in rotation (``targets.kill_rotation``:
the next kill waits for the last broker killed to serve again).

Its parameters are Apache's (``MODES``, ``MESSAGES``, ...): ``VerifiableProducer`` (idempotent)
seeds 100,000 integers into the input topic (replication 3, min.insync.replicas 2);
``TransactionalMessageCopier`` instances copy it to the output topic in transactions of 750
records (transaction timeout 40 s):

- ``assign``: one copier per input partition (2 input partitions, 3 output), each assigned
  its partition, committing offsets with the consumer group's name (no
  ``--use-group-metadata``);
- ``group``: 3 copiers subscribed as one group (``--group-mode``, ``--use-group-metadata``),
  9 input and 9 output partitions, the seed keyed over 9 keys.

The copiers are bounced as Apache bounces its clients: 3 rounds, each copier restarted once
it has copied 20% of what it had left, cleanly (SIGTERM: its shutdown hook closes the
producer and consumer) or hard (SIGKILL). A copier that exits with work left is started again
(as a supervisor would), and counted. Meanwhile a ``VerifiableConsumer`` reads the output
``read_committed``; once the group's committed offsets reach the input's end, the kills
stop and a second ``VerifiableConsumer`` (a new group) reads the whole output. Each read is
judged by ``copy_verdict``: every input message exactly once, every output partition equal
to its input partition, value for value, in order.

Progress: the copiers' status lines give each committed transaction's time; the longest
stretch without one is reported (``longest_no_commit_s``), with the copy's rate.
"""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .copy_verdict import Read, copy_verdict
from .faults import Faults
from .jvm import JavaProc, java_cmd, json_event, tools_classpath, write_properties
from .report import longest_stretch
from .targets import Target, kill_rotation, spread, start_target

MESSAGES = 100_000  # num_seed_messages
TXN_SIZE = 750  # transaction_size
TXN_TIMEOUT_MS = 40_000  # transaction_timeout
BOUNCE_ROUNDS = 3  # bounce_copiers: rounds...
BOUNCE_AT_PCT = 20.0  # ...each copier once it has copied this share of what it had left
PROGRESS_TIMEOUT_S = 120.0  # Apache waits 60 s for that progress; under kills, twice that
KILL_EVERY_S = float(os.environ.get("KAAS_CHAOS_KILL_EVERY_S", "4"))
COPY_TIMEOUT_S = 900.0
RESTART_IDLE_S = 5.0  # a copier that exited with work left is started again this much later
DRAIN_IDLE_S = 10.0  # a reader stops after this long without a new record once it has them all...
DRAIN_TIMEOUT_S = 180.0  # ...or after this long at most
TOOLS = "org.apache.kafka.tools."


@dataclass(frozen=True)
class Mode:
    input_partitions: int
    output_partitions: int
    copiers: int
    group_mode: bool
    group: str


MODES = {
    "assign": Mode(2, 3, 2, False, "transactions-test-consumer-group"),
    "group": Mode(9, 9, 3, True, "grouped-transactions-test-consumer-group"),
}
BOUNCES = ("clean", "hard")
INPUT, OUTPUT = "input-topic", "output-topic"


class Copiers:
    """The copier processes, their incarnations, and every committed transaction's time
    (from their status lines: ``totalProcessed`` grows by each committed transaction)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.lock = threading.Lock()
        self.procs: dict[int, JavaProc] = {}
        self.incarnations: dict[int, int] = {}
        self.status: dict[int, dict] = {}  # copier -> the last status of its current incarnation
        self.commit_times: list[float] = []
        self.exits: list[dict] = []  # copiers that ended without being bounced
        self.bounces = 0

    def start(self, i: int) -> None:
        r, m = self.run, self.run.mode
        inc = self.incarnations.get(i, -1) + 1
        self.incarnations[i] = inc
        args = ["--input-topic", INPUT, "--input-partition", str(-1 if m.group_mode else i), "--output-topic", OUTPUT,
                "--broker-list", r.target.bootstrap, "--consumer-group", m.group, "--transaction-size", str(TXN_SIZE),
                "--transaction-timeout", str(TXN_TIMEOUT_MS), "--transactional-id", f"copier-{i}"]
        if m.group_mode:
            args += ["--group-mode", "--use-group-metadata"]
        with self.lock:
            self.status[i] = {}
        proc = JavaProc(f"copier-{i}.{inc}", java_cmd(r.dir, r.cp, TOOLS + "TransactionalMessageCopier", *args),
                        r.dir, self._on_line(i, inc))
        self.procs[i] = proc.start()

    def _on_line(self, i: int, inc: int):
        def on_line(line: str, at: float) -> None:
            ev = json_event(line)
            if ev is None or "totalProcessed" not in ev:
                return
            with self.lock:
                if self.incarnations[i] != inc:
                    return
                before = self.status[i].get("totalProcessed", 0)
                self.status[i] = ev
                if ev["totalProcessed"] > before:
                    self.commit_times.append(at)
        return on_line

    def progress_pct(self, i: int) -> float:
        """How much of what the current incarnation had left it has copied."""
        with self.lock:
            st = self.status.get(i, {})
        done, left = st.get("consumed", 0), st.get("remaining", 0)
        if done + left <= 0 or left > 1 << 62:  # before its first status, or "unbounded"
            return 0.0
        return 100.0 * done / (done + left)

    def bounce(self, i: int, clean: bool) -> tuple[int, bool]:
        proc = self.procs[i]
        pid = proc.pid
        graceful = False
        if clean:
            graceful = proc.stop(30.0)
        else:
            proc.kill()
        self.bounces += 1
        self.start(i)
        return pid, graceful

    def note_exit(self, i: int) -> None:
        p = self.procs[i]
        self.exits.append({"copier": i, "incarnation": self.incarnations[i], "returncode": p.returncode,
                           "stderr": p.stderr_tail(3)})

    def stop_all(self) -> None:
        for p in self.procs.values():
            p.stop(20.0)


class Reader:
    """A ``VerifiableConsumer`` of the output (``--verbose``: every record), read_committed."""

    def __init__(self, run: Run, group: str) -> None:
        self.lock = threading.Lock()
        self.reads: list[Read] = []
        self.offsets: set[tuple[int, int]] = set()
        self.last_new = time.monotonic()
        conf = write_properties(run.dir / f"{group}.properties", {"isolation.level": "read_committed"})
        args = ["--topic", OUTPUT, "--group-id", group, "--bootstrap-server", run.target.bootstrap, "--verbose",
                "--reset-policy", "earliest", "--command-config", str(conf)]
        self.proc = JavaProc(group, java_cmd(run.dir, run.cp, TOOLS + "VerifiableConsumer", *args), run.dir,
                             self._on_line).start()

    def _on_line(self, line: str, at: float) -> None:
        ev = json_event(line)
        if ev is None or ev.get("name") != "record_data":
            return
        r = Read(int(ev["partition"]), int(ev["offset"]), str(ev["value"]))
        with self.lock:
            self.reads.append(r)
            if (r.partition, r.offset) not in self.offsets:
                self.offsets.add((r.partition, r.offset))
                self.last_new = time.monotonic()

    def drain(self, expected: int, echo, label: str) -> list[Read]:
        """Read until ``expected`` records and then ``DRAIN_IDLE_S`` without a new one (or
        ``DRAIN_TIMEOUT_S``); stop; the reads."""
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.alive():
            with self.lock:
                n, idle = len(self.offsets), time.monotonic() - self.last_new
            if n >= expected and idle >= DRAIN_IDLE_S:
                break
            time.sleep(0.5)
        self.proc.stop(30.0)
        with self.lock:
            echo(f"  {label}: {len(self.offsets)} records at distinct offsets ({len(self.reads)} reads)")
            return list(self.reads)


@dataclass
class Run:
    target: Target
    dir: Path
    cp: str
    mode: Mode


def _create_topics(run: Run) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": run.target.bootstrap})
    cfg = {"min.insync.replicas": "2"}
    futs = admin.create_topics([NewTopic(INPUT, run.mode.input_partitions, 3, config=cfg),
                                NewTopic(OUTPUT, run.mode.output_partitions, 3, config=cfg)], operation_timeout=30)
    for f in futs.values():
        f.result(60)


def _seed(run: Run, messages: int, echo) -> dict[int, list[str]]:
    """VerifiableProducer: ``messages`` integers, idempotent, acks=all; each partition's
    acknowledged values in offset order."""
    acked: list[tuple[int, int, str]] = []
    failed: list[str] = []

    def on_line(line: str, _at: float) -> None:
        ev = json_event(line)
        if ev and ev.get("name") == "producer_send_success":
            acked.append((int(ev["partition"]), int(ev["offset"]), str(ev["value"])))
        elif ev and ev.get("name") == "producer_send_error":
            failed.append(str(ev.get("value")))

    conf = write_properties(run.dir / "seed.properties", {"enable.idempotence": "true", "acks": "all",
                                                                  "retries": 2147483647,
                                                                  "max.in.flight.requests.per.connection": 5})
    args = ["--topic", INPUT, "--bootstrap-server", run.target.bootstrap, "--max-messages", str(messages),
            "--command-config", str(conf)]
    if run.mode.group_mode:
        args += ["--repeating-keys", str(run.mode.input_partitions)]
    t0 = time.monotonic()
    proc = JavaProc("seed", java_cmd(run.dir, run.cp, TOOLS + "VerifiableProducer", *args), run.dir, on_line).start()
    rc = proc.wait(600)
    if rc != 0 or failed or len(acked) != messages:
        raise RuntimeError(f"seeding failed: exit {rc}, {len(acked)} acked, {len(failed)} failed "
                           f"{proc.stderr_tail()}")
    echo(f"  seeded {len(acked)} messages in {time.monotonic() - t0:.1f} s")
    inputs: dict[int, list[str]] = {}
    for p, _o, v in sorted(acked):
        inputs.setdefault(p, []).append(v)
    return inputs


def _committed(reader, partitions: int) -> dict[int, int] | None:
    """The group's committed offsets of the input partitions (``reader``: a consumer with the
    group's id that never joins it), None when the cluster does not answer in time."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        got = reader.committed([TopicPartition(INPUT, p) for p in range(partitions)], timeout=5)
    except KafkaException:
        return None
    return {tp.partition: tp.offset for tp in got if tp.error is None}


def _bounce_copiers(copiers: Copiers, clean: bool, faults: Faults, stop: threading.Event) -> None:
    """``bounce_copiers``: ``BOUNCE_ROUNDS`` rounds; in each, every copier in turn restarted
    once it has copied ``BOUNCE_AT_PCT`` of what it had left (a finished one is skipped)."""
    for rnd in range(BOUNCE_ROUNDS):
        for i in sorted(copiers.procs):
            deadline = time.monotonic() + PROGRESS_TIMEOUT_S
            while not stop.is_set() and copiers.procs[i].alive() and copiers.progress_pct(i) < BOUNCE_AT_PCT:
                if time.monotonic() > deadline:
                    faults.log(f"copier {i} made less than {BOUNCE_AT_PCT:.0f}% progress in {PROGRESS_TIMEOUT_S:.0f} s")
                    break
                time.sleep(0.1)
            if stop.is_set():
                return
            if not copiers.procs[i].alive():
                continue
            at = time.time()
            pid, graceful = copiers.bounce(i, clean)
            what = ("SIGTERM" + ("" if graceful else ", SIGKILL after 30 s")) if clean else "SIGKILL"
            faults.log(f"round {rnd + 1}: copier {i} bounced ({what}, pid {pid})", at, "copier-kill")


def _copy(run: Run, inputs: dict[int, list[str]], clean: bool, faults: Faults, echo) -> dict:
    """Start the copiers and the concurrent reader; bounce copiers and kill brokers until
    the group's committed offsets reach the input's end; stop the faults."""
    from confluent_kafka import Consumer

    ends = {p: len(vs) for p, vs in inputs.items()}
    copiers = Copiers(run)
    for i in range(run.mode.copiers):
        copiers.start(i)
    concurrent = Reader(run, "concurrent_consumer")
    offsets = Consumer({"bootstrap.servers": run.target.bootstrap, "group.id": run.mode.group,
                        "enable.auto.commit": False, "reconnect.backoff.max.ms": 1000, "log_level": 2})
    stop = threading.Event()
    t0 = time.time()
    started = False
    dead_since: dict[int, float] = {}
    downtimes: list[float] = []
    committed: dict[int, int] | None = None
    try:
        while time.time() - t0 < COPY_TIMEOUT_S:
            if not started and copiers.commit_times:  # faults once the copiers are in their stride
                started = True
                threading.Thread(target=kill_rotation, args=(faults, run.target, stop, KILL_EVERY_S, downtimes),
                                 daemon=True).start()
                threading.Thread(target=_bounce_copiers, args=(copiers, clean, faults, stop), daemon=True).start()
            fresh = _committed(offsets, run.mode.input_partitions)
            committed = fresh or committed
            if committed is not None and all(committed.get(p, -1) >= e for p, e in ends.items()):
                break
            now = time.monotonic()
            for i, p in copiers.procs.items():
                if p.alive():
                    dead_since.pop(i, None)
                    continue
                # an assigned copier exits 0 once its partition is copied; a group's once its
                # partitions are: the group may still have work for it
                left = fresh is not None and (run.mode.group_mode or fresh.get(i, -1) < ends.get(i, 0))
                if (left or p.returncode != 0) and now - dead_since.setdefault(i, now) >= RESTART_IDLE_S:
                    copiers.note_exit(i)
                    faults.log(f"copier {i} exited ({p.returncode}) with work left: started again")
                    copiers.start(i)
                    dead_since.pop(i, None)
            time.sleep(0.5)
        else:
            faults.log(f"the copy did not complete in {COPY_TIMEOUT_S:.0f} s")
    except BaseException:
        concurrent.proc.stop(10.0)
        raise
    finally:
        stop.set()
        faults.log("faults over")
        copiers.stop_all()
        offsets.close()
    t1 = time.time()
    done = committed is not None and all(committed.get(p, -1) >= e for p, e in ends.items())
    return {"copiers": copiers, "concurrent": concurrent, "copy_started_at": t0, "copy_ended_at": t1,
            "copy_completed": done, "committed": committed, "downtimes": downtimes}


def run_apache_eos(target_name: str, mode_name: str, bounce: str, seed: int, messages: int, tmp: Path,
                   echo) -> dict:
    """One run on a fresh cluster of ``target_name`` in ``tmp``: the result (the report's content)."""
    random.seed(seed)
    mode = MODES[mode_name]
    cp = tools_classpath()
    (tmp / "jvm").mkdir(parents=True, exist_ok=True)
    target = start_target(target_name, tmp)
    faults = Faults(target, echo)  # type: ignore[arg-type] # a duck-typed cluster
    faults.watch_restarts()
    run = Run(target, tmp / "jvm", cp, mode)
    try:
        _create_topics(run)
        inputs = _seed(run, messages, echo)
        copy = _copy(run, inputs, bounce == "clean", faults, echo)
        faults.done = True
        expected = sum(len(v) for v in inputs.values())
        concurrent = copy_verdict(inputs, copy["concurrent"].drain(expected, echo, "concurrent consumer"))
        final = copy_verdict(inputs, Reader(run, "verifying_consumer").drain(expected, echo, "verifying consumer"))
    finally:
        faults.done = True
        target.stop()
    copiers: Copiers = copy["copiers"]
    commits = sorted(copiers.commit_times)
    stretch, stretch_at = longest_stretch(commits)
    seconds = copy["copy_ended_at"] - copy["copy_started_at"]
    name = f"apache-eos-{mode_name}-{bounce}"
    return {
        "scenario": name, "target": target_name, "seed": seed, "messages": messages, "mode": mode_name,
        "bounce": bounce, "parameters": {**mode.__dict__, "transaction_size": TXN_SIZE,
                                         "transaction_timeout_ms": TXN_TIMEOUT_MS, "kill_every_s": KILL_EVERY_S},
        "ok": final["ok"] and concurrent["ok"] and copy["copy_completed"],
        "copy_completed": copy["copy_completed"], "final": final, "concurrent": concurrent,
        "kills": sum(1 for e in faults.events if e.kind == "kill"), "copier_bounces": copiers.bounces,
        "copier_exits": copiers.exits, "broker_restarts": sum(1 for e in faults.events if e.kind == "restart"),
        "broker_down_s": spread(copy["downtimes"]), "longest_no_commit_s": stretch,
        "longest_no_commit_at_s": None if stretch_at is None else round(stretch_at - copy["copy_started_at"], 1),
        "seconds": round(seconds, 1), "msgs_per_s": round(messages / seconds, 1) if seconds > 0 else None,
        "commit_times": commits, "copy_started_at": copy["copy_started_at"], "copy_ended_at": copy["copy_ended_at"],
        "events": [[round(f.at - copy["copy_started_at"], 3), f.kind, f.label] for f in faults.events],
        "faults": faults.faults,
    }

