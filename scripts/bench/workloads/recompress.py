"""``recompress`` (issue 31): what a topic's ``compression.type`` costs the broker.

One ``kaas broker`` on tmpfs; the raw pipelined producer (``raw_produce``: 1,000 values of
1 KiB per request, idempotent, acks=all, 5 in flight) sends batches in a source codec to
topics whose ``compression.type`` is each target in turn, target by target within a round
and round after round (A B C ... A B C ...), so the machine's drift spreads over all of
them. Per (source, target): MiB/s of values and the broker process's CPU seconds per GiB of
values, medians over the rounds, and the extra CPU per GiB over ``producer`` (which stores
the producer's batch as it came: validation only)."""

from __future__ import annotations

import statistics

from ..common import MIB, _r
from ..metering import BrokerPids
from ..targets import _Kaas
from .raw_produce import RECORDS_PER_REQUEST, run_raw_produce

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
TARGETS = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
VALUE_SIZE = 1024


def _create(bootstrap: str, topic: str, target: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": target})])[topic].result(30)


def run_recompress(rounds: int, mib: float, sources: tuple[str, ...], targets: tuple[str, ...], emit) -> dict:
    """One line per (round, source, target) through ``emit``; returns the medians."""
    requests = max(1, round(mib * MIB / (RECORDS_PER_REQUEST * VALUE_SIZE)))
    broker = _Kaas([])
    runs: dict[tuple[str, str], list[dict]] = {}
    try:
        pids = BrokerPids((broker.proc.pid,))
        for rnd in range(rounds):
            for source in sources:
                for target in targets:
                    topic = f"recompress-{source}-{target}-{rnd}"
                    _create(broker.bootstrap, topic, target)
                    res = run_raw_produce(broker.bootstrap, topic, requests, RECORDS_PER_REQUEST, VALUE_SIZE,
                                          pids=pids, compression=CODEC_IDS[source])
                    line = {"bench": "recompress", "round": rnd, "source": source, "target": target,
                            **{k: res.get(k) for k in ("mib_per_s", "cpu_s_per_gib", "broker_cores",
                                                       "request_bytes", "seconds")}}
                    emit(line)
                    runs.setdefault((source, target), []).append(line)
    finally:
        broker.close()
    summary: dict[str, dict] = {}
    for (source, target), lines in runs.items():
        summary.setdefault(source, {})[target] = {
            k: _r(statistics.median(x[k] for x in lines if x.get(k) is not None))
            for k in ("mib_per_s", "cpu_s_per_gib")}
    for per_target in summary.values():
        base = per_target.get("producer", {}).get("cpu_s_per_gib")
        for target, fig in per_target.items():
            if base and fig.get("cpu_s_per_gib") is not None:
                fig["extra_cpu_s_per_gib"] = _r(fig["cpu_s_per_gib"] - base)
    return {"bench": "recompress", "rounds": rounds, "mib_per_run": mib, "value_size": VALUE_SIZE,
            "records_per_request": RECORDS_PER_REQUEST, "summary": summary}
