"""``cpu --brokers N`` (issue 35): instructions per transaction of ``txn-many``'s shape, a
transaction of ``--txn-records`` records over ``--partitions`` partitions, summed over the
brokers of a cluster each under callgrind.

N ``kaas broker`` processes on one tmpfs data directory, each under callgrind with its
periodic loops stretched (``cpu/launch.py --quiet``), form a cluster; the raw client of
``cpu`` finds the partitions' leaders (Metadata) and the transaction's coordinator
(FindCoordinator), warms up, then opens the windows on every broker at once. A
transaction is what librdkafka sends for it: AddPartitionsToTxn v0 with every partition to
the coordinator, one Produce v10 per leader with its partitions' batches (the records
round robin over the partitions), EndTxn v1 (with ``--tv2``, what a transaction.version 2
client sends: one Produce v12 per leader, whose leader adds the partitions, and EndTxn v5);
each request is sent once every broker is idle (``cpu.wait_idle``), so the coordinator's
markers to the other leaders (WriteTxnMarkers) and their KIP-890 checks are in the
window, whatever the machine's load.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import click
from kio.schema.errors import ErrorCode

from kaas.client import WireClient
from kaas.testing import free_ports, wait_ready
from kaas.wire import batch as wb

from ..common import _payloads, connect_nodelay, find_coordinator
from ..targets import tmp_base
from . import callgrind as cg
from .cpu import TXN_VALUE, Frame, Retriable, wait_idle

TOPIC = "cpu-txn-many"
TXN_ID = "cpu-bench-many"


def _call(wc: WireClient, api: tuple[int, int], body: dict, retries: list[int]) -> object:
    for _ in range(200):
        try:
            return Frame(api, body).call(wc)
        except Retriable:
            retries[0] += 1
            time.sleep(0.05)
    raise click.ClickException(f"api {api}: still retriable after 200 tries")


class ClusterProducer:
    """One transactional producer over the cluster's connections (one per broker); with
    ``tv2``, as a transaction.version 2 client (KIP-890 part 2) sends it: no
    AddPartitionsToTxn (the leaders add the partitions of a Produce v12 through the
    coordinator), EndTxn v5, whose answer raises the epoch (sequences start again at 0)."""

    def __init__(self, clients: dict[int, WireClient], leaders: dict[int, int], coordinator: int,
                 records: int, tv2: bool = False, topic: str = TOPIC, txn_id: str = TXN_ID) -> None:
        self.topic, self.txn_id = topic, txn_id
        self.clients = clients
        self.leaders = leaders  # partition -> broker
        self.coordinator = clients[coordinator]
        self.records = records
        self.tv2 = tv2
        self.retries = [0]
        r = _call(self.coordinator, (22, 5 if tv2 else 4), {"transactional_id": txn_id, "transaction_timeout": 60_000,
                                                            "producer_id": -1, "producer_epoch": -1}, self.retries)
        self.pid, self.epoch = r.producer_id, r.producer_epoch
        self.sequence = dict.fromkeys(leaders, 0)
        self.values = _payloads(TXN_VALUE)
        self.next = 0  # the next record's partition (round robin)

    def one(self) -> float:
        """One transaction: AddPartitionsToTxn, a Produce per leader, EndTxn (commit).
        Returns the seconds EndTxn took."""
        counts = dict.fromkeys(self.leaders, 0)
        for _ in range(self.records):
            counts[self.next % len(self.leaders)] += 1
            self.next += 1
        parts = sorted(p for p, n in counts.items() if n)
        if not self.tv2:
            _call(self.coordinator, (24, 0), {
                "v3_and_below_transactional_id": self.txn_id, "v3_and_below_producer_id": self.pid,
                "v3_and_below_producer_epoch": self.epoch,
                "v3_and_below_topics": [{"name": self.topic, "partitions": parts}]}, self.retries)
        by_leader: dict[int, list[int]] = {}
        for p in parts:
            by_leader.setdefault(self.leaders[p], []).append(p)
        now = int(time.time() * 1000)
        for leader, ps in sorted(by_leader.items()):
            data = []
            for p in ps:
                n = counts[p]
                data.append({"index": p, "records": wb.build_batch(
                    attributes=wb.ATTR_TRANSACTIONAL, base_timestamp=now, producer_id=self.pid,
                    producer_epoch=self.epoch, base_sequence=self.sequence[p],
                    records=[(None, self.values[(self.sequence[p] + i) % len(self.values)]) for i in range(n)])})
                self.sequence[p] += n
            _call(self.clients[leader], (0, 12 if self.tv2 else 10),
                  {"transactional_id": self.txn_id, "acks": -1, "timeout": 30_000,
                   "topic_data": [{"name": self.topic, "partition_data": data}]}, self.retries)
        t0 = time.perf_counter()
        r = _call(self.coordinator, (26, 5 if self.tv2 else 1),
                  {"transactional_id": self.txn_id, "producer_id": self.pid, "producer_epoch": self.epoch,
                   "committed": True}, self.retries)
        took = time.perf_counter() - t0
        if self.tv2 and (r.producer_id, r.producer_epoch) != (self.pid, self.epoch):
            self.pid, self.epoch = r.producer_id, r.producer_epoch
            self.sequence = dict.fromkeys(self.leaders, 0)
        return took


def _layout(wc: WireClient, partitions: int, topic: str = TOPIC) -> tuple[dict[int, tuple[str, int]], dict[int, int]]:
    """(broker id -> (host, port), partition -> leader) once every partition has a leader."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        md = wc.call(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                             "include_topic_authorized_operations": False})
        brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
        leaders = {p.partition_index: p.leader_id for t in md.topics for p in t.partitions
                   if p.error_code == ErrorCode.none}
        if len(leaders) == partitions and all(v in brokers for v in leaders.values()):
            return brokers, leaders
        time.sleep(0.5)
    raise click.ClickException(f"{topic}: no leader for every partition")


def raw_producer(bootstrap: str, topic: str, txn_id: str, partitions: int, records: int,
                 tv2: bool) -> ClusterProducer:
    """A ``ClusterProducer`` of ``txn_id`` over ``topic`` (which exists) of the cluster at
    ``bootstrap``: one connection per broker (``txn-many --client tv1|tv2``)."""
    with connect_nodelay(bootstrap) as wc:
        addresses, leaders = _layout(wc, partitions, topic)
    coordinator = find_coordinator(bootstrap, txn_id, timeout=60)
    clients = {node: connect_nodelay(f"{host}:{port}") for node, (host, port) in addresses.items()}
    return ClusterProducer(clients, leaders, coordinator, records, tv2, topic, txn_id)


def measure_cluster(out_dir: Path, n: int, count: int, partitions: int, records: int, idle_s: float,
                    warmup: int, profile_dir: Path | None, tv2: bool = False) -> dict:
    """N brokers under callgrind: the idle and txn windows, summed over the brokers."""
    data = Path(tempfile.mkdtemp(prefix="kaas-cpu-", dir=tmp_base()))
    base = free_ports(n)
    brokers: list[cg.CallgrindBroker] = []
    clients: dict[int, WireClient] = {}
    try:
        for i in range(n):
            d = out_dir / f"b{i}"
            d.mkdir(parents=True, exist_ok=True)
            brokers.append(cg.CallgrindBroker(d, data / "data", f"127.0.0.1:{base + i}", profile_dir, broker_id=i))
        for i, b in enumerate(brokers):
            wait_ready("127.0.0.1", base + i, timeout=900, proc=b.proc)
        bootstrap = ",".join(f"127.0.0.1:{base + i}" for i in range(n))
        retries = [0]
        with connect_nodelay(bootstrap) as wc:
            _call(wc, (19, 4), {"topics": [{"name": TOPIC, "num_partitions": partitions, "replication_factor": 1,
                                            "assignments": [], "configs": []}],
                                "timeout": 60_000, "validate_only": False}, retries)
            addresses, leaders = _layout(wc, partitions)
        coordinator = find_coordinator(bootstrap, TXN_ID, timeout=300)
        for node, (host, port) in addresses.items():
            clients[node] = connect_nodelay(f"{host}:{port}")
        producer = ClusterProducer(clients, leaders, coordinator, records, tv2)
        for _ in range(warmup):
            producer.one()
        warm_retries = producer.retries[0]
        Frame.quiesce = [b.proc.pid for b in brokers]
        windows: dict[str, tuple[list[Path], float]] = {}
        for name, work in (("idle", lambda: time.sleep(idle_s)),
                           ("txn", lambda: [producer.one() for _ in range(count)])):
            wait_idle(Frame.quiesce)
            t0 = time.monotonic()
            for b in brokers:
                b.start_window()
            work()
            wait_idle(Frame.quiesce)  # the last EndTxn's markers too
            windows[name] = ([b.dump() for b in brokers], time.monotonic() - t0)
        retries_in = producer.retries[0] - warm_retries
    finally:
        Frame.quiesce = []
        for wc in clients.values():
            wc.close()
        for b in brokers:
            b.close()
        shutil.rmtree(data, ignore_errors=True)
    out: dict = {"brokers": n, "partitions": partitions, "txn_records": records, "coordinator": coordinator,
                 "transaction_version": 2 if tv2 else 1,
                 "leaders": {str(p): b for p, b in sorted(leaders.items())}, "retries": retries_in,
                 "files": {name: [str(p) for p in paths] for name, (paths, _) in windows.items()}}
    costs = {name: ([cg.read_costs(p) for p in paths], elapsed) for name, (paths, elapsed) in windows.items()}
    idle_parts, idle_elapsed = costs["idle"]
    idle_rate = sum(t for t, _ in idle_parts) / idle_elapsed
    parts, elapsed = costs["txn"]
    out["idle_ir_per_s"] = round(idle_rate)
    out["ir_per_txn"] = round((sum(t for t, _ in parts) - idle_rate * elapsed) / count)
    out["ir_per_txn_by_broker"] = {str(i): round(t / count) for i, (t, _) in enumerate(parts)}
    out["txn_seconds"] = round(elapsed, 2)
    if profile_dir is not None:
        layers: dict[str, int] = {}
        functions: dict[str, int] = {}
        for i, (_total, fns) in enumerate(parts):
            frames = cg.read_map(brokers[i].map)
            for k, v in cg.by_layer(fns, frames).items():
                layers[k] = layers.get(k, 0) + v
            for k, v in cg.by_function(fns, frames).items():
                functions[k] = functions.get(k, 0) + v
            for path in windows["txn"][0][i:i + 1] + windows["idle"][0][i:i + 1]:
                cg.name_functions(path, frames)
        out["txn_by_layer"] = {k: round(v / count) for k, v in sorted(layers.items(), key=lambda kv: -kv[1])}
        out["txn_top"] = [[k, round(v / count)] for k, v in sorted(functions.items(), key=lambda kv: -kv[1])[:25]]
    return out
