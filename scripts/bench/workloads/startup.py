"""Issue 36: how fast a test cluster serves. ``python scripts/bench startup``.

Two start-up paths, A B A B:

- A, the previous one: ``kaas cluster`` and every broker a new interpreter
  (``ClusterProcess(launcher="exec")``), readiness probed every 50 ms;
- B, ``kaas.testing.cluster()``'s: the supervisor forked from the fork server, its
  brokers forked from it (``--fork-brokers``), readiness probed with a backoff from 2 ms.

Each sample times, from the call that starts the cluster: ``first_s``, until broker 0
answers ApiVersions (a probe thread, every 1 ms); ``formed_s``, until the call returns
(every broker's Metadata lists all brokers and a controller). ``cold``: the first start
in a fresh Python process, right after ``import kaas.testing.clusters`` (which starts B's
fork server: its imports overlap the process's own), with ``from_import_s``, the first
answer counted from before that import; ``warm``: a second start in the same process,
after one started and stopped. The target:
B's best of five ``first_s`` at most 0.5 s for 1 broker and 1 s for 3, cold and warm.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import click

from ..common import REPO, _emit, _r

MODES = {"A": "exec", "B": "fork"}
TARGETS_S = {1: 0.5, 3: 1.0}


def _one(mode: str, brokers: int, imported_at: float | None = None) -> dict:
    """Start and stop one cluster by path ``mode``; its timings (``from_import_s``: since
    ``imported_at``, before the process imported kaas.testing)."""
    from kaas.testing import ClusterProcess, api_versions_ok
    from kaas.testing.clusters import TEST_BROKER_ARGS, TEST_ENV, shm_root

    root = Path(tempfile.mkdtemp(prefix="kaas-bench-startup-", dir=shm_root()))
    proc = ClusterProcess(root / "data", brokers, extra=list(TEST_BROKER_ARGS), env=TEST_ENV, launcher=MODES[mode],
                          ready_interval=0.05 if mode == "A" else None)
    first: list[float] = []
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            if api_versions_ok("127.0.0.1", proc.ports[0], timeout=0.5):
                first.append(time.perf_counter())
                return
            time.sleep(0.001)

    t = threading.Thread(target=probe, daemon=True)
    t0 = time.perf_counter()
    t.start()
    try:
        proc.start()
        formed = time.perf_counter()
        t.join(5)
    finally:
        done.set()
        t_stop = time.perf_counter()
        proc.stop(graceful=False)
        stop_s = time.perf_counter() - t_stop
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    out = {"first_s": _r(first[0] - t0) if first else None, "formed_s": _r(formed - t0), "stop_s": _r(stop_s)}
    if imported_at is not None and first:
        out["from_import_s"] = _r(first[0] - imported_at)
    return out


def child(mode: str, brokers: int, warm: bool) -> None:
    """One sample in this (fresh) process: printed as a JSON line. Path A never uses the
    fork server (``KAAS_TESTING_LAZY``: importing kaas.testing.clusters does not start it)."""
    import os

    if mode == "A":
        os.environ["KAAS_TESTING_LAZY"] = "1"
    t_import = time.perf_counter()
    import kaas.testing.clusters  # noqa: F401  (B: starts the fork server)

    if warm:
        _one(mode, brokers)
    print(json.dumps(_one(mode, brokers, None if warm else t_import)), flush=True)


def _sample(mode: str, brokers: int, warm: bool) -> dict:
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; from bench.workloads.startup import child; "
            "child(sys.argv[3], int(sys.argv[4]), sys.argv[5] == 'warm')")
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "scripts"), str(REPO), mode, str(brokers),
                          "warm" if warm else "cold"], capture_output=True, text=True, timeout=300, cwd=REPO)
    if out.returncode != 0:
        raise click.ClickException(f"startup sample {mode} {brokers} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_startup(rounds: int, sizes: list[int], emit=_emit) -> dict:
    samples: dict[str, list[dict]] = {}
    for r in range(rounds):
        for brokers in sizes:
            for temp in ("cold", "warm"):
                for mode in ("A", "B"):  # A B A B
                    s = _sample(mode, brokers, temp == "warm")
                    samples.setdefault(f"{brokers}:{temp}:{mode}", []).append(s)
                    emit({"round": r, "brokers": brokers, "temp": temp, "path": mode, **s})
    rows = []
    for key, ss in samples.items():
        brokers, temp, mode = key.split(":")
        firsts = [s["first_s"] for s in ss if s["first_s"] is not None]
        formed = [s["formed_s"] for s in ss]
        rows.append({"brokers": int(brokers), "temp": temp, "path": mode, "runs": len(ss),
                     "first_best_s": min(firsts) if firsts else None,
                     "first_median_s": _r(statistics.median(firsts)) if firsts else None,
                     "formed_best_s": min(formed), "formed_median_s": _r(statistics.median(formed)),
                     "stop_median_s": _r(statistics.median(s["stop_s"] for s in ss)),
                     "from_import_best_s": min((s["from_import_s"] for s in ss if "from_import_s" in s), default=None)})
    verdict = {f"{n} broker(s) {temp}": bool(row["first_best_s"] is not None and row["first_best_s"] <= TARGETS_S[n])
               for n in sizes if n in TARGETS_S for temp in ("cold", "warm")
               for row in rows if row["brokers"] == n and row["temp"] == temp and row["path"] == "B"}
    return {"bench": "startup", "rounds": rounds, "rows": rows, "targets_s": TARGETS_S, "target_met": verdict}


@click.command()
@click.option("--rounds", type=click.IntRange(min=1), default=5, show_default=True, help="Samples per cell (best of).")
@click.option("--sizes", default="1,3", show_default=True, help="Cluster sizes, comma-separated.")
def startup(rounds, sizes) -> None:
    """Issue 36: a test cluster's start-up, the previous path (A: new interpreters, 50 ms
    probes) against kaas.testing.cluster()'s (B: forked, backoff probes), A B A B, cold
    and warm; best of ``--rounds``: the time to broker 0's first answer and to a formed
    cluster."""
    _emit(run_startup(rounds, [int(s) for s in sizes.split(",")], _emit))
