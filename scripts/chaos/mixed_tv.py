"""The ``mixed-tv`` scenario (issue 45): transaction.version 1 and 2 clients on one cluster
while the transaction coordinators crash at each EndTxn step.

On a fresh 3-broker kaas cluster (which finalizes transaction.version 2):

- ``TV1_PRODUCERS`` librdkafka transactional producers (``mixed_clients.Tv1Producer``,
  transaction.version 1) write transactions of 10 records over the 3 partitions of the
  shared topic, every 5th aborted on purpose;
- ``TV2_WRITERS`` Apache ``TransactionalMessageCopier`` instances (Java 4.4:
  transaction.version 2, so Produce adds the partitions and TxnOffsetCommit the offsets,
  and EndTxn v5 bumps the epoch) copy the seed topic into the same partitions of the same
  topic, in transactions of 25 records, about one in three aborted;
- ``TV2_COPIERS`` more copiers copy the shared topic, read_committed, to the output topic:
  an EOS copy of a topic whose transactions are of both versions, interleaved;

while the chaos of ``endtxn-failpoints`` (``scenarios.Chaos``) arms each EndTxn failpoint on
every broker in turn, ``ROUNDS`` times: the coordinator that reaches it first crashes there,
and the supervisor restarts it. Once every point was tried and the seed copied, the TV1
producers stop; the copy of the shared topic runs to its end; both topics are read back
(read_committed) and judged (``mixed_verdict``): every committed TV1 transaction whole and
once, no aborted one visible, none torn; every seed value once and in order; the output equal
to the shared topic partition for partition (``copy_verdict``). The slot files must show the
librdkafka ids' transactions under version 1 and the Java ids' under version 2.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

from eos_harness.topics import create_topics
from eos_harness.topics import seed as write_seed

from kaas import failpoints
from kaas.domain.routing import txn_slot
from kaas.storage.txn_store import TxnStore
from kaas.testing import ClusterProcess
from kaas.testing.verify import read_topic, wait_transactions_complete

from .copy_verdict import Read, copy_verdict
from .jvm import tools_classpath
from .mixed_clients import Copiers, Tv1Producer
from .mixed_verdict import Rec, Txn, aborted_in_log, judge, kills_by_point, outcomes, version_violations
from .report import longest_stretch, write_report
from .runner import scratch_volume
from .scenarios import ENDTXN_POINTS, ROUNDS, Chaos

MESSAGES = 12_000  # seed values the TV2 writers copy into the shared topic
PARTITIONS = 3
TV1_PRODUCERS = 2
TV2_WRITERS = 2
TV2_COPIERS = 2
WRITER_TXN = 25  # records per TV2 writer transaction (the copier's max.poll.records)
COPIER_TXN = 50  # records per TV2 copier transaction
WRITE_CAP_S = 240.0  # the writers stop by then whatever the chaos
DRAIN_S = 240.0  # after the writers stopped: the seed's copy, then the shared topic's, at most this long
SEED, SHARED, OUT = "mixed-seed", "mixed-shared", "mixed-out"
WRITERS_GROUP, COPY_GROUP = "mixed-tv2-writers", "mixed-tv2-copy"


def _committed(consumer, topic: str) -> dict[int, int] | None:
    from confluent_kafka import KafkaException, TopicPartition

    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=5)
    except KafkaException:
        return None
    return {tp.partition: tp.offset for tp in got if tp.error is None}


def _reached(committed: dict[int, int] | None, ends: dict[int, int]) -> bool:
    return committed is not None and all(committed.get(p, -1) >= e for p, e in ends.items())


def _read(bootstrap: str, topic: str, echo, isolation: str = "read_committed") -> list[Rec]:
    conf = {"bootstrap.servers": bootstrap}
    wait_transactions_complete(conf, topic, time.monotonic() + 60, say=lambda s: echo(s, err=True))
    return [Rec(r.partition, r.offset, (r.value or b"").decode())
            for r in read_topic(conf, topic, isolation, timeout=120)]


def _versions(data: Path, ids: list[str]) -> dict[str, dict]:
    """Each transactional id's slot file entry: the version, epoch and count of its transactions."""
    store = TxnStore(data / "__cluster" / "txn_state", owns=lambda _slot: False)
    out: dict[str, dict] = {}
    for tid in ids:
        meta = store.load(txn_slot(tid)).get(tid)
        if meta is not None:
            out[tid] = {"transaction_version": meta.txn_version, "producer_id": meta.producer_id,
                        "producer_epoch": meta.producer_epoch, "transactions": meta.txn_seq, "state": meta.state.value}
    return out


class Mixed:
    """One run's clients and the loop that drives them and the chaos."""

    def __init__(self, cluster: ClusterProcess, cp: str, workdir: Path, chaos: Chaos, echo) -> None:
        from confluent_kafka import Consumer

        self.cluster, self.chaos, self.echo = cluster, chaos, echo
        b = cluster.bootstrap
        self.stop_tv1 = threading.Event()
        self.tv1 = [Tv1Producer(f"mixed-tv1-{i}", b, SHARED, PARTITIONS, self.stop_tv1) for i in range(TV1_PRODUCERS)]
        self.writers = Copiers("mixed-tv2-writer", workdir, cp, b, SEED, SHARED, WRITERS_GROUP, TV2_WRITERS, WRITER_TXN)
        self.copiers = Copiers("mixed-tv2-copier", workdir, cp, b, SHARED, OUT, COPY_GROUP, TV2_COPIERS, COPIER_TXN)
        self.offsets = {g: Consumer({"bootstrap.servers": b, "group.id": g, "enable.auto.commit": False,
                                     "reconnect.backoff.max.ms": 1000, "log_level": 2})
                        for g in (WRITERS_GROUP, COPY_GROUP)}
        self.t0 = time.time()

    def commit_times(self) -> list[float]:
        return sorted([t for p in self.tv1 for t in p.commit_times] + self.writers.commit_times
                      + self.copiers.commit_times)

    def chaos_over(self) -> bool:
        return self.chaos.step >= ROUNDS * len(ENDTXN_POINTS) and self.chaos.armed is None

    def write(self, seed_ends: dict[int, int]) -> bool:
        """Start the clients; run the chaos until every point was tried and the seed copied
        (or ``WRITE_CAP_S``); stop the TV1 producers. Whether the seed was copied."""
        for p in self.tv1:
            p.start()
        self.writers.start_all()
        copying = False
        seeded, checked = False, 0.0
        while time.time() - self.t0 < WRITE_CAP_S:
            commits = len(self.commit_times())
            self.chaos(time.time() - self.t0, commits)
            if not copying and commits:  # the copy's input has data (a copier finding none exits)
                self.copiers.start_all()
                copying = True
            if time.monotonic() - checked > 1.0:
                checked = time.monotonic()
                seeded = seeded or _reached(_committed(self.offsets[WRITERS_GROUP], SEED), seed_ends)
            self.writers.supervise(not seeded, self.chaos.log)
            self.copiers.supervise(True, self.chaos.log)
            if self.chaos_over() and seeded:
                break
            time.sleep(0.2)
        self.chaos.done = True
        self._disarm()
        self.chaos.log("writers stopping: chaos over" if self.chaos_over() else "writers stopping: time cap")
        self.stop_tv1.set()
        for p in self.tv1:
            p.join(120)
        if not copying:
            self.copiers.start_all()
        deadline = time.monotonic() + DRAIN_S
        while not seeded and time.monotonic() < deadline:
            seeded = _reached(_committed(self.offsets[WRITERS_GROUP], SEED), seed_ends)
            self.writers.supervise(not seeded, self.chaos.log)
            self.copiers.supervise(True, self.chaos.log)
            time.sleep(0.5)
        self.writers.stop_all()
        return seeded

    def copy(self, shared: list[Rec]) -> bool:
        """Let the copiers reach the last committed record of each shared partition; stop
        them. Whether they did."""
        last: dict[int, int] = {p: 0 for p in range(PARTITIONS)}
        for r in shared:
            last[r.partition] = max(last[r.partition], r.offset + 1)
        deadline = time.monotonic() + DRAIN_S
        done = False
        while time.monotonic() < deadline:
            done = _reached(_committed(self.offsets[COPY_GROUP], SHARED), last)
            if done:
                break
            self.copiers.supervise(True, self.chaos.log)
            time.sleep(0.5)
        self.copiers.stop_all()
        return done

    def _disarm(self) -> None:
        for bid in range(self.cluster.n):
            failpoints.disarm(self.cluster.data / "run", bid)

    def close(self) -> None:
        self.chaos.done = True
        self.stop_tv1.set()
        self.writers.stop_all()
        self.copiers.stop_all()
        for c in self.offsets.values():
            c.close()
        self._disarm()


def run_mixed_tv(seed: int, messages: int | None, out: Path | None, echo) -> dict:
    """One run on a fresh cluster; the result (and its report in ``out``)."""
    messages = messages or MESSAGES
    cp = tools_classpath()
    with scratch_volume("mixed-tv") as tmp:
        (tmp / "jvm").mkdir()
        cluster = ClusterProcess(tmp / "data", 3, env={"KAAS_TXN_SWEEP_MS": "1000"}).start()
        chaos = Chaos("endtxn-failpoints", cluster, random.Random(seed), echo)
        chaos.watch_restarts()
        mixed: Mixed | None = None
        try:
            create_topics(cluster.bootstrap, {SEED: PARTITIONS, SHARED: PARTITIONS, OUT: PARTITIONS})
            write_seed(cluster.bootstrap, SEED, messages, PARTITIONS)
            mixed = Mixed(cluster, cp, tmp / "jvm", chaos, echo)
            seeded = mixed.write({p: len(range(p, messages, PARTITIONS)) for p in range(PARTITIONS)})
            shared = _read(cluster.bootstrap, SHARED, echo)
            raw = _read(cluster.bootstrap, SHARED, echo, "read_uncommitted")
            copied = mixed.copy(shared)
            t1 = time.time()
            output = _read(cluster.bootstrap, OUT, echo)
            ids = [p.tid for p in mixed.tv1] + [c.tid(i) for c in (mixed.writers, mixed.copiers)
                                                 for i in range(c.count)]
            versions = _versions(cluster.data, ids)
        finally:
            if mixed is not None:
                mixed.close()
            cluster.stop()
    result = _result(seed, messages, mixed, chaos, (seeded, copied), (shared, raw, output), versions, t1)
    if out is not None:
        write_report(result, out, echo)
    return result


def _result(seed: int, messages: int, mixed: Mixed, chaos: Chaos, done: tuple[bool, bool],
            reads: tuple[list[Rec], list[Rec], list[Rec]], versions: dict[str, dict], t1: float) -> dict:
    seeded, copied = done
    shared, raw, output = reads
    txns: dict[tuple[str, int], Txn] = {k: v for p in mixed.tv1 for k, v in p.txns.items()}
    inputs: dict[int, list[str]] = {}
    for r in sorted(shared):
        inputs.setdefault(r.partition, []).append(r.value)
    shared_v = judge(shared, txns, messages, PARTITIONS)
    out_v = judge(output, txns, messages, PARTITIONS)
    copy_v = copy_verdict(inputs, [Read(r.partition, r.offset, r.value) for r in output])
    bad_versions = version_violations(versions, [p.tid for p in mixed.tv1],
                                      [c.tid(i) for c in (mixed.writers, mixed.copiers) for i in range(c.count)])
    commits = mixed.commit_times()
    stretch, _at = longest_stretch(commits)
    violations = [f"shared: {v}" for v in shared_v["examples"]["violations"] + shared_v["examples"]["torn"]]
    violations += [f"output: {v}" for v in out_v["examples"]["violations"] + out_v["examples"]["torn"]]
    if not copy_v["ok"]:
        violations.append(f"output != shared: {copy_v['examples']} "
                          f"partitions {copy_v['partitions_not_equal_to_input']}")
    violations += bad_versions
    violations += [] if seeded else ["the TV2 writers did not copy the whole seed"]
    violations += [] if copied else ["the TV2 copiers did not copy the whole shared topic"]
    seconds = t1 - mixed.t0
    return {
        "scenario": "mixed-tv", "seed": seed, "messages": messages,
        "ok": shared_v["ok"] and out_v["ok"] and copy_v["ok"] and not bad_versions and seeded and copied,
        "violations": violations, "shared": shared_v, "output": out_v, "copy": copy_v,
        "kills": sum(1 for e in chaos.events if e.kind == "kill"),
        "kills_by_point": kills_by_point(chaos.faults, ENDTXN_POINTS),
        # crashes while the TV2 writers still wrote the shared topic (all three kinds of client running)
        "kills_while_all_wrote": sum(1 for e in chaos.events if e.kind == "kill"
                                     and e.at <= max(mixed.writers.commit_times, default=0.0)),
        "broker_restarts": sum(1 for e in chaos.events if e.kind == "restart"),
        "tv1_transactions": outcomes(txns), "tv1_aborted_in_log": aborted_in_log(raw, txns),
        "tv1_errors": {p.tid: p.errors[:20] for p in mixed.tv1}, "tv1_inits": {p.tid: p.inits for p in mixed.tv1},
        "tv2_commits": {"writers": len(mixed.writers.commit_times), "copiers": len(mixed.copiers.commit_times)},
        "tv2_restarts": {"writers": mixed.writers.restarts, "copiers": mixed.copiers.restarts},
        "tv2_exits": mixed.writers.exits + mixed.copiers.exits,
        "slot_entries": versions, "longest_no_commit_s": stretch, "seconds": round(seconds, 1),
        "msgs_per_s": round(len(output) / seconds, 1) if seconds > 0 else None,
        "commit_times": commits, "copy_started_at": mixed.t0, "copy_ended_at": t1,
        "events": [[round(f.at - mixed.t0, 3), f.kind, f.label] for f in chaos.events], "faults": chaos.faults,
    }
