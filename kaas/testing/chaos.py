"""Faults in the background while a test runs: a schedule of SIGKILLs and SIGSTOP pauses on
a ``Cluster``'s brokers, with a record of what was done (the pytest ``chaos`` fixture).

::

    with Chaos(c).start(every=1.0, actions=("kill", "pause"), seed=7):
        run_the_app()
    # or an explicit plan: at 0.5 s pause the leader of out/0 for 2 s, at 3 s kill broker 1
    chaos.start(plan=[(0.5, "pause", lambda c: c.leader_of("out", 0), 2.0), (3.0, "kill", 1)])

One fault at a time: a pause is held for its length and resumed before the next fault;
a killed broker is restarted by the supervisor after the cluster's ``restart_delay``.
``stop`` ends the schedule, resumes what is paused and returns the events; ``report()``
is the record as text.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from kaas.testing.clusters import Broker, Cluster

Target = Union["Broker", int, Callable[["Cluster"], Any]]
"""Whom a fault hits: a broker, its id, or a function of the cluster returning one (or a
list to pick from): ``lambda c: c.leader_of("out", 0)``."""
ACTIONS = ("kill", "pause")


@dataclass(frozen=True)
class Event:
    """One fault: ``at`` seconds after ``start``, ``action`` on broker ``broker`` (process
    ``pid``), held ``hold`` seconds (a pause), or why it could not be done (``error``)."""

    at: float
    action: str
    broker: int | None
    pid: int | None = None
    hold: float = 0.0
    error: str | None = None

    def __str__(self) -> str:
        what = f"{self.at:7.2f}s  {self.action:<5} broker {self.broker}"
        if self.pid is not None:
            what += f" (pid {self.pid})"
        if self.hold:
            what += f" for {self.hold:.2f}s"
        return what + (f"  FAILED: {self.error}" if self.error else "")


class Chaos:
    """A fault schedule over ``cluster`` run by a background thread (see the module docstring)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.events: list[Event] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._t0 = 0.0
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, *, every: float = 1.0, actions: Sequence[str] = ACTIONS, hold: float = 1.0,
              targets: Target | Sequence[Target] | None = None, seed: int | None = None,
              max_faults: int | None = None, plan: Iterable[tuple[Any, ...]] | None = None) -> Chaos:
        """Start the schedule: every ``every`` s one of ``actions`` (``kill``, ``pause``) on
        one of ``targets`` (default: any broker), chosen by ``random.Random(seed)``, a pause
        held ``hold`` s, at most ``max_faults`` faults; or, given ``plan``, exactly its
        faults: tuples ``(at_s, action, target[, hold_s])``."""
        if self.running:
            raise RuntimeError("chaos is already running")
        for a in actions:
            if a not in ACTIONS:
                raise ValueError(f"unknown chaos action {a!r}; one of {', '.join(ACTIONS)}")
        steps = None if plan is None else sorted((tuple(p) for p in plan), key=lambda p: float(p[0]))
        self._stop.clear()
        self._t0 = time.monotonic()
        rng = random.Random(seed)
        self._thread = threading.Thread(target=self._run, name="kaas-chaos", daemon=True,
                                        args=(every, list(actions), hold, targets, rng, max_faults, steps))
        self._thread.start()
        return self

    def _run(self, every: float, actions: list[str], hold: float, targets: Any, rng: random.Random,
             max_faults: int | None, steps: list[tuple[Any, ...]] | None) -> None:
        done = 0
        while not self._stop.is_set():
            if steps is not None:
                if done >= len(steps):
                    return
                step = steps[done]
                at, action, target = float(step[0]), str(step[1]), step[2]
                length = float(step[3]) if len(step) > 3 else hold
                if self._stop.wait(max(0.0, self._t0 + at - time.monotonic())):
                    return
            else:
                if max_faults is not None and done >= max_faults:
                    return
                if self._stop.wait(every):
                    return
                action, target, length = rng.choice(actions), targets, hold
            self._fault(action, target, length, rng)
            done += 1

    def _pick(self, target: Any, rng: random.Random) -> Broker:
        if target is None:
            return rng.choice(self.cluster.brokers)
        if callable(target) and not isinstance(target, int):
            target = target(self.cluster)
        if isinstance(target, list | tuple):
            target = rng.choice([self._pick(t, rng) for t in target])
        return self.cluster.broker(target)

    def _fault(self, action: str, target: Any, hold: float, rng: random.Random) -> None:
        at = time.monotonic() - self._t0
        b = None
        try:
            b = self._pick(target, rng)
            if action == "kill":
                self._record(Event(at, "kill", b.id, b.kill()))
                return
            if action != "pause":
                raise ValueError(f"unknown chaos action {action!r}")
            pid = b.pause()
            try:
                self._stop.wait(hold)
            finally:
                b.resume()
            self._record(Event(at, "pause", b.id, pid, hold=round(time.monotonic() - self._t0 - at, 2)))
        except Exception as exc:  # noqa: BLE001 - recorded: e.g. no process to pause within its timeout
            self._record(Event(at, action, None if b is None else b.id, error=str(exc) or type(exc).__name__))

    def _record(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def stop(self, timeout: float = 30.0) -> list[Event]:
        """End the schedule (a pause in progress is resumed), and return the events."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for b in self.cluster.brokers:
            b.resume()
        return list(self.events)

    def report(self) -> str:
        """The events, one line each."""
        with self._lock:
            events = list(self.events)
        if not events:
            return "kaas chaos: no faults"
        kinds = {a: sum(1 for e in events if e.action == a and not e.error) for a in ACTIONS}
        head = f"kaas chaos: {len(events)} faults ({', '.join(f'{n} {a}' for a, n in kinds.items())})"
        return "\n".join([head, *(str(e) for e in events)])

    def __enter__(self) -> Chaos:
        if not self.running:
            self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
