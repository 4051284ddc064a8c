"""A real supervisor (``kaas cluster``) whose own files fail (issue 17, points 4 and 6): it
keeps its brokers running and restarting, says once what failed, and writes the pid file
again once it can. The failures come from the ``supervisor.write`` failpoint, from
/dev/full (a real ENOSPC for its stdout and stderr) and, where the machine allows
``mount -t tmpfs``, from a real full tmpfs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from kaas import failpoints
from kaas.client import WireClient
from kaas.testing import ClusterProcess, free_ports, wait_for, wait_ready
from tests.tools import require, require_tool

pytestmark = [pytest.mark.slow, pytest.mark.cluster]




def metadata_brokers(port: int) -> set[int]:
    with WireClient("127.0.0.1", port, timeout=5.0) as wc:
        md = wc.call(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                             "include_topic_authorized_operations": False})
    return {b.node_id for b in md.brokers}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def started_pids(text: str, broker_id: int) -> list[tuple[int, str]]:
    """(pid, rest of line) of each ``broker <id> started`` line of the supervisor."""
    return [(int(m.group(1)), m.group(2)) for m in
            re.finditer(rf"\[kaas-cluster\] broker {broker_id} started pid=(\d+)(.*)", text)]


def test_supervisor_survives_failing_pid_and_log_files(tmp_path):
    with ClusterProcess(tmp_path / "data", 2).running() as c:
        run = c.data / "run"
        pid0, pid1 = c.pid(0), c.pid(1)
        log = c.log_path
        # every file operation of the supervisor fails with ENOSPC from now on
        failpoints.arm(run, "supervisor", {"supervisor.write": {"action": "error", "errno": "ENOSPC"}})
        wait_for(lambda: "failpoints_armed" in log.read_text(errors="replace"), 10, "supervisor armed")

        os.kill(pid0, signal.SIGKILL)
        new0 = wait_for(lambda: [p for p, _ in started_pids(log.read_text(errors="replace"), 0) if p != pid0],
                        20, "broker 0 restarted")[-1]
        wait_ready("127.0.0.1", c.ports[0], timeout=20)
        assert alive(new0)
        time.sleep(3 * 1.0 + 0.5)  # three pid file retries (PID_RETRY_S) while still failing

        assert c.proc.poll() is None, "the supervisor died"
        assert c.pid(1) == pid1 and alive(pid1), "broker 1 was disturbed"
        assert metadata_brokers(c.ports[0]) >= {0, 1}
        text = log.read_text(errors="replace")
        pid_path, log_path = run / "kaas-0.pid", run / "kaas-0.log"
        pid_fail = [ln for ln in text.splitlines() if f"cannot write pid file {pid_path}: ENOSPC" in ln]
        log_fail = [ln for ln in text.splitlines() if f"cannot open log file {log_path}: ENOSPC" in ln]
        dir_fail = [ln for ln in text.splitlines() if f"cannot create run directory {run}: ENOSPC" in ln]
        assert len(pid_fail) == 1, text  # once, not once per retry
        assert len(log_fail) == 1 and "/dev/null" in log_fail[0], text
        assert len(dir_fail) == 1, text
        assert started_pids(text, 0)[-1] == (new0, f" port={c.ports[0]} log=/dev/null")
        # the stale pid file could not be removed either (unlink fails too): it names pid0
        assert pid_path.read_text().strip() == str(pid0)

        failpoints.disarm(run, "supervisor")
        wait_for(lambda: pid_path.read_text().strip() == str(new0), 10, "pid file written again")
        text = log.read_text(errors="replace")
        assert f"[kaas-cluster] write pid file {pid_path}: works again (pid {new0})" in text
        assert not list(run.glob(".*.tmp")), "a tmp pid file was left behind"

        # the next restart has its log file again
        os.kill(new0, signal.SIGKILL)
        c.wait_restarted(0, new0)
        newer = c.pid(0)
        wait_for(lambda: any(p == newer for p, _ in started_pids(log.read_text(errors="replace"), 0)), 10)
        assert started_pids(log.read_text(errors="replace"), 0)[-1] == (newer, f" port={c.ports[0]}")
        assert c.proc.poll() is None
    assert c.log_path.read_text(errors="replace").rstrip().endswith("[kaas-cluster] all brokers stopped")


def test_supervisor_with_unwritable_stdout_and_stderr(tmp_path):
    """The supervisor's own stdout and stderr on /dev/full (ENOSPC on every write): the
    bootstrap and status lines are lost, the supervisor is not."""
    data = tmp_path / "data"
    base = free_ports(1)
    with open("/dev/full", "wb") as full:
        proc = subprocess.Popen([sys.executable, "-m", "kaas.cli", "cluster", "--brokers", "1", "--data", str(data),
                                 "--base-port", str(base), "--restart-delay", "0.5"],
                                stdout=full, stderr=full, stdin=subprocess.DEVNULL)
    try:
        wait_ready("127.0.0.1", base, timeout=30, proc=proc)
        pid_path = data / "run" / "kaas-0.pid"
        pid = int(wait_for(lambda: pid_path.exists() and pid_path.read_text().strip(), 10, "pid file"))
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: pid_path.read_text().strip() not in ("", str(pid)), 20, "restarted")
        wait_ready("127.0.0.1", base, timeout=20, proc=proc)
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    assert rc == 0 and not pid_path.exists()


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A real 48 MiB tmpfs mounted for the test (skipped where ``mount`` is not allowed)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    require_tool("mount", package="mount")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    require(res.returncode == 0, f"cannot mount a tmpfs here ({res.stderr.strip() or res.returncode}): run as root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(path: Path) -> None:
    """Write zeros to ``path`` until the volume is full."""
    block = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(block)
        except OSError:
            pass
        small = b"\0" * 4096
        try:
            while True:
                f.write(small)
        except OSError:
            pass


def test_supervisor_on_a_full_tmpfs(tiny_tmpfs):
    """The observed bug: the data directory on a small tmpfs that fills up. A broker killed
    then must be restarted by a supervisor that cannot write its pid file or open the log."""
    data = tiny_tmpfs / "data"
    c = ClusterProcess(data, 1)
    c.log_path = tiny_tmpfs.parent / f"supervisor-{uuid.uuid4().hex}.log"  # off the full volume
    with c.running():
        pid0 = c.pid(0)
        filler = tiny_tmpfs / "filler"
        fill(filler)
        os.kill(pid0, signal.SIGKILL)
        log = c.log_path
        wait_for(lambda: [p for p, _ in started_pids(log.read_text(errors="replace"), 0) if p != pid0],
                 20, "broker 0 restarted")
        time.sleep(2.5)
        assert c.proc.poll() is None, "the supervisor died on a full disk"
        text = log.read_text(errors="replace")
        assert "cannot write pid file" in text and "ENOSPC" in text, text
        filler.unlink()
        wait_ready("127.0.0.1", c.ports[0], timeout=30, proc=c.proc)
        # the broker may have died on the full disk and been restarted since: the pid file
        # names the process the supervisor runs now
        wait_for(lambda: (data / "run" / "kaas-0.pid").exists(), 10, "pid file written again")
        last = started_pids(log.read_text(errors="replace"), 0)[-1][0]
        assert c.pid(0) == last and alive(last)
