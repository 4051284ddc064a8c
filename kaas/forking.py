"""Start a ``kaas`` command as a forked copy of this process instead of a new interpreter.

A new ``python -m kaas.cli broker`` spends about 0.3 s of CPU importing trio,
structlog, kio and the broker's modules before it can serve (its handler modules come
later, each at its API's first request); a process that has imported
them once (``kaas cluster --fork-brokers``, the fork server of ``kaas.testing``) forks each
broker in a few milliseconds, and the brokers share the imported code's memory copy-on-write.

``fork_command(main, args, stdout=...)`` forks; the child becomes a session leader (as
``subprocess.Popen(start_new_session=True)`` makes it), takes the default signal
dispositions back (a signal sent to it meanwhile waits, blocked, and is delivered then),
points its standard streams at ``stdout`` (stdin at /dev/null), closes every other
descriptor it inherited, takes ``env`` if given, and runs ``main(args)`` (a click entry
point) to its end; it never returns into the caller's code. The parent gets a ``Forked``:
the part of ``subprocess.Popen``'s interface a supervisor uses.

Only a process without threads may fork this way (a thread holding a lock at the fork
would leave the lock held forever in the child): the supervisor and the fork server have
none.

A stdlib-only leaf: it imports nothing of kaas.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO

# what a new interpreter starts with: default actions, SIGINT raising KeyboardInterrupt,
# SIGPIPE and SIGXFSZ ignored (CPython's start-up sets both to SIG_IGN)
_SIGNALS_DEFAULT = (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP, signal.SIGALRM, signal.SIGUSR1, signal.SIGUSR2)
_SIGNALS_IGNORED = (signal.SIGPIPE, signal.SIGXFSZ)
_SIGNALS_HELD = (*_SIGNALS_DEFAULT, signal.SIGINT)  # blocked across the fork (fork_command)


class Forked:
    """A child forked by this process: ``pid``, ``returncode`` and ``poll``, ``wait``,
    ``send_signal``, ``terminate``, ``kill`` as ``subprocess.Popen`` has them (a
    returncode of ``-N`` for death by signal N)."""

    def __init__(self, pid: int, args: Sequence[str]) -> None:
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None

    def _reap(self, flags: int) -> int | None:
        if self.returncode is not None:
            return self.returncode
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:  # reaped elsewhere (a SIGCHLD handler of the caller's)
            self.returncode = -1
            return self.returncode
        if pid == 0:
            return None
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        return self._reap(os.WNOHANG)

    def wait(self, timeout: float | None = None) -> int:
        """The exit code, once the child has exited.

        Raises:
            subprocess.TimeoutExpired: still running after ``timeout`` s.
        """
        if timeout is None:
            code = self._reap(0)
            assert code is not None
            return code
        deadline = time.monotonic() + timeout
        delay = 0.001
        while (code := self.poll()) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.05)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _stdout_fd(stdout: IO[bytes] | int | None) -> int:
    if stdout is None:
        return 1
    if stdout == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_WRONLY)
    return stdout if isinstance(stdout, int) else stdout.fileno()


def fork_command(main: Callable[[list[str]], object], args: Sequence[str], *,
                 stdout: IO[bytes] | int | None = None, env: Mapping[str, str] | None = None,
                 cwd: str | None = None) -> Forked:
    """Fork a child that runs ``main(list(args))`` and exits with its status (see the module
    docstring for what the child sets up first).

    Args:
        stdout: where the child's stdout and stderr go: a file, a descriptor,
            ``subprocess.DEVNULL``, or None for this process's stdout.
        env: the child's whole environment (None: this process's).
        cwd: the child's working directory (None: this process's).

    Raises:
        OSError: the fork failed (EAGAIN, ENOMEM).
    """
    out = _stdout_fd(stdout)
    sys.stdout.flush()
    sys.stderr.flush()
    # Signals wait (blocked) across the fork until the child has its own dispositions: a
    # SIGTERM sent to the child the moment its pid is known would otherwise run the
    # parent's handler in the child (the supervisor's sets a flag the child never reads)
    # and be lost, leaving a broker that was told to stop running on.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS_HELD)
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        raise
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if stdout == subprocess.DEVNULL:
            os.close(out)
        return Forked(pid, args)
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        for sig in _SIGNALS_DEFAULT:
            signal.signal(sig, signal.SIG_DFL)
        for sig in _SIGNALS_IGNORED:
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # what arrived meanwhile is delivered now
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except KeyboardInterrupt:
            code = 130
    except BaseException:  # noqa: BLE001 - the child reports and exits; it never returns to the caller
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    raise AssertionError("unreachable")  # (os._exit above)
