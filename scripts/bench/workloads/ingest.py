"""``ingest`` and ``brokers`` (issue 22): what one broker process takes, and how N of them add up.

``ingest``: one ``kaas broker`` on tmpfs against librdkafka's mock with one broker, one
partition, 1 KiB values, idempotent, acks=all, keyless (librdkafka's default partitioner),
A B A B. The target: one broker process ingests at least 400 MiB/s; the kaas/mock ratio
beside it. Each run is a child ``python scripts/bench produce``.

``brokers``: ``kaas cluster`` of N = 1, 2, 3, 6 brokers (fresh each), the same producer
over 12 partitions named round robin so that every broker takes a share: msgs/s and broker
CPU per GiB per N. On a machine of C cores, client and brokers share them: the curve
flattens where the cores run out, not where a broker does.
"""

from __future__ import annotations

import os
import statistics
import time

from ..common import _r
from ..targets import _Kaas, _KaasCluster, _Mock

INGEST_TARGET_MIB_S = 400.0


def _produce_argv(messages: int, partitions: int, keyless: bool) -> list[str]:
    return ["produce", "--messages", str(messages), "--size", "1024", "--partitions", str(partitions),
            "--idempotence", "--acks", "all", "--linger-ms", "5", *(["--keyless"] if keyless else [])]


def _median(runs: list[dict], key: str) -> float | None:
    vals = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def run_ingest(rounds: int, messages: int, run_timeout: float, emit) -> dict:
    from ..suite import _run_child

    started = time.monotonic()
    kaas = mock = None
    runs: dict[str, list[dict]] = {"kaas": [], "mock": []}
    try:
        kaas = _Kaas([])
        mock = _Mock(1)
        for rnd in range(rounds):
            for name, target, extra in (("kaas", kaas, ["--cpu-pid", str(kaas.proc.pid)]), ("mock", mock, [])):
                res = _run_child([*_produce_argv(messages, 1, True), "--topic", f"ingest-{rnd}",
                                  "--bootstrap", target.bootstrap, *extra], run_timeout,
                                 getattr(target, "env", None))
                res = {"bench": "ingest", "target": name, "round": rnd, **{k: v for k, v in res.items()
                                                                            if k != "bench"}}
                runs[name].append(res)
                emit(res)
    finally:
        for t in (kaas, mock):
            if t is not None:
                t.close()
    k = _median(runs["kaas"], "mib_per_s")
    m = _median(runs["mock"], "mib_per_s")
    return {"bench": "ingest", "rounds": rounds, "messages": messages, "cpus": os.cpu_count(),
            "seconds": round(time.monotonic() - started, 1),
            "kaas": {"mib_per_s": k, "msgs_per_s": _median(runs["kaas"], "msgs_per_s"),
                     "cpu_s_per_gib": _median(runs["kaas"], "cpu_s_per_gib"),
                     "p50_ms": _median(runs["kaas"], "p50_ms")},
            "mock": {"mib_per_s": m, "msgs_per_s": _median(runs["mock"], "msgs_per_s"),
                     "p50_ms": _median(runs["mock"], "p50_ms")},
            "kaas_over_mock": _r(k / m) if k and m else None,
            "target": {"mib_per_s": f">= {INGEST_TARGET_MIB_S:g}",
                       "met": None if k is None else k >= INGEST_TARGET_MIB_S}}


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
