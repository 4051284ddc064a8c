"""The click CLI: ``python scripts/eos_harness run ...``."""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import click

from .acls import PROBE_EXPECT
from .config import GROUP_PROTOCOLS, HarnessConfig
from .run import admin_settings, launch_cluster, run_harness


def print_summary(result: dict) -> None:
    rows = [
        ("messages", result["messages"], True),
        ("transactions committed", result["transactions_committed"], True),
        ("transactions aborted (deliberate or forced)", result["transactions_aborted"], True),
        ("output records (read_committed)", result["output_records"], True),
        ("duplicates", result["duplicates"], result["duplicates"] == 0),
        ("losses", result["losses"], result["losses"] == 0),
        ("order violations", result["order_violations"], result["order_violations"] == 0),
        ("aborted records visible", result["aborted_visible"], result["aborted_visible"] == 0),
        ("phantom records (never written)", result["phantoms"], result["phantoms"] == 0),
        ("not copied before the timeout", result["uncopied"], result["uncopied"] == 0),
        ("committed offsets == input end", result["offsets_match"], result["offsets_match"]),
        ("output partitions with a transaction left open", result["open_txns_left"], result["open_txns_left"] == 0),
        ("waited for open transactions to complete (s)", result["open_txn_wait_s"], True),
        ("max end-to-end latency (ms)", result["max_e2e_latency_ms"], True),
        ("copy throughput (msgs/s)", result["msgs_per_s"], True),
        ("commit_transaction p99 (ms)", result["commit_p99_ms"], True),
    ]
    sec = result.get("security")
    if sec is not None:
        rows.append(("copiers ran as (least privilege)", ", ".join(sec["copiers_ran_as"]),
                     sec["copiers_ran_as"] == [sec["principals"]["copier"]]))
        rows.append(("ACLs read back == plan", sec["acls_match_plan"], sec["acls_match_plan"]))
        rows += [(f"refused: {what}", err, err == PROBE_EXPECT[what]) for what, err in sec["probes"].items()]
        cleanup = sec.get("cleanup")
        if cleanup is not None:  # a removal that failed is a warning below, not a failure
            rows.append(("removed at the end: users + ACLs",
                         "kept" if cleanup["kept"] else f"{len(cleanup['removed_users'])} + "
                                                        f"{len(cleanup['removed_acls'])}", True))
    width = max(len(r[0]) for r in rows)
    click.echo("-" * (width + 24))
    for name, value, good in rows:
        click.echo(f"{name:<{width}}  {str(value):>12}  {'ok' if good else 'FAILED'}")
    click.echo("-" * (width + 24))
    for line in result["violations"]:
        click.echo(f"  {line}")
    for line in result["fatal"]:
        click.echo(f"  fatal: {line}")
    for line in result.get("warnings", ()):
        click.echo(f"  warning: {line}")
    if result["ok"]:
        click.echo("EXACTLY-ONCE HELD")
    elif result["eos_ok"]:
        click.echo(f"EXACTLY-ONCE HELD, LEAST PRIVILEGE DID NOT (seed {result['seed']})")
    else:
        click.echo(f"GUARANTEE BROKEN (seed {result['seed']})")



@click.group()
def cli() -> None:
    """Exactly-once harness for kaas (or any Kafka cluster)."""


@cli.command()
@click.option("--bootstrap", default=None, help="Bootstrap servers of a running cluster.")
@click.option("--start-cluster", type=int, default=0, help="Start a fresh kaas cluster of this many brokers.")
@click.option("--messages", type=int, default=10000, show_default=True)
@click.option("--copiers", type=int, default=3, show_default=True)
@click.option("--commit-every", type=int, default=100, show_default=True, help="Messages per transaction (max).")
@click.option("--abort-every", type=int, default=10, show_default=True,
              help="Abort about one transaction in this many (0: never).")
@click.option("--input-partitions", type=int, default=6, show_default=True)
@click.option("--output-partitions", type=int, default=6, show_default=True)
@click.option("--rate", type=float, default=0, help="Messages/s per copier (0: unlimited).")
@click.option("--timeout", type=float, default=300, show_default=True)
@click.option("--seed", type=int, default=None, help="Random seed (printed).")
@click.option("--secure", is_flag=True,
              help="SASL_SSL with ACLs: with --start-cluster, start kaas cluster --secure; else give the admin's "
                   "settings with --command-config. The copiers, the seeding producer and the verifier run as "
                   "SCRAM users of their own with only the ACLs they need.")
@click.option("--command-config", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="--secure with --bootstrap: the admin's client properties (key=value, librdkafka's; "
                   "e.g. DATA/run/client.properties of kaas cluster --secure).")
@click.option("--group-protocol", type=click.Choice(GROUP_PROTOCOLS), default="classic", show_default=True,
              help="The copiers' group.protocol: classic, or consumer (KIP-848; session timeout and heartbeat "
                   "interval are then the broker's: --start-cluster gives its brokers the copiers' 4 s / 1 s).")
@click.option("--keep-users", is_flag=True,
              help="--secure: leave the run's SCRAM users and ACLs on the cluster for inspection (by default "
                   "they are removed at the end, also of a failed or interrupted run; their passwords are never "
                   "shown).")
def run(bootstrap, start_cluster, messages, copiers, commit_every, abort_every, input_partitions,
        output_partitions, rate, timeout, seed, secure, command_config, group_protocol, keep_users) -> None:
    """Seed, copy with transactions, verify; exit 0 only if exactly-once held."""
    seed = seed if seed is not None else random.randrange(1 << 30)
    if command_config is not None and not secure:
        raise click.UsageError("--command-config goes with --secure")
    if keep_users and (not secure or start_cluster):
        raise click.UsageError("--keep-users goes with --bootstrap and --secure (a cluster of --start-cluster "
                               "is removed at the end)")
    if start_cluster and command_config is not None:
        raise click.UsageError("--command-config goes with --bootstrap (--start-cluster --secure makes its own admin)")
    if secure and not start_cluster and command_config is None:
        raise click.UsageError("--secure with --bootstrap needs the admin's --command-config")
    cluster = None
    tmp = None
    if start_cluster:
        tmp = Path(tempfile.mkdtemp(prefix="kaas-eos-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
        cluster = launch_cluster(start_cluster, tmp / "data", secure=secure, group_protocol=group_protocol)
        bootstrap = cluster.bootstrap
        if secure:
            command_config = cluster.client_properties
    if not bootstrap:
        raise click.UsageError("give --bootstrap or --start-cluster")
    cfg = HarnessConfig.new_run(bootstrap, seed, messages=messages, copiers=copiers, commit_every=commit_every,
                                abort_every=abort_every, input_partitions=input_partitions,
                                output_partitions=output_partitions, rate=rate, timeout=timeout,
                                group_protocol=group_protocol)
    if secure:
        cfg = replace(cfg, secure=True, keep_users=keep_users, security={"admin": admin_settings(command_config)})
    click.echo(f"eos harness: seed={seed} bootstrap={bootstrap} group.protocol={group_protocol}"
               f"{' (secure)' if secure else ''}")
    try:
        result = run_harness(cfg)
    finally:
        if cluster is not None:
            cluster.stop()
            shutil.rmtree(tmp, ignore_errors=True)
    print_summary(result)
    click.echo(json.dumps({k: v for k, v in result.items()
                           if k not in ("committed_offsets", "input_ends", "commit_times", "commit_times_by_copier")}))
    sys.exit(0 if result["ok"] else 1)
