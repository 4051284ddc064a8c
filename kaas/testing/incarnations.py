"""Which process is a test cluster's broker now: its incarnation, as its supervisor sees it.

A broker of ``kaas cluster`` is a child process of the supervisor; each time the broker
dies the supervisor reaps it, waits ``restart_delay`` and starts a new child (a new
incarnation), whose pid it writes to ``DATA/run/kaas-<id>.pid``. Between the death and the
new start the pid file still names the dead process, and that pid may even be reused by an
unrelated process; a fault sent on the strength of the pid file alone then fails
(``ProcessLookupError``) or hits the wrong process.

So an ``Incarnation`` is a process identified by its pid *and* its start time, and it is
the broker's current one only while it is alive, not a zombie, and a child of the
supervisor (``current``). ``send`` signals exactly that process, never a successor or a
stranger with the same pid. Without ``/proc`` (not Linux) the start time and parent cannot
be read: the pid file's process is taken as the broker while it answers signal 0.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class Incarnation:
    """One process of broker ``broker_id``: ``pid`` and its start time (clock ticks since
    boot, ``/proc/<pid>/stat`` field 22; 0 where there is no ``/proc``)."""

    broker_id: int
    pid: int
    started: int

    def __str__(self) -> str:
        return f"broker {self.broker_id} pid {self.pid}"


@dataclass(frozen=True, slots=True)
class _Stat:
    state: str
    ppid: int
    started: int


def _stat(pid: int) -> _Stat | None:
    """``/proc/<pid>/stat``'s state, parent and start time; None: no such process."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # after "pid (comm) ": comm may hold spaces
    return _Stat(fields[0], int(fields[1]), int(fields[19]))


def _pid_of(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None  # not written yet, or being replaced (the supervisor renames a whole file)


def current(pid_file: Path, broker_id: int, supervisor_pid: int | None) -> Incarnation | None:
    """The broker's running incarnation (paused counts as running), or None between
    incarnations: the pid file's process when it is alive, not a zombie, and a child of
    ``supervisor_pid`` (None: any parent)."""
    pid = _pid_of(pid_file)
    if pid is None:
        return None
    if not PROC.is_dir():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return Incarnation(broker_id, pid, 0)
    st = _stat(pid)
    if st is None or st.state in ("Z", "X", "x"):
        return None
    if supervisor_pid is not None and st.ppid != supervisor_pid:
        return None  # a stranger that got the dead broker's pid
    return Incarnation(broker_id, pid, st.started)


def alive(inc: Incarnation) -> bool:
    """``inc``'s process still runs (or is stopped): the same pid and start time, no zombie."""
    if not PROC.is_dir():
        try:
            os.kill(inc.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    st = _stat(inc.pid)
    return st is not None and st.started == inc.started and st.state not in ("Z", "X", "x")


def send(inc: Incarnation, sig: int) -> bool:
    """Send ``sig`` to ``inc``'s process if it is still alive. Returns whether it was sent
    (False: the process is gone; nothing was signalled)."""
    if not alive(inc):
        return False
    try:
        os.kill(inc.pid, sig)
    except ProcessLookupError:
        return False
    return True


def wait_next(pid_file: Path, broker_id: int, supervisor_pid: int | None, not_: set[Incarnation],
              deadline: float) -> Incarnation:
    """Wait until the broker runs an incarnation other than those in ``not_``; return it.

    Raises:
        TimeoutError: none by ``deadline`` (``time.monotonic()``).
    """
    pause = 0.002  # growing to 50 ms (procs.Backoff's pattern; procs imports this module)
    while True:
        inc = current(pid_file, broker_id, supervisor_pid)
        if inc is not None and inc not in not_:
            return inc
        left = deadline - time.monotonic()
        if left < 0:
            raise TimeoutError(f"broker {broker_id} did not start a new process in time")
        time.sleep(min(pause, left))
        pause = min(pause * 1.5, 0.05)


__all__ = ["Incarnation", "alive", "current", "send", "wait_next"]
