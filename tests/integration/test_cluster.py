"""A real 3-broker cluster through the supervisor: failover under load, controller loss,
a paused broker that must not write after its partitions moved."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kaas.testing import ClusterProcess, wait_ready
from tests.fixtures import cluster_fixture
from tests.kafka import create_topic

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

TOPIC_PARTS = 6


def controller_of(data: Path) -> int:
    cdir = data / "__cluster" / "controller"
    n = max(int(p.name[6:]) for p in cdir.glob("epoch-*"))
    return int(json.loads((cdir / f"epoch-{n}").read_text())["broker_id"])


cluster = cluster_fixture(3)


class Load:
    """A producer (acks=all, idempotent) and a group consumer running in threads."""

    def __init__(self, bootstrap: str, topic: str):
        self.bootstrap = bootstrap
        self.topic = topic
        self.acked: dict[int, tuple[int, int]] = {}  # seq -> (partition, offset)
        self.ack_times: list[tuple[float, int]] = []  # (monotonic time, partition)
        self.consumed: list[tuple[int, int, int]] = []  # (partition, offset, seq)
        self.violations: list[str] = []
        self.stop = threading.Event()
        self.stop_consumer = threading.Event()
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def _produce(self):
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 60000, "retry.backoff.ms": 50})
        seq = 0

        def cb(err, msg):
            if err is not None:
                self.errors.append(str(err))
                return
            s = int(msg.value())
            self.acked[s] = (msg.partition(), msg.offset())
            self.ack_times.append((time.monotonic(), msg.partition()))

        while not self.stop.is_set():
            try:
                p.produce(self.topic, value=str(seq).encode(), key=str(seq).encode(), on_delivery=cb)
                seq += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0)
            time.sleep(0.002)
        p.flush(60)

    def _consume(self):
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "cluster-load",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        c.subscribe([self.topic])
        committed: dict[int, int] = {}
        seen: set[tuple[int, int]] = set()
        while not self.stop_consumer.is_set():
            msgs = c.consume(200, 0.2)
            batch = {}
            for m in msgs:
                if m.error():
                    continue
                key = (m.partition(), m.offset())
                if key in seen and committed.get(m.partition(), -1) > m.offset():
                    self.violations.append(f"{key} consumed again below committed {committed[m.partition()]}")
                seen.add(key)
                self.consumed.append((m.partition(), m.offset(), int(m.value())))
                batch[m.partition()] = m.offset() + 1
            if batch:
                try:
                    c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in batch.items()],
                             asynchronous=False)
                    for p, o in batch.items():
                        committed[p] = max(committed.get(p, 0), o)
                except Exception as exc:  # a commit during a coordinator move may fail; retried next batch
                    self.errors.append(f"commit: {exc}")
        c.close()

    def outage_after(self, t: float) -> float:
        """Failover time clients saw for a fault at ``t``: the longest time any partition
        went without an acknowledgement, from its last ack before ``t`` to its first after."""
        worst = 0.0
        acks = list(self.ack_times)
        for part in range(TOPIC_PARTS):
            before = [x for x, p in acks if p == part and x < t]
            after = [x for x, p in acks if p == part and x >= t]
            if before and after:
                worst = max(worst, after[0] - before[-1])
        return worst


def wait_acks(load: Load, more: int, timeout: float = 30.0) -> None:
    target = len(load.acked) + more
    deadline = time.monotonic() + timeout
    while len(load.acked) < target and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(load.acked) >= target, f"cluster stopped acknowledging ({len(load.acked)} < {target})"


def test_failover_under_load_and_controller_loss(cluster):
    topic = f"chaos-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, TOPIC_PARTS, timeout=15)
    load = Load(cluster.bootstrap, topic).start()
    wait_acks(load, 500)
    kills = []
    victims = [0, 1, 2, "controller"]
    for v in victims:
        bid = controller_of(cluster.data) if v == "controller" else v
        kills.append(time.monotonic())
        old = cluster.kill(bid)
        wait_acks(load, 300)
        cluster.wait_restarted(bid, old)
        wait_acks(load, 1500)
    load.stop.set()
    load.threads[0].join(90)
    # let the consumer catch up with everything acknowledged
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if {s for _, _, s in load.consumed} >= set(load.acked):
            break
        time.sleep(0.2)
    load.stop_consumer.set()
    load.threads[1].join(30)
    failovers = [round(load.outage_after(t), 2) for t in kills]
    print("failover (longest per-partition ack outage, s):", failovers)
    consumed = {s for _, _, s in load.consumed}
    missing = set(load.acked) - consumed
    assert not missing, f"{len(missing)} acknowledged messages never consumed"
    assert not load.violations, load.violations[:5]
    # every acknowledged message sits at its acknowledged offset, offsets dense per partition
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"v-{uuid.uuid4()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(TOPIC_PARTS)])
    by_part: dict[int, list[tuple[int, int]]] = {p: [] for p in range(TOPIC_PARTS)}
    total = 0
    hw = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(TOPIC_PARTS)}
    deadline = time.monotonic() + 60
    while total < sum(hw.values()) and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            assert not m.error(), m.error()
            by_part[m.partition()].append((m.offset(), int(m.value())))
            total += 1
    c.close()
    where = {}
    for p, recs in by_part.items():
        offs = [o for o, _ in recs]
        assert offs == list(range(hw[p])), f"partition {p} offsets not dense"
        for o, s in recs:
            where[s] = (p, o)
    for s, po in load.acked.items():
        assert where.get(s) == po, f"message {s} acked at {po} found at {where.get(s)}"
    # the idempotent producer never duplicated a message
    assert len(where) == total
    assert max(failovers) < 15, failovers


def test_paused_broker_writes_nothing_after_its_partitions_moved(cluster):
    topic = f"pause-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, TOPIC_PARTS, 1)])[topic].result(15)
    victim = 1
    load = Load(cluster.bootstrap, topic).start()
    wait_acks(load, 300)
    tdir = cluster.data / "data" / topic

    def segments(p: int) -> list:
        return sorted((tdir / str(p)).glob("*.log"), key=lambda f: int(f.stem.split("-e")[1]))

    def epoch(f) -> int:
        return int(f.stem.split("-e")[1])

    def victim_leads() -> set[int]:
        md = admin.list_topics(topic, timeout=10)
        return {p for p, pm in md.topics[topic].partitions.items() if pm.leader == victim}

    # Leadership can still move right after the topic is created (the balancer's next pass,
    # a broker rejoining after an earlier test): take the partitions the victim leads in two
    # readings a second apart, with data written at the epoch of that reading.
    led: set[int] = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        first = victim_leads()
        time.sleep(1)
        led = first & victim_leads()
        if led:
            break
    assert led, "the victim leads nothing"
    at_pause = {p: epoch(segments(p)[-1]) for p in led}
    pid = cluster.signal(victim, signal.SIGSTOP)
    try:
        time.sleep(6)  # well past the 3 s session timeout: its partitions move

        def moved(p: int) -> bool:
            segs = segments(p)
            return bool(segs) and epoch(segs[-1]) > at_pause[p]

        # normally moved by now; on a loaded machine (or a paused controller) allow more time
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(moved(p) for p in led):
            time.sleep(0.2)
        wait_acks(load, 300)
        before = {}
        for p in led:
            segs = segments(p)
            assert len(segs) >= 2, f"partition {p} was not taken over while the leader was paused"
            assert moved(p), f"partition {p} was not taken over while the leader was paused: {segs}"
            for f in segs[:-1]:  # everything but the new leader's segment
                before[f] = f.read_bytes()
    finally:
        import os
        os.kill(pid, signal.SIGCONT)
    time.sleep(4)
    wait_acks(load, 200)
    load.stop.set()
    load.threads[0].join(60)
    load.stop_consumer.set()
    load.threads[1].join(30)
    # the resumed broker appended nothing to the segments of the epochs before the move
    for f, data in before.items():
        assert f.read_bytes() == data, f"segment {f} changed after the partition moved"
    assert "partition_relinquish" in cluster.broker_log(victim)
    # it rejoined: it is in Metadata again
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if victim in admin.list_topics(timeout=5).brokers:
            break
        time.sleep(0.5)
    assert victim in admin.list_topics(timeout=5).brokers
    assert not load.violations
    assert not [e for e in load.errors if "commit" not in e], load.errors[:5]


def test_two_supervisors_form_one_cluster(tmp_path):
    """Two 'hosts': two supervisors with disjoint broker ids over one data directory."""
    data = tmp_path / "shared"
    a = ClusterProcess(data, 2)
    a.start()
    b = ClusterProcess(data, 1)  # only for its free port; started by hand with --first-id
    try:
        logf = open(tmp_path / "sup-b.log", "ab")
        b.proc = subprocess.Popen(
            [sys.executable, "-m", "kaas.cli", "cluster", "--brokers", "1", "--first-id", "2", "--data", str(data),
             "--base-port", str(b.base_port)], stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_ready("127.0.0.1", b.base_port, proc=b.proc)
        bootstrap = f"{a.bootstrap},127.0.0.1:{b.base_port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        # every broker learns of the others from the heartbeat files on its own tick, so
        # ask each one until all three list all three
        ports = [a.base_port, a.base_port + 1, b.base_port]
        seen: dict[int, list[int]] = {}
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            seen = {port: sorted(AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
                                 .list_topics(timeout=5).brokers) for port in ports}
            if all(v == [0, 1, 2] for v in seen.values()):
                break
            time.sleep(0.3)
        assert all(v == [0, 1, 2] for v in seen.values()), seen
        admin.create_topics([NewTopic("two-hosts", 6, 1)])["two-hosts"].result(15)
        md = admin.list_topics("two-hosts", timeout=5)
        leaders = {pm.leader for pm in md.topics["two-hosts"].partitions.values()}
        assert leaders == {0, 1, 2}
        p = Producer({"bootstrap.servers": f"127.0.0.1:{b.base_port}", "acks": "all"})
        for i in range(600):
            p.produce("two-hosts", value=str(i).encode(), partition=i % 6)
        assert p.flush(20) == 0
        c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "two-hosts", "auto.offset.reset": "earliest"})
        c.subscribe(["two-hosts"])
        got = set()
        deadline = time.monotonic() + 30
        while len(got) < 600 and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if not m.error():
                    got.add(int(m.value()))
        c.close()
        assert got == set(range(600))
    finally:
        if b.proc is not None:
            b.proc.send_signal(signal.SIGTERM)
            b.proc.wait(20)
        a.stop()


def test_idempotent_producer_exactly_once_across_leader_kills(cluster):
    """100,000 sequenced messages from an idempotent producer while the partition's leader
    is SIGKILLed three times: the log holds each exactly once, in order, with no gap."""
    topic = f"idem-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    n = 100_000
    p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "message.timeout.ms": 120000, "retry.backoff.ms": 50,
                  "queue.buffering.max.messages": 200000})
    errors = []
    acked = [0]

    def cb(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            acked[0] += 1

    kills = 0
    next_kill = n // 4
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=b"%d" % i, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
        if i % 2000 == 0:
            p.poll(0)
        if i == next_kill and kills < 3:
            # kill while part of the stream is acknowledged and the rest is in flight
            while acked[0] < i - 5000:
                p.poll(0.01)
            leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
            old = cluster.kill(leader)
            kills += 1
            next_kill += n // 4
            p.poll(0.5)
            cluster.wait_restarted(leader, old)
    assert p.flush(120) == 0
    assert not errors, errors[:5]
    assert acked[0] == n
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"v-{uuid.uuid4()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    values = []
    offsets = []
    deadline = time.monotonic() + 90
    while len(values) < n and time.monotonic() < deadline:
        for m in c.consume(5000, 0.5):
            assert not m.error(), m.error()
            values.append(int(m.value()))
            offsets.append(m.offset())
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.close()
    assert (lo, hi) == (0, n), "extra or missing records in the log"
    assert offsets == list(range(n))
    assert values == list(range(n))


def _init_pid(port: int) -> int:
    from kaas.client import WireClient

    with WireClient("127.0.0.1", port) as wc:
        r = wc.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000})
    assert r.error_code == 0 and r.producer_epoch == 0
    return r.producer_id


def test_producer_ids_never_reused_across_restarts_and_brokers(cluster):
    seen: dict[int, list[int]] = {0: [], 1: [], 2: []}
    for round_ in range(4):
        for bid, port in enumerate(cluster.ports):
            for _ in range(3):
                seen[bid].append(_init_pid(port))
        victim = round_ % 3
        old = cluster.kill(victim)
        cluster.wait_restarted(victim, old)
    for bid, pids in seen.items():
        assert pids == sorted(pids) and len(set(pids)) == len(pids), f"broker {bid} reused or rewound: {pids}"
        assert all((bid + 1) * 2**40 <= p < (bid + 2) * 2**40 for p in pids)
    everything = [p for pids in seen.values() for p in pids]
    assert len(set(everything)) == len(everything)
