#!/usr/bin/env python3
"""Chaos scenarios: the EOS harness on a fresh 3-broker kaas cluster while brokers die.

    python scripts/chaos.py run --scenario all --messages 4000 --seed 7
    python scripts/chaos.py run --scenario endtxn-failpoints

Scenarios (each reproducible from its seed, printed on failure):
  endtxn-failpoints  SIGKILL (os._exit at a failpoint) the transaction coordinators at each
                     EndTxn step in turn: after_prepare, after_local_markers, after_enqueue,
                     before_complete, twice over
  random-kills       SIGKILL a random broker every few seconds
  pause-coordinator  SIGSTOP the transaction coordinator of a copier past the session
                     timeout, then SIGCONT it
  kill-controller    SIGKILL the controller, twice
  kill-all           SIGKILL every broker at once; the supervisor restarts them all
  disk-full          the cluster's data directory on a tmpfs of its own (root: mount), filled
                     to the last byte by a filler file for a few seconds, then freed, three
                     times: appends, state files, heartbeats and logs all hit ENOSPC

Exit status 0 only when exactly-once held in every scenario run.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import eos_harness  # noqa: E402
from kaas import failpoints  # noqa: E402
from kaas.domain.routing import txn_slot  # noqa: E402
from tests.procs import ClusterProcess  # noqa: E402

ENDTXN_POINTS = ("endtxn.after_prepare", "endtxn.after_local_markers", "endtxn.after_enqueue",
                 "endtxn.before_complete")
ROUNDS = 2  # endtxn-failpoints cycles through the points this many times
ARM_WAIT_S = 8.0  # a point not hit within this long is skipped
SETTLE_S = 2.0  # after a crash, before arming the next point
FIRST_FAULT_S = 2.0  # after the first committed transaction, before the first fault
DISK_FULL_ROUNDS = 3  # disk-full: how often the volume is filled and freed
DISK_FULL_HOLD_S = float(os.environ.get("KAAS_CHAOS_DISK_FULL_HOLD_S", "4"))  # disk-full: how long the volume stays full
DISK_FULL_GAP_S = 6.0  # disk-full: how long it has room between two full spells
DISK_FULL_SIZE = "256m"  # disk-full: the tmpfs holding the cluster's data directory


def controller_of(data: Path) -> int:
    cdir = data / "__cluster" / "controller"
    n = max(int(p.name[6:]) for p in cdir.glob("epoch-*"))
    return int(json.loads((cdir / f"epoch-{n}").read_text())["broker_id"])


def txn_coordinator_of(data: Path, transactional_id: str) -> int:
    """The broker that owns the transaction slot of ``transactional_id`` (assignment.json)."""
    a = json.loads((data / "__cluster" / "assignment.json").read_text())
    return int(a["txn_slots"][str(txn_slot(transactional_id))])


class Chaos:
    """Calls faults into a running cluster on a schedule; every fault is logged."""

    def __init__(self, scenario: str, cluster: ClusterProcess, rnd: random.Random, echo,
                 transactional_id: str = "") -> None:
        self.scenario = scenario
        self.cluster = cluster
        self.rnd = rnd
        self.echo = echo
        self.next_at = 0.0
        self.started_at: float | None = None
        self.transactional_id = transactional_id  # a copier's: pause-coordinator stops its coordinator
        self.step = 0
        self.paused: tuple[int, float] | None = None
        self.armed: tuple[str, float] | None = None  # (failpoint, when armed)
        self.faults: list[str] = []
        self.fault_times: list[float] = []
        self.done = False  # the harness finished: no new faults

    def log(self, what: str, at: float | None = None) -> None:
        """Record a chaos action; ``at`` (wall clock) marks it as a fault whose recovery is
        measured (kills, crashes, stops)."""
        self.faults.append(what)
        if at is not None:
            self.fault_times.append(at)
        self.echo(f"  chaos: {what}", err=True)

    def _fill(self, round_no: int) -> int:
        """Fill the data volume to the last byte with a filler file beside the data
        directory (same mount). Returns the bytes written."""
        filler = self.cluster.data.parent / f"filler-{round_no}"
        chunk = b"\0" * (1 << 20)
        written = 0
        with open(filler, "wb", buffering=0) as f:
            while True:
                try:
                    written += f.write(chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if len(chunk) == 1:
                        return written
                    chunk = chunk[: len(chunk) // 16 or 1]

    def _disk_full_rounds(self) -> None:
        """Fill the volume, hold it full, free it; ``DISK_FULL_ROUNDS`` times, in a thread of
        its own so the full spells last exactly as long as said, whatever the harness's
        main loop (which calls the chaos) is blocked on meanwhile."""
        for i in range(DISK_FULL_ROUNDS):
            if self.done:
                return
            written = self._fill(i)
            self.log(f"volume full ({written >> 20} MiB filler) for {DISK_FULL_HOLD_S:.0f} s", time.time())
            time.sleep(DISK_FULL_HOLD_S)
            self._free()
            self.log("volume freed")
            time.sleep(DISK_FULL_GAP_S)

    def _free(self) -> None:
        for f in self.cluster.data.parent.glob("filler-*"):
            f.unlink()

    def _kill(self, bid: int) -> None:
        try:
            self.cluster.kill(bid)
            self.log(f"SIGKILL broker {bid}", time.time())
        except (OSError, ValueError) as exc:
            self.log(f"could not kill broker {bid}: {exc}")

    def _endtxn_step(self, elapsed: float) -> None:
        """Arm the next EndTxn failpoint on every broker; once a broker crashed on it (its
        file is renamed ``.fired``), or it did not fire within ``ARM_WAIT_S``, disarm and
        arm the next one ``SETTLE_S`` later, cycling through the points ``ROUNDS`` times."""
        run = self.cluster.data / "run"
        n = self.cluster.n
        if self.armed is not None:
            point, since = self.armed
            fired = [b for b in range(n) if (run / f"failpoints-{b}.fired").exists()]
            if not fired and elapsed - since < ARM_WAIT_S:
                return
            # the crash came right after the rename to .fired: its ctime (rename changes it)
            when = min((run / f"failpoints-{b}.fired").stat().st_ctime for b in fired) if fired else 0.0
            for b in range(n):
                failpoints.disarm(run, b)
                (run / f"failpoints-{b}.fired").unlink(missing_ok=True)
            if fired:
                self.log(f"broker {fired} crashed at {point}", when)
            else:
                self.log(f"{point} did not fire in {ARM_WAIT_S} s")
            self.armed = None
            self.step += 1
            self.next_at = elapsed + SETTLE_S
            return
        if self.step >= ROUNDS * len(ENDTXN_POINTS):
            return
        point = ENDTXN_POINTS[self.step % len(ENDTXN_POINTS)]
        for b in range(n):
            failpoints.arm(run, b, {point: {"action": "crash", "count": 1}})
        self.log(f"armed {point} (crash) on every broker")
        self.armed = (point, elapsed)

    def __call__(self, elapsed: float, commits: int = 1) -> None:
        if self.started_at is None:
            # Faults start once the copiers are in their stride (a first transaction
            # committed): a fault during their start-up would measure nothing.
            if commits == 0:
                return
            self.started_at = elapsed
            self.next_at = elapsed + FIRST_FAULT_S
        if self.scenario == "disk-full":
            if elapsed >= self.next_at and self.step == 0:
                self.step = 1
                threading.Thread(target=self._disk_full_rounds, name="disk-full", daemon=True).start()
            return
        if self.paused is not None and elapsed >= self.paused[1]:
            bid = self.paused[0]
            try:
                self.cluster.signal(bid, signal.SIGCONT)
            except OSError:
                pass
            self.log(f"SIGCONT broker {bid}")
            self.paused = None
        if elapsed < self.next_at:
            return
        s = self.scenario
        if s == "endtxn-failpoints":
            self._endtxn_step(elapsed)
        elif s == "random-kills":
            if self.step < 4:
                self._kill(self.rnd.randrange(self.cluster.n))
                self.step += 1
                self.next_at = elapsed + self.rnd.uniform(3.0, 6.0)
        elif s == "pause-coordinator":
            if self.step < 1:
                try:
                    bid = txn_coordinator_of(self.cluster.data, self.transactional_id)
                except (OSError, ValueError, KeyError):
                    bid = self.rnd.randrange(self.cluster.n)
                self.cluster.signal(bid, signal.SIGSTOP)
                self.log(f"SIGSTOP broker {bid} (coordinator of {self.transactional_id}) for 6 s "
                         f"(session timeout 3 s)", time.time())
                self.paused = (bid, elapsed + 6.0)
                self.step += 1
                self.next_at = elapsed + 10.0
        elif s == "kill-controller":
            if self.step < 2:
                self._kill(controller_of(self.cluster.data))
                self.step += 1
                self.next_at = elapsed + 6.0
        elif s == "kill-all":
            if self.step < 1:
                for bid in range(self.cluster.n):
                    self._kill(bid)
                self.step += 1
                self.next_at = elapsed + 1000


SCENARIOS = ("endtxn-failpoints", "random-kills", "pause-coordinator", "kill-controller", "kill-all",
             "disk-full")


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
                 duration: float = 0) -> dict:
    """One scenario on a fresh cluster. ``duration``: pace the copiers so the copy takes about
    this long (the faults must land while transactions run), 0 for full speed."""
    with scratch_volume(scenario) as tmp:
        return _run_in(tmp, scenario, seed, messages, copiers, timeout, echo, duration)


def _run_in(tmp: Path, scenario: str, seed: int, messages: int, copiers: int, timeout: float, echo,
            duration: float) -> dict:
    rnd = random.Random(seed)
    # KAAS_CHAOS_BROKER_ARGS: extra `kaas broker` options, e.g. "--no-marker-rpc" for an A/B run
    cluster = ClusterProcess(tmp / "data", 3, env={"KAAS_TXN_SWEEP_MS": "1000"},
                             extra=shlex.split(os.environ.get("KAAS_CHAOS_BROKER_ARGS", ""))).start()
    run_id = uuid.uuid4().hex[:8]
    cfg = {"bootstrap": cluster.bootstrap, "messages": messages, "copiers": copiers, "commit_every": 25,
           "abort_every": 10, "rate": messages / (copiers * duration) if duration else 0, "input_partitions": 6, "output_partitions": 6, "timeout": timeout, "seed": seed,
           "input": f"chaos-in-{run_id}", "output": f"chaos-out-{run_id}", "group": f"chaos-{run_id}"}
    chaos = Chaos(scenario, cluster, rnd, echo, transactional_id=f"{cfg['group']}-copier-0")
    t0 = time.monotonic()
    try:
        result = eos_harness.run_harness(cfg, chaos=chaos, echo=echo)
    finally:
        for bid in range(cluster.n):
            failpoints.disarm(cluster.data / "run", bid)
            try:
                cluster.signal(bid, signal.SIGCONT)
            except (OSError, ValueError):
                pass
        chaos.done = True
        chaos._free()
        cluster.stop()
        if os.environ.get("KAAS_CHAOS_KEEP"):
            echo(f"data directory kept: {tmp}")
    result.update({"scenario": scenario, "faults": chaos.faults, "seconds": round(time.monotonic() - t0, 1),
                   "kills": len(chaos.fault_times),
                   "recovery_s": recovery(chaos.fault_times, result.pop("commit_times"))})
    return result


def recovery(faults: list[float], commits: list[float]) -> float | None:
    """The longest stretch without a committed transaction around any fault: from the last
    commit before it to the first commit after it (None when no fault had commits on both
    sides)."""
    worst = None
    for t in faults:
        before = [c for c in commits if c <= t]
        after = [c for c in commits if c > t]
        if before and after:
            gap = after[0] - before[-1]
            worst = gap if worst is None else max(worst, gap)
    return None if worst is None else round(worst, 2)


@click.group()
def cli() -> None:
    """Chaos scenarios over the exactly-once harness."""


@cli.command()
@click.option("--scenario", type=click.Choice([*SCENARIOS, "all"]), default="all", show_default=True)
@click.option("--seed", type=int, default=None, help="Random seed (printed; reuse it to replay).")
@click.option("--messages", type=int, default=4000, show_default=True)
@click.option("--copiers", type=int, default=2, show_default=True)
@click.option("--duration", type=float, default=40, show_default=True,
              help="Pace the copiers so each copy takes about this many seconds (0: full speed).")
@click.option("--timeout", type=float, default=150, show_default=True, help="Per scenario, seconds.")
def run(scenario: str, seed: int | None, messages: int, copiers: int, duration: float, timeout: float) -> None:
    """Run scenarios; print a summary table; exit 0 only if every guarantee held."""
    seed = seed if seed is not None else random.randrange(1 << 30)
    names = SCENARIOS if scenario == "all" else (scenario,)
    results = []
    for i, name in enumerate(names):
        s = seed + i
        click.echo(f"== scenario {name} (seed {s})")
        r = run_scenario(name, s, messages, copiers, timeout, click.echo, duration)
        results.append(r)
        if not r["ok"]:
            for line in r["violations"] + [f"fatal: {f}" for f in r["fatal"]]:
                click.echo(f"   {line}")
            click.echo(f"!! scenario {name} FAILED — replay with: scripts/chaos.py run --scenario {name} --seed {s}")
    click.echo(f"{'scenario':<20} {'seed':>11} {'msgs':>6} {'kills':>5} {'recovery s':>10} {'txn ok':>7} "
               f"{'aborted':>7} {'dups':>5} {'lost':>5} {'aborted visible':>15} {'offsets':>7} {'secs':>6}  result")
    for r in results:
        rec = "-" if r["recovery_s"] is None else f"{r['recovery_s']:.2f}"
        click.echo(f"{r['scenario']:<20} {r['seed']:>11} {r['messages']:>6} {r['kills']:>5} {rec:>10} "
                   f"{r['transactions_committed']:>7} {r['transactions_aborted']:>7} {r['duplicates']:>5} "
                   f"{r['losses']:>5} {r['aborted_visible']:>15} {str(r['offsets_match']):>7} {r['seconds']:>6}  "
                   f"{'ok' if r['ok'] else 'FAILED'}")
    for r in results:
        click.echo(json.dumps({k: v for k, v in r.items() if k not in ("committed_offsets", "input_ends")}))
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    cli()
