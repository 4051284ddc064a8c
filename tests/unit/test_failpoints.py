from __future__ import annotations

import subprocess
import sys

import pytest

from kaas import failpoints


@pytest.fixture(autouse=True)
def _reset(tmp_path):
    failpoints.configure(tmp_path, 7)
    yield
    failpoints.disarm(tmp_path, 7)
    failpoints.reload()


def test_nothing_armed_is_a_no_op(tmp_path):
    for name in failpoints.NAMES:
        failpoints.hit(name)


def test_error_action_raises_with_count_limit(tmp_path):
    failpoints.arm(tmp_path, 7, {"slot.before_write": {"action": "error", "count": 2}})
    failpoints.reload()
    for _ in range(2):
        with pytest.raises(OSError):
            failpoints.hit("slot.before_write")
    failpoints.hit("slot.before_write")  # exhausted
    failpoints.hit("endtxn.after_prepare")  # not armed


def test_drop_action_fires_only_on_matching_context_and_counts(tmp_path):
    failpoints.arm(tmp_path, 7, {"marker.before_append": {"action": "drop", "count": 1, "match": {"commit": False}}})
    failpoints.reload()
    assert failpoints.hit("marker.before_append", commit=True) is False  # no match: not consumed
    assert failpoints.hit("marker.before_append", commit=False) is True
    assert failpoints.hit("marker.before_append", commit=False) is False  # exhausted
    assert "marker.before_append" in failpoints.DROPPABLE


def test_other_broker_file_is_ignored(tmp_path):
    failpoints.arm(tmp_path, 8, {"slot.before_write": {"action": "error"}})
    failpoints.reload()
    failpoints.hit("slot.before_write")


def test_disarm_clears(tmp_path):
    failpoints.arm(tmp_path, 7, {"slot.before_write": {"action": "error"}})
    failpoints.reload()
    failpoints.disarm(tmp_path, 7)
    failpoints.reload()
    failpoints.hit("slot.before_write")


def test_pause_action(tmp_path):
    import time

    failpoints.arm(tmp_path, 7, {"snapshot.before_write": {"action": "pause", "ms": 200}})
    failpoints.reload()
    t0 = time.monotonic()
    failpoints.hit("snapshot.before_write")
    assert time.monotonic() - t0 >= 0.19


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
