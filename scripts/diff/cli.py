"""``make diff``: the corpus against a fresh Apache Kafka 4.4 and a fresh kaas cluster.

    .venv/bin/python -m scripts.diff [--apache HOST:PORT,..] [--kaas HOST:PORT,..] [-k PATTERN] [-v]

Without ``--apache`` / ``--kaas`` it starts both (3 nodes each: scripts/peers/apache.py and
``kaas.testing.cluster``) and stops them at the end; then, for the corpus files marked
``"cluster": "secure"``, a second pair with SASL and the authoriser on (``secure.py``;
``--apache-secure`` / ``--kaas-secure`` name running ones). Each pair starts only when
``-k`` selects some of its scenarios. Prints each instance that differs, then,
last, ``N scenarios, N identical, N explained, N differ``; exits 1 when any differs without
an explanation (``compat/diff/explanations.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import corpus
from .normalise import Explanation, differences, explain, normalise, select
from .runner import Side

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "compat" / "diff" / "scenarios"
EXPLANATIONS = REPO / "compat" / "diff" / "explanations.json"


@contextlib.contextmanager
def apache_cluster(bootstrap: str | None, brokers: int) -> Iterator[list[int]]:
    if bootstrap:
        yield [int(hp.rsplit(":", 1)[1]) for hp in bootstrap.split(",")]
        return
    proc = subprocess.Popen([sys.executable, str(REPO / "scripts" / "peers" / "apache.py"), "--brokers", str(brokers)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line:
            raise SystemExit("diff: Apache Kafka did not start")
        yield [int(hp.rsplit(":", 1)[1]) for hp in line.split(",")]
    finally:
        proc.terminate()
        proc.wait(60)


@contextlib.contextmanager
def kaas_cluster(bootstrap: str | None, brokers: int) -> Iterator[list[int]]:
    if bootstrap:
        yield [int(hp.rsplit(":", 1)[1]) for hp in bootstrap.split(",")]
        return
    from kaas.testing import cluster

    with cluster(brokers=brokers) as c:
        yield [b.port for b in c.brokers]


def served(side: Side) -> dict[int, tuple[int, int]]:
    r = side.call(side.ports[0], 18, 3, {"client_software_name": "kaas-diff", "client_software_version": "1"})
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in r["api_keys"]}


def warm_up(side: Side) -> None:
    """Internal topics (Apache creates them on first use) and coordinators loaded: a group,
    a transactional id, a block of producer ids (Apache's first idempotent InitProducerId
    answers COORDINATOR_LOAD_IN_PROGRESS while it fetches one), and a share group (whose
    state topic Apache creates on its first heartbeat), which then leaves."""
    port = side.coordinator("warm-up-group", 0)
    side.coordinator("warm-up-txn", 1)
    deadline = time.monotonic() + 60
    init = {"transactional_id": None, "transaction_timeout": -1, "producer_id": -1, "producer_epoch": -1}
    while side.call(side.ports[0], 22, 4, init).get("error_code") != "none":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{side.name}: no producer id")
        time.sleep(0.3)
    hb = {"group_id": "warm-up-group", "member_id": "warm-up-member-0000001", "member_epoch": 0,
          "rack_id": None, "subscribed_topic_names": ["warm-up"]}
    deadline = time.monotonic() + 60
    while side.call(port, 76, 1, hb).get("error_code") != "none":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{side.name}: share coordinator not ready")
        time.sleep(0.3)
    side.call(port, 76, 1, hb | {"member_epoch": -1})


def compare(inst: corpus.Instance, apache: Any, kaas: Any, explanations: list[Explanation]
            ) -> tuple[str, list[tuple[Any, Explanation]], list[Any]]:
    diffs = select(differences(normalise(apache), normalise(kaas)),
                   inst.spec.get("only", ()), inst.spec.get("ignore", ()))
    if not diffs:
        return "identical", [], []
    explained, unexplained = explain(inst.id, diffs, explanations)
    return ("differ" if unexplained else "explained"), explained, unexplained


def run_pair(apache: Side, kaas: Side, files: list[dict[str, Any]], pattern: str,
             explanations: list[Explanation], verbose: bool, t0: float) -> list[dict[str, Any]]:
    """Prepare two clusters for ``files`` (topics, users, coordinators) and run their
    instances matching ``pattern``, printing each that differs; each instance's outcome."""
    users = {name: pw for f in files for name, pw in f.get("users", {}).items()}
    report: list[dict[str, Any]] = []
    with ThreadPoolExecutor(2) as pool:
        if users:
            from .secure import create_users

            list(pool.map(lambda s: create_users(s, users), (apache, kaas)))
        list(pool.map(lambda s: s.create_topics(corpus.topics(files)), (apache, kaas)))
        list(pool.map(warm_up, (apache, kaas)))
        print(f"diff: clusters ready in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
        for inst in corpus.expand(files, served(kaas)):
            if not fnmatch.fnmatchcase(inst.id, pattern):
                continue
            fa, fk = pool.submit(apache.run, inst), pool.submit(kaas.run, inst)
            a, k = fa.result(), fk.result()
            verdict, explained, unexplained = compare(inst, a, k, explanations)
            report.append({"id": inst.id, "verdict": verdict, "apache": a, "kaas": k,
                           "explained": [(str(d), e.id) for d, e in explained],
                           "unexplained": [str(d) for d in unexplained]})
            if unexplained:
                print(f"DIFFER {inst.id}", flush=True)
                for d in unexplained:
                    print(f"    {d}", flush=True)
            elif explained and verbose:
                print(f"explained {inst.id}: " + "; ".join(sorted({e.id for _d, e in explained})), flush=True)
    apache.close()
    kaas.close()
    return report


def wanted(files: list[dict[str, Any]], pattern: str) -> bool:
    """Whether any instance of ``files`` (at the versions this tree serves) matches."""
    from kaas.handlers.registry import REGISTRY

    served_here = {k: (h.min_version, h.max_version) for k, h in REGISTRY.items()}
    return any(fnmatch.fnmatchcase(i.id, pattern) for i in corpus.expand(files, served_here))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--apache", help="bootstrap of a running Apache cluster (default: start one)")
    ap.add_argument("--kaas", help="bootstrap of a running kaas cluster (default: start one)")
    ap.add_argument("--apache-secure", help="bootstrap of a running `apache.py --secure` (default: start one)")
    ap.add_argument("--kaas-secure", help="client.properties of a running `kaas cluster --secure` (default: start one)")
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("-k", "--only", default="*", help="fnmatch pattern of instance ids to run")
    ap.add_argument("-v", "--verbose", action="store_true", help="print explained differences too")
    ap.add_argument("--report", type=Path, help="write every instance's outcome as JSON here")
    args = ap.parse_args(argv)
    files = corpus.load(CORPUS)
    plain = [f for f in files if not corpus.secure(f)]
    secure = [f for f in files if corpus.secure(f)]
    explanations = [Explanation.from_dict(d) for d in json.loads(EXPLANATIONS.read_text())["explanations"]]
    t0 = time.monotonic()
    report: list[dict[str, Any]] = []
    if wanted(plain, args.only):
        with apache_cluster(args.apache, args.brokers) as a_ports, kaas_cluster(args.kaas, args.brokers) as k_ports:
            report += run_pair(Side("apache", a_ports), Side("kaas", k_ports), plain, args.only, explanations,
                               args.verbose, t0)
    if wanted(secure, args.only):
        from .secure import apache_secure, kaas_secure

        t1 = time.monotonic()
        with apache_secure(args.apache_secure, args.brokers) as apache, kaas_secure(args.kaas_secure,
                                                                                      args.brokers) as kaas:
            report += run_pair(apache, kaas, secure, args.only, explanations, args.verbose, t1)
    if args.report:
        args.report.write_text(json.dumps(report, indent=1, default=repr))
    counts = {v: sum(r["verdict"] == v for r in report) for v in ("identical", "explained", "differ")}
    print(f"diff: {time.monotonic() - t0:.1f} s", file=sys.stderr)
    print(f"{len(report)} scenarios, {counts['identical']} identical, {counts['explained']} explained, "
          f"{counts['differ']} differ")
    return 1 if counts["differ"] else 0
