"""``security`` (issue 21): the same workloads over PLAINTEXT and over SASL_SSL, A B A B.

Two fresh clusters side by side: ``kaas cluster`` (plaintext, no authoriser) and ``kaas
cluster --secure`` (SASL_SSL listeners, SCRAM-SHA-512, the authoriser on). On the secure one
two principals run each workload: the admin (a super user: the authoriser answers before
reading any ACL) and ``bench``, an ordinary user whose ACLs allow the ``bench-`` topics,
groups and transactional ids among a few hundred ACLs of other principals, so every request
walks the matching ACLs. Each run is a child ``python scripts/bench produce|txn`` whose
clients take the variant's settings from ``$KAAS_BENCH_CLIENT_CONFIG``.

Reported: produce msgs/s and txn1 commit p50 per variant and their ratios to plaintext
(the targets: >= 0.8x and <= 1.2x), broker CPU per GiB and per 1,000 transactions of the
ACL'd user over the super user (the authoriser's cost: < 5%), and the time from a new
connection's first byte to the answer of its first request after a SCRAM-SHA-512 exchange
(target < 20 ms), next to the same for a plaintext connection.
"""

from __future__ import annotations

import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

import click

from ..common import CLIENT_CONFIG_ENV, REPO, _emit, _percentile, _r
from ..targets import _KaasCluster

BENCH_USER = "bench"
NOISE_ACLS = 300  # other principals' ACLs, on other topics, groups and transactional ids


def _kaas(*args: str, timeout: float = 60.0) -> None:
    cp = subprocess.run([sys.executable, "-m", "kaas.cli", *args], capture_output=True, text=True, timeout=timeout,
                        cwd=REPO)
    if cp.returncode != 0:
        raise click.ClickException(f"kaas {' '.join(args[:2])}: {cp.stderr.strip()[-500:]}")


def _acl_user(secure: _KaasCluster) -> Path:
    """Create ``bench`` (SCRAM) with ACLs on the bench- prefix and NOISE_ACLS others; its
    client properties file."""
    admin = ["--bootstrap", secure.bootstrap, "--command-config", str(secure.client_config)]
    password = secrets.token_urlsafe(18)
    _kaas("users", "add", BENCH_USER, "--password", password, "--mechanism", "SCRAM-SHA-512", *admin)
    principal = f"User:{BENCH_USER}"
    for resource in ("--topic", "--group", "--transactional-id"):
        _kaas("acls", "add", resource, "bench-", "--resource-pattern-type", "prefixed", "--operation", "all",
              "--allow-principal", principal, *admin)
    # one call per batch of noise: kaas acls add takes the product of what it is given
    for i in range(0, NOISE_ACLS, 50):
        topics = [a for k in range(i, min(i + 50, NOISE_ACLS)) for a in ("--topic", f"other-{k}")]
        _kaas("acls", "add", *topics, "--operation", "write", "--operation", "read",
              "--allow-principal", f"User:app-{i}", *admin)
    path = secure.dir / "bench-user.properties"
    settings = {**secure.settings, "sasl.username": BENCH_USER, "sasl.password": password}
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    path.chmod(0o600)
    return path


def _child(argv: list[str], bootstrap: str, data: Path, config: Path | None, timeout: float) -> dict:
    from ..suite import _run_child

    env = {CLIENT_CONFIG_ENV: str(config)} if config else {}
    return _run_child([*argv, "--bootstrap", bootstrap, "--kaas-data", str(data)], timeout, env)


def _connect_times(host: str, port: int, props: dict[str, str] | None, n: int) -> list[float]:
    """Seconds from socket connect to the answer of ApiVersions, the first request after
    authentication (TLS handshake and SCRAM exchange included when ``props`` says so)."""
    from kaas.client import WireClient
    from kaas.tools._wire import sasl_from_properties, ssl_from_properties

    sasl = sasl_from_properties(props) if props else None
    ctx = ssl_from_properties(props) if props else None
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        with WireClient(host, port, sasl=sasl, ssl_context=ctx) as wc:
            wc.call(18, 3, {"client_software_name": "kaas-bench", "client_software_version": "1"})
            out.append(time.perf_counter() - t0)
    return out


def _ms(values: list[float], q: float) -> float | None:
    return _r(_percentile(sorted(values), q) * 1000) if values else None


def run_security(brokers: int, rounds: int, messages: int, txn_count: int, txn_seconds: float, connections: int,
                 run_timeout: float, keep: bool) -> dict:
    from kaas.testing import read_properties

    started = time.monotonic()
    plain = secure = None
    try:
        plain = _KaasCluster(brokers, [])
        secure = _KaasCluster(brokers, [], secure=True)
        acl_props = _acl_user(secure)
        variants = {"plaintext": (plain.bootstrap, plain.data, None),
                    "sasl_ssl_acl": (secure.bootstrap, secure.data, acl_props),
                    "sasl_ssl_super": (secure.bootstrap, secure.data, secure.client_config)}
        benches = {"produce": ["produce", "--messages", str(messages), "--size", "1024", "--partitions", "4",
                               "--idempotence", "--acks", "all", "--linger-ms", "5"],
                   "txn1": ["txn", "--txn-messages", "1", "--count", str(txn_count), "--seconds", str(txn_seconds),
                            "--size", "100", "--partitions", "4"]}
        runs: dict[tuple[str, str], list[dict]] = {}
        for rnd in range(rounds):
            for bench, argv in benches.items():
                for variant, (bootstrap, data, config) in variants.items():
                    res = _child(argv, bootstrap, data, config, run_timeout)
                    res = {"bench": f"security-{bench}", "variant": variant, "round": rnd,
                           **{k: v for k, v in res.items() if k != "bench"}}
                    runs.setdefault((bench, variant), []).append(res)
                    _emit(res)
        host, _, port = secure.bootstrap.split(",")[0].rpartition(":")
        phost, _, pport = plain.bootstrap.split(",")[0].rpartition(":")
        acl = read_properties(acl_props)
        auth, tcp = [], []
        for _ in range(rounds):  # alternate here too
            auth += _connect_times(host, int(port), acl, connections)
            tcp += _connect_times(phost, int(pport), None, connections)
    finally:
        for c in (plain, secure):
            if c is not None:
                c.close(keep)

    def med(bench: str, variant: str, key: str) -> float | None:
        vals = [r[key] for r in runs.get((bench, variant), []) if isinstance(r.get(key), (int, float))]
        return statistics.median(vals) if vals else None

    def ratio(a: float | None, b: float | None) -> float | None:
        return _r(a / b) if a is not None and b else None

    summary: dict[str, object] = {"bench": "security", "brokers": brokers, "rounds": rounds, "cpus": os.cpu_count(),
                                  "seconds": round(time.monotonic() - started, 1)}
    for variant in variants:
        summary[variant] = {"produce_msgs_per_s": med("produce", variant, "msgs_per_s"),
                            "produce_mib_per_s": med("produce", variant, "mib_per_s"),
                            "produce_cpu_s_per_gib": med("produce", variant, "cpu_s_per_gib"),
                            "txn1_per_s": med("txn1", variant, "txn_per_s"),
                            "txn1_commit_p50_ms": med("txn1", variant, "commit_p50_ms"),
                            "txn1_cpu_s_per_1k_txn": med("txn1", variant, "cpu_s_per_1k_txn")}
    p, a, s = summary["plaintext"], summary["sasl_ssl_acl"], summary["sasl_ssl_super"]
    summary["targets"] = {
        "produce_sasl_ssl_over_plaintext": {"value": ratio(a["produce_msgs_per_s"], p["produce_msgs_per_s"]),
                                            "target": ">= 0.8"},
        "txn1_commit_p50_sasl_ssl_over_plaintext": {
            "value": ratio(a["txn1_commit_p50_ms"], p["txn1_commit_p50_ms"]), "target": "<= 1.2"},
        "scram_sha512_connect_to_first_answer_p50_ms": {"value": _ms(auth, 0.5), "p99": _ms(auth, 0.99),
                                                        "plaintext_p50_ms": _ms(tcp, 0.5), "target": "< 20"},
        "authz_cpu_per_gib_acl_over_super": {
            "value": ratio(a["produce_cpu_s_per_gib"], s["produce_cpu_s_per_gib"]), "target": "< 1.05"},
        "authz_cpu_per_1k_txn_acl_over_super": {
            "value": ratio(a["txn1_cpu_s_per_1k_txn"], s["txn1_cpu_s_per_1k_txn"]), "target": "< 1.05"},
    }
    return summary
