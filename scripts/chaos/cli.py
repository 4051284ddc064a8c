"""The click CLI: ``python scripts/chaos run ...``."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import click

from .report import REPORT_DIR, write_report
from .rolling import ROLLING_DURATION_S
from .runner import run_scenario
from .scenarios import CHURN_MESSAGES, CONT_DURATION_S, CONT_MESSAGES, CONT_TIMEOUT_S, EXTRA_SCENARIOS, SCENARIOS
from .share import SHARE_SECONDS, run_share_runs


def run_mixed(seed: int, messages: int | None, out: Path, echo) -> bool:
    """The mixed-tv scenario (``mixed_tv``): its summary lines; whether it held."""
    from .mixed_tv import run_mixed_tv

    echo(f"== scenario mixed-tv (seed {seed})")
    r = run_mixed_tv(seed, messages, out, echo)
    for line in r["violations"]:
        echo(f"   {line}")
    for where in ("shared", "output"):
        v = r[where]
        echo(f"{where:<7} records {v['records']:>6} (TV1 {v['tv1_records']}, seed {v['seed_records']}) "
             f"lost {v['lost']} duplicates {v['duplicates']} aborted reads {v['aborted_reads']} torn {v['torn']} "
             f"phantoms {v['phantoms']} order {v['order_violations']}")
    echo(f"kills by EndTxn point: {json.dumps(r['kills_by_point'])} ({r['kills_while_all_wrote']} of {r['kills']} "
         f"while the TV2 writers still wrote)")
    echo(f"TV1 transactions: {json.dumps(r['tv1_transactions'])} ({r['tv1_aborted_in_log']} aborted records in the "
         f"shared log); TV2 commits: {json.dumps(r['tv2_commits'])}")
    echo(f"slot entries: {json.dumps(r['slot_entries'])}")
    echo(f"mixed-tv (seed {seed}): {'ok' if r['ok'] else 'FAILED'} in {r['seconds']} s")
    return bool(r["ok"])


JAVA_SCENARIOS = ("apache-eos", "streams", "connect")


def run_java(scenario: str, target: str, mode: str, bounce: str, seed: int, messages: int | None, out: Path,
             echo) -> bool:
    from .java_runs import run_apache_eos_matrix, run_connect_runs, run_streams_runs

    targets = ["kaas", "apache"] if target == "both" else [target]
    if scenario == "connect":
        return run_connect_runs(targets, seed, messages, out, echo)
    if scenario == "streams":
        return run_streams_runs(targets, seed, messages, out, echo)
    return run_apache_eos_matrix(targets, ["assign", "group"] if mode == "both" else [mode],
                                 ["clean", "hard"] if bounce == "both" else [bounce], seed, messages, out, echo)


TARGET_STRETCH_S = 5.0  # issue 19: continuous's longest stretch without a commit
TARGET_RATE_RATIO = 0.5  # issue 19: continuous's copy rate against the fault-free run


@click.group()
def cli() -> None:
    """Chaos scenarios over the exactly-once harness."""


SUMMARY_SKIP = ("committed_offsets", "input_ends", "commit_times", "commit_times_by_copier", "events", "faults")


@cli.command()
@click.option("--scenario", type=click.Choice([*SCENARIOS, *EXTRA_SCENARIOS, "share", "share-churn", "mixed-tv",
                                              *JAVA_SCENARIOS, "none", "all"]),
              default="all", show_default=True)
@click.option("--seed", type=int, default=None, help="Random seed (printed; reuse it to replay).")
@click.option("--messages", type=int, default=None,
              help=f"Messages to copy [4000; continuous and its baseline: {CONT_MESSAGES}].")
@click.option("--copiers", type=int, default=2, show_default=True)
@click.option("--duration", type=float, default=None,
              help=f"Pace the copiers so each copy takes about this many seconds, 0: full speed "
                   f"[40; continuous and its baseline: {CONT_DURATION_S:.0f}].")
@click.option("--timeout", type=float, default=None,
              help=f"Per scenario, seconds [150; continuous: {CONT_TIMEOUT_S:.0f}].")
@click.option("--baseline/--no-baseline", default=True, show_default=True,
              help="continuous: first run the same copy without faults (scenario none) for the rate.")
@click.option("--out", type=click.Path(path_type=Path), default=REPORT_DIR, show_default=True,
              help="Directory for each scenario's JSON report and SVG timeline.")
@click.option("--secure", is_flag=True,
              help="kaas cluster --secure (SASL_SSL, SCRAM, ACLs); the harness's clients run as least-privilege "
                   "users with only the ACLs they need.")
@click.option("--group-protocol", type=click.Choice(["classic", "consumer"]), default="classic", show_default=True,
              help="The copiers' group.protocol (consumer: KIP-848; the brokers get the copiers' 4 s session "
                   "timeout). rolling-upgrade starts them classic and moves them to consumer whatever this says.")
@click.option("--runs", type=click.IntRange(min=1), default=1, show_default=True,
              help="share: this many runs, seeds SEED, SEED+1, ...")
@click.option("--release/--no-release", default=None,
              help="share: consumers release 2%% of their deliveries (default: every other seed).")
@click.option("--target", type=click.Choice(["kaas", "apache", "both"]), default="kaas", show_default=True,
              help="apache-eos, streams, connect: the cluster (Apache: Apache Kafka 4.4, scripts/peers/apache.py).")
@click.option("--mode", type=click.Choice(["assign", "group", "both"]), default="both", show_default=True,
              help="apache-eos: copiers assigned a partition each, or one group (--group-mode).")
@click.option("--bounce", type=click.Choice(["clean", "hard", "both"]), default="both", show_default=True,
              help="apache-eos: copiers bounced with SIGTERM (clean) or SIGKILL (hard).")
def run(scenario: str, seed: int | None, messages: int | None, copiers: int, duration: float | None,
        timeout: float | None, baseline: bool, out: Path, secure: bool, group_protocol: str, runs: int,
        release: bool | None, target: str, mode: str, bounce: str) -> None:
    """Run scenarios; print a summary table; exit 0 only if every guarantee held."""
    seed = seed if seed is not None else random.randrange(1 << 30)
    if scenario == "mixed-tv":  # its own clients: librdkafka (TV1) and Java 4.4 (TV2) producers and copiers
        sys.exit(0 if run_mixed(seed, messages, out, click.echo) else 1)
    if scenario in JAVA_SCENARIOS:  # Apache's Java tools / Kafka Streams: java_runs
        sys.exit(0 if run_java(scenario, target, mode, bounce, seed, messages, out, click.echo) else 1)
    if scenario in ("share", "share-churn"):  # its own harness: share consumers, not the EOS copiers
        ok = run_share_runs(seed, runs, duration if duration is not None else SHARE_SECONDS, out, click.echo, release,
                            churn=scenario == "share-churn")
        sys.exit(0 if ok else 1)
    names = SCENARIOS if scenario == "all" else (scenario,)
    results = []

    def one(name: str, s: int) -> dict:
        long = name in ("continuous", "none") and scenario in ("continuous", "none", "all")
        churn = name == "consumer-churn"
        m = messages or (CHURN_MESSAGES if churn else CONT_MESSAGES if long else 4000)
        d = duration if duration is not None else (CONT_DURATION_S if long else ROLLING_DURATION_S
                                                   if name == "rolling-restart" else 60 if churn else 40)
        t = timeout or (CONT_TIMEOUT_S if name in ("continuous", "consumer-churn") else 150)
        click.echo(f"== scenario {name} (seed {s}, {m} messages, paced to {d:.0f} s{', secure' if secure else ''}, "
                   f"group.protocol={group_protocol})")
        # continuous's report is written below, with its baseline's figures
        r = run_scenario(name, s, m, copiers, t, click.echo, d, None if name == "continuous" else out, secure,
                         group_protocol)
        if not r["ok"]:
            for line in r["violations"] + [f"fatal: {f}" for f in r["fatal"]]:
                click.echo(f"   {line}")
            if not r["copy_completed"]:
                click.echo("   the copy did not complete")
            click.echo(f"!! scenario {name} FAILED — replay with: python scripts/chaos run --scenario {name} --seed {s}"
                       f"{' --secure' if secure else ''}"
                       f"{' --group-protocol consumer' if group_protocol == 'consumer' else ''}")
        return r

    for i, name in enumerate(names):
        if name == "continuous" and baseline:
            base = one("none", seed + i)
            results.append(base)
        r = one(name, seed + i)
        if name == "continuous":
            rate = r["msgs_per_s"] if r["copy_completed"] else 0.0
            base_rate = base["msgs_per_s"] if baseline and base["copy_completed"] else None
            r["baseline_msgs_per_s"] = base_rate
            r["rate_vs_baseline"] = round(rate / base_rate, 2) if base_rate else None
            r["targets"] = {
                "copy completed": r["copy_completed"],
                f"longest stretch without a commit <= {TARGET_STRETCH_S:.0f} s":
                    r["longest_no_commit_s"] is not None and r["longest_no_commit_s"] <= TARGET_STRETCH_S,
                f"rate >= {TARGET_RATE_RATIO:.0%} of fault-free": None if r["rate_vs_baseline"] is None
                else r["rate_vs_baseline"] >= TARGET_RATE_RATIO,
                "0 anomalies": r["ok"]}
            write_report(r, out, click.echo)
        results.append(r)
    click.echo(f"{'scenario':<26} {'seed':>11} {'msgs':>6} {'kills':>5} {'recovery s':>10} {'stretch s':>9} "
               f"{'msgs/s':>7} {'txn ok':>7} {'aborted':>7} {'dups':>5} {'lost':>5} {'aborted visible':>15} "
               f"{'offsets':>7} {'secs':>6}  result")
    for r in results:
        rec = "-" if r["recovery_s"] is None else f"{r['recovery_s']:.2f}"
        stretch = "-" if r["longest_no_commit_s"] is None else f"{r['longest_no_commit_s']:.2f}"
        name = r["scenario"] + (" (secure)" if r.get("secure") else "") + (
            " (consumer)" if r.get("group_protocol") == "consumer" and r["scenario"] not in ("rolling-upgrade",
                                                                                           "consumer-churn") else "")
        click.echo(f"{name:<26} {r['seed']:>11} {r['messages']:>6} {r['kills']:>5} {rec:>10} {stretch:>9} "
                   f"{r['msgs_per_s']:>7} {r['transactions_committed']:>7} {r['transactions_aborted']:>7} "
                   f"{r['duplicates']:>5} {r['losses']:>5} {r['aborted_visible']:>15} {str(r['offsets_match']):>7} "
                   f"{r['seconds']:>6}  {'ok' if r['ok'] else 'FAILED'}")
    for r in results:
        for target, met in r.get("targets", {}).items():
            click.echo(f"  {r['scenario']} target: {target}: {'-' if met is None else 'yes' if met else 'NO'}")
    for r in results:
        click.echo(json.dumps({k: v for k, v in r.items() if k not in SUMMARY_SKIP}))
    sys.exit(0 if all(r["ok"] for r in results) else 1)

