"""One multi-host scenario: three brokers on three simulated hosts (``net``), the EOS copy
and a probe producer in the client namespace, the fault on a timeline of its own, then the
verdicts and figures."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import eos_harness
from chaos.rolling import Probe
from eos_harness import HarnessConfig

from kaas.testing import api_versions_ok, wait_for

from . import net

REPO = Path(__file__).resolve().parents[2]
BROKERS = 3
SESSION_MS = 3000  # the brokers' default: the lease is half of it
FAULT_AT_S = 3.0  # after the first committed transaction
HOLD_S = {"a-brokers-apart": 20.0, "bc-storage-cut-and-heal": 9.0, "d-clients-cut-off": 8.0}
SCENARIOS = tuple(HOLD_S)
REJOIN_TIMEOUT_S = 30.0
GAP_TAIL_S = 10.0  # the produce gaps are measured from the fault until this long after its heal


class Cluster:
    """``kaas broker`` i in host namespace i, its data directory host i's bindfs view."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.shared = root / "shared"
        self.shared.mkdir()
        self.storage = [net.Storage(self.shared, root / f"mnt-h{i}") for i in range(BROKERS)]
        self.procs: list[subprocess.Popen | None] = [None] * BROKERS
        self.bootstrap = ",".join(f"{net.host_ip(i)}:{net.KAFKA_PORT}" for i in range(BROKERS))

    def start(self) -> None:
        for i, st in enumerate(self.storage):
            st.start()
            log = open(self.root / f"broker-{i}.log", "ab")  # noqa: SIM115 - the child has it
            self.procs[i] = subprocess.Popen(
                ["ip", "netns", "exec", net.host_ns(i), sys.executable, "-m", "kaas.cli", "broker", "--id", str(i),
                 "--data", str(st.mount), "--listen", f"{net.host_ip(i)}:{net.KAFKA_PORT}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)})
            log.close()
        for i in range(BROKERS):
            wait_for(lambda i=i: api_versions_ok(net.host_ip(i), net.KAFKA_PORT), 30, f"broker {i} listening")

    def stop(self) -> None:
        for p in self.procs:
            if p is not None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        for st in self.storage:
            st.stop()

    def log(self, i: int) -> str:
        return (self.root / f"broker-{i}.log").read_text(errors="replace")

    def leaders(self) -> dict[tuple[str, int], tuple[int, int]]:
        """{(topic, partition): (leader, epoch)} of ``assignment.json`` (read on the shared
        directory itself, not through a host's view)."""
        try:
            a = json.loads((self.shared / "__cluster" / "assignment.json").read_text())
        except (OSError, ValueError):
            return {}
        return {(t, p): (row["leader"], row["epoch"]) for t, rows in a["partitions"].items()
                for p, row in enumerate(rows)}

    def controller(self) -> int:
        cdir = self.shared / "__cluster" / "controller"
        n = max(int(p.name[6:]) for p in cdir.glob("epoch-*"))
        return int(json.loads((cdir / f"epoch-{n}").read_text())["broker_id"])


class Fault:
    """The scenario's fault, started about ``FAULT_AT_S`` after the first commit (the
    harness calls it every 0.2 s) and run by the clock in a thread of its own."""

    def __init__(self, scenario: str, cluster: Cluster, echo) -> None:
        self.scenario, self.cluster, self.echo = scenario, cluster, echo
        self.figures: dict = {"scenario": scenario}
        self.commits = 0
        self.started: float | None = None
        self.window: tuple[float, float] | None = None  # monotonic: the fault's start and heal
        self.thread: threading.Thread | None = None
        self.healers: list = []

    def __call__(self, elapsed: float, commits: int = 1) -> None:
        self.commits = commits
        if commits and self.started is None:
            self.started = elapsed
        if self.started is not None and self.thread is None and elapsed - self.started >= FAULT_AT_S:
            self.thread = threading.Thread(target=self._run, name="fault", daemon=True)
            self.thread.start()

    def say(self, what: str) -> None:
        self.echo(f"  fault: {what}", err=True)

    def heal_all(self) -> None:
        for h in self.healers:
            h()
        self.healers.clear()

    def _run(self) -> None:
        try:
            getattr(self, "_" + self.scenario.split("-", 1)[0])()
        except Exception as exc:  # reported in the verdict, never a hung harness
            self.figures["error"] = f"{type(exc).__name__}: {exc}"
            self.say(self.figures["error"])
            self.heal_all()

    def _hold(self, what: str) -> None:
        t0 = time.monotonic()
        c0 = self.commits
        time.sleep(HOLD_S[self.scenario])
        self.heal_all()
        self.window = (t0, time.monotonic())
        self.figures["commits_during"] = self.commits - c0
        self.say(f"{what} healed after {HOLD_S[self.scenario]:.0f} s; "
                 f"{self.figures['commits_during']} transactions committed meanwhile")

    def _a(self) -> None:
        """(a) Brokers cannot reach one another; all reach storage, clients reach all."""
        ips = [net.host_ip(i) for i in range(BROKERS)]
        for i in range(BROKERS):
            net.drop(net.host_ns(i), [ip for ip in ips if ip != net.host_ip(i)])
            self.healers.append(lambda i=i: net.heal(net.host_ns(i)))
        self.say("brokers cut off from one another (storage and clients untouched)")
        self._hold("broker network")
        self.figures["progress_during_cut"] = self.figures["commits_during"] > 0

    def _bc(self) -> None:
        """(b) One host (the controller's) cut off from storage: frozen, as a hard NFS mount
        whose server is unreachable. (c) The cut heals: it fenced itself, and rejoins."""
        c = self.cluster
        victim = c.controller()
        before = c.leaders()
        led = {k for k, (leader, _e) in before.items() if leader == victim}
        st = c.storage[victim]
        t0 = time.monotonic()
        st.freeze()
        self.healers.append(st.thaw)
        self.say(f"host {victim} (controller, leading {len(led)} partitions) frozen off storage")
        moved = None
        while time.monotonic() - t0 < HOLD_S[self.scenario]:
            now = c.leaders()
            if moved is None and all(now.get(k, (victim, 0))[0] != victim for k in led):
                moved = round(time.monotonic() - t0, 3)
                self.say(f"its partitions led elsewhere after {moved} s (session timeout {SESSION_MS / 1000:.0f} s)")
            time.sleep(0.05)
        self.figures.update({"victim": victim, "partitions_of_victim": len(led), "takeover_s": moved,
                             "moved_within_lease": moved is not None and moved <= 2 * SESSION_MS / 1000})
        self._hold_rest(t0)
        t1 = time.monotonic()
        back = None
        while time.monotonic() - t1 < REJOIN_TIMEOUT_S:
            now = c.leaders()
            mine = {k: e for k, (leader, e) in now.items() if leader == victim}
            if mine and all(e > before.get(k, (0, -1))[1] for k, e in mine.items()):
                back = round(time.monotonic() - t1, 3)
                break
            time.sleep(0.1)
        log = c.log(victim)
        self.figures.update({"rejoined_s": back, "rejoined_at_higher_epoch": back is not None,
                             "fenced_itself": "lease_lapsed" in log or "heartbeat_write_failed" in log})
        self.say(f"host {victim} leads again at higher epochs {back} s after the heal; "
                 f"fenced itself: {self.figures['fenced_itself']}")

    def _hold_rest(self, t0: float) -> None:
        self.heal_all()
        self.window = (t0, time.monotonic())
        self.say(f"storage healed after {self.window[1] - t0:.1f} s")

    def _d(self) -> None:
        """(d) Clients cut off from one host (not the controller's)."""
        victim = (self.cluster.controller() + 1) % BROKERS
        net.drop(net.CLIENT, [net.host_ip(victim)])
        self.healers.append(lambda: net.heal(net.CLIENT))
        self.figures["victim"] = victim
        self.say(f"clients cut off from host {victim}")
        self._hold("client network")


def run_scenario(scenario: str, seed: int, messages: int, copiers: int, duration: float, echo) -> dict:
    root = Path(tempfile.mkdtemp(prefix="kaas-multihost-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    cluster = Cluster(root)
    fault = Fault(scenario, cluster, echo)
    probe: Probe | None = None
    try:
        cluster.start()
        probe = Probe({"bootstrap.servers": cluster.bootstrap})
        probe.start()
        cfg = HarnessConfig.new_run(cluster.bootstrap, seed, prefix="mh", group_prefix="mh", messages=messages,
                                    copiers=copiers, commit_every=25, abort_every=10,
                                    rate=messages / (copiers * duration), input_partitions=6, output_partitions=6,
                                    timeout=240)
        result = eos_harness.run_harness(cfg, chaos=fault, echo=echo)
        if fault.thread is not None:
            fault.thread.join(REJOIN_TIMEOUT_S + 30)
    finally:
        fault.heal_all()
        if probe is not None:
            probe.stop.set()
            probe.thread.join(90)
        cluster.stop()
        if not os.environ.get("KAAS_MULTIHOST_KEEP"):
            shutil.rmtree(root, ignore_errors=True)
        else:
            echo(f"kept: {root}")
    figures = fault.figures
    if fault.window is not None and probe is not None:
        t0, healed = fault.window
        figures["produce_gap_any_s"], figures["produce_gap_partition_s"] = probe.gaps(t0, healed + GAP_TAIL_S)
        figures["probe_errors"] = len(probe.errors)
    checks = {"0 anomalies (EOS verdict)": bool(result["ok"]), "fault ran": fault.window is not None,
              "no error": "error" not in figures}
    if scenario.startswith("a"):
        checks["progress during the cut"] = bool(figures.get("progress_during_cut"))
    if scenario.startswith("bc"):
        checks["(b) partitions moved within 2x the session timeout"] = bool(figures.get("moved_within_lease"))
        checks["(b) the cut-off broker fenced itself"] = bool(figures.get("fenced_itself"))
        checks["(c) it rejoined at higher epochs"] = bool(figures.get("rejoined_at_higher_epoch"))
    figures.update({"checks": checks, "ok": all(checks.values()), "violations": result["violations"],
                    "transactions_committed": result["transactions_committed"],
                    "duplicates": result["duplicates"], "losses": result["losses"],
                    "aborted_visible": result["aborted_visible"]})
    return figures
