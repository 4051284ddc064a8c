"""The faults a scenario is made of, on a running ``kaas.testing.ClusterProcess``, and the
record of every one (for the report and the timeline): SIGKILL a broker, fill and free the
data volume, watch the supervisor restart brokers; and where the controller and a
transaction coordinator are, read from the cluster's files.
"""

from __future__ import annotations

import errno
import json
import threading
import time
from pathlib import Path

import timeline

from kaas.domain.routing import txn_slot
from kaas.testing import ClusterProcess


def controller_of(data: Path) -> int:
    """The broker that holds the controller's latest epoch (``__cluster/controller/epoch-N``)."""
    cdir = data / "__cluster" / "controller"
    n = max(int(p.name[6:]) for p in cdir.glob("epoch-*"))
    return int(json.loads((cdir / f"epoch-{n}").read_text())["broker_id"])


def txn_coordinator_of(data: Path, transactional_id: str) -> int:
    """The broker that owns the transaction slot of ``transactional_id`` (assignment.json)."""
    a = json.loads((data / "__cluster" / "assignment.json").read_text())
    return int(a["txn_slots"][str(txn_slot(transactional_id))])


class Faults:
    """A cluster to hurt and the log of what was done to it; every fault is logged."""

    def __init__(self, cluster: ClusterProcess, echo) -> None:
        self.cluster = cluster
        self.echo = echo
        self.faults: list[str] = []
        self.fault_times: list[float] = []
        self.events: list[timeline.Fault] = []  # every fault and restart, for the timeline
        self.done = False  # the harness finished: no new faults

    def log(self, what: str, at: float | None = None, kind: str | None = None) -> None:
        """Record a chaos action; ``at`` (wall clock) marks it as a fault whose recovery is
        measured (kills, crashes, stops); ``kind`` (a key of ``timeline.KINDS``) marks it on
        the timeline."""
        self.faults.append(what)
        if at is not None:
            self.fault_times.append(at)
        if kind is not None:
            self.events.append(timeline.Fault(at if at is not None else time.time(), kind, what))
        self.echo(f"  chaos: {what}", err=True)

    def watch_restarts(self) -> None:
        """A thread marking every broker restart (its pid file names a new process) until
        ``done``."""
        def pid(b: int) -> int | None:
            try:
                return self.cluster.pid(b)
            except (OSError, ValueError):
                return None

        def run() -> None:
            known = {b: pid(b) for b in range(self.cluster.n)}
            while not self.done:
                for b in range(self.cluster.n):
                    now = pid(b)
                    if now is not None and now != known[b]:
                        known[b] = now
                        self.log(f"broker {b} restarted (pid {now})", kind="restart")
                time.sleep(0.05)

        threading.Thread(target=run, name="restart-watch", daemon=True).start()

    def fill_volume(self, round_no: int) -> int:
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

    def free_volume(self) -> None:
        for f in self.cluster.data.parent.glob("filler-*"):
            f.unlink()

    def kill_broker(self, bid: int) -> None:
        try:
            self.cluster.kill(bid)
            self.log(f"SIGKILL broker {bid}", time.time(), "kill")
        except (OSError, ValueError) as exc:
            self.log(f"could not kill broker {bid}: {exc}")

