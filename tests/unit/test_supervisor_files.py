"""The supervisor's own files on a full or failing disk (issue 17): the pid file write
leaves the old file and no tmp behind, and a failing operation is reported once, not on
every poll, and once more when it works again. (A real supervisor with brokers:
tests/integration/test_supervisor_faults.py.)"""

from __future__ import annotations

import contextlib
import errno

import pytest

from cluster import supervisor
from cluster.supervisor import Supervisor, _write_pid
from kaas import failpoints

FP = "supervisor"


@pytest.fixture
def run(tmp_path):
    run = tmp_path / "data" / "run"
    run.mkdir(parents=True)
    failpoints.configure(run, FP)
    yield run
    failpoints.disarm(run, FP)
    failpoints.reload()


def arm(run, spec):
    failpoints.arm(run, FP, {"supervisor.write": spec})
    failpoints.reload()


@pytest.mark.parametrize("spec", [
    {"action": "error", "errno": "ENOSPC"},
    {"action": "error", "errno": "EIO"},
    {"action": "short", "fraction": 0.5},
    # every step names the pid file (storage.atomic's points); the other broker's is untouched
    {"action": "error", "errno": "EIO", "path": "/kaas-0.pid"},
])
def test_failed_pid_write_keeps_the_old_file_and_leaves_no_tmp(run, spec):
    path = supervisor.pid_file(run.parent, 0)
    _write_pid(path, 111)
    arm(run, spec)
    with pytest.raises(OSError) as info:
        _write_pid(path, 222)
    assert info.value.errno in (errno.ENOSPC, errno.EIO)
    assert path.read_text() == "111\n"
    assert sorted(p.name for p in run.iterdir()) == ["failpoints-supervisor.json", "kaas-0.pid"]
    failpoints.disarm(run, FP)
    failpoints.reload()
    _write_pid(path, 333)
    assert path.read_text() == "333\n"


def test_a_failure_is_reported_once_and_its_recovery_once(run, capsys):
    sup = Supervisor(brokers=1, data=run.parent, base_port=1)
    arm(run, {"action": "error", "errno": "ENOSPC", "path": "/run"})
    for _ in range(5):  # five polls' worth of the same failure
        assert sup._ensure_run_dir() is False
    arm(run, {"action": "error", "errno": "EIO", "path": "/run"})
    assert sup._ensure_run_dir() is False  # a different error is news
    failpoints.disarm(run, FP)
    failpoints.reload()
    assert sup._ensure_run_dir() is True
    assert sup._ensure_run_dir() is True
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"[kaas-cluster] cannot create run directory {run}: ENOSPC (No space left on device); "
        "pid files and broker logs cannot be written until it exists",
        f"[kaas-cluster] cannot create run directory {run}: EIO (Input/output error); "
        "pid files and broker logs cannot be written until it exists",
        f"[kaas-cluster] create run directory {run}: works again",
    ]


def test_a_log_file_that_cannot_be_opened_gives_devnull(run, capsys):
    sup = Supervisor(brokers=1, data=run.parent, base_port=1)
    arm(run, {"action": "error", "errno": "ENOSPC", "path": "kaas-0.log"})
    assert sup._open_log(sup.children[0]) is supervisor.subprocess.DEVNULL
    assert "broker 0 starts with its output sent to /dev/null" in capsys.readouterr().err
    failpoints.disarm(run, FP)
    failpoints.reload()
    f = sup._open_log(sup.children[0])
    f.close()
    assert "works again" in capsys.readouterr().err


def test_status_lines_that_cannot_be_written_are_dropped(run, monkeypatch):
    full = open("/dev/full", "w")  # noqa: SIM115  every flush fails with ENOSPC
    try:
        monkeypatch.setattr("sys.stderr", full)
        sup = Supervisor(brokers=1, data=run.parent, base_port=1)
        sup._say("nobody reads this")
        arm(run, {"action": "error", "errno": "EIO"})
        assert sup._ensure_run_dir() is False
    finally:
        with contextlib.suppress(OSError):
            full.close()  # its flush of the lines still buffered fails too
