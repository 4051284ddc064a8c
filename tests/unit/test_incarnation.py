"""Incarnations (``kaas.storage.incarnation``) instead of process ids: two writers that are
both PID 1, each in its own PID namespace as in two containers, never share a tmp file."""

from __future__ import annotations

import ctypes
import os

import pytest

from kaas.storage import atomic, fs, incarnation
from tests.tools import missing

CLONE_NEWPID = 0x20000000


def test_one_id_per_process_and_a_new_one_after_fork():
    me = incarnation.current()
    assert incarnation.valid(me) and incarnation.current() == me
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(w, incarnation.current().encode())
        os._exit(0)
    os.close(w)
    child = os.read(r, 64).decode()
    os.waitpid(pid, 0)
    os.close(r)
    assert incarnation.valid(child) and child != me


def test_adopt_takes_only_a_well_formed_id():
    before = incarnation.current()
    try:
        with pytest.raises(ValueError, match="32 lowercase hex"):
            incarnation.adopt("1")
        assert incarnation.adopt("ab" * 16) == incarnation.current() == "ab" * 16
    finally:
        incarnation.adopt(before)


def _in_new_pid_namespace(run) -> int:
    """Fork a child that unshares a PID namespace and forks ``run`` as its PID 1 (the
    grandchild keeps this thread's ident: fork copies the thread). Returns the child's pid;
    its exit status is the grandchild's: 0 ok, 3 not PID 1, 4 ``run`` raised, 5 no unshare."""
    pid = os.fork()
    if pid:
        return pid
    try:  # pragma: no cover - the child
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWPID) != 0:
            os._exit(5)
        inner = os.fork()
        if inner == 0:
            code = 3
            try:
                if os.getpid() == 1:
                    run()
                    code = 0
            except BaseException:
                code = 4
            os._exit(code)
        _, status = os.waitpid(inner, 0)
        os._exit(os.waitstatus_to_exitcode(status))
    finally:
        os._exit(6)


def _status(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_two_pid_1_writers_of_one_file_during_a_takeover_never_share_a_tmp(tmp_path):
    """A deposed leader (a zombie, PID 1 in its container) has opened its tmp file of the
    partition manifest and stalls; the new owner (PID 1 in another container, forked from
    the same thread, so the same thread ident too) writes the manifest whole; then the
    zombie goes on. With tmp names made of pid and thread ident both opened one tmp file:
    the zombie's bytes landed inside the new owner's renamed manifest (a torn file).
    With incarnations each has its own tmp, and the manifest is one writer's whole content."""
    path = tmp_path / "manifest.json"
    old = b'{"epoch":1,"format":1,"high_watermark":10,"log_start_offset":0}'
    new = b'{"epoch":2,"format":1,"high_watermark":1000000,"log_start_offset":0,"note":"the new owner"}'
    opened_r, opened_w = os.pipe()
    go_r, go_w = os.pipe()

    def zombie() -> None:
        write_all = fs.write_all

        def stalled(fd, chunks, **kw):  # the zombie stalls between open and write
            os.write(opened_w, b"o")
            os.read(go_r, 1)
            return write_all(fd, chunks, **kw)

        fs.write_all = stalled
        try:
            atomic.write_bytes(path, old)
        except FileNotFoundError:
            pass  # its tmp vanished under it (renamed away by the other writer)

    def new_owner() -> None:
        atomic.write_bytes(path, new)

    z = _in_new_pid_namespace(zombie)
    got = os.read(opened_r, 1)
    if not got:  # the zombie never opened its tmp
        code = _status(z)
        if code == 5:
            missing("unshare(CLONE_NEWPID) is not permitted here: run as root (or with CAP_SYS_ADMIN)")
        pytest.fail(f"the zombie writer exited with {code}")
    assert _status(_in_new_pid_namespace(new_owner)) == 0
    os.write(go_w, b"g")
    assert _status(z) == 0
    for fd in (opened_r, opened_w, go_r, go_w):
        os.close(fd)
    assert path.read_bytes() in (old, new)
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
