"""A fork server for test clusters: one process that has imported the broker's code once
and forks every ``kaas cluster`` (and, through ``--fork-brokers``, every broker) from it.

A new ``python -m kaas.cli ...`` spends ~0.4-0.5 s of CPU on imports before it serves;
forked from this server, a supervisor and its brokers start within milliseconds, and a
test session that starts many clusters pays the imports once (``docs/testing.rst``,
"Start-up").

The server (``python -m kaas.testing.forkserver``) speaks JSON lines: on stdin, requests
``{"id": n, "args": [...], "env": {...}, "cwd": "...", "log": "path"}`` (run ``kaas
ARGS`` with that environment, output appended to ``log``); on stdout ``{"ready": pid}``
once its imports are done, ``{"id": n, "pid": p}`` (or ``"error"``) per request, and
``{"exit": p, "rc": code}`` when a child ends (``-N``: killed by signal N). When its
stdin closes (the test process ended, even by SIGKILL), it SIGTERMs every child still
running, SIGKILLs what is left after ``STOP_GRACE_S`` and exits: a test run never leaves
clusters behind because its fork server outlived it.

``ForkServer`` is the test process's side; ``shared()`` is one per process, started on
first use (``warm()`` starts it in the background ahead of time).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

STOP_GRACE_S = 10.0


# ----------------------------------------------------------------------------- server


def _serve() -> None:  # pragma: no cover - runs in the server process (tests drive it through ForkServer)
    from kaas.cli import main, preload_broker

    preload_broker(all_handlers=True)  # (it forks brokers for a whole test session)
    import cluster.supervisor  # noqa: F401  (what `kaas cluster` imports)
    from kaas.forking import fork_command

    _become_subreaper()

    out = sys.stdout
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the test process; it closes stdin
    children: set[int] = set()

    def say(obj: dict[str, object]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    def reap() -> None:
        """Reap every child that ended: the ones it forked (reported) and, as a subreaper,
        the brokers of a supervisor killed before them."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in children:
                children.discard(pid)
                say({"exit": pid, "rc": os.waitstatus_to_exitcode(status)})

    def spawn(req: dict[str, Any]) -> None:
        log = open(req["log"], "ab")  # noqa: SIM115  (the child has it; closed below)
        try:
            child = fork_command(main, req["args"], stdout=log, env=req.get("env"), cwd=req.get("cwd"))
        except OSError as exc:
            say({"id": req["id"], "error": str(exc)})
            return
        finally:
            log.close()
        children.add(child.pid)
        say({"id": req["id"], "pid": child.pid})

    say({"ready": os.getpid()})
    buf = b""
    stdin = 0
    while True:
        try:
            readable, _, _ = select.select([stdin, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in readable:
            try:
                os.read(wake_r, 512)
            except BlockingIOError:
                pass
            reap()
        if stdin in readable:
            chunk = os.read(stdin, 65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    spawn(json.loads(line))
    _stop(children, reap)


def _stop(children: set[int], reap: Callable[[], None]) -> None:  # pragma: no cover - server side
    """Stdin closed (the test process is done): SIGTERM every child, SIGKILL what is left
    after ``STOP_GRACE_S``."""
    for pid in list(children):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_GRACE_S
    while children and time.monotonic() < deadline:
        time.sleep(0.02)
        reap()
    for pid in list(children):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _become_subreaper() -> None:  # pragma: no cover - server side
    """Linux: the orphans of its children (brokers whose supervisor was SIGKILLed) become
    its children, so it reaps them (a container's pid 1 may never do)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


# ----------------------------------------------------------------------------- client


class ServedProcess:
    """A process the fork server started for this process: ``pid``, ``returncode`` and
    ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill`` as ``subprocess.Popen``
    has them (the server reaps it and reports its exit)."""

    def __init__(self, server: ForkServer, pid: int, args: Sequence[str]) -> None:
        self.server = server
        self.pid = pid
        self.args = list(args)

    @property
    def returncode(self) -> int | None:
        return self.server.exit_code(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Raises: subprocess.TimeoutExpired: still running after ``timeout`` s."""
        code = self.server.wait_exit(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServerError(RuntimeError):
    """The fork server could not be started or did not answer."""


class ForkServer:
    """The test process's handle on one fork server (see the module docstring)."""

    def __init__(self, log_path: Path | None = None) -> None:
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._cond = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self._exits: dict[int, int] = {}
        self._next_id = 0
        self._ready = False
        self._dead = False
        self._reader: threading.Thread | None = None
        self._send_lock = threading.Lock()

    def start(self) -> ForkServer:
        """Start the server process (its imports go on in the background)."""
        with self._cond:
            if self._proc is not None:
                return self
            err = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
            self._proc = subprocess.Popen([sys.executable, "-m", "kaas.testing.forkserver"], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=err, start_new_session=True)
            if not isinstance(err, int):
                err.close()
            self._reader = threading.Thread(target=self._read, name="kaas-forkserver", daemon=True)
            self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                if "ready" in msg:
                    self._ready = True
                elif "exit" in msg:
                    self._exits[int(msg["exit"])] = int(msg["rc"])
                elif "id" in msg:
                    self._replies[int(msg["id"])] = msg
                self._cond.notify_all()
        with self._cond:
            self._dead = True
            self._cond.notify_all()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Raises: ForkServerError: it died or is not ready within ``timeout`` s."""
        self.start()
        with self._cond:
            if not self._cond.wait_for(lambda: self._ready or self._dead, timeout):
                raise ForkServerError(f"the fork server was not ready within {timeout} s")
            if not self._ready:
                raise ForkServerError(f"the fork server exited ({self._proc.poll() if self._proc else None})"
                                      + (f"; see {self.log_path}" if self.log_path else ""))

    def spawn(self, args: Sequence[str], *, log: Path, env: Mapping[str, str] | None = None,
              cwd: str | None = None, timeout: float = 30.0) -> ServedProcess:
        """Run ``kaas ARGS`` forked from the server, stdout and stderr appended to ``log``.

        Args:
            env: the child's whole environment (default: this process's).

        Raises:
            ForkServerError: the server is gone, or the fork failed.
        """
        self.wait_ready(timeout)
        assert self._proc is not None and self._proc.stdin is not None
        with self._cond:
            self._next_id += 1
            rid = self._next_id
        req = {"id": rid, "args": list(args), "env": dict(os.environ if env is None else env),
               "cwd": cwd or os.getcwd(), "log": str(log)}
        try:
            with self._send_lock:
                self._proc.stdin.write((json.dumps(req) + "\n").encode())
                self._proc.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise ForkServerError(f"the fork server is gone: {exc}") from None
        with self._cond:
            if not self._cond.wait_for(lambda: rid in self._replies or self._dead, timeout):
                raise ForkServerError("the fork server did not answer")
            reply = self._replies.pop(rid, None)
        if reply is None or "error" in reply:
            raise ForkServerError(f"fork failed: {reply.get('error') if reply else 'the server is gone'}")
        return ServedProcess(self, int(reply["pid"]), args)

    def exit_code(self, pid: int) -> int | None:
        with self._cond:
            code = self._exits.get(pid)
            if code is None and self._dead:  # nobody reaps it now: alive while the pid answers
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    return -1
            return code

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while pid not in self._exits:
                if self._dead:
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)
            if pid in self._exits:
                return self._exits[pid]
        while self.exit_code(pid) is None:  # the server died: poll the pid
            if deadline is not None and time.monotonic() > deadline:
                return None
            time.sleep(0.02)
        return self.exit_code(pid)

    def close(self, timeout: float = STOP_GRACE_S + 5) -> None:
        """Close the server's stdin: it stops what it started and exits."""
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self._proc = None


_shared: ForkServer | None = None
_shared_lock = threading.Lock()


def shared() -> ForkServer:
    """This process's fork server, started on first use and closed at exit."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared._dead:
            _shared = ForkServer().start()
            atexit.register(_shared.close)
        return _shared


def warm() -> ForkServer:
    """Start this process's fork server now (its imports run while the caller goes on)."""
    return shared()


if __name__ == "__main__":
    _serve()
