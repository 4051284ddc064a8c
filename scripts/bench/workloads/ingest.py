"""``ingest`` and ``brokers`` (issue 22): what one broker process takes, and how N of them add up.

``ingest``: one ``kaas broker`` on tmpfs against librdkafka's mock with one broker, one
partition, 1 KiB values, idempotent, acks=all, A B A B, with two clients. ``librdkafka``: a
child ``python scripts/bench produce``, keyless (librdkafka's default partitioner). On two
cores that client takes 1.1-1.2 of them and caps the figure before the broker does, so
``raw`` (``raw_produce``: pipelined 1 MB Produce requests of one idempotent producer, no
Python per record) measures what the broker process takes alone, with the client's own CPU
beside it. The target, judged on the raw figure: one broker process ingests at least
400 MiB/s; the kaas/mock ratio of each client beside it.

``brokers``: ``kaas cluster`` of N = 1, 2, 3, 6 brokers (fresh each), the same producer
over 12 partitions named round robin so that every broker takes a share: msgs/s and broker
CPU per GiB per N. On a machine of C cores, client and brokers share them: the curve
flattens where the cores run out, not where a broker does.
"""

from __future__ import annotations

import os
import statistics
import time

from ..common import MIB, _r, ensure_topic
from ..metering import BrokerPids
from ..targets import _KaasCluster, kaas_and_mock
from .raw_produce import MAX_IN_FLIGHT, RECORDS_PER_REQUEST, run_raw_produce

INGEST_TARGET_MIB_S = 400.0
CLIENTS = ("librdkafka", "raw")
VALUE_SIZE = 1024


def _produce_argv(messages: int, partitions: int, keyless: bool) -> list[str]:
    return ["produce", "--messages", str(messages), "--size", str(VALUE_SIZE), "--partitions", str(partitions),
            "--idempotence", "--acks", "all", "--linger-ms", "5", *(["--keyless"] if keyless else [])]


def _median(runs: list[dict], key: str) -> float | None:
    vals = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return _r(statistics.median(vals)) if vals else None


def raw_requests(raw_mib: float) -> int:
    """Produce requests of RECORDS_PER_REQUEST 1 KiB values that carry about ``raw_mib`` MiB."""
    return max(1, round(raw_mib * MIB / (RECORDS_PER_REQUEST * VALUE_SIZE)))


def _raw_medians(runs: list[dict]) -> dict:
    return {k: _median(runs, k) for k in ("mib_per_s", "msgs_per_s", "cpu_s_per_gib", "broker_cores",
                                          "client_cpu_s_per_gib", "client_cores")}


def run_ingest(rounds: int, messages: int, run_timeout: float, emit, raw_mib: float = 800.0,
               clients: tuple[str, ...] = CLIENTS) -> dict:
    """``rounds`` rounds of kaas then the mock, per client of ``clients`` (CLIENTS): one line
    per (client, target, round) through ``emit``; returns the summary: medians per client and
    target, kaas/mock, and the target judged on the raw client's kaas median (librdkafka's
    when the raw client is not run).

    Raises:
        click.ClickException: a broker did not start, a librdkafka run failed, or a raw
            run's answer carried an error (``run_raw_produce``).
    """
    from ..suite import _run_child

    started = time.monotonic()
    runs: dict[str, dict[str, list[dict]]] = {c: {"kaas": [], "mock": []} for c in clients}
    requests = raw_requests(raw_mib)
    with kaas_and_mock() as (kaas, mock):
        for rnd in range(rounds):
            for client in clients:
                for name, target in (("kaas", kaas), ("mock", mock)):
                    if client == "raw":
                        topic = f"ingest-raw-{rnd}"
                        ensure_topic(target.bootstrap, topic, 1)
                        res = run_raw_produce(target.bootstrap, topic, requests, RECORDS_PER_REQUEST, VALUE_SIZE,
                                              pids=BrokerPids([target.proc.pid]))
                    else:
                        extra = ["--cpu-pid", str(kaas.proc.pid)] if target is kaas else []
                        res = _run_child([*_produce_argv(messages, 1, True), "--topic", f"ingest-{rnd}",
                                          "--bootstrap", target.bootstrap, *extra], run_timeout,
                                         getattr(target, "env", None))
                    res = {"bench": "ingest", "client": client, "target": name, "round": rnd,
                           **{k: v for k, v in res.items() if k != "bench"}}
                    runs[client][name].append(res)
                    emit(res)
    out: dict[str, object] = {"bench": "ingest", "rounds": rounds, "clients": list(clients), "cpus": os.cpu_count(),
                              "seconds": round(time.monotonic() - started, 1)}
    judged = None
    if "librdkafka" in clients:
        lib = runs["librdkafka"]
        k = judged = _median(lib["kaas"], "mib_per_s")
        m = _median(lib["mock"], "mib_per_s")
        out.update({"messages": messages,
                    "kaas": {"mib_per_s": k, "msgs_per_s": _median(lib["kaas"], "msgs_per_s"),
                             "cpu_s_per_gib": _median(lib["kaas"], "cpu_s_per_gib"),
                             "p50_ms": _median(lib["kaas"], "p50_ms")},
                    "mock": {"mib_per_s": m, "msgs_per_s": _median(lib["mock"], "msgs_per_s"),
                             "p50_ms": _median(lib["mock"], "p50_ms")},
                    "kaas_over_mock": _r(k / m) if k and m else None})
    if "raw" in clients:
        raw = {name: _raw_medians(runs["raw"][name]) for name in ("kaas", "mock")}
        k = judged = raw["kaas"]["mib_per_s"]
        m = raw["mock"]["mib_per_s"]
        out["raw"] = {"mib": raw_mib, "requests": requests, "records_per_request": RECORDS_PER_REQUEST,
                      "in_flight": MAX_IN_FLIGHT, **raw, "kaas_over_mock": _r(k / m) if k and m else None}
    out["target"] = {"mib_per_s": f">= {INGEST_TARGET_MIB_S:g}", "client": "raw" if "raw" in clients else "librdkafka",
                     "met": None if judged is None else judged >= INGEST_TARGET_MIB_S}
    return out


def run_brokers(counts: list[int], rounds: int, messages: int, partitions: int, run_timeout: float,
                emit) -> dict:
    from ..suite import _run_child

    started = time.monotonic()
    out: dict[str, dict] = {}
    for n in counts:
        cluster = _KaasCluster(n, [])
        runs = []
        try:
            for rnd in range(rounds):
                cluster.wait_healthy()
                res = _run_child([*_produce_argv(messages, partitions, False), "--topic", f"brokers-{n}-{rnd}",
                                  "--bootstrap", cluster.bootstrap, *cluster.pid_args()], run_timeout)
                res = {"bench": "brokers", "brokers": n, "round": rnd,
                       **{k: v for k, v in res.items() if k != "bench"}}
                runs.append(res)
                emit(res)
        finally:
            cluster.close()
        out[str(n)] = {"msgs_per_s": _median(runs, "msgs_per_s"), "mib_per_s": _median(runs, "mib_per_s"),
                       "cpu_s_per_gib": _median(runs, "cpu_s_per_gib")}
    base = out.get(str(counts[0]), {}).get("msgs_per_s")
    for v in out.values():
        v["vs_first"] = _r(v["msgs_per_s"] / base) if base and v["msgs_per_s"] else None
    return {"bench": "brokers", "partitions": partitions, "rounds": rounds, "cpus": os.cpu_count(),
            "seconds": round(time.monotonic() - started, 1), "by_brokers": out}
