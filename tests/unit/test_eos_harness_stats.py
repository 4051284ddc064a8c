"""scripts/eos_harness: the copiers' report files survive a SIGKILL mid-line, and the
chaos report's longest stretch without a commit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import eos_harness  # noqa: E402
from eos_harness.run import _longest_gap  # noqa: E402


def test_drain_reads_complete_lines_and_skips_a_torn_one(tmp_path):
    pool = eos_harness.CopierPool(eos_harness.HarnessConfig("127.0.0.1:1", "in", "out", "g", seed=1, copiers=2),
                                  tmp_path)
    a = eos_harness.StatsFile(tmp_path / "copier-0-0.jsonl")
    a.put(("commit_at", 1.5, 0))
    a.put(("aborted", "0.0:2"))
    assert pool.drain() == [["commit_at", 1.5, 0], ["aborted", "0.0:2"]]
    assert pool.drain() == []
    # a copier killed in the middle of a write leaves a torn last line: never read
    with open(tmp_path / "copier-1-0.jsonl", "ab") as f:
        f.write(json.dumps(["progress", 1, 0, 3, 0, 75]).encode() + b"\n" + b'["commit_at", 2.')
    b = eos_harness.StatsFile(tmp_path / "copier-1-1.jsonl")  # its restart writes a file of its own
    b.put(("progress", 1, 1, 1, 0, 25))
    assert pool.drain() == [["progress", 1, 0, 3, 0, 75], ["progress", 1, 1, 1, 0, 25]]
    a.put(("done", 0, 0, 1, 1, 25, [3.0]))
    assert pool.drain() == [["done", 0, 0, 1, 1, 25, [3.0]]]


def test_longest_gap_between_consecutive_commits():
    assert _longest_gap([]) is None
    assert _longest_gap([5.0]) is None
    assert _longest_gap([3.0, 1.0, 1.5, 7.25]) == 4.25
