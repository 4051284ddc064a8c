"""The scenarios: when each fault lands, as the harness copies (``Chaos``, called about
every 0.2 s from ``eos_harness.run_harness``'s loop, or a thread of its own for the
scenarios that go by the clock). A new scenario is a name in ``SCENARIOS`` and a branch
of ``Chaos.__call__`` (a method of its own when it has more than a few lines).
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path

from kaas import failpoints
from kaas.domain import coordinators, routing
from kaas.testing import ClusterProcess

from .faults import Faults, controller_of, txn_coordinator_of
from .rolling import run_rolling

ENDTXN_POINTS = ("endtxn.after_prepare", "endtxn.after_local_markers", "endtxn.after_enqueue",
                 "endtxn.before_complete")
ROUNDS = 2  # endtxn-failpoints cycles through the points this many times
ARM_WAIT_S = 8.0  # a point not hit within this long is skipped
SETTLE_S = 2.0  # after a crash, before arming the next point
FIRST_FAULT_S = 2.0  # after the first committed transaction, before the first fault
DISK_FULL_ROUNDS = 3  # disk-full: how often the volume is filled and freed
# disk-full: how long the volume stays full
DISK_FULL_HOLD_S = float(os.environ.get("KAAS_CHAOS_DISK_FULL_HOLD_S", "4"))
DISK_FULL_GAP_S = 6.0  # disk-full: how long it has room between two full spells
DISK_FULL_SIZE = "256m"  # disk-full: the tmpfs holding the cluster's data directory
CONT_SECONDS = 60.0  # continuous: how long the faults go on
CONT_KILL_EVERY_S = 4.0  # continuous: a broker SIGKILLed this often, in rotation
CONT_COPIER_KILL_AT_S = 18.0  # continuous: a copier SIGKILLed this far into the faults...
CONT_COPIER_DOWN_S = 2.0  # ...and restarted this much later
CONT_STOP_AT_S = 37.0  # continuous: a copier's transaction coordinator SIGSTOPped then...
CONT_STOP_FOR_S = 6.0  # ...for this long
CONT_MESSAGES = 15000  # continuous (and its baseline): default size
CONT_DURATION_S = 75.0  # continuous: the copy is paced to take this long without faults
CONT_TIMEOUT_S = 300.0  # continuous: copy timeout
CHURN_SECONDS = 60.0  # consumer-churn: how long brokers are killed
CHURN_KILL_EVERY_S = float(os.environ.get("KAAS_CHAOS_KILL_EVERY_S", "4"))  # ... one this often, in rotation
CHURN_COPIER_KILL_AT_S = 10.0  # consumer-churn: a copier SIGKILLed this far into the faults...
CHURN_COPIER_DOWN_S = 2.0  # ...and restarted (a new member of the group) this much later
# consumer-churn: KAAS_CHAOS_STOP_GROUP_COORDINATOR_S > 0 also SIGSTOPs the group
# coordinator's broker for that long, 20 s into the faults (no broker is killed meanwhile)
CHURN_STOP_S = float(os.environ.get("KAAS_CHAOS_STOP_GROUP_COORDINATOR_S", "0"))
CHURN_STOP_AT_S = 20.0
CHURN_MESSAGES = 20000  # consumer-churn: issue 42's copy
CHURN_SESSION_S = 45.0  # the cluster's default group.consumer.session.timeout.ms, which it runs with
# after a dead member's removal its partitions wait for a survivor's next heartbeat (the
# default 5 s interval) and its first transaction on them (a fetch and a commit, under faults)
CHURN_TAKEOVER_S = 10.0
UPGRADE_GAP_S = 8.0  # rolling-upgrade: between one copier's restart and the next one's stop
UPGRADE_TO = "consumer"  # rolling-upgrade: the group.protocol the copiers are restarted with


class Chaos(Faults):
    """Calls faults into a running cluster on a schedule; every fault is logged."""

    def __init__(self, scenario: str, cluster: ClusterProcess, rnd: random.Random, echo,
                 transactional_id: str = "", group: str = "") -> None:
        super().__init__(cluster, echo)
        self.group = group  # the copiers' group: consumer-churn's SIGSTOP finds its coordinator
        self.scenario = scenario
        self.rnd = rnd
        self.next_at = 0.0
        self.started_at: float | None = None
        self.transactional_id = transactional_id  # a copier's: pause-coordinator stops its coordinator
        self.step = 0
        self.paused: tuple[int, float] | None = None
        self.armed: tuple[str, float] | None = None  # (failpoint, when armed)
        self.copiers = None  # eos_harness.CopierPool, set by run_harness
        self.figures: dict = {}  # a scenario's own figures, for the report (rolling-restart)

    def _continuous(self) -> None:
        """The continuous scenario's faults, by the clock: a broker SIGKILLed every
        ``CONT_KILL_EVERY_S`` in rotation (skipping a stopped one) for ``CONT_SECONDS``; one
        copier SIGKILLed and restarted; a copier's transaction coordinator SIGSTOPped for
        ``CONT_STOP_FOR_S`` once. A thread of its own: the harness's loop may block for
        seconds on a moving coordinator."""
        f0 = time.monotonic()
        plan: list[tuple[float, str, int]] = [(k * CONT_KILL_EVERY_S, "kill", k)
                                              for k in range(int(CONT_SECONDS / CONT_KILL_EVERY_S))]
        plan += [(CONT_COPIER_KILL_AT_S, "copier-kill", 0), (CONT_COPIER_KILL_AT_S + CONT_COPIER_DOWN_S,
                                                              "copier-restart", 0),
                 (CONT_STOP_AT_S, "stop", 0), (CONT_STOP_AT_S + CONT_STOP_FOR_S, "cont", 0)]
        plan.sort()
        stopped: int | None = None
        victim = max(0, (self.copiers.cfg.copiers if self.copiers else 1) - 1)  # the last copier
        for at, what, k in plan:
            while not self.done and time.monotonic() - f0 < at:
                time.sleep(min(0.02, at - (time.monotonic() - f0)))
            if self.done:
                return
            if what == "kill":
                bid = k % self.cluster.n
                if bid == stopped:
                    bid = (bid + 1) % self.cluster.n
                self.kill_broker(bid)
            elif what == "copier-kill" and self.copiers is not None:
                pid = self.copiers.kill(victim)
                self.log(f"SIGKILL copier {victim} (pid {pid})", time.time(), "copier-kill")
            elif what == "copier-restart" and self.copiers is not None:
                self.copiers.restart(victim)
                self.log(f"copier {victim} restarted (same transactional id)", kind="copier-restart")
            elif what == "stop":
                try:
                    bid = txn_coordinator_of(self.cluster.data, self.transactional_id)
                except (OSError, ValueError, KeyError):
                    bid = self.rnd.randrange(self.cluster.n)
                self.cluster.signal(bid, signal.SIGSTOP)
                stopped = bid
                self.log(f"SIGSTOP broker {bid} (coordinator of {self.transactional_id}) for "
                         f"{CONT_STOP_FOR_S:.0f} s", time.time(), "stop")
            elif what == "cont" and stopped is not None:
                try:
                    self.cluster.signal(stopped, signal.SIGCONT)
                except (OSError, ValueError):
                    pass
                self.log(f"SIGCONT broker {stopped}", kind="cont")
                stopped = None
        self.log("continuous: faults over")

    def _consumer_churn(self) -> None:
        """consumer-churn's faults, by the clock (issue 42): a broker SIGKILLed every
        ``CHURN_KILL_EVERY_S`` in rotation for ``CHURN_SECONDS``; the last copier SIGKILLed
        and restarted; optionally the group coordinator's broker SIGSTOPped for
        ``CHURN_STOP_S``. The cluster runs its default session (45 s) and heartbeat."""
        f0 = time.monotonic()
        plan: list[tuple[float, str, int]] = [(k * CHURN_KILL_EVERY_S, "kill", k)
                                              for k in range(int(CHURN_SECONDS / CHURN_KILL_EVERY_S))]
        plan += [(CHURN_COPIER_KILL_AT_S, "copier-kill", 0),
                 (CHURN_COPIER_KILL_AT_S + CHURN_COPIER_DOWN_S, "copier-restart", 0)]
        if CHURN_STOP_S > 0:
            plan = [p for p in plan if not (p[1] == "kill" and CHURN_STOP_AT_S - 1 <= p[0] <= CHURN_STOP_AT_S
                                            + CHURN_STOP_S)]
            plan += [(CHURN_STOP_AT_S, "stop", 0), (CHURN_STOP_AT_S + CHURN_STOP_S, "cont", 0)]
        plan.sort()
        victim = max(0, (self.copiers.cfg.copiers if self.copiers else 1) - 1)
        stopped: int | None = None
        for at, what, k in plan:
            while not self.done and time.monotonic() - f0 < at:
                time.sleep(min(0.02, at - (time.monotonic() - f0)))
            if self.done:
                return
            if what == "kill":
                self.kill_broker(k % self.cluster.n)
            elif what == "copier-kill" and self.copiers is not None:
                pid = self.copiers.kill(victim)
                self.log(f"SIGKILL copier {victim} (pid {pid})", time.time(), "copier-kill")
            elif what == "copier-restart" and self.copiers is not None:
                self.copiers.restart(victim)
                self.log(f"copier {victim} restarted (a new member of the group)", kind="copier-restart")
            elif what == "stop":
                bid = group_coordinator_of(self.cluster.n, self.group, self.cluster.data)
                self.cluster.signal(bid, signal.SIGSTOP)
                stopped = bid
                self.log(f"SIGSTOP broker {bid} (coordinator of group {self.group}) for {CHURN_STOP_S:.0f} s",
                         time.time(), "stop")
            elif what == "cont" and stopped is not None:
                try:
                    self.cluster.signal(stopped, signal.SIGCONT)
                except (OSError, ValueError):
                    pass
                self.log(f"SIGCONT broker {stopped}", kind="cont")
                stopped = None
        self.log("consumer-churn: faults over")

    def _rolling_upgrade(self) -> None:
        """Restart the copiers one by one with ``group.protocol=consumer``, as an operator
        rolls a new version out: stop one (its transaction ended, its consumer closed: it
        leaves the classic group), start it again on the consumer protocol, let it settle
        for ``UPGRADE_GAP_S``, then the next. The group converts online, one member at a time.
        A thread of its own (a stop waits for the copier's transaction). Each upgraded copier
        must commit while the group is still mixed (``mixed_phase_commits``)."""
        n = self.copiers.cfg.copiers if self.copiers else 0
        for idx in range(n):
            if self.done:
                return
            at = time.time()
            graceful = self.copiers.stop(idx)
            self.log(f"copier {idx} stopped ({'gracefully' if graceful else 'SIGKILLed after the stop timeout'})",
                     at, "copier-stop")
            self.copiers.restart(idx, UPGRADE_TO)
            self.log(f"copier {idx} restarted with group.protocol={UPGRADE_TO}", kind="copier-restart")
            deadline = time.monotonic() + UPGRADE_GAP_S
            while not self.done and time.monotonic() < deadline:
                time.sleep(0.05)
        self.log("rolling-upgrade: every copier on the consumer protocol")

    def _disk_full_rounds(self) -> None:
        """Fill the volume, hold it full, free it; ``DISK_FULL_ROUNDS`` times, in a thread of
        its own so the full spells last exactly as long as said, whatever the harness's
        main loop (which calls the chaos) is blocked on meanwhile."""
        for i in range(DISK_FULL_ROUNDS):
            if self.done:
                return
            written = self.fill_volume(i)
            self.log(f"volume full ({written >> 20} MiB filler) for {DISK_FULL_HOLD_S:.0f} s", time.time(), "disk")
            time.sleep(DISK_FULL_HOLD_S)
            self.free_volume()
            self.log("volume freed", kind="disk")
            time.sleep(DISK_FULL_GAP_S)

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
                self.log(f"broker {fired} crashed at {point}", when, "kill")
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
        if self.scenario == "continuous":
            if elapsed >= self.next_at and self.step == 0:
                self.step = 1
                threading.Thread(target=self._continuous, name="continuous", daemon=True).start()
            return
        if self.scenario == "consumer-churn":
            if elapsed >= self.next_at and self.step == 0:
                self.step = 1
                threading.Thread(target=self._consumer_churn, name="consumer-churn", daemon=True).start()
            return
        if self.scenario == "rolling-restart":
            if elapsed >= self.next_at and self.step == 0:
                self.step = 1
                threading.Thread(target=run_rolling, args=(self,), name="rolling-restart", daemon=True).start()
            return
        if self.scenario == "rolling-upgrade":
            if elapsed >= self.next_at and self.step == 0:
                self.step = 1
                threading.Thread(target=self._rolling_upgrade, name="rolling-upgrade", daemon=True).start()
            return
        if self.scenario == "none":
            return
        if self.paused is not None and elapsed >= self.paused[1]:
            bid = self.paused[0]
            try:
                self.cluster.signal(bid, signal.SIGCONT)
            except OSError:
                pass
            self.log(f"SIGCONT broker {bid}", kind="cont")
            self.paused = None
        if elapsed < self.next_at:
            return
        s = self.scenario
        if s == "endtxn-failpoints":
            self._endtxn_step(elapsed)
        elif s == "random-kills":
            if self.step < 4:
                self.kill_broker(self.rnd.randrange(self.cluster.n))
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
                         f"(session timeout 3 s)", time.time(), "stop")
                self.paused = (bid, elapsed + 6.0)
                self.step += 1
                self.next_at = elapsed + 10.0
        elif s == "kill-controller":
            if self.step < 2:
                self.kill_broker(controller_of(self.cluster.data))
                self.step += 1
                self.next_at = elapsed + 6.0
        elif s == "kill-all":
            if self.step < 1:
                for bid in range(self.cluster.n):
                    self.kill_broker(bid)
                self.step += 1
                self.next_at = elapsed + 1000


SCENARIOS = ("endtxn-failpoints", "random-kills", "pause-coordinator", "kill-controller", "kill-all",
             "disk-full", "continuous", "rolling-restart")
# Run by name only, not by ``all``: the copiers change group protocol during the run.
EXTRA_SCENARIOS = ("rolling-upgrade", "consumer-churn")


def group_coordinator_of(n: int, group: str, data: Path | None = None) -> int:
    """The broker coordinating ``group`` in an ``n``-broker cluster with every broker up
    (``kaas.domain.routing``), over the brokers the assignment in ``data`` lists as group
    coordinators (a broker back from the dead within its hold is not; ``docs/groups.rst``)."""
    listed = None
    if data is not None:
        try:
            listed = json.loads((data / "__cluster" / "assignment.json").read_text()).get("coordinators")
        except (OSError, ValueError):
            listed = None
    return routing.coordinator_for(group, range(n), coordinators.candidates(range(n), listed)) or 0

