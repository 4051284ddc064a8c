"""kaas.forking: a command forked instead of exec'd (``kaas cluster --fork-brokers``, the
fork server of kaas.testing) gets what a new interpreter would: its own session, default
signal dispositions, its output where asked, stdin at /dev/null, no inherited descriptor,
the given environment; the parent's ``Forked`` handle behaves as ``subprocess.Popen``."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from kaas.forking import fork_command


def _report(args: list[str]) -> None:
    """The child: writes what it sees to stdout (os.write: no buffered stream), exits 3,
    or waits for a signal with ``wait``."""
    seen = {
        "args": args,
        "sid_is_pid": os.getsid(0) == os.getpid(),
        "term": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
        "pipe": signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN,
        "stdin": os.read(0, 10) == b"",
        "env": os.environ.get("KAAS_FORK_TEST"),
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2),
    }
    os.write(1, (repr(seen) + "\n").encode())
    if args == ["wait"]:
        signal.pause()
    raise SystemExit(3)


def test_a_forked_command_starts_as_a_new_interpreter_would(tmp_path):
    log = tmp_path / "out.log"
    keep = os.open(os.devnull, os.O_RDONLY)  # an fd the child must not inherit
    try:
        with open(log, "ab") as out:
            child = fork_command(_report, ["a", "b"], stdout=out, env={"KAAS_FORK_TEST": "yes"})
    finally:
        os.close(keep)
    assert child.wait(10) == 3 and child.poll() == 3 and child.returncode == 3
    seen = eval(log.read_text().strip())  # noqa: S307 - our own repr
    assert seen["args"] == ["a", "b"] and seen["sid_is_pid"] and seen["term"] and seen["pipe"] and seen["stdin"]
    assert seen["env"] == "yes"
    assert seen["fds"] in ([], [3])  # (listdir's own descriptor)


def test_signals_and_timeouts_as_popen_has_them(tmp_path):
    with open(tmp_path / "out.log", "ab") as out:
        child = fork_command(_report, ["wait"], stdout=out)
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(0.05)
    assert child.poll() is None
    child.terminate()
    assert child.wait(10) == -signal.SIGTERM
    child.kill()  # gone already: nothing happens


def _run_on(args: list[str]) -> None:
    """A child that would run for a while: only a signal ends it early."""
    import time

    time.sleep(float(args[0]))


def test_a_sigterm_sent_the_moment_the_child_exists_is_not_lost():
    """The parent (a supervisor) has a SIGTERM handler of its own; a SIGTERM that reaches
    the child before the child reset its dispositions waits, blocked, and then ends it,
    instead of running the parent's handler in the child and vanishing."""
    seen: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        for _ in range(20):
            child = fork_command(_run_on, ["30"], stdout=subprocess.DEVNULL)
            os.kill(child.pid, signal.SIGTERM)  # at once: the child is likely still in fork_command
            assert child.wait(10) == -signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, before)
    assert seen == []  # and the parent's own handler never ran for them
