"""Spawn N broker processes, keep one pid file per broker current, restart a broker that
dies after a short delay, and stop them all gracefully on SIGTERM/SIGINT.

The supervisor owns ``DATA/run/`` (pid files and broker logs) and its brokers' death
notices (``DATA/__cluster/deaths/kaas-<id>.json``, ``kaas.storage.deaths``): when it reaps
a broker it records that the process is gone, so peers move its keys at once instead of
after the liveness timeout. Brokers coordinate through the shared volume, never through
the supervisor.

Its own I/O never stops it (issue 17): the run directory, the pid files and the brokers'
log files usually sit on the data volume, which can be full or failing. Each of those
operations goes through the failpoint ``supervisor.write`` (context: the path; armed in
``DATA/run/failpoints-supervisor.json``), and an ``OSError`` from it is reported once
(``[kaas-cluster] cannot ...``, again only when the error changes, and once more when the
operation works again) while the supervisor keeps its brokers running and restarting:

- a log file that cannot be opened: the broker starts with its output sent to /dev/null;
- a pid file that cannot be written: the stale one is removed (it names a dead process)
  and the write is retried every ``PID_RETRY_S`` until it succeeds;
- a run directory that cannot be created: the pid file retry creates it later;
- a status line that cannot be printed is dropped.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

from kaas import failpoints
from kaas.forking import Forked
from kaas.listeners import parse_endpoints, shift_ports
from kaas.storage import atomic, deaths, incarnation

POINT = "supervisor.write"
_POINTS = atomic.Points(write=POINT, fsync=POINT, rename=POINT)
PID_RETRY_S = 1.0
POLL_S = 0.05  # how soon a broker's exit is noticed (and its death notice written)


@dataclass
class Child:
    broker_id: int
    port: int
    metrics_port: int = 0
    proc: subprocess.Popen[bytes] | Forked | None = None
    died_at: float | None = None
    restarts: int = 0
    log: object = None
    argv: list[str] = field(default_factory=list)
    pid_retry_at: float | None = None  # the pid file is not current: retry at this time
    incarnation: str = ""  # drawn at each spawn, passed with --incarnation: its death notice names it


def pid_file(data: Path, broker_id: int) -> Path:
    return Path(data) / "run" / f"kaas-{broker_id}.pid"


def log_file(data: Path, broker_id: int) -> Path:
    return Path(data) / "run" / f"kaas-{broker_id}.log"


def _fault(path: Path) -> None:
    """The failpoint before one file operation of the supervisor. A ``short`` action fails
    like a write that ran out of space (for operations that write no bytes of their own).

    Raises:
        OSError: the failpoint is armed with ``error`` or ``short``.
    """
    if failpoints.io_fault(POINT, path=str(path)) is not None:
        raise failpoints.oserror("ENOSPC", f"failpoint {POINT}")


Launch = Callable[[list[str], "BinaryIO | int"], "subprocess.Popen[bytes] | Forked"]
"""Starts one broker: ``(argv, log file) -> process``; argv is ``[python, -m, kaas.cli, broker, ...]``."""


def exec_broker(argv: list[str], logf: BinaryIO | int) -> subprocess.Popen[bytes]:
    """The default ``Launch``: a new interpreter running ``argv``, in a session of its own."""
    return subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def death_file(data: Path, broker_id: int) -> Path:
    """The broker's death notice on the shared volume (``kaas.storage.deaths``)."""
    return Path(data) / "__cluster" / "deaths" / f"kaas-{broker_id}.json"


def _write_pid(path: Path, pid: int) -> None:
    """Replace the pid file ``path`` (tmp + rename: readers never see a torn file).

    Raises:
        OSError: the write failed; ``path`` is as it was and no tmp file is left behind.
    """
    _write_file(path, f"{pid}\n".encode())


def _write_file(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Replace ``path`` with ``data`` (``storage.atomic``: tmp + rename, and with ``durable``
    fsync of the tmp file before the rename and of the directory after it), every step
    behind the failpoint ``supervisor.write``.

    Raises:
        OSError: the write failed; ``path`` is as it was and no tmp file is left behind.
    """
    atomic.write_bytes(path, data, fsync=durable, points=_POINTS)


def _unlink(path: Path) -> None:
    """Remove ``path`` if it exists.

    Raises:
        OSError: other than the file being absent.
    """
    _fault(path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def describe(exc: OSError) -> str:
    """``ENOSPC (No space left on device)``: an OSError as one short phrase."""
    if exc.errno is None:
        return str(exc)
    return f"{errno.errorcode.get(exc.errno, exc.errno)} ({exc.strerror or os.strerror(exc.errno)})"


class Supervisor:
    def __init__(self, *, brokers: int, data: Path, base_port: int, host: str = "127.0.0.1",
                 first_id: int = 0, restart_delay: float = 1.0, broker_args: list[str] | None = None,
                 metrics_base_port: int = 0, listeners: str | None = None,
                 advertised_listeners: str | None = None, launch: Launch = exec_broker) -> None:
        """
        Args:
            launch: starts a broker (``exec_broker``; ``kaas cluster --fork-brokers``
                forks it from the supervisor instead, ``kaas.forking``), every restart too.
            listeners, advertised_listeners: broker 0's ``--listeners`` and
                ``--advertised-listeners`` (Kafka-style ``NAME://host:port,...``); broker
                i gets every port +i, as with ``base_port``. None: one PLAINTEXT listener
                at ``host:base_port+i`` (``--listen``/``--advertise``). The bootstrap
                servers are the first listener's (advertised) endpoints.

        Raises:
            kaas.listeners.ListenerError: a listener list does not parse.
        """
        self.data = Path(data).resolve()
        self.host = host
        self.restart_delay = restart_delay
        self.broker_args = list(broker_args or [])
        self.launch = launch
        self.listeners = listeners
        self.advertised_listeners = advertised_listeners
        first = parse_endpoints(advertised_listeners or listeners)[0] if listeners else None
        if first is not None:
            self.host = first.host if first.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
            base_port = first.port
        self.children = [Child(first_id + i, base_port + i, metrics_base_port + i if metrics_base_port else 0)
                         for i in range(brokers)]
        self.first_id = first_id
        self.stopping = False
        # what failed and how ("cannot write pid file X" -> "ENOSPC (...)"): reported once
        self.failing: dict[str, str] = {}
        self._mkdir_what = f"create run directory {self.run_dir}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{c.port}" for c in self.children)

    @property
    def run_dir(self) -> Path:
        return self.data / "run"

    # -- reporting ---------------------------------------------------------------------

    def _say(self, msg: str) -> None:
        """One status line on stderr; a line that cannot be written is dropped."""
        try:
            print(f"[kaas-cluster] {msg}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass

    def _failed(self, what: str, exc: OSError, consequence: str) -> None:
        """Report ``cannot <what>: <error>; <consequence>`` unless this failure is already
        reported (same operation, same error)."""
        err = describe(exc)
        if self.failing.get(what) == err:
            return
        self.failing[what] = err
        self._say(f"cannot {what}: {err}; {consequence}")

    def _recovered(self, what: str, detail: str = "") -> None:
        if self.failing.pop(what, None) is not None:
            self._say(f"{what}: works again{detail}")

    # -- the run directory ---------------------------------------------------------------

    def _ensure_run_dir(self) -> bool:
        what = self._mkdir_what
        try:
            _fault(self.run_dir)
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._failed(what, exc, "pid files and broker logs cannot be written until it exists")
            return False
        self._recovered(what)
        return True

    def _open_log(self, child: Child) -> BinaryIO | int:
        """The broker's log file opened for append, or DEVNULL if it cannot be opened."""
        path = log_file(self.data, child.broker_id)
        what = f"open log file {path}"
        try:
            _fault(path)
            logf = open(path, "ab")  # noqa: SIM115  closed by _spawn once the child has it
        except OSError as exc:
            self._failed(what, exc, f"broker {child.broker_id} starts with its output sent to /dev/null")
            return subprocess.DEVNULL
        self._recovered(what)
        return logf

    def _update_pid(self, child: Child, now: float) -> None:
        """Write the child's pid file; on failure remove the stale one (it names a dead
        process) and retry after ``PID_RETRY_S``."""
        assert child.proc is not None
        path = pid_file(self.data, child.broker_id)
        what = f"write pid file {path}"
        try:
            _write_pid(path, child.proc.pid)
        except OSError as exc:
            first = child.pid_retry_at is None
            child.pid_retry_at = now + PID_RETRY_S
            self._failed(what, exc, f"broker {child.broker_id} (pid {child.proc.pid}) keeps running; "
                                    f"retrying every {PID_RETRY_S:g}s")
            if first:  # an unlink needs no space: it usually works on a full disk
                try:
                    _unlink(path)
                except OSError as exc2:
                    self._failed(f"remove stale pid file {path}", exc2, "it may name a dead process")
            return
        child.pid_retry_at = None
        self._recovered(what, f" (pid {child.proc.pid})")

    # -- brokers -------------------------------------------------------------------------

    def _spawn(self, child: Child) -> None:
        self._ensure_run_dir()
        inc = incarnation.draw()
        argv = [sys.executable, "-m", "kaas.cli", "broker", "--id", str(child.broker_id),
                "--data", str(self.data), "--incarnation", inc]
        if self.listeners:
            offset = child.broker_id - self.first_id
            argv += ["--listeners", shift_ports(self.listeners, offset)]
            if self.advertised_listeners:
                argv += ["--advertised-listeners", shift_ports(self.advertised_listeners, offset)]
        else:
            argv += ["--listen", f"{self.host}:{child.port}", "--advertise", f"{self.host}:{child.port}"]
        if child.metrics_port:
            argv += ["--metrics-port", str(child.metrics_port)]
        argv += self.broker_args
        now = time.monotonic()
        logf = self._open_log(child)
        try:
            proc = self.launch(argv, logf)
        except OSError as exc:  # fork/exec failed (EAGAIN, ENOMEM): try again after the delay
            child.died_at = now
            self._say(f"broker {child.broker_id} could not be started: {describe(exc)}; "
                      f"retrying in {self.restart_delay}s")
            return
        finally:
            if not isinstance(logf, int):  # (DEVNULL: nothing to close)
                try:
                    logf.close()
                except OSError:
                    pass
        child.proc = proc
        child.incarnation = inc
        child.died_at = None
        child.pid_retry_at = None
        self._update_pid(child, now)
        metrics = f" metrics=http://{self.host}:{child.metrics_port}/metrics" if child.metrics_port else ""
        quiet = " log=/dev/null" if logf is subprocess.DEVNULL else ""
        self._say(f"broker {child.broker_id} started pid={proc.pid} port={child.port}{metrics}{quiet}")

    def _record_death(self, child: Child) -> None:
        """Write the reaped broker's death notice (``kaas.storage.deaths``): its peers move
        its keys at once instead of after the liveness timeout. Failing to write it costs
        only that speed; the heartbeat rule still applies."""
        assert child.proc is not None
        path = death_file(self.data, child.broker_id)
        what = f"write death notice {path}"
        body = deaths.encode(child.broker_id, child.incarnation, child.proc.returncode, pid=child.proc.pid)
        try:
            _fault(path.parent)
            deaths.write(path, body, points=_POINTS)
        except OSError as exc:
            self._failed(what, exc, "peers wait out the liveness timeout instead")
            return
        self._recovered(what)

    def start(self) -> None:
        try:
            failpoints.configure(self.run_dir, "supervisor")
        except OSError as exc:  # its own log line could not be written
            self._failed(f"read failpoints from {self.run_dir}", exc, "retrying on every poll")
        for child in self.children:
            self._spawn(child)

    def _reload_failpoints(self) -> None:
        what = f"read failpoints from {self.run_dir}"
        try:
            failpoints.reload()
        except OSError as exc:  # its own log line could not be written
            self._failed(what, exc, "retrying on every poll")
            return
        self._recovered(what)

    def poll(self) -> None:
        """Restart brokers that died, after the restart delay; retry pid files not yet
        written."""
        self._reload_failpoints()
        now = time.monotonic()
        for child in self.children:
            if child.proc is not None and child.proc.poll() is None:
                if child.pid_retry_at is not None and now >= child.pid_retry_at:
                    if self._mkdir_what in self.failing:
                        self._ensure_run_dir()
                    self._update_pid(child, now)
                continue
            if child.died_at is None:
                if child.proc is None:
                    continue  # not started yet
                child.died_at = now
                self._record_death(child)
                self._say(f"broker {child.broker_id} exited rc={child.proc.returncode}; "
                          f"restarting in {self.restart_delay}s")
            elif not self.stopping and now - child.died_at >= self.restart_delay:
                child.restarts += 1
                self._spawn(child)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every broker (a graceful drain), SIGKILL what is left after ``timeout``."""
        self.stopping = True
        for child in self.children:
            if child.proc and child.proc.poll() is None:
                try:
                    child.proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout
        for child in self.children:
            if child.proc is None:
                continue
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait()
        for child in self.children:
            path = pid_file(self.data, child.broker_id)
            try:
                _unlink(path)
            except OSError as exc:
                self._failed(f"remove pid file {path}", exc, "it names a stopped broker")
        self._say("all brokers stopped")


def run_supervisor(**kwargs: Any) -> None:
    """Foreground supervisor: prints the bootstrap servers, runs until SIGINT/SIGTERM."""
    sup = Supervisor(**kwargs)
    stop = False

    def on_signal(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:  # first, before the status lines on stderr: the first line a terminal shows
        print(sup.bootstrap, flush=True)
    except (OSError, ValueError):
        pass
    sup.start()
    sup._say(f"bootstrap servers: {sup.bootstrap}  (data: {sup.data}, logs: {sup.run_dir})")
    try:
        while not stop:
            try:
                sup.poll()
            except OSError as exc:  # a last resort: every file operation above handles its own
                sup._failed("poll brokers", exc, "polling again")
            time.sleep(POLL_S)
    finally:
        sup.stop()
