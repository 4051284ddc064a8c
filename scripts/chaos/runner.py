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
from kaas.domain.groups import sessions
from kaas.testing import ClusterProcess

from .report import longest_stretch, recovery, write_report
from .scenarios import CHURN_SESSION_S, CHURN_TAKEOVER_S, DISK_FULL_SIZE, UPGRADE_TO, Chaos
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


def mixed_phase_commits(restarts: list[float], stops: list[float],
                        commit_times_by_copier: dict[int, list[float]]) -> dict[int, int]:
    """Transactions each upgraded copier committed while the group was mixed: copier ``i``
    from its restart on the new protocol (``restarts[i]``) until copier ``i + 1`` was stopped
    (``stops[i + 1]``); the last copier has no mixed phase. A converting group gives the new
    member partitions at once; a group that refuses it (INCONSISTENT_GROUP_PROTOCOL, which
    librdkafka retries quietly) leaves it at 0 until every classic member is gone."""
    return {i: sum(restarts[i] <= t <= stops[i + 1] for t in commit_times_by_copier.get(i, ()))
            for i in range(min(len(restarts), len(stops) - 1))}


def upgrade_done(copier_protocols: dict[int, list[str]]) -> bool:
    """Whether a rolling upgrade went through: every copier started on the classic protocol
    and its last incarnation ran ``UPGRADE_TO``."""
    return bool(copier_protocols) and all(ps and ps[0] == "classic" and ps[-1] == UPGRADE_TO
                                          for ps in copier_protocols.values())


def churn_verdict(result: dict, stretch: float | None) -> None:
    """consumer-churn's progress verdict: the copy completes; neither the group nor a
    copier goes without a commit for longer than the session plus the grace; no input
    partition stands still for longer than that plus ``CHURN_TAKEOVER_S`` (the killed
    copier's partitions wait for its member's removal, then for a survivor's next heartbeat
    and first transaction on them)."""
    bound = CHURN_SESSION_S + sessions.grace_ms(int(CHURN_SESSION_S * 1000)) / 1000
    gaps = [g for g in [stretch, *result["longest_no_commit_by_copier_s"].values()] if g is not None]
    worst = max(gaps) if gaps else None
    parts = list(result.get("longest_no_progress_by_partition_s", {}).values())
    worst_part = max(parts) if parts else None
    result.update(stretch_bound_s=bound, longest_no_progress_s=worst, longest_partition_stall_s=worst_part,
                  partition_stall_bound_s=bound + CHURN_TAKEOVER_S)
    if not result["copy_completed"]:
        result["violations"].append("consumer-churn: the copy did not complete")
    if worst is None or worst > bound:
        result["violations"].append(f"consumer-churn: longest stretch without a commit {worst} s > {bound} s "
                                    f"(the session timeout plus the grace)")
    if worst_part is not None and worst_part > bound + CHURN_TAKEOVER_S:
        result["violations"].append(f"consumer-churn: a partition stood still for {worst_part} s > "
                                    f"{bound + CHURN_TAKEOVER_S} s (session + grace + take-over)")
    result["ok"] = result["ok"] and not any(v.startswith("consumer-churn") for v in result["violations"])


def run_scenario(scenario: str, seed: int, messages: int, copiers: int, timeout: float, echo,
                 duration: float = 0, out: Path | None = None, secure: bool = False,
                 group_protocol: str = "classic") -> dict:
    """One scenario on a fresh cluster. ``duration``: pace the copiers so the copy takes about
    this long (the faults must land while transactions run), 0 for full speed. ``out``: a
    directory for the report (JSON and SVG timeline). ``secure``: ``kaas cluster --secure``,
    the clients as least-privilege users (``eos_harness.grant_least_privilege``).
    ``group_protocol``: the copiers' group.protocol (rolling-upgrade starts them classic
    whatever it says, and moves them to ``UPGRADE_TO``)."""
    with scratch_volume(scenario) as tmp:
        result = _run_in(tmp, scenario, seed, messages, copiers, timeout, echo, duration, secure, group_protocol)
    if out is not None:
        write_report(result, out, echo)
    return result


def _run_in(tmp: Path, scenario: str, seed: int, messages: int, copiers: int, timeout: float, echo,
            duration: float, secure: bool = False, group_protocol: str = "classic") -> dict:
    rnd = random.Random(seed)
    upgrade = scenario == "rolling-upgrade"
    churn = scenario == "consumer-churn"  # issue 42: consumer-protocol copiers on the cluster's defaults
    protocol = "classic" if upgrade else "consumer" if churn else group_protocol
    # KAAS_CHAOS_BROKER_ARGS: extra `kaas broker` options, e.g. "--no-marker-rpc" for an A/B run
    extra = shlex.split(os.environ.get("KAAS_CHAOS_BROKER_ARGS", ""))
    if upgrade or (protocol == "consumer" and not churn):  # the copiers' session timeout for consumer members
        extra = eos_harness.consumer_broker_args() + extra
    cluster = ClusterProcess(tmp / "data", 3, env={"KAAS_TXN_SWEEP_MS": "1000"}, extra=extra, secure=secure).start()
    cfg = HarnessConfig.new_run(cluster.bootstrap, seed, prefix="chaos", group_prefix="chaos", messages=messages,
                                copiers=copiers, commit_every=25, abort_every=10,
                                rate=messages / (copiers * duration) if duration else 0, input_partitions=6,
                                output_partitions=6, timeout=timeout, group_protocol=protocol)
    if secure:
        cfg = replace(cfg, secure=True, security={"admin": eos_harness.admin_settings(cluster.client_properties)})
    chaos = Chaos(scenario, cluster, rnd, echo, transactional_id=f"{eos_harness.txn_id_prefix(cfg)}0",
                  group=cfg.group)
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
    if churn:
        churn_verdict(result, stretch)
    if upgrade:  # progress too: the copy completes, every copier ends on the new protocol
        upgraded = upgrade_done(result["copier_protocols"])
        mixed = mixed_phase_commits([f.at for f in chaos.events if f.kind == "copier-restart"],
                                    [f.at for f in chaos.events if f.kind == "copier-stop"],
                                    {int(i): ts for i, ts in result["commit_times_by_copier"].items()})
        result["upgraded"] = upgraded
        result["mixed_phase_commits"] = mixed
        if not upgraded:
            result["violations"].append(f"rolling upgrade incomplete: copiers' protocols {result['copier_protocols']}")
        idle = sorted(i for i, n in mixed.items() if n == 0)
        if idle:
            result["violations"].append(f"rolling upgrade: copier(s) {idle} on the consumer protocol committed "
                                        f"nothing while the group still had classic members (not converted online)")
        result["ok"] = result["ok"] and result["copy_completed"] and upgraded and not idle
    result.update(chaos.figures)
    if "rolling" in result:  # every broker restarted, the probe producer without errors
        result["ok"] = result["ok"] and bool(result["rolling"].get("ok"))
    return result

