"""``scripts/bench ingest``'s raw client for real, in small: its idempotent batches land
whole against a broker process, which checks their sequences; an error answer fails the
run; the raw-only run (a kaas broker and librdkafka's mock, one round) gives its JSON lines
and summary. Nothing here is timed: only counts, offsets, error codes and the shapes."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import click
import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from kaas.client import recv_exact
from kaas.wire import codec
from kaas.wire.batch import set_base_sequence
from tests.tools import require_bundled_librdkafka

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench.common import connect_nodelay, ensure_topic  # noqa: E402
from bench.metering import BrokerPids  # noqa: E402
from bench.workloads.ingest import run_ingest  # noqa: E402
from bench.workloads.raw_produce import (  # noqa: E402
    MAX_IN_FLIGHT,
    PRODUCE,
    init_producer_id,
    produce_frame,
    run_raw_produce,
)

pytestmark = pytest.mark.slow

REQUESTS, RECORDS = 2 * MAX_IN_FLIGHT, 100  # the window of requests in flight moves on


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ingest-test"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    finally:
        c.close()


def test_raw_produce_lands_every_record(broker):
    ensure_topic(broker.bootstrap, "raw", 1)
    res = run_raw_produce(broker.bootstrap, "raw", REQUESTS, RECORDS, pids=BrokerPids([broker.proc.pid]))
    assert (res["requests"], res["records"], res["first_offset"], res["next_offset"]) == \
        (REQUESTS, REQUESTS * RECORDS, 0, REQUESTS * RECORDS)
    assert res["bytes"] == REQUESTS * RECORDS * 1024 and res["cpu_s"] is not None
    assert _watermarks(broker.bootstrap, "raw") == (0, REQUESTS * RECORDS)
    # A second producer (a new id, sequences from 0 again) appends after the first.
    again = run_raw_produce(broker.bootstrap, "raw", 2, RECORDS)
    assert (again["first_offset"], again["next_offset"]) == (REQUESTS * RECORDS, (REQUESTS + 2) * RECORDS)
    assert _watermarks(broker.bootstrap, "raw") == (0, (REQUESTS + 2) * RECORDS)


def test_the_batches_carry_the_producer_and_its_sequence(broker):
    """After a first batch, one of the client's producer that skips ahead of its sequence is
    refused: the broker runs its idempotent checks on these batches."""
    ensure_topic(broker.bootstrap, "seq", 1)
    codes = []
    with connect_nodelay(broker.bootstrap) as wc:
        frame, at = produce_frame("seq", *init_producer_id(wc), RECORDS, 1024)
        for seq in (0, RECORDS + 7):
            set_base_sequence(frame, at, seq)
            wc.sock.sendall(frame)
            payload = recv_exact(wc.sock, struct.unpack(">i", recv_exact(wc.sock, 4))[0])
            codes.append(codec.decode_response(*PRODUCE, payload)[1].responses[0].partition_responses[0].error_code)
    assert codes == [ErrorCode.none, ErrorCode.out_of_order_sequence_number]


def test_an_error_answer_fails_the_run(broker):
    # A name the broker does not auto-create (it does create unknown valid ones).
    with pytest.raises(click.ClickException, match="unknown_topic_or_partition"):
        run_raw_produce(broker.bootstrap, "no such topic!", 1, RECORDS)


def test_the_raw_run_against_kaas_and_the_mock():
    require_bundled_librdkafka()  # scripts/peers/mock_cluster.py loads it
    lines: list[dict] = []
    summary = run_ingest(1, 0, 60.0, lines.append, raw_mib=2, clients=("raw",))
    for line in [*lines, summary]:
        json.dumps(line)
    assert [(r["client"], r["target"]) for r in lines] == [("raw", "kaas"), ("raw", "mock")]
    for r in lines:
        assert r["bench"] == "ingest" and r["round"] == 0 and r["requests"] == 2
        assert r["next_offset"] - r["first_offset"] == r["records"] == 2000
        assert r["mib_per_s"] > 0 and r["client_cpu_s"] >= 0 and r["cpu_s"] is not None
    assert summary["clients"] == ["raw"] and "kaas" not in summary  # no librdkafka figures when not run
    assert summary["raw"]["requests"] == 2 and summary["raw"]["kaas_over_mock"] > 0
    assert summary["target"]["mib_per_s"] == ">= 400" and summary["target"]["client"] == "raw"
    assert isinstance(summary["target"]["met"], bool)
