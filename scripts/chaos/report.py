"""A scenario's figures from its commit and fault times, and its report: JSON and an SVG
timeline (``scripts/timeline.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import timeline

REPORT_DIR = Path(os.environ.get("KAAS_CHAOS_REPORTS", "/tmp/kaas-chaos-reports"))


def longest_stretch(commits: list[float]) -> tuple[float | None, float | None]:
    """The longest stretch without a committed transaction between two commits (start-up
    and the finished tail excluded): (seconds, wall clock of its start)."""
    gap = timeline.longest_gap(commits)
    return (None, None) if gap is None else (round(gap[1] - gap[0], 2), gap[0])


def write_report(result: dict, out: Path, echo) -> tuple[Path, Path]:
    """``out/SCENARIO-seedN.json`` (the whole result) and ``.svg`` (the timeline); echoes both."""
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{result['scenario']}{'-secure' if result.get('secure') else ''}-seed{result['seed']}"
    t0 = result["copy_started_at"]
    faults = [timeline.Fault(t0 + at, kind, label) for at, kind, label in result["events"]]
    title = (f"{result['scenario']} (seed {result['seed']}): {result['messages']} messages, "
             f"{'ok' if result['ok'] else 'FAILED'}, longest stretch without a commit "
             f"{result['longest_no_commit_s']} s, {result['msgs_per_s']} msgs/s")
    svg = timeline.write_svg(stem.with_suffix(".svg"), result["commit_times"], faults, t0=t0,
                             t1=result["copy_ended_at"], title=title)
    js = stem.with_suffix(".json")
    js.write_text(json.dumps(result, indent=1) + "\n")
    echo(f"report: {js}")
    echo(f"timeline: {svg}")
    return js, svg


def recovery(faults: list[float], commits: list[float]) -> float | None:
    """The longest stretch without a committed transaction around any fault: from the last
    commit before it to the first commit after it (None when no fault had commits on both
    sides)."""
    worst = None
    for t in faults:
        before = [c for c in commits if c <= t]
        after = [c for c in commits if c > t]
        if before and after:
            gap = after[0] - before[-1]
            worst = gap if worst is None else max(worst, gap)
    return None if worst is None else round(worst, 2)

