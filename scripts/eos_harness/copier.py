"""The copier processes: one consume-process-produce loop per process (``copier``), its
report file (``StatsFile``), and the pool that starts, kills and restarts them and reads
their reports (``CopierPool``).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

from .config import HarnessConfig, group_settings, security, txn_id_prefix


class StatsFile:
    """A copier's report channel: one JSON array per line, appended with one write each."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def put(self, item: tuple) -> None:
        os.write(self.fd, (json.dumps(item) + "\n").encode())



def copier(idx: int, incarnation: int, cfg: HarnessConfig, run_dir: str) -> None:
    """One copier process: consume (read_committed) -> produce in a txn -> commit offsets.
    Reports to ``run_dir/copier-<idx>-<incarnation>.jsonl``; stops once ``run_dir/stop``
    (all copiers) or ``run_dir/stop-<idx>-<incarnation>`` (this one) exists, after its
    current transaction, and leaves the group. A restarted copier (same ``idx``, next
    ``incarnation``) keeps the transactional id, so its init_transactions fences and aborts
    what its killed predecessor left open. Its group protocol is ``cfg.group_protocol``."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

    stats = StatsFile(Path(run_dir) / f"copier-{idx}-{incarnation}.jsonl")
    stop_file = Path(run_dir) / "stop"
    own_stop = Path(run_dir) / f"stop-{idx}-{incarnation}"
    rnd = random.Random(cfg.seed * 1000 + idx * 100 + incarnation)
    consumer = Consumer({
        **security(cfg, "copier"),
        "bootstrap.servers": cfg.bootstrap, "group.id": cfg.group, "enable.auto.commit": False,
        "isolation.level": "read_committed", "auto.offset.reset": "earliest",
        **group_settings(cfg), "max.poll.interval.ms": 60000,
        "socket.timeout.ms": cfg.socket_timeout_ms, "reconnect.backoff.max.ms": 1000,
        "metadata.recovery.strategy": "none",
    })
    txn_timeout = cfg.transaction_timeout_ms
    producer = Producer({
        **security(cfg, "copier"),
        "bootstrap.servers": cfg.bootstrap, "transactional.id": f"{txn_id_prefix(cfg)}{idx}",
        "transaction.timeout.ms": txn_timeout, "linger.ms": 5, "acks": "all", "message.timeout.ms": txn_timeout,
        "socket.timeout.ms": min(cfg.socket_timeout_ms, txn_timeout),
        # librdkafka's default (10 s) would measure its reconnect backoff, not the cluster's
        # recovery; scripts/bench's failover runs use the same
        "reconnect.backoff.max.ms": 1000,
        # With every broker down at once librdkafka (2.16) "re-bootstraps": it drops the
        # brokers it knew, and a send_offsets_to_transaction() waiting for the group
        # coordinator stays on the dropped handle forever (seen in kill-all). Keeping the
        # known brokers avoids that client bug; the brokers come back on the same addresses.
        "metadata.recovery.strategy": "none",
        **({"debug": os.environ["KAAS_HARNESS_DEBUG"]} if os.environ.get("KAAS_HARNESS_DEBUG") else {}),
    })
    # whom the copier connects as (--secure: its least-privilege user), for the harness to check
    stats.put(("user", idx, incarnation, security(cfg, "copier").get("sasl.username")))
    stats.put(("protocol", idx, incarnation, cfg.group_protocol))
    producer.init_transactions(60)
    consumer.subscribe([cfg.input])
    committed = aborted = copied = 0
    commit_ms: list[float] = []
    txn_no = 0

    def retrying(call):
        """A retriable error (a timeout while a coordinator moves) means: call again."""
        while True:
            try:
                return call()
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise

    def rewind(msgs) -> None:
        """After an abort, consume the batch again: seek each partition back to the batch's
        first offset in it. (Not to ``committed()``: while the coordinator moves that can
        answer with a per-partition error and no offset, which is not "from the start".) A
        partition no longer assigned is skipped; its new owner starts from the committed
        offset."""
        first: dict[int, int] = {}
        for m in msgs:
            first.setdefault(m.partition(), m.offset())
        for p, o in first.items():
            try:
                consumer.seek(TopicPartition(cfg.input, p, o))
            except KafkaException:
                pass

    rate = cfg.rate  # messages/s for this copier, 0: as fast as it goes
    next_at = time.monotonic()
    try:
        while not stop_file.exists() and not own_stop.exists():
            if rate:
                time.sleep(max(0.0, next_at - time.monotonic()))
            msgs = [m for m in consumer.consume(cfg.commit_every, 0.5) if not m.error()]
            if not msgs:
                continue
            next_at = max(next_at, time.monotonic() - 1.0) + (len(msgs) / rate if rate else 0)
            txn_no += 1
            abort = cfg.abort_every > 0 and rnd.random() < 1.0 / cfg.abort_every
            tag = f"{idx}.{incarnation}:{txn_no}"
            try:
                producer.begin_transaction()
                for m in msgs:
                    producer.produce(cfg.output, key=str(m.partition()).encode(),
                                     value=json.dumps({"v": m.value().decode(), "ip": m.partition(),
                                                       "io": m.offset(), "ts": m.timestamp()[1],
                                                       "tag": tag}).encode())
                    producer.poll(0)
                positions = {}
                for m in msgs:
                    positions[m.partition()] = m.offset() + 1
                offsets = [TopicPartition(cfg.input, p, o) for p, o in positions.items()]
                retrying(lambda: producer.send_offsets_to_transaction(
                    offsets, consumer.consumer_group_metadata(), 30))
                if abort:
                    retrying(lambda: producer.abort_transaction(30))
                    aborted += 1
                    stats.put(("aborted", tag))
                    rewind(msgs)
                else:
                    t0 = time.perf_counter()
                    retrying(lambda: producer.commit_transaction(30))
                    commit_ms.append((time.perf_counter() - t0) * 1000)
                    stats.put(("commit_at", time.time(), idx))
                    committed += 1
                    copied += len(msgs)
            except KafkaException as exc:
                err = exc.args[0]
                if not err.txn_requires_abort():
                    stats.put(("fatal", f"copier {idx}: {err}"))
                    raise
                retrying(lambda: producer.abort_transaction(30))
                aborted += 1
                stats.put(("aborted", tag))
                rewind(msgs)
            stats.put(("progress", idx, incarnation, committed, aborted, copied))
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._FENCED:
            raise
    finally:
        stats.put(("done", idx, incarnation, committed, aborted, copied, commit_ms))
        consumer.close()



class CopierPool:
    """The copier processes of one run: start, SIGKILL, restart one; read their reports.

    Each incarnation of copier ``i`` writes ``run_dir/copier-<i>-<n>.jsonl``;
    :meth:`drain` parses the complete lines appended since the last call (a killed
    copier's torn last line is never complete, so it is never read)."""

    def __init__(self, cfg: HarnessConfig, run_dir: Path) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.ctx = mp.get_context("spawn")
        self.procs: dict[int, object] = {}  # copier index -> its current process
        self.incarnation: dict[int, int] = {}
        self.killed: set[tuple[int, int]] = set()  # (index, incarnation) SIGKILLed on purpose
        self.protocol: dict[int, str] = {}  # copier index -> group.protocol of its current process
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}
        self._lock = threading.Lock()  # chaos kills and restarts from a thread of its own
        self.stopped = False

    def start(self, idx: int, group_protocol: str | None = None) -> None:
        """Start copier ``idx`` (its next incarnation), with ``group_protocol`` if given, else
        the one it had, else ``cfg.group_protocol``."""
        with self._lock:
            if self.stopped:
                return
            n = self.incarnation.get(idx, -1) + 1
            protocol = group_protocol or self.protocol.get(idx) or self.cfg.group_protocol
            cfg = replace(self.cfg, group_protocol=protocol)
            p = self.ctx.Process(target=copier, args=(idx, n, cfg, str(self.run_dir)), daemon=True,
                                 name=f"copier-{idx}-{n}")
            p.start()
            self.incarnation[idx] = n
            self.procs[idx] = p
            self.protocol[idx] = protocol

    def kill(self, idx: int) -> int:
        """SIGKILL copier ``idx`` (its transaction, if one is open, stays open). Its pid."""
        with self._lock:
            p = self.procs[idx]
            self.killed.add((idx, self.incarnation[idx]))
            os.kill(p.pid, signal.SIGKILL)
            p.join(5)
            return p.pid

    def restart(self, idx: int, group_protocol: str | None = None) -> None:
        """Start copier ``idx`` again (same transactional id, next incarnation; its group
        protocol ``group_protocol`` if given, else the same)."""
        self.start(idx, group_protocol)

    def stop(self, idx: int, timeout: float = 30.0) -> bool:
        """Stop copier ``idx`` as an application is stopped for an upgrade: it ends its
        transaction, closes its consumer (leaving the group) and exits. False if it had to
        be SIGKILLed after ``timeout`` seconds."""
        with self._lock:
            p = self.procs[idx]
            (self.run_dir / f"stop-{idx}-{self.incarnation[idx]}").touch()
        p.join(timeout)
        if p.is_alive():
            self.kill(idx)
            return False
        return True

    def died(self) -> list[str]:
        """Copiers that exited with an error without being killed on purpose (reported once)."""
        out = []
        with self._lock:
            for idx, p in self.procs.items():
                key = (idx, self.incarnation[idx])
                if p.exitcode not in (None, 0) and key not in self.killed:
                    out.append(f"copier {idx} died with exit code {p.exitcode}")
                    self.killed.add(key)
        return out

    def drain(self) -> list[list]:
        items = []
        for path in sorted(self.run_dir.glob("copier-*.jsonl")):
            off = self._offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(off)
                chunk = f.read()
            self._offsets[path] = off + len(chunk)
            *lines, rest = (self._partial.get(path, b"") + chunk).split(b"\n")
            self._partial[path] = rest
            items.extend(json.loads(line) for line in lines if line)
        return items

    def stop_all(self, timeout: float = 30.0) -> None:
        (self.run_dir / "stop").touch()
        deadline = time.monotonic() + timeout
        with self._lock:
            self.stopped = True
            procs = list(self.procs.values())
        for p in procs:
            p.join(max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(5)

