"""The ``mixed-tv`` scenario's clients: librdkafka transactional producers (confluent-kafka,
transaction.version 1: librdkafka sends AddPartitionsToTxn and EndTxn below v5 whatever the
broker finalizes) and Apache's ``TransactionalMessageCopier`` (the Java 4.4 client, which
negotiates transaction.version 2 on a cluster that finalizes it), started, watched and
restarted."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from .jvm import JavaProc, java_cmd, json_event
from .mixed_verdict import ABORTED, COMMITTED, UNKNOWN, Txn, tv1_value

TOOLS = "org.apache.kafka.tools."
TV1_TXN_SIZE = 10  # records per TV1 transaction, spread over the partitions
TV1_ABORT_EVERY = 5  # every 5th TV1 transaction is aborted on purpose, once its records are written
TV1_PAUSE_S = 0.05  # between two TV1 transactions
TV1_TIMEOUT_S = 60.0  # a blocking transactional call's timeout
TV1_ATTEMPTS = 20  # a retriable commit or abort is tried this often before it is called unknown


class Tv1Producer(threading.Thread):
    """One librdkafka transactional producer writing transactions of ``TV1_TXN_SIZE``
    records over the topic's partitions until ``stop``; every transaction's outcome is
    recorded in ``txns`` (an undecided one, after a fatal error, as unknown; the producer is
    then made anew, whose InitProducerId fences the old one)."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, stop: threading.Event) -> None:
        super().__init__(name=f"tv1-{name}", daemon=True)
        self.tid = name
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.stop = stop
        self.txns: dict[tuple[str, int], Txn] = {}
        self.commit_times: list[float] = []
        self.errors: list[str] = []
        self.inits = 0

    def _make(self):
        from confluent_kafka import KafkaException, Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.tid,
                      "transaction.timeout.ms": 20000, "linger.ms": 5, "reconnect.backoff.max.ms": 1000,
                      "log_level": 2})
        for _ in range(TV1_ATTEMPTS * 3):
            try:
                p.init_transactions(TV1_TIMEOUT_S)
                self.inits += 1
                return p
            except KafkaException as e:
                if not e.args[0].retriable():
                    raise
                time.sleep(0.5)
        raise RuntimeError(f"{self.tid}: init_transactions kept failing")

    def _end(self, p, commit: bool) -> str:
        """Commit or abort the open transaction, retrying a retriable error; its outcome."""
        from confluent_kafka import KafkaException

        for _ in range(TV1_ATTEMPTS):
            try:
                if commit:
                    p.commit_transaction(TV1_TIMEOUT_S)
                    return COMMITTED
                p.abort_transaction(TV1_TIMEOUT_S)
                return ABORTED
            except KafkaException as e:
                err = e.args[0]
                self.errors.append(f"{'commit' if commit else 'abort'}: {err.name()}")
                if err.txn_requires_abort() and commit:
                    commit = False
                elif err.fatal() or not err.retriable():
                    return UNKNOWN
        return UNKNOWN

    def run(self) -> None:
        from confluent_kafka import KafkaException

        p = self._make()
        t = 0
        while not self.stop.is_set():
            t += 1
            abort = t % TV1_ABORT_EVERY == 0
            try:
                p.begin_transaction()
                for i in range(TV1_TXN_SIZE):
                    v = tv1_value(self.tid, t, i, TV1_TXN_SIZE).encode()
                    while True:
                        try:
                            p.produce(self.topic, value=v, partition=i % self.partitions)
                            break
                        except BufferError:
                            p.poll(0.05)
                if abort:  # its records reach the log before the abort (else librdkafka purges them unsent)
                    p.flush(TV1_TIMEOUT_S)
                outcome = self._end(p, commit=not abort)
            except KafkaException as e:
                err = e.args[0]
                self.errors.append(f"produce: {err.name()}")
                outcome = self._end(p, commit=False) if err.txn_requires_abort() else UNKNOWN
            self.txns[(self.tid, t)] = Txn(TV1_TXN_SIZE, outcome)
            if outcome == COMMITTED:
                self.commit_times.append(time.time())
            elif outcome == UNKNOWN:
                p = self._make()
            time.sleep(TV1_PAUSE_S)
        p.flush(10)


class Copiers:
    """Apache's ``TransactionalMessageCopier`` instances of one tier, in group mode (one
    consumer group, ``--use-group-metadata``), random aborts on (about one transaction in
    three): their incarnations, and each committed transaction's time (its status lines'
    ``totalProcessed`` grows at each commit). A copier that exits is started again by
    ``supervise`` while its tier has work left."""

    def __init__(self, tier: str, workdir: Path, cp: str, bootstrap: str, source: str, sink: str, group: str,
                 count: int, txn_size: int) -> None:
        self.tier, self.workdir, self.cp, self.bootstrap = tier, workdir, cp, bootstrap
        self.source, self.sink, self.group, self.count, self.txn_size = source, sink, group, count, txn_size
        self.lock = threading.Lock()
        self.procs: dict[int, JavaProc] = {}
        self.incarnations: dict[int, int] = {}
        self.totals: dict[int, int] = {}
        self.commit_times: list[float] = []
        self.restarts = 0
        self.exits: list[dict] = []
        self.dead_since: dict[int, float] = {}

    def tid(self, i: int) -> str:
        return f"{self.tier}-{i}"

    def start_all(self) -> None:
        for i in range(self.count):
            self.start(i)

    def start(self, i: int) -> None:
        inc = self.incarnations.get(i, -1) + 1
        self.incarnations[i] = inc
        args = ["--input-topic", self.source, "--input-partition", "-1", "--output-topic", self.sink,
                "--broker-list", self.bootstrap, "--consumer-group", self.group, "--transaction-size",
                str(self.txn_size), "--transaction-timeout", "20000", "--transactional-id", self.tid(i),
                "--group-mode", "--use-group-metadata", "--enable-random-aborts"]
        with self.lock:
            self.totals[i] = 0
        cmd = java_cmd(self.workdir, self.cp, TOOLS + "TransactionalMessageCopier", *args)
        self.procs[i] = JavaProc(f"{self.tid(i)}.{inc}", cmd, self.workdir, self._on_line(i, inc)).start()

    def _on_line(self, i: int, inc: int):
        def on_line(line: str, at: float) -> None:
            ev = json_event(line)
            if ev is None or "totalProcessed" not in ev:
                return
            with self.lock:
                if self.incarnations[i] != inc:
                    return
                if ev["totalProcessed"] > self.totals[i]:
                    self.commit_times.append(at)
                    self.totals[i] = ev["totalProcessed"]
        return on_line

    def supervise(self, work_left: bool, log, idle_s: float = 3.0) -> None:
        """Start again, ``idle_s`` after it ended, a copier that exited with work left (or
        with an error)."""
        now = time.monotonic()
        for i, p in list(self.procs.items()):
            if p.alive():
                self.dead_since.pop(i, None)
                continue
            if (work_left or p.returncode != 0) and now - self.dead_since.setdefault(i, now) >= idle_s:
                self.exits.append({"copier": self.tid(i), "incarnation": self.incarnations[i],
                                   "returncode": p.returncode, "stderr": p.stderr_tail(3)})
                log(f"{self.tid(i)} exited ({p.returncode}) with work left: started again")
                self.restarts += 1
                self.start(i)
                self.dead_since.pop(i, None)

    def stop_all(self) -> None:
        for p in self.procs.values():
            p.stop(30.0)
