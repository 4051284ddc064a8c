from __future__ import annotations

import errno
import json
import subprocess
import sys
import time

import pytest
import trio

from kaas import failpoints


@pytest.fixture(autouse=True)
def _reset(tmp_path):
    failpoints.configure(tmp_path, 7)
    yield
    failpoints.disarm(tmp_path, 7)
    failpoints.reload()


def armed(tmp_path, specs: dict) -> None:
    failpoints.arm(tmp_path, 7, specs)
    failpoints.reload()


def test_nothing_armed_is_a_no_op(tmp_path):
    assert not (tmp_path / "failpoints-7.json").exists()
    for name in failpoints.NAMES:
        assert failpoints.hit(name) is False
        assert failpoints.io_fault(name, path="/x") is None
    assert failpoints.ARMED == {}


def test_arm_writes_the_broker_file_atomically(tmp_path):
    specs = {"slot.before_write": {"action": "error", "count": 2}}
    path = failpoints.arm(tmp_path, 7, specs)
    assert path == tmp_path / "failpoints-7.json"
    assert json.loads(path.read_text()) == specs
    assert not path.with_suffix(".tmp").exists()
    assert failpoints.hit("slot.before_write") is False  # not read until the next reload
    failpoints.reload()
    with pytest.raises(OSError):
        failpoints.hit("slot.before_write")


def test_error_action_raises_eio_with_count_limit(tmp_path):
    armed(tmp_path, {"slot.before_write": {"action": "error", "count": 2}})
    for _ in range(2):
        with pytest.raises(OSError) as info:
            failpoints.hit("slot.before_write")
        assert info.value.errno == errno.EIO
        assert "failpoint slot.before_write" in str(info.value)
    assert failpoints.hit("slot.before_write") is False  # exhausted
    assert failpoints.hit("endtxn.after_prepare") is False  # not armed


def test_error_action_raises_the_named_errno(tmp_path):
    armed(tmp_path, {"state.write": {"action": "error", "errno": "ENOSPC"}})
    with pytest.raises(OSError) as info:
        failpoints.io_fault("state.write", path="/d/slot-3.json")
    assert info.value.errno == errno.ENOSPC and info.value.strerror == "No space left on device"


def test_oserror_takes_a_name_or_a_number_and_falls_back_to_eio():
    assert failpoints.oserror("ENOSPC", "w").errno == errno.ENOSPC
    assert failpoints.oserror(errno.EROFS, "w").errno == errno.EROFS
    assert failpoints.oserror("ENOSUCHERRNO", "w").errno == errno.EIO
    assert failpoints.oserror("EIO", "what").filename == "what"


def test_short_action_returns_the_fraction_and_does_not_raise(tmp_path):
    armed(tmp_path, {"append.write": {"action": "short", "fraction": 0.25, "count": 1},
                     "state.write": {"action": "short"}})
    assert failpoints.io_fault("append.write", path="/d/0.log") == 0.25
    assert failpoints.io_fault("append.write", path="/d/0.log") is None  # count spent
    assert failpoints.io_fault("state.write", path="/d/x.json") == 0.5  # the default fraction


def test_path_filter_fires_only_for_matching_files(tmp_path):
    armed(tmp_path, {"state.write": {"action": "error", "errno": "ENOSPC", "path": "slot-", "count": 1}})
    assert failpoints.io_fault("state.write", path="/d/__cluster/assignment.json") is None
    assert failpoints.io_fault("state.write") is None  # no path in the context
    with pytest.raises(OSError):  # the count was still there: the other hits did not spend it
        failpoints.io_fault("state.write", path="/d/__txn/slot-4.json")
    assert failpoints.io_fault("state.write", path="/d/__txn/slot-4.json") is None  # spent now


def test_drop_action_fires_only_on_matching_context_and_counts(tmp_path):
    armed(tmp_path, {"marker.before_append": {"action": "drop", "count": 1, "match": {"commit": False}}})
    assert failpoints.hit("marker.before_append", commit=True) is False  # no match: not consumed
    assert failpoints.hit("marker.before_append") is False  # the key missing is no match
    assert failpoints.hit("marker.before_append", commit=False) is True
    assert failpoints.hit("marker.before_append", commit=False) is False  # exhausted
    assert "marker.before_append" in failpoints.DROPPABLE


def test_other_broker_file_is_ignored(tmp_path):
    failpoints.arm(tmp_path, 8, {"slot.before_write": {"action": "error"}})
    failpoints.reload()
    assert failpoints.hit("slot.before_write") is False
    assert failpoints.ARMED == {}


def test_once_fires_on_the_first_broker_to_claim_it_and_never_on_another(tmp_path):
    """Armed on two brokers: the first to reach the point claims it and fires it, ``count``
    times, also after a reload; the other (another process: ``once-t1`` was claimed
    there) never fires it, however often it gets there."""
    armed(tmp_path, {"slot.before_write": {"action": "error", "count": 2, "once": "t1"}})
    with pytest.raises(OSError):
        failpoints.hit("slot.before_write")
    assert (tmp_path / "once-t1").exists()
    armed(tmp_path, {"slot.before_write": {"action": "error", "count": 1, "once": "t1"}})  # re-read
    with pytest.raises(OSError):
        failpoints.hit("slot.before_write")
    assert failpoints.hit("slot.before_write") is False  # count spent
    other = subprocess.run([sys.executable, "-c", (
        "import sys; from pathlib import Path; from kaas import failpoints as f; "
        "f.configure(Path(sys.argv[1]), 8); f.arm(Path(sys.argv[1]), 8, "
        "{'slot.before_write': {'action': 'error', 'once': 't1'}}); f.reload(); "
        "print([f.hit('slot.before_write') for _ in range(3)], f.ARMED['slot.before_write']['count'])"),
        str(tmp_path)], capture_output=True, text=True, check=True)
    assert other.stdout.split("\n")[-2] == "[False, False, False] 0"


def test_once_with_another_token_fires_again(tmp_path):
    armed(tmp_path, {"slot.before_write": {"action": "error", "count": 1, "once": "t1"}})
    (tmp_path / "once-t2").touch()  # another arming's claim
    with pytest.raises(OSError):
        failpoints.hit("slot.before_write")


def test_disarm_clears(tmp_path):
    armed(tmp_path, {"slot.before_write": {"action": "error"}})
    with pytest.raises(OSError):
        failpoints.hit("slot.before_write")
    failpoints.disarm(tmp_path, 7)
    assert not (tmp_path / "failpoints-7.json").exists()
    failpoints.disarm(tmp_path, 7)  # disarming twice is harmless
    failpoints.reload()
    assert failpoints.hit("slot.before_write") is False


def test_rewritten_file_replaces_what_is_armed(tmp_path):
    armed(tmp_path, {"slot.before_write": {"action": "error"}})
    armed(tmp_path, {"snapshot.before_write": {"action": "error", "count": 1}})
    assert failpoints.hit("slot.before_write") is False
    with pytest.raises(OSError):
        failpoints.hit("snapshot.before_write")


def test_unchanged_file_is_not_reread(tmp_path):
    """A reload of the same file (same mtime and size) keeps the counts already spent."""
    armed(tmp_path, {"slot.before_write": {"action": "error", "count": 1}})
    with pytest.raises(OSError):
        failpoints.hit("slot.before_write")
    failpoints.reload()
    assert failpoints.hit("slot.before_write") is False


@pytest.mark.parametrize("text", ["[1, 2]", "{not json", '{"slot.before_write": 3}'])
def test_unreadable_file_keeps_what_was_armed(tmp_path, text):
    armed(tmp_path, {"snapshot.before_write": {"action": "drop"}})
    (tmp_path / "failpoints-7.json").write_text(text)
    failpoints.reload()
    assert failpoints.hit("snapshot.before_write") is True
    assert failpoints.hit("slot.before_write") is False


def test_set_in_process_arms_without_a_file_and_replaces(tmp_path):
    failpoints.set_in_process({"append.fsync": {"action": "error", "errno": "EIO"}})
    assert not (tmp_path / "failpoints-7.json").exists()
    with pytest.raises(OSError):
        failpoints.io_fault("append.fsync", path="/d/0.log")
    failpoints.set_in_process({})
    assert failpoints.io_fault("append.fsync", path="/d/0.log") is None


def test_pause_action(tmp_path):
    armed(tmp_path, {"snapshot.before_write": {"action": "pause", "ms": 200}})
    t0 = time.monotonic()
    assert failpoints.hit("snapshot.before_write") is False
    assert time.monotonic() - t0 >= 0.19


async def test_hit_async_pauses_on_trio_time_and_raises_errors(tmp_path, autojump_clock):
    armed(tmp_path, {"append.after_write_before_fsync": {"action": "pause", "ms": 5000, "count": 1},
                     "endtxn.before_complete": {"action": "error", "errno": "EROFS"}})
    t0 = trio.current_time()
    await failpoints.hit_async("append.after_write_before_fsync")
    assert trio.current_time() - t0 == pytest.approx(5.0)
    t0 = trio.current_time()
    await failpoints.hit_async("append.after_write_before_fsync")  # spent: no pause
    assert trio.current_time() == t0
    with pytest.raises(OSError) as info:
        await failpoints.hit_async("endtxn.before_complete")
    assert info.value.errno == errno.EROFS


def test_crash_action_exits_and_is_consumed(tmp_path):
    failpoints.arm(tmp_path, 3, {"endtxn.after_prepare": {"action": "crash"}})
    code = ("from kaas import failpoints; import sys; "
            f"failpoints.configure({str(tmp_path)!r}, 3); failpoints.hit('endtxn.after_prepare'); sys.exit(0)")
    rc = subprocess.run([sys.executable, "-c", code]).returncode
    assert rc == 137
    assert not (tmp_path / "failpoints-3.json").exists()
    assert (tmp_path / "failpoints-3.fired").exists()
    rc = subprocess.run([sys.executable, "-c", code]).returncode
    assert rc == 0
