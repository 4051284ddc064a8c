"""The client processes of the ``share`` scenario (``chaos.share``), one per process, each
reporting through an append-only file of JSON lines of its own (a SIGKILL loses at most a
torn last line, which the reader skips) and stopping once a ``stop`` file appears::

    python scripts/chaos/share_clients.py consume  --bootstrap B --topic T --group G --report F --stop S
    python scripts/chaos/share_clients.py produce  --bootstrap B --topic T --name N --report F --stop S --rate R
    python scripts/chaos/share_clients.py txn      --bootstrap B --topic T --name N --report F --stop S --rate R

``consume``: a confluent-kafka ``ShareConsumer`` with explicit acknowledgement: every record
a poll returns is reported (``d``: partition, offset, value, delivery count) and accepted,
or released (``--release-pct`` percent of them, only while the delivery count is at least
two below ``--limit``, so a release never archives a record); then, after up to
``--hold-ms`` of "processing", ``commit_sync``. The
acknowledgement-commit callback reports each answer (``a``: partition, the offsets with the
type and delivery count each was acknowledged with, success or the error).

``produce``: an idempotent producer (acks=all) of unique values ``N-<seq>``; each delivery
report (``p``: ok or the error, partition, offset). ``txn``: a transactional producer,
transactions of ``--txn-size`` values ``N-<txn>-<i>``, every ``--abort-pct`` percent
aborted on purpose; each outcome (``c`` committed, ``x`` aborted, ``u`` unknown: the commit
failed in a way that leaves it open, the read-back decides).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

COMMON = {
    "reconnect.backoff.max.ms": 1000,
    # librdkafka 2.16 "re-bootstraps" when every known broker is down and may stay on the
    # dropped handles (scripts/eos_harness/copier.py): the brokers come back on the same ports
    "metadata.recovery.strategy": "none",
}


class Report:
    """One JSON array per line, appended with one write each."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def put(self, *item: object) -> None:
        os.write(self.fd, (json.dumps(item, separators=(",", ":")) + "\n").encode())


def consume(a: argparse.Namespace, report: Report, stop: Path) -> None:
    from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

    rnd = random.Random(a.seed)
    c = ShareConsumer({**COMMON, "bootstrap.servers": a.bootstrap, "group.id": a.group, "client.id": a.name,
                       "share.acknowledgement.mode": "explicit"})
    pending: dict[tuple[int, int], tuple[int, int]] = {}  # (partition, offset) -> (ack type, delivery count)

    def answered(offsets: dict, exc: Exception | None) -> None:
        err = None if exc is None else str(exc)
        for tp, os_ in offsets.items():
            e = err if err is not None or tp.error is None else str(tp.error)
            acks = [[o, *pending.pop((tp.partition, o), (-1, -1))] for o in sorted(os_)]
            report.put("a", tp.partition, acks, e, round(time.time(), 3))

    c.set_acknowledgement_commit_callback(answered)
    c.subscribe([a.topic])
    report.put("start", a.name, os.getpid())
    try:
        while not stop.exists():
            try:
                msgs = c.poll(0.5)
            except KafkaException as exc:
                report.put("e", "poll", str(exc))
                continue
            acked = 0
            for m in msgs:
                if m.error() is not None:
                    report.put("e", "message", str(m.error()))
                    continue
                dc = m.delivery_count()
                release = dc <= a.limit - 2 and rnd.random() * 100 < a.release_pct
                kind = AcknowledgeType.RELEASE if release else AcknowledgeType.ACCEPT
                report.put("d", m.partition(), m.offset(), m.value().decode(), dc)
                c.acknowledge(m, kind)
                pending[(m.partition(), m.offset())] = (int(kind), dc)
                acked += 1
            if acked:
                if a.hold_ms:  # "processing": records stay in flight a while, as faults land
                    time.sleep(rnd.random() * a.hold_ms / 1000)
                try:
                    c.commit_sync(15)
                except KafkaException as exc:
                    report.put("e", "commit", str(exc))
    finally:
        try:
            c.close()
        except KafkaException as exc:
            report.put("e", "close", str(exc))
        report.put("end", a.name)


def _pace(rate: float, sent: int, t0: float) -> None:
    if rate > 0:
        time.sleep(max(0.0, t0 + sent / rate - time.monotonic()))


def produce(a: argparse.Namespace, report: Report, stop: Path) -> None:
    from confluent_kafka import Producer

    p = Producer({**COMMON, "bootstrap.servers": a.bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "message.timeout.ms": 60000})

    def done(err, msg) -> None:
        report.put("p", msg.value().decode(), None if err is None else str(err), msg.partition(), msg.offset())

    t0, sent = time.monotonic(), 0
    while not stop.exists():
        _pace(a.rate, sent, t0)
        p.produce(a.topic, f"{a.name}-{sent}".encode(), on_delivery=done)
        sent += 1
        p.poll(0)
    p.flush(60)
    report.put("end", a.name, sent)


def txn(a: argparse.Namespace, report: Report, stop: Path) -> None:
    from confluent_kafka import KafkaException, Producer

    rnd = random.Random(a.seed)

    def new() -> Producer:
        p = Producer({**COMMON, "bootstrap.servers": a.bootstrap, "transactional.id": a.name, "acks": "all",
                      "linger.ms": 5, "transaction.timeout.ms": 20000, "message.timeout.ms": 20000})
        p.init_transactions(60)
        return p

    p = new()
    t0, sent, no = time.monotonic(), 0, 0
    while not stop.exists():
        _pace(a.rate, sent, t0)
        values = [f"{a.name}-{no}-{i}" for i in range(a.txn_size)]
        no += 1
        abort = rnd.random() * 100 < a.abort_pct
        try:
            p.begin_transaction()
            for v in values:
                p.produce(a.topic, v.encode())
                p.poll(0)
            sent += len(values)
            if abort:
                p.abort_transaction(30)
                report.put("x", values)
                continue
            while True:
                try:
                    p.commit_transaction(30)
                    report.put("c", values)
                    break
                except KafkaException as exc:
                    if not exc.args[0].retriable():
                        raise
        except KafkaException as exc:
            err = exc.args[0]
            if err.txn_requires_abort():
                try:
                    p.abort_transaction(30)
                    report.put("x", values)
                    continue
                except KafkaException as exc2:
                    err = exc2.args[0]
            report.put("u", values, str(err))
            if err.fatal() or not err.retriable():
                p = new()  # fences the old one: its open transaction is aborted or completed
    report.put("end", a.name, sent)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("role", choices=("consume", "produce", "txn"))
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--stop", required=True)
    ap.add_argument("--name", default="client")
    ap.add_argument("--group", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rate", type=float, default=100.0, help="produce, txn: records/s")
    ap.add_argument("--txn-size", type=int, default=10)
    ap.add_argument("--abort-pct", type=float, default=25.0)
    ap.add_argument("--release-pct", type=float, default=0.0)
    ap.add_argument("--limit", type=int, default=5, help="the group's delivery count limit")
    ap.add_argument("--hold-ms", type=float, default=0.0,
                    help="consume: hold each poll's records up to this long before committing")
    a = ap.parse_args()
    report = Report(a.report)
    {"consume": consume, "produce": produce, "txn": txn}[a.role](a, report, Path(a.stop))


if __name__ == "__main__":
    main()
