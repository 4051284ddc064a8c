"""Failover of a kaas cluster: SIGKILL/SIGSTOP a partition leader or a transaction coordinator under load."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import click

from ..common import (
    RECONNECT_BACKOFF_MAX_MS,
    _payloads,
    _r,
    ensure_topic,
    find_coordinator,
    producer_conf,
    topic_leaders,
    topic_partitions,
    txn_producer_conf,
)
from ..metering import BrokerPids, CpuMeter, cpu_fields


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
        "warmup_s": warmup, "after_s": after, "run_s": _r(t_end - t0), **counters,
        "errors": len(errors), "first_errors": errors[:3],
        "fatal_error": fatal[0] if fatal else None, "producer_recreated": counters["reinit"] > 0,
        "partitions": partitions, "topic": topic, "bootstrap": bootstrap,
        **cpu_fields(cpu_s, counters["sent"] * size, counters["committed"]),
    }


class _Aborted(Exception):
    pass
