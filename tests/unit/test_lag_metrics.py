"""The lag families of ``kaas.net.lag_metrics``: per group and led partition, the committed
offset and its distance to the high watermark and to the last stable offset; partitions
not led here are left to their leader."""

from __future__ import annotations

from dataclasses import dataclass

from kaas.net.lag_metrics import lag_families


@dataclass
class Led:
    topic: str
    index: int
    high_watermark: int
    last_stable_offset: int


def test_lag_against_both_ends_for_led_partitions_only():
    parts = [Led("t", 0, 100, 90), Led("t", 1, 50, 50)]
    committed = {"g": {("t", 0): 40, ("t", 1): 50, ("t", 2): 7}, "h": {("t", 1): 10}}
    fams = {f.name: {tuple(s.labels.values()): s.value for s in f.samples} for f in lag_families(parts, committed)}
    assert fams["kaas_consumer_group_lag"] == {("g", "t", "0"): 60, ("g", "t", "1"): 0, ("h", "t", "1"): 40}
    assert fams["kaas_consumer_group_lag_stable"][("g", "t", "0")] == 50
    assert fams["kaas_consumer_group_committed_offset"][("h", "t", "1")] == 10
    assert ("g", "t", "2") not in fams["kaas_consumer_group_lag"]  # led elsewhere: its leader reports it
    assert fams["kaas_partition_high_watermark"] == {("t", "0"): 100, ("t", "1"): 50}
    assert fams["kaas_partition_last_stable_offset"][("t", "0")] == 90
