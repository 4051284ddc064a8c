"""The operator's metrics of issue 48 on a real broker's /metrics: per-topic bytes and
records in and out, the share partitions' windows (in flight, per delivery state) matching
``kaas groups describe``, and the Grafana dashboard in deploy/grafana, whose every query
must name metrics (and labels) this broker really exports.

One broker serves the module; ``busy`` gives it a topic with traffic, a consumer group that
is behind and a share group with records in every delivery state, then keeps its share
consumer open (holding its acquired records) while the tests scrape.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from kaas.testing import BrokerProcess, free_port, wait_for
from tests.integration.test_tools import run as run_tool
from tests.kafka import create_topic, uniq

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "kaas-dashboard.json"
N = 40  # records of the traffic topic
SHARE_N = 6  # records of the share topic: one batch


def exposition(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        return resp.read().decode()


def samples(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """name -> [(labels, value)] of every sample on /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(exposition(port)):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def one(got, name: str, **labels: str) -> float:
    vals = [v for ls, v in got.get(name, []) if all(ls.get(k) == x for k, x in labels.items())]
    assert len(vals) == 1, (name, labels, got.get(name))
    return vals[0]


class Busy:
    def __init__(self, broker: BrokerProcess, mport: int) -> None:
        self.broker, self.mport = broker, mport
        self.bs = broker.bootstrap
        self.topic, self.group = uniq("traffic"), uniq("behind")
        self.share_topic, self.share_group = uniq("shared"), uniq("sg")
        self.deleted = uniq("gone")
        self.consumer: ShareConsumer | None = None


def _traffic(b: Busy) -> None:
    create_topic(b.bs, b.topic, 2)
    create_topic(b.bs, b.deleted, 1)
    p = Producer({"bootstrap.servers": b.bs, "acks": "all", "enable.idempotence": True, "linger.ms": 2})
    for i in range(N):
        p.produce(b.topic, f"value-{i}".encode(), partition=i % 2)
    p.produce(b.deleted, b"x")
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": b.bs, "group.id": b.group, "enable.auto.commit": False})
    c.assign([TopicPartition(b.topic, 0, 0), TopicPartition(b.topic, 1, 0)])
    got = 0
    deadline = time.monotonic() + 30
    while got < N and time.monotonic() < deadline:
        for m in c.consume(100, 0.5):
            assert m.error() is None, m.error()
            got += 1
    assert got == N
    c.commit(offsets=[TopicPartition(b.topic, 0, 5), TopicPartition(b.topic, 1, 12)], asynchronous=False)
    c.close()
    admin = AdminClient({"bootstrap.servers": b.bs})
    assert admin.delete_topics([b.deleted])[b.deleted].result(15) is None


def _share(b: Busy) -> None:
    """One batch of SHARE_N records, delivered once: v0 released (available again), v1
    rejected (archived), v2 accepted, the rest held (acquired) by the open consumer."""
    create_topic(b.bs, b.share_topic, 1)
    admin = AdminClient({"bootstrap.servers": b.bs})
    res = ConfigResource(ResourceType.GROUP, b.share_group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    assert admin.incremental_alter_configs([res])[res].result(15) is None
    p = Producer({"bootstrap.servers": b.bs, "linger.ms": 50})
    for i in range(SHARE_N):
        p.produce(b.share_topic, f"v{i}".encode(), partition=0)
    assert p.flush(15) == 0
    c = b.consumer = ShareConsumer({"bootstrap.servers": b.bs, "group.id": b.share_group,
                                    "share.acknowledgement.mode": "explicit"})
    c.subscribe([b.share_topic])
    got = []
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        got = list(c.poll(0.5))
    assert len(got) == SHARE_N, [m.value() for m in got]
    kinds = {b"v0": AcknowledgeType.RELEASE, b"v1": AcknowledgeType.REJECT, b"v2": AcknowledgeType.ACCEPT}
    for m in got:
        assert m.error() is None, m.error()
        if m.value() in kinds:
            c.acknowledge(m, kinds[m.value()])
    c.commit_sync(10)


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    mport = free_port()
    flags = ["--metrics-port", str(mport), "--no-fsync", "--group-initial-rebalance-delay-ms", "0",
             "--group-share-heartbeat-interval-ms", "500", "--group-share-min-heartbeat-interval-ms", "500"]
    with BrokerProcess(tmp_path_factory.mktemp("ops-metrics") / "data", extra=flags).running() as broker:
        b = Busy(broker, mport)
        _traffic(b)
        try:
            _share(b)
            yield b
        finally:
            if b.consumer is not None:
                b.consumer.close()


def test_topic_bytes_and_records_in_and_out(busy):
    got = samples(busy.mport)
    assert one(got, "kaas_topic_records_in_total", topic=busy.topic) == N  # idempotent: no duplicate counted
    assert one(got, "kaas_topic_records_out_total", topic=busy.topic) >= N
    bytes_in = one(got, "kaas_topic_bytes_in_total", topic=busy.topic)
    assert bytes_in > N * len(b"value-0")
    assert one(got, "kaas_topic_bytes_out_total", topic=busy.topic) >= bytes_in  # the same batches, read back
    assert one(got, "kaas_topic_records_out_total", topic=busy.share_topic) == SHARE_N  # ShareFetch counts
    assert one(got, "kaas_topic_records_in_total", topic=busy.share_topic) == SHARE_N
    assert not [ls for ls, _ in got["kaas_topic_bytes_in_total"] if ls["topic"] == busy.deleted]  # forgotten
    # the per-API byte counters hold at least the records' bytes
    assert one(got, "kaas_request_bytes_total", api="Produce") > bytes_in


def test_share_partition_gauges_match_groups_describe(busy):
    labels = {"group": busy.share_group, "topic": busy.share_topic, "partition": "0"}

    def settled():
        got = samples(busy.mport)
        states = {ls["state"]: v for ls, v in got.get("kaas_share_partition_records", [])
                  if all(ls[k] == x for k, x in labels.items())}
        return (got, states) if states.get("acknowledged") == 1 else None
    got, states = wait_for(settled, timeout=15, what="the acknowledgements applied")
    assert states == {"available": 1, "archived": 1, "acknowledged": 1, "acquired": SHARE_N - 3}
    assert one(got, "kaas_share_partition_in_flight", **labels) == SHARE_N
    assert one(got, "kaas_share_partition_start_offset", **labels) == 0
    described = run_tool("groups", "describe", busy.share_group, "--bootstrap", busy.bs)
    (row,) = described["offsets"]
    assert (row["start_offset"], row["in_flight"], row["archived"], row["available"], row["acknowledged"],
            row["acquired"]) == (0, SHARE_N, states["archived"], states["available"], states["acknowledged"],
                                 states["acquired"])


def test_consumer_lag_on_metrics_matches_groups_describe(busy):
    got = samples(busy.mport)
    described = {o["partition"]: o for o in run_tool("groups", "describe", busy.group, "--bootstrap", busy.bs)
                 ["offsets"]}
    lag = {int(ls["partition"]): v for ls, v in got["kaas_consumer_group_lag"]
           if ls["group"] == busy.group and ls["topic"] == busy.topic}
    assert lag == {p: o["lag"] for p, o in described.items()} == {0: N // 2 - 5, 1: N // 2 - 12}
    stable = {int(ls["partition"]): v for ls, v in got["kaas_consumer_group_lag_stable"]
              if ls["group"] == busy.group and ls["topic"] == busy.topic}
    assert stable == lag  # no open transaction: the last stable offset is the high watermark


# --------------------------------------------------------------------------- the dashboard

SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
METRIC = re.compile(r"\b(?:kaas|process|python)_[a-z0-9_]+\b")
LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
NAME_REGEX = re.compile(r'__name__\s*=~\s*"([^"]*)"')


def exported(port: int) -> tuple[set[str], dict[str, set[str]]]:
    """The sample names /metrics can hold (every family's, by its TYPE line, with the
    counter and histogram suffixes) and the labels each sample carries now."""
    text = exposition(port)
    names: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        base = name.removesuffix("_total") if kind == "counter" else name  # (the text format names a counter
        names |= {"counter": {f"{base}_total", f"{base}_created"},             # by its sample, _total)
                  "histogram": {f"{base}_bucket", f"{base}_sum", f"{base}_count", f"{base}_created"},
                  "summary": {f"{base}_sum", f"{base}_count", base}}.get(kind, {base})
    labels: dict[str, set[str]] = {}
    for name, group in samples(port).items():
        for ls, _ in group:
            labels.setdefault(name, set()).update(ls)
    return names, labels


def queries(dash: dict) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and query variable."""
    out = []
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            out.append((f"panel {panel['title']!r} {t['refId']}", t["expr"]))
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            out.append((f"variable {var['name']}", var["query"]["query"]))
    return out


def test_dashboard_parses_and_every_query_names_an_exported_metric(busy):
    dash = json.loads(DASHBOARD.read_text())
    names, labels = exported(busy.mport)
    assert {"kaas_topic_bytes_in_total", "kaas_share_partition_in_flight", "kaas_consumer_group_lag"} <= names
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    found = queries(dash)
    assert len(found) > 20
    for where, expr in found:
        metrics = set(METRIC.findall(expr))
        for regex in NAME_REGEX.findall(expr):
            metrics |= set(regex.split("|"))
        assert metrics, f"{where}: no kaas metric in {expr!r}"
        for m in metrics:
            assert m in names, f"{where}: {m} is not exported ({expr!r})"
        for metric, matchers in SELECTOR.findall(expr):
            if metric in names:  # its labels must be ones the metric carries (or Prometheus' job)
                for label in LABEL.findall(matchers):
                    assert label == "job" or label in labels.get(metric, set()), \
                        f"{where}: {metric} has no label {label} ({sorted(labels.get(metric, ()))})"
    assert {v["name"] for v in dash["templating"]["list"]} >= {"datasource", "job", "group", "topic"}
