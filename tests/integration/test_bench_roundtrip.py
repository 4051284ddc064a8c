"""``scripts/bench roundtrip`` for real, in small: the round trips against a broker process,
and the whole run (a kaas broker and librdkafka's mock, one round) with its JSON lines.
Nothing here is timed: only the shapes, positive percentiles and the error codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.tools import require_bundled_librdkafka

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench.workloads.roundtrip import APIS, COMPARED, measure_roundtrips, run_roundtrip  # noqa: E402

pytestmark = pytest.mark.slow

REQUESTS = 50


def test_round_trips_on_a_broker(broker):
    measured = measure_roundtrips(broker.bootstrap, REQUESTS)
    assert list(measured) == list(APIS)
    for rt in measured.values():
        assert len(rt.seconds) == REQUESTS and all(s > 0 for s in rt.seconds)
        assert rt.error_code == 0


def test_the_run_against_kaas_and_the_mock():
    require_bundled_librdkafka()  # scripts/peers/mock_cluster.py loads it
    lines: list[dict] = []
    summary = run_roundtrip(1, REQUESTS, lines.append)
    for line in [*lines, summary]:
        json.dumps(line)
    assert [(r["target"], r["api"]) for r in lines] == [(t, api) for t in ("kaas", "mock") for api in APIS]
    for r in lines:
        assert r["bench"] == "roundtrip" and r["round"] == 0 and r["requests"] == REQUESTS
        assert all(isinstance(r[k], float) and r[k] > 0 for k in ("p50_us", "p90_us", "p99_us"))
        # The mock lacks ApiVersions v3 and says so; everything else answers error 0.
        assert r["error_code"] == (35 if (r["target"], r["api"]) == ("mock", "api_versions") else 0)
    assert summary["bench"] == "roundtrip" and summary["rounds"] == 1 and summary["requests"] == REQUESTS
    for target in ("kaas", "mock"):
        assert set(summary[target]) == set(APIS)
        assert all(summary[target][api]["p50_us"] > 0 for api in APIS)
        assert summary[target]["heartbeat"]["error_codes"] == [0]
    assert set(summary["kaas_over_mock"]) == set(COMPARED)  # not v3: the mock answers it with an error
    assert all(summary["kaas_over_mock"][api] > 0 for api in COMPARED)
    assert summary["target"]["kaas_over_mock"] == "<= 2"
    assert {api: type(met) for api, met in summary["target"]["met"].items()} == {api: bool for api in COMPARED}
