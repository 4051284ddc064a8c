"""The per-topic traffic counters and the share-partition gauges of
``kaas.net.topic_metrics``: what Produce and Fetch add shows per topic, a deleted topic is
forgotten, and a share partition's window shows per delivery state."""

from __future__ import annotations

from kaas import counters
from kaas.domain.share_partition import AckBatch, AckType, ShareLimits, SharePartition, Span
from kaas.net.topic_metrics import share_partition_families, topic_families


def samples(fams) -> dict[str, dict[tuple[str, ...], float]]:
    out: dict[str, dict[tuple[str, ...], float]] = {}
    for f in fams:
        for s in f.samples:
            out.setdefault(s.name, {})[tuple(s.labels.values())] = s.value
    return out


def test_topic_traffic_counters_and_a_deleted_topic_forgotten():
    counters.reset()
    counters.record_produced("a", 100, 3)
    counters.record_produced("a", 50, 2)
    counters.record_produced("b", 7, 1)
    counters.record_fetched("a", 150, 5)
    got = samples(topic_families(lambda name: True))
    assert got["kaas_topic_bytes_in_total"] == {("a",): 150, ("b",): 7}
    assert got["kaas_topic_records_in_total"] == {("a",): 5, ("b",): 1}
    assert got["kaas_topic_bytes_out_total"] == {("a",): 150, ("b",): 0}
    assert got["kaas_topic_records_out_total"] == {("a",): 5, ("b",): 0}
    got = samples(topic_families(lambda name: name != "b"))  # b deleted
    assert got["kaas_topic_bytes_in_total"] == {("a",): 150}
    assert "b" not in counters.TOPIC
    counters.reset()


def test_share_partition_window_by_state():
    sp = SharePartition(ShareLimits(delivery_count_limit=2), start=10)
    sp.acquire("m", 10, [Span(10, 19, True)], max_records=100, now_ms=0)
    sp.acknowledge("m", [AckBatch(10, 11, (int(AckType.RELEASE),)), AckBatch(12, 13, (int(AckType.REJECT),)),
                         AckBatch(14, 15, (int(AckType.ACCEPT),))], 0)
    got = samples(share_partition_families({("g", "t", 0): sp}))
    assert got["kaas_share_partition_start_offset"] == {("g", "t", "0"): 10}
    assert got["kaas_share_partition_in_flight"] == {("g", "t", "0"): 10}
    states = {k[3]: v for k, v in got["kaas_share_partition_records"].items()}
    assert states == {"available": 2, "archived": 2, "acknowledged": 2, "acquired": 4}
    sp.acknowledge("m", [AckBatch(16, 19, (int(AckType.ACCEPT),))], 0)
    sp.acquire("m", 10, [Span(10, 11, True)], max_records=100, now_ms=0)
    sp.acknowledge("m", [AckBatch(10, 11, (int(AckType.ACCEPT),))], 0)
    got = samples(share_partition_families({("g", "t", 0): sp}))
    assert got["kaas_share_partition_start_offset"] == {("g", "t", "0"): 20}  # all done: the window moved on
    assert got["kaas_share_partition_in_flight"] == {("g", "t", "0"): 0}
