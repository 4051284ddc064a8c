"""Consumer lag on /metrics (issue 48): a group that is behind shows, summed over a real
cluster's brokers, the same lag per partition as ``kaas groups describe``, and a
transaction left open shows in the read_committed lag (against the last stable offset)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kaas.testing import ClusterProcess, free_ports
from tests.integration.test_metrics import scrape
from tests.integration.test_tools import run as run_tool
from tests.kafka import create_topic

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

N, READ, OPEN = 60, 25, 5


def lag_by_partition(samples: list[dict], name: str, group: str, topic: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for m in samples:
        for (metric, labels), value in m.items():
            d = dict(labels)
            if metric == name and d.get("group") == group and d.get("topic") == topic:
                part = int(d["partition"])
                assert part not in out, "a partition reported by two brokers"
                out[part] = value
    return out


def test_lag_on_metrics_matches_groups_describe(tmp_path):
    for _attempt in range(5):  # the metrics ports and the brokers' are drawn apart: draw again on a clash
        mbase = free_ports(2)
        c = ClusterProcess(tmp_path / "data", 2, supervisor_args=["--metrics-base-port", str(mbase)],
                           extra=["--no-fsync", "--group-initial-rebalance-delay-ms", "0"], launcher="fork")
        if mbase not in c.ports and mbase + 1 not in c.ports:
            break
    else:
        raise AssertionError("the metrics ports kept colliding with the brokers'")
    with c.running():
        topic, group = "lagging", "behind"
        create_topic(c.bootstrap, topic, 2)
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(N):
            p.produce(topic, b"v%d" % i, partition=i % 2)
        assert p.flush(20) == 0
        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False})
        cons.commit(offsets=[TopicPartition(topic, 0, 10), TopicPartition(topic, 1, READ - 10)], asynchronous=False)
        cons.close()
        tx = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "lag-open"})
        tx.init_transactions(20)
        tx.begin_transaction()
        for i in range(OPEN):
            tx.produce(topic, b"open", partition=0)
        assert tx.flush(20) == 0  # in the log, above the last stable offset

        described = {o["partition"]: o for o in run_tool("groups", "describe", group, "--bootstrap", c.bootstrap)
                     ["offsets"]}
        samples = [scrape(mbase + i) for i in range(2)]
        lag = lag_by_partition(samples, "kaas_consumer_group_lag", group, topic)
        stable = lag_by_partition(samples, "kaas_consumer_group_lag_stable", group, topic)
        committed = lag_by_partition(samples, "kaas_consumer_group_committed_offset", group, topic)
        assert lag == {part: o["lag"] for part, o in described.items()}
        assert committed == {part: o["current_offset"] for part, o in described.items()}
        assert sum(lag.values()) == N + OPEN - READ
        assert stable[0] == lag[0] - OPEN and stable[1] == lag[1]
        tx.abort_transaction(20)
