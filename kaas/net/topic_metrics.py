"""Per-topic traffic and per-share-partition windows on ``/metrics``.

Traffic: each broker counts the bytes and records appended to each topic by Produce (in)
and handed out by Fetch and ShareFetch (out) in ``kaas.counters``; Prometheus' ``rate()``
of these counters is Apache's per-topic ``BrokerTopicMetrics`` one-minute rates. Records
out are counted from the batch headers answered (whole batches, as the consumer receives
them). A topic that no longer exists is dropped at the next scrape, as Apache removes a
deleted topic's metrics. Summing over the brokers gives the cluster's traffic.

Share partitions: the window of each share partition (group, topic, partition) held by this
broker (its leader), read from the pure machines at the scrape: the records in flight
(between the share-partition start and end offsets) and how many are in each delivery state.

==================================================================  ===================================================
kaas metric                                                         Apache JMX equivalent
==================================================================  ===================================================
``kaas_topic_bytes_in_total{topic}``                                ``kafka.server:type=BrokerTopicMetrics,``
                                                                    ``name=BytesInPerSec,topic=T``
``kaas_topic_records_in_total{topic}``                              ``...,name=MessagesInPerSec,topic=T``
``kaas_topic_bytes_out_total{topic}``                               ``...,name=BytesOutPerSec,topic=T``
``kaas_topic_records_out_total{topic}``                             (none)
``kaas_share_partition_in_flight{group,topic,partition}``           ``kafka.server:type=SharePartitionMetrics,``
                                                                    ``name=InFlightMessageCount``
``kaas_share_partition_records{group,topic,partition,state}``       (none; ``kafka-share-groups --describe`` columns)
``kaas_share_partition_start_offset{group,topic,partition}``        (``kafka-share-groups --describe`` START-OFFSET)
==================================================================  ===================================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kaas import counters

__all__ = ["share_partition_families", "topic_families"]

STATES = ("available", "acquired", "acknowledged", "archived")


def topic_families(exists: Callable[[str], bool]) -> Iterator[Any]:
    """The four per-topic counters of ``kaas.counters.TOPIC``, for the topics ``exists``
    still knows (the others are forgotten)."""
    from prometheus_client.core import CounterMetricFamily

    for name in [t for t in counters.TOPIC if not exists(t)]:
        counters.forget_topic(name)
    fams = (
        CounterMetricFamily("kaas_topic_bytes_in", "Bytes appended to the topic by Produce.", labels=["topic"]),
        CounterMetricFamily("kaas_topic_records_in", "Records appended to the topic by Produce.", labels=["topic"]),
        CounterMetricFamily("kaas_topic_bytes_out", "Bytes of the topic answered to Fetch and ShareFetch.",
                            labels=["topic"]),
        CounterMetricFamily("kaas_topic_records_out", "Records of the topic answered to Fetch and ShareFetch.",
                            labels=["topic"]),
    )
    for topic, t in sorted(counters.TOPIC.items()):
        for fam, value in zip(fams, (t.bytes_in, t.records_in, t.bytes_out, t.records_out)):
            fam.add_metric([topic], value)
    yield from fams


def share_partition_families(held: Mapping[tuple[str, str, int], Any]) -> Iterator[Any]:
    """Gauges of the share partitions ``held`` (``(group, topic, partition)`` ->
    ``kaas.domain.share_partition.SharePartition``)."""
    from prometheus_client.core import GaugeMetricFamily

    from kaas.domain.share_partition import RecordState

    in_flight = GaugeMetricFamily("kaas_share_partition_in_flight",
                                  "Records in the share partition's window (start to end offset).",
                                  labels=["group", "topic", "partition"])
    start = GaugeMetricFamily("kaas_share_partition_start_offset", "The share-partition start offset.",
                              labels=["group", "topic", "partition"])
    by_state = GaugeMetricFamily("kaas_share_partition_records",
                                 "Records of the share partition's window in each delivery state.",
                                 labels=["group", "topic", "partition", "state"])
    for (group, topic, index), machine in sorted(held.items()):
        labels = [group, topic, str(index)]
        in_flight.add_metric(labels, machine.end - machine.start)
        start.add_metric(labels, machine.start)
        counts = machine.counts()
        for state in STATES:
            by_state.add_metric([*labels, state], counts[RecordState[state.upper()]])
    yield from (in_flight, start, by_state)
