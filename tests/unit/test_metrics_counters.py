"""kaas.counters: the lock-free counters behind /metrics; the API names the endpoint gives them."""

from __future__ import annotations

from kaas import counters as metrics
from kaas.handlers.registry import REGISTRY
from kaas.net.metrics_http import _api_name


def test_histogram_buckets_are_le_and_cumulative():
    h = metrics.Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 1.0, 7.0):
        h.observe(v)
    assert h.cumulative() == [("0.1", 2), ("1.0", 4), ("+Inf", 5)]
    assert h.count == 5
    assert abs(h.total - 8.65) < 1e-9


def test_record_request_counts_per_api():
    metrics.reset()
    try:
        metrics.record_request(0, 120, b"x" * 30, 0.002)
        metrics.record_request(0, 80, None, 0.004)  # acks=0: no response
        metrics.record_error(1)
        s = metrics.API[0]
        got = (_api_name(s.api_key), s.requests, s.bytes_in, s.bytes_out, s.latency.count)
        assert got == ("Produce", 2, 200, 30, 2)
        assert _api_name(metrics.API[1].api_key) == "Fetch" and metrics.API[1].errors == 1
    finally:
        metrics.reset()


def test_api_names_are_kafkas():
    names = {h.api_key: h.api_name for h in REGISTRY.values()}
    assert names[18] == "ApiVersions"
    assert names[22] == "InitProducerId"
    assert names[24] == "AddPartitionsToTxn"
    assert names[23] == "OffsetForLeaderEpoch"
    assert names[44] == "IncrementalAlterConfigs"
