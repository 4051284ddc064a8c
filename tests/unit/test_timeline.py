"""scripts/timeline.py draws well-formed SVG with every fault marked."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import timeline  # noqa: E402
from timeline import Fault  # noqa: E402

NS = "{http://www.w3.org/2000/svg}"
T0 = 1_700_000_000.0


def test_svg_parses_and_marks_every_fault(tmp_path):
    commits = [T0 + i * 0.1 for i in range(100)] + [T0 + 17 + i * 0.2 for i in range(50)]
    faults = [Fault(T0 + 10.2, "kill", "SIGKILL broker 1"), Fault(T0 + 10.9, "restart", "broker 1 restarted"),
              Fault(T0 + 12, "stop", "SIGSTOP broker 2 <coordinator & co>"), Fault(T0 + 18, "cont", "SIGCONT broker 2"),
              Fault(T0 + 20, "copier-kill", "SIGKILL copier 0"), Fault(T0 + 22, "copier-restart", "copier 0")]
    path = timeline.write_svg(tmp_path / "run.svg", commits, faults, t0=T0, t1=T0 + 30, title="continuous & co")
    root = ET.parse(path).getroot()
    assert root.tag == f"{NS}svg"
    marks = [e for e in root.iter(f"{NS}line") if e.get("class") == "fault"]
    assert [m.get("data-kind") for m in marks] == [f.kind for f in faults]
    assert "SIGSTOP broker 2 <coordinator & co>" in marks[2].find(f"{NS}title").text
    assert all(float(m.get("x1")) < float(marks[i + 1].get("x1")) for i, m in enumerate(marks[:-1]))
    bars = [e for e in root.iter(f"{NS}rect") if e.get("class") == "bar"]
    assert sum(int(b.find(f"{NS}title").text.split(": ")[1].split()[0]) for b in bars) == len(commits)
    gap = next(e for e in root.iter(f"{NS}rect") if e.get("class") == "gap")
    assert "7.10 s" in gap.find(f"{NS}title").text  # 9.9 -> 17.0


def test_empty_run_still_draws():
    root = ET.fromstring(timeline.svg([], [], t0=T0))
    assert root.tag == f"{NS}svg"
    assert not [e for e in root.iter(f"{NS}rect") if e.get("class") in ("bar", "gap")]


def test_per_second_and_longest_gap():
    commits = [T0 + 0.5, T0 + 0.7, T0 + 2.1, T0 + 9.0]
    assert timeline.per_second(commits, T0, 10) == [2, 0, 1, 0, 0, 0, 0, 0, 0, 1]
    assert timeline.longest_gap(commits) == (T0 + 2.1, T0 + 9.0)
    assert timeline.longest_gap(commits[:1]) is None
