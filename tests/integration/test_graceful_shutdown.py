"""SIGTERM, as Kubernetes stops a pod: the broker drains, hands over and leaves its own
death notice, so its peers take over at once, far inside a 20 s session timeout, with no
supervisor in sight. Three ``kaas broker`` processes under a producer; the victim is the
controller (the hardest case: it must keep controlling until its keys are gone)."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kaas.testing import BrokerProcess, free_ports, wait_for
from tests.integration.test_control_plane import metadata

PARTITIONS = 6
SESSION_MS = 20_000  # a lease wait would show: everything below must happen well inside it


def _controller(data: Path) -> tuple[int, int]:
    cdir = data / "__cluster" / "controller"
    epoch = max(int(p.name[6:]) for p in cdir.glob("epoch-*"))
    return epoch, int(json.loads((cdir / f"epoch-{epoch}").read_text())["broker_id"])


def test_sigterm_hands_everything_over_well_before_the_lease(tmp_path):
    data = tmp_path / "data"
    base = free_ports(3)
    brokers = [BrokerProcess(data, i, port=base + i, extra=["--session-timeout-ms", str(SESSION_MS),
                                                            "--shutdown-grace-ms", "10000"]) for i in range(3)]
    acked: list[int] = []
    errors: list = []
    stop = threading.Event()
    try:
        for b in brokers:
            b.start()
        bootstrap = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("g", PARTITIONS, 1)], operation_timeout=10)["g"].result()
        wait_for(lambda: {leader for _e, leader in metadata(base, "g").values()} == {0, 1, 2}, 20,
                 "every broker leads partitions")
        _epoch, victim = _controller(data)
        other = base + (victim + 1) % 3

        def produce() -> None:
            p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                          "linger.ms": 1, "message.timeout.ms": 30000})
            i = 0
            while not stop.is_set():
                p.produce("g", str(i).encode(), partition=i % PARTITIONS,
                          on_delivery=lambda err, m: errors.append(err) if err else acked.append(int(m.value())))
                i += 1
                p.poll(0.005)
            assert p.flush(30) == 0

        producer = threading.Thread(target=produce)
        producer.start()
        wait_for(lambda: len(acked) > 200, 20, "the producer in its stride")
        incarnation = json.loads((data / "__cluster" / "brokers" / f"kaas-{victim}.json").read_text())["incarnation"]
        brokers[victim].proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        wait_for(lambda: all(leader not in (-1, victim) for _e, leader in metadata(other, "g").values()), 10,
                 "the victim's partitions led by the others")
        moved = time.monotonic() - t0
        assert brokers[victim].proc.wait(15) == 0
        exited = time.monotonic() - t0
        wait_for(lambda: _controller(data)[1] != victim, 5, "a new controller")
        elected = time.monotonic() - t0
        notice = json.loads((data / "__cluster" / "deaths" / f"kaas-{victim}.json").read_text())
        assert notice["incarnation"] == incarnation and notice["graceful"] is True
        assert max(moved, exited, elected) < SESSION_MS / 1000 / 2, (moved, exited, elected)
        n = len(acked)
        wait_for(lambda: len(acked) > n + 200, 20, "the producer goes on")
        brokers[victim].proc = None
        brokers[victim].start()  # a new incarnation: its own old notice does not kill it
        wait_for(lambda: victim in {leader for _e, leader in metadata(other, "g").values()}, 20,
                 "the restarted broker leads again")
        stop.set()
        producer.join(60)
        assert not errors
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-check", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        c.assign([TopicPartition("g", p, 0) for p in range(PARTITIONS)])
        got: set[int] = set()
        want = set(acked)
        try:
            wait_for(lambda: got.update(int(m.value()) for m in c.consume(500, 0.5) if m.error() is None)
                     or want <= got, 30, "every acknowledged record read back")
        finally:
            c.close()
    finally:
        stop.set()
        for b in brokers:
            b.kill()
