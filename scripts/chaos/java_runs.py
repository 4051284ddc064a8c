"""``scripts/chaos run --scenario apache-eos|streams|connect``: the Java scenarios, each on a fresh
cluster per run, for each target (kaas, Apache 4.4) asked for; a table of the verdicts.

    python scripts/chaos run --scenario apache-eos [--target kaas|apache|both]
                             [--mode assign|group|both] [--bounce clean|hard|both] [--messages N]
    python scripts/chaos run --scenario streams [--target ...] [--messages N]
    python scripts/chaos run --scenario connect [--target ...] [--messages N]
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from .report import write_report

SKIP = ("commit_times", "events", "faults", "copier_exits", "progress_times")


def _scratch(label: str) -> Path:
    """A fresh run directory: under ``KAAS_CHAOS_DIR`` if set, else in /dev/shm."""
    base = os.environ.get("KAAS_CHAOS_DIR") or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
    if base:
        os.makedirs(base, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"kaas-chaos-{label}-", dir=base))


def _one(fn, echo, out: Path, label: str) -> dict:
    tmp = _scratch(label.split()[0])
    echo(f"== {label}")
    try:
        r = fn(tmp)
    finally:
        if os.environ.get("KAAS_CHAOS_KEEP"):
            echo(f"run directory kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    r["scenario"] = f"{r['scenario']}-{r['target']}"
    write_report(r, out, echo)
    return r


def run_apache_eos_matrix(targets: list[str], modes: list[str], bounces: list[str], seed: int, messages: int | None,
                          out: Path, echo) -> bool:
    from .apache_eos import MESSAGES, run_apache_eos

    results = []
    for target in targets:
        for i, mode in enumerate(modes):
            for j, bounce in enumerate(bounces):
                s = seed + 2 * i + j
                m = messages or MESSAGES
                results.append(_one(lambda tmp, t=target, mo=mode, b=bounce, s=s, m=m:
                                    run_apache_eos(t, mo, b, s, m, tmp, echo),
                                    echo, out, f"apache-eos on {target}: {mode} mode, {bounce} copier bounces, "
                                               f"{m} messages, seed {s}"))
    echo(f"{'run':<34} {'target':<7} {'input':>7} {'output':>7} {'dups':>5} {'lost':>5} {'order':>5} "
         f"{'kills':>5} {'bounces':>7} {'exits':>5} {'gap s':>7} {'msgs/s':>7} {'secs':>6}  result")
    for r in results:
        f = r["final"]
        echo(f"{r['scenario']:<34} {r['target']:<7} {f['input']:>7} {f['output']:>7} {f['duplicates']:>5} "
             f"{f['lost']:>5} {'ok' if not f['partitions_not_equal_to_input'] else 'NO':>5} {r['kills']:>5} "
             f"{r['copier_bounces']:>7} {len(r['copier_exits']):>5} {r['longest_no_commit_s'] or '-':>7} "
             f"{r['msgs_per_s'] or '-':>7} {r['seconds']:>6}  {'ok' if r['ok'] else 'FAILED'}")
    for r in results:
        echo(json.dumps({k: v for k, v in r.items() if k not in SKIP}))
    return all(r["ok"] for r in results)


def run_streams_runs(targets: list[str], seed: int, messages: int | None, out: Path, echo) -> bool:
    from .streams import MESSAGES, run_streams

    m = messages or MESSAGES
    results = [_one(lambda tmp, t=target: run_streams(t, seed, m, tmp, echo), echo, out,
                    f"streams on {target}: {m} orders, seed {seed}") for target in targets]
    echo(f"{'run':<16} {'orders':>7} {'enriched':>8} {'dups':>5} {'lost':>5} {'windows':>7} {'regions':>7} "
         f"{'regr':>5} {'deleted':>7} {'kills':>5} {'restored':>8} {'gap s':>7} {'msgs/s':>7} {'secs':>6}  result")
    for r in results:
        v = r["verdict"]
        e, w, g = v["enriched"], v["windowed_totals"], v["region_totals"]
        echo(f"{r['scenario']:<16} {e['input']:>7} {e['output']:>8} {e['duplicates']:>5} {e['lost']:>5} "
             f"{'ok' if w['ok'] else 'NO':>7} {'ok' if g['ok'] else 'NO':>7} {w['regressions'] + g['regressions']:>5} "
             f"{sum(len(ps) for ps in r['deleted_by_brokers'].values()):>7} {r['kills']:>5} "
             f"{r['restored_after_instance_kill'] or 0:>8} {r['longest_no_commit_s'] or '-':>7} "
             f"{r['msgs_per_s'] or '-':>7} {r['seconds']:>6}  {'ok' if r['ok'] else 'FAILED'}")
    for r in results:
        echo(json.dumps({k: v for k, v in r.items() if k not in SKIP}))
    return all(r["ok"] for r in results)


def run_connect_runs(targets: list[str], seed: int, messages: int | None, out: Path, echo) -> bool:
    from .connect import MESSAGES, run_connect

    m = messages or MESSAGES
    results = [_one(lambda tmp, t=target: run_connect(t, seed, m, tmp, echo), echo, out,
                    f"connect on {target}: {m} numbers, seed {seed}") for target in targets]
    echo(f"{'run':<16} {'input':>7} {'output':>7} {'dups':>5} {'lost':>5} {'sink':>7} {'redeliv':>7} "
         f"{'offsets':>7} {'internal':>8} {'cleaned':>7} {'kills':>5} {'resumes':>7} {'gap s':>7} {'msgs/s':>7} "
         f"{'secs':>6}  result")
    for r in results:
        s, k, i = r["source"], r["sink"], r["internal"]
        echo(f"{r['scenario']:<16} {s['input']:>7} {s['output']:>7} {s['duplicates']:>5} {s['lost']:>5} "
             f"{k['distinct_given']:>7} {k['redelivered']:>7} {'ok' if k['ok'] else 'NO':>7} "
             f"{'ok' if i['ok'] else 'NO':>8} {sum(i['rounds_shorter_than_the_one_before'].values()):>7} "
             f"{r['kills']:>5} {len(r['source_resumes']):>7} "
             f"{r['longest_no_commit_s'] or '-':>7} {r['msgs_per_s'] or '-':>7} {r['seconds']:>6}  "
             f"{'ok' if r['ok'] else 'FAILED'}")
    for r in results:
        echo(json.dumps({k: v for k, v in r.items() if k not in SKIP}))
    return all(r["ok"] for r in results)
