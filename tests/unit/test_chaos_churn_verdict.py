"""consumer-churn's verdict (issue 42) and the EOS harness's per-partition progress: pure
functions of a run's figures."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from chaos.runner import churn_verdict  # noqa: E402
from eos_harness.run import _note_progress  # noqa: E402


def result(**over) -> dict:
    return {"copy_completed": True, "ok": True, "violations": [], "longest_no_commit_by_copier_s": {0: 3.0, 1: 40.0},
            "longest_no_progress_by_partition_s": {0: 44.0, 1: 2.0}, **over}


def test_a_complete_copy_within_session_and_grace_passes():
    r = result()
    churn_verdict(r, 9.8)
    assert r["ok"] and r["violations"] == [] and r["longest_no_progress_s"] == 40.0 and r["stretch_bound_s"] == 67.5
    assert r["longest_partition_stall_s"] == 44.0 and r["partition_stall_bound_s"] == 77.5


def test_a_stalled_partition_or_an_incomplete_copy_fails():
    r = result(longest_no_progress_by_partition_s={0: 90.0})
    churn_verdict(r, 9.8)
    assert not r["ok"] and "90.0 s > 77.5 s" in r["violations"][0]
    r = result(longest_no_commit_by_copier_s={0: 70.0})
    churn_verdict(r, 9.8)
    assert not r["ok"] and "70.0 s > 67.5 s" in r["violations"][0]
    r = result(copy_completed=False)
    churn_verdict(r, 9.8)
    assert not r["ok"] and r["violations"] == ["consumer-churn: the copy did not complete"]


def test_progress_is_the_longest_time_a_partitions_offset_stood_still():
    seen: dict = {}
    stall: dict = {}
    polls = [(1.0, [5, 0]), (2.0, [9, 0]), (3.0, [9, 0]), (30.0, [9, 7]), (31.0, [12, 8])]
    for at, offsets in polls:
        _note_progress(seen, stall, [SimpleNamespace(partition=p, offset=o) for p, o in enumerate(offsets)], at)
    # partition 0 stood at 9 from 2 s to 31 s; partition 1 at 0 from the first poll (1 s)
    # until 30 s
    assert stall == {0: 29.0, 1: 29.0}
