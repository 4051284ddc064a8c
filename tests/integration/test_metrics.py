"""Prometheus /metrics of a real broker process (``--metrics-port``) and of a supervised
cluster (``kaas cluster --metrics-base-port``)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from kaas.testing import BrokerProcess, ClusterProcess, free_port, free_ports
from tests.kafka import create_topic

pytestmark = pytest.mark.slow


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics as {(name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def produce_and_consume(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    create_topic(bootstrap, topic, partitions)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), key=str(i).encode())
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, i, 0) for i in range(partitions)])
    got = 0
    deadline = time.monotonic() + 30
    try:
        while got < n and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                assert m.error() is None, m.error()
                got += 1
    finally:
        c.close()
    assert got == n


def test_broker_metrics_endpoint(tmp_path):
    mport = free_port()
    b = BrokerProcess(tmp_path / "data", extra=["--metrics-port", str(mport)]).start()
    try:
        before = scrape(mport)
        assert sample(before, "kaas_requests_total", api="Produce") == 0
        info = [(dict(k[1]), v) for k, v in before.items() if k[0] == "kaas_broker_info"]
        assert len(info) == 1 and info[0][1] == 1
        assert info[0][0]["broker_id"] == "0" and info[0][0]["cluster_id"] == "kaas-cluster"

        produce_and_consume(b.bootstrap, "metrics-t", 200, 2)
        m = scrape(mport)
        assert sample(m, "kaas_requests_total", api="Produce") > 0
        assert sample(m, "kaas_requests_total", api="Fetch") > 0
        assert sample(m, "kaas_request_duration_seconds_count", api="Produce") == \
            sample(m, "kaas_requests_total", api="Produce")
        assert sample(m, "kaas_request_duration_seconds_bucket", api="Fetch", le="+Inf") == \
            sample(m, "kaas_requests_total", api="Fetch")
        assert sample(m, "kaas_request_bytes_total", api="Produce") > 200
        assert sample(m, "kaas_response_bytes_total", api="Fetch") > 200
        assert sample(m, "kaas_request_errors_total", api="Produce") == 0
        assert sample(m, "kaas_partitions_led") == 2
        assert sample(m, "kaas_producer_states") >= 1  # the idempotent producer
        assert sample(m, "kaas_fsync_seconds_count") > 0  # acks=all with fsync on
        assert sample(m, "kaas_partition_takeovers_total") >= 2
        assert sample(m, "kaas_partition_takeover_seconds_count") >= 2
        assert sample(m, "kaas_controller") == 1
        assert sample(m, "kaas_brokers_alive") == 1
        assert sample(m, "kaas_transactions_open") == 0
        assert sample(m, "kaas_transactions_prepared") == 0
        assert sample(m, "kaas_marker_queue_depth") == 0
        assert sample(m, "kaas_txn_slots_owned") == 50
        assert any(k[0].startswith("process_") for k in m)  # the standard process collector

        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/healthz", timeout=5) as resp:
            assert resp.read() == b"ok\n"
        with pytest.raises(urllib.error.HTTPError) as ei:
            urllib.request.urlopen(f"http://127.0.0.1:{mport}/nope", timeout=5)
        assert ei.value.code == 404
        # OpenMetrics when asked for it.
        req = urllib.request.Request(f"http://127.0.0.1:{mport}/metrics",
                                     headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
            assert resp.read().rstrip().endswith(b"# EOF")
    finally:
        assert b.stop() == 0


def test_open_transaction_counted(tmp_path):
    mport = free_port()
    b = BrokerProcess(tmp_path / "data", extra=["--metrics-port", str(mport), "--no-fsync"]).start()
    try:
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "metrics-tx"})
        p.init_transactions(10)
        p.begin_transaction()
        p.produce("metrics-tx-topic", b"x")
        assert p.flush(10) == 0
        m = scrape(mport)
        assert sample(m, "kaas_transactions_open") == 1
        assert sample(m, "kaas_requests_total", api="InitProducerId") >= 1
        assert sample(m, "kaas_requests_total", api="AddPartitionsToTxn") >= 1
        p.commit_transaction(10)
        m = scrape(mport)
        assert sample(m, "kaas_transactions_open") == 0
        assert sample(m, "kaas_requests_total", api="EndTxn") == 1
    finally:
        b.stop()


@pytest.mark.cluster
def test_cluster_metrics_base_port(tmp_path):
    for _ in range(20):  # metrics ports apart from the brokers' own
        mbase = free_ports(2)
        c = ClusterProcess(tmp_path / "data", 2, supervisor_args=["--metrics-base-port", str(mbase)],
                           extra=["--no-fsync"])
        if not {mbase, mbase + 1} & set(c.ports):
            break
    else:
        pytest.fail("no metrics port range apart from the brokers' ports in 20 tries")
    with c.running():
        produce_and_consume(c.bootstrap, "metrics-cluster", 100, 4)
        deadline = time.monotonic() + 15
        while True:
            ms = [scrape(mbase + i) for i in range(2)]
            led = [sample(m, "kaas_partitions_led") for m in ms]
            if sum(led) == 4 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert sum(led) == 4
        assert sum(sample(m, "kaas_controller") for m in ms) == 1
        assert sum(sample(m, "kaas_requests_total", api="Produce") for m in ms) > 0
        ids = sorted(k[1] for m in ms for k in m if k[0] == "kaas_broker_info")
        assert [dict(labels)["broker_id"] for labels in ids] == ["0", "1"]
