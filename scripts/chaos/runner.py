"""One scenario on a fresh 3-broker cluster: its scratch volume, the cluster, the chaos
and the harness, then the figures."""

from __future__ import annotations

import os
import random
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import click
import eos_harness
from eos_harness import HarnessConfig

from kaas import failpoints
from kaas.testing import ClusterProcess

from .report import longest_stretch, recovery, write_report
from .scenarios import DISK_FULL_SIZE, Chaos
from .secure import cleanup_violations, cluster_after, plant_bystander


@contextmanager
def scratch_volume(scenario: str):
    """A fresh directory for one scenario's cluster: on /dev/shm, or for disk-full on a
    tmpfs of its own (so the scenario can fill it without touching anything else)."""
    tmp = Path(tempfile.mkdtemp(prefix="kaas-chaos-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    mounted = False
    try:
        if scenario == "disk-full":
            proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_FULL_SIZE}", "tmpfs", str(tmp)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise click.ClickException(f"disk-full needs a tmpfs of its own (run as root): "
                                           f"mount failed: {proc.stderr.strip()}")
            mounted = True
        yield tmp
    finally:
        if not os.environ.get("KAAS_CHAOS_KEEP"):
            if mounted:
                subprocess.run(["umount", "-l", str(tmp)], check=False)
            shutil.rmtree(tmp, ignore_errors=True)


def run_scenario(scenario: str, seed: int, messages: int, copiers: int, timeout: float, echo,
                 duration: float = 0, out: Path | None = None, secure: bool = False) -> dict:
    """One scenario on a fresh cluster. ``duration``: pace the copiers so the copy takes about
    this long (the faults must land while transactions run), 0 for full speed. ``out``: a
    directory for the report (JSON and SVG timeline). ``secure``: ``kaas cluster --secure``,
    the clients as least-privilege users (``eos_harness.grant_least_privilege``)."""
    with scratch_volume(scenario) as tmp:
        result = _run_in(tmp, scenario, seed, messages, copiers, timeout, echo, duration, secure)
    if out is not None:
        write_report(result, out, echo)
    return result


def _run_in(tmp: Path, scenario: str, seed: int, messages: int, copiers: int, timeout: float, echo,
            duration: float, secure: bool = False) -> dict:
    rnd = random.Random(seed)
    # KAAS_CHAOS_BROKER_ARGS: extra `kaas broker` options, e.g. "--no-marker-rpc" for an A/B run
    cluster = ClusterProcess(tmp / "data", 3, env={"KAAS_TXN_SWEEP_MS": "1000"},
                             extra=shlex.split(os.environ.get("KAAS_CHAOS_BROKER_ARGS", "")), secure=secure).start()
    cfg = HarnessConfig.new_run(cluster.bootstrap, seed, prefix="chaos", group_prefix="chaos", messages=messages,
                                copiers=copiers, commit_every=25, abort_every=10,
                                rate=messages / (copiers * duration) if duration else 0, input_partitions=6,
                                output_partitions=6, timeout=timeout)
    if secure:
        cfg = replace(cfg, secure=True, security={"admin": eos_harness.admin_settings(cluster.client_properties)})
    chaos = Chaos(scenario, cluster, rnd, echo, transactional_id=f"{eos_harness.txn_id_prefix(cfg)}0")
    chaos.watch_restarts()
    t0 = time.monotonic()
    try:
        bystander = plant_bystander(cfg) if secure else None
        result = eos_harness.run_harness(cfg, chaos=chaos, echo=echo)
        if secure:
            result["bystander"] = bystander
            result["cluster_after"] = cluster_after(cfg)
            problems = cleanup_violations(cfg, bystander, result["cluster_after"])
            result["violations"] += problems
            result["ok"] = result["ok"] and not problems
    finally:
        chaos.done = True
        for bid in range(cluster.n):
            failpoints.disarm(cluster.data / "run", bid)
            try:
                cluster.signal(bid, signal.SIGCONT)
            except (OSError, ValueError):
                pass
        chaos.free_volume()
        cluster.stop()
        if os.environ.get("KAAS_CHAOS_KEEP"):
            echo(f"data directory kept: {tmp}")
    commits = result["commit_times"]
    stretch, stretch_at = longest_stretch(commits)
    result.update({"scenario": scenario, "secure": secure, "faults": chaos.faults,
                   "seconds": round(time.monotonic() - t0, 1),
                   "kills": len(chaos.fault_times), "paced_msgs_per_s": round(cfg.rate * copiers, 1),
                   "recovery_s": recovery(chaos.fault_times, commits),
                   "longest_no_commit_s": stretch,
                   "longest_no_commit_at_s": None if stretch_at is None
                   else round(stretch_at - result["copy_started_at"], 1),
                   "events": [[round(f.at - result["copy_started_at"], 3), f.kind, f.label] for f in chaos.events]})
    if scenario == "continuous":
        result["ok"] = result["ok"] and result["copy_completed"]
    result.update(chaos.figures)
    if "rolling" in result:  # every broker restarted, the probe producer without errors
        result["ok"] = result["ok"] and bool(result["rolling"].get("ok"))
    return result

