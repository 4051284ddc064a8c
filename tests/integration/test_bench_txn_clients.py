"""The raw wire producers of ``scripts/bench txn-many --client tv1|tv2`` (and ``cpu
--brokers --tv2``) against a real 3-broker cluster: their transactions commit, every
record is readable read_committed, and the TV2 producer's epoch rises by one per
transaction (EndTxn v5) where the TV1 one keeps its epoch. Nothing here is timed."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from tests.fixtures import cluster_fixture
from tests.kafka import create_topic

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench.workloads.cpu_cluster import raw_producer  # noqa: E402

PARTITIONS = 8
RECORDS = 10
TXNS = 5

cluster = cluster_fixture(3, doc="A 3-broker cluster for the raw producers.")


def _committed(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        total = 0
        for p in range(PARTITIONS):
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            assert low == 0
            total += high
        got = 0
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        while True:
            msgs = c.consume(500, 5)
            if not msgs:
                return got
            got += sum(1 for m in msgs if m.error() is None)
    finally:
        c.close()


def test_tv1_and_tv2_raw_producers_commit(cluster):
    for tv2 in (False, True):
        topic = f"raw-{'tv2' if tv2 else 'tv1'}-{uuid.uuid4().hex[:6]}"
        create_topic(cluster.bootstrap, topic, PARTITIONS)
        p = raw_producer(cluster.bootstrap, topic, f"{topic}-txn", PARTITIONS, RECORDS, tv2)
        epoch = p.epoch
        for _ in range(TXNS):
            assert p.one() > 0
        assert p.epoch == epoch + (TXNS if tv2 else 0), (tv2, epoch, p.epoch)
        assert _committed(cluster.bootstrap, topic) == TXNS * RECORDS
        for wc in p.clients.values():
            wc.close()
