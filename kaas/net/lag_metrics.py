"""Consumer lag on ``/metrics``: each group's committed offset against the end of every
partition this broker leads (the high watermark, and the last stable offset that a
``read_committed`` consumer reads up to).

A broker reports the partitions it leads, and only those, so summing a metric over the
cluster's brokers counts every partition once, whichever broker coordinates the group. The
committed offsets come from the groups' files on the shared volume (each written whole by
its group's coordinator before the commit is answered), read in a worker thread when
Prometheus scrapes; the ends come from the leader's memory. The lag is the end minus the
committed offset, as ``kaas groups describe`` computes it (ListOffsets latest minus
OffsetFetch), so the two agree while nothing is produced or committed in between.

===============================================================  ========================================
kaas metric                                                      kafka-exporter equivalent
===============================================================  ========================================
``kaas_partition_high_watermark{topic,partition}``               ``kafka_topic_partition_current_offset``
``kaas_partition_last_stable_offset{topic,partition}``           (none)
``kaas_consumer_group_committed_offset{group,topic,partition}``  ``kafka_consumergroup_current_offset``
``kaas_consumer_group_lag{group,topic,partition}``               ``kafka_consumergroup_lag``
``kaas_consumer_group_lag_stable{group,topic,partition}``        (none: a read_committed consumer's lag)
===============================================================  ========================================
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kaas.errors import CorruptState
from kaas.storage.offset_store import OffsetStore

__all__ = ["committed_offsets", "lag_families"]

TP = tuple[str, int]


def committed_offsets(store: OffsetStore, led: set[TP]) -> dict[str, dict[TP, int]]:
    """Every group's committed offset of each partition in ``led``, read from the groups'
    files (blocking: run it in a worker thread). A file that does not parse, or vanishes
    while being read, is left out."""
    out: dict[str, dict[TP, int]] = {}
    for gid in store.list_groups():
        try:
            g = store.load(gid)
        except (CorruptState, OSError):
            continue
        mine = {tp: c.offset for tp, c in g.offsets.items() if tp in led}
        if mine:
            out[gid] = mine
    return out


def lag_families(parts: Iterable[Any], committed: Mapping[str, Mapping[TP, int]]) -> Iterator[Any]:
    """The metric families of the module docstring, for the led partitions ``parts``
    (``kaas.broker.partition.Partition``) and the committed offsets read at this scrape."""
    from prometheus_client.core import GaugeMetricFamily

    hw = GaugeMetricFamily("kaas_partition_high_watermark", "High watermark (log end) of each led partition.",
                           labels=["topic", "partition"])
    lso = GaugeMetricFamily("kaas_partition_last_stable_offset",
                            "Last stable offset of each led partition (read_committed consumers read up to it).",
                            labels=["topic", "partition"])
    ends: dict[TP, tuple[int, int]] = {}
    for p in parts:
        ends[(p.topic, p.index)] = (p.high_watermark, p.last_stable_offset)
    for (topic, index), (h, s) in sorted(ends.items()):
        hw.add_metric([topic, str(index)], h)
        lso.add_metric([topic, str(index)], s)
    cur = GaugeMetricFamily("kaas_consumer_group_committed_offset",
                            "Committed offset of each group on each led partition.",
                            labels=["group", "topic", "partition"])
    lag = GaugeMetricFamily("kaas_consumer_group_lag",
                            "High watermark minus the committed offset (as kaas groups describe shows it).",
                            labels=["group", "topic", "partition"])
    lag_stable = GaugeMetricFamily("kaas_consumer_group_lag_stable",
                                   "Last stable offset minus the committed offset: a read_committed consumer's lag.",
                                   labels=["group", "topic", "partition"])
    for gid in sorted(committed):
        for (topic, index), offset in sorted(committed[gid].items()):
            end = ends.get((topic, index))
            if end is None:
                continue  # no longer led here since the read
            labels = [gid, topic, str(index)]
            cur.add_metric(labels, offset)
            lag.add_metric(labels, end[0] - offset)
            lag_stable.add_metric(labels, end[1] - offset)
    yield from (hw, lso, cur, lag, lag_stable)
