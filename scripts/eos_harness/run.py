"""One run of the harness: topics, (--secure) users and ACLs, seed, copy, verify, clean up."""

from __future__ import annotations

import shutil
import signal
import tempfile
import time
from pathlib import Path

import click

from .acls import PROBE_EXPECT, Grants, clean_up, grant_least_privilege
from .config import HarnessConfig, consumer_broker_args, security
from .copier import CopierPool
from .topics import create_topics, seed
from .verify import VerifyError, verify


def run_harness(cfg: HarnessConfig, *, chaos=None, echo=click.echo) -> dict:
    """Seed, copy, verify. ``chaos(elapsed_s, transactions_committed)`` is called about every
    0.2 s while copying; a chaos object with a ``copiers`` attribute gets the
    :class:`CopierPool` there before the first call (to kill and restart copiers). With
    ``cfg.secure`` (and the admin's settings in ``cfg.security["admin"]``), the
    least-privilege users and ACLs are made once the topics exist
    (:func:`grant_least_privilege`), and the result's ``security`` says what was granted and
    whom every copier ran as. They are removed again at the end, also when the run fails
    or is interrupted (:func:`revoke_least_privilege`), unless ``cfg.keep_users``;
    ``security.cleanup`` says what was removed and what is left, and each removal that
    failed is a line of the result's ``warnings``, not a violation: the verdict is the
    cluster's guarantees (see :func:`clean_up`)."""
    create_topics(cfg.bootstrap, {cfg.input: cfg.input_partitions, cfg.output: cfg.output_partitions},
                  conf=security(cfg))
    grants = Grants()
    cleanup = None
    try:
        secured = None
        if cfg.secure:  # the config the run goes on with has the users' client settings
            cfg, secured = grant_least_privilege(cfg, echo, grants)
        result = _seed_copy_verify(cfg, secured, chaos, echo)
    finally:
        if grants:
            cleanup = clean_up(cfg, grants, echo)
    if cleanup is not None:
        result["security"]["cleanup"] = cleanup
        if not cleanup["kept"]:
            result["warnings"] += [f"not removed from the cluster: {what} ({why})"
                                   for what, why in cleanup["left"].items()]
    return result



def _seed_copy_verify(cfg: HarnessConfig, secured: dict | None, chaos, echo) -> dict:
    """``run_harness`` once the topics, and with --secure the users (``secured``), exist."""
    t0 = time.monotonic()
    # raises unless all acked
    seed(cfg.bootstrap, cfg.input, cfg.messages, cfg.input_partitions, conf=security(cfg, "producer"))
    echo(f"seeded {cfg.messages} messages in {time.monotonic() - t0:.1f}s")
    run_dir = Path(tempfile.mkdtemp(prefix="kaas-eos-copiers-"))
    pool = CopierPool(cfg, run_dir)
    if chaos is not None and hasattr(chaos, "copiers"):
        chaos.copiers = pool
    progress: dict[tuple[int, int], tuple[int, int, int]] = {}  # (copier, incarnation) -> counts
    aborted_tags: set[str] = set()
    fatal: list[str] = []
    commit_ms: list[float] = []
    commit_times: list[float] = []  # wall clock of every committed transaction
    commits_by_copier: dict[int, list[float]] = {}
    copier_users: set[str | None] = set()  # the SASL user of each copier incarnation
    protocols: dict[tuple[int, int], str] = {}  # (copier, incarnation) -> its group.protocol
    started_at = time.time()
    t_copy = time.monotonic()
    for i in range(cfg.copiers):
        pool.start(i)
    last_print = 0.0
    completed = False
    # per input partition: its committed offset as last seen, and when it last moved (the
    # monitor's 1 s polls; a partition stalls while its committing member is dead)
    part_seen: dict[int, tuple[int, float]] = {}
    part_stall: dict[int, float] = {}

    def drain_stats():
        for item in pool.drain():
            kind = item[0]
            if kind == "progress":
                progress[(item[1], item[2])] = tuple(item[3:6])
            elif kind == "aborted":
                aborted_tags.add(item[1])
            elif kind == "fatal":
                fatal.append(item[1])
            elif kind == "commit_at":
                commit_times.append(item[1])
                commits_by_copier.setdefault(item[2], []).append(item[1])
            elif kind == "done":
                progress[(item[1], item[2])] = tuple(item[3:6])
                commit_ms.extend(item[6])
            elif kind == "user":
                copier_users.add(item[3])
            elif kind == "protocol":
                protocols[(item[1], item[2])] = item[3]

    from confluent_kafka import Consumer, TopicPartition

    mon = Consumer({**security(cfg), "bootstrap.servers": cfg.bootstrap, "group.id": cfg.group,
                    "enable.auto.commit": False})
    tps = [TopicPartition(cfg.input, p) for p in range(cfg.input_partitions)]
    try:
        while time.monotonic() - t_copy < cfg.timeout:
            drain_stats()
            if chaos is not None:
                chaos(time.monotonic() - t_copy, len(commit_times))
            now = time.monotonic()
            if now - last_print >= 1.0:
                last_print = now
                try:
                    offsets = mon.committed(tps, 10)
                    committed = sum(max(tp.offset, 0) for tp in offsets)
                    _note_progress(part_seen, part_stall, offsets, now - t_copy)
                except Exception:  # noqa: BLE001 — coordinator moving
                    committed = -1
                c = sum(x[0] for x in progress.values())
                a = sum(x[1] for x in progress.values())
                echo(f"  [{now - t_copy:6.1f}s] committed offsets {committed}/{cfg.messages}  "
                     f"txns committed {c} aborted {a}", err=True)
                if committed >= cfg.messages:
                    completed = True
                    break
            fatal.extend(pool.died())
            if fatal:
                break
            time.sleep(0.2)
    finally:
        ended_at = time.time()
        copy_s = time.monotonic() - t_copy
        mon.close()
        pool.stop_all()
        drain_stats()
        shutil.rmtree(run_dir, ignore_errors=True)
    try:
        result = verify(cfg, aborted_tags, echo)
    except VerifyError as exc:
        raise click.ClickException(str(exc)) from None
    result.update({
        "messages": cfg.messages, "copiers": cfg.copiers, "seed": cfg.seed,
        "transactions_committed": sum(x[0] for x in progress.values()),
        "transactions_aborted": sum(x[1] for x in progress.values()),
        "copy_completed": completed,
        "copy_seconds": round(copy_s, 2), "msgs_per_s": round(cfg.messages / copy_s, 1) if copy_s else 0,
        "commit_p99_ms": round(sorted(commit_ms)[int(len(commit_ms) * 0.99)] if commit_ms else 0, 2),
        "copier_restarts": sum(pool.incarnation.values()),
        "group_protocol": cfg.group_protocol,
        # each copier's group.protocol, first incarnation to last (a rolling upgrade changes it)
        "copier_protocols": {i: [protocols[k] for k in sorted(protocols) if k[0] == i]
                             for i in sorted({k[0] for k in protocols})},
        "fatal": fatal,
        "warnings": [],
        "copy_started_at": started_at, "copy_ended_at": ended_at,
        "commit_times": sorted(commit_times),
        "longest_no_commit_by_copier_s": {i: _longest_gap(ts)
                                           for i, ts in sorted(commits_by_copier.items())},
        "commit_times_by_copier": {i: sorted(ts) for i, ts in sorted(commits_by_copier.items())},
        "longest_no_progress_by_partition_s": {p: round(g, 1) for p, g in sorted(part_stall.items())},
    })
    if secured is not None:
        ran_as = sorted(f"User:{u}" if u else "(no SASL user)" for u in copier_users)
        secured = {**secured, "copiers_ran_as": ran_as,
                   "least_privilege": secured["least_privilege"] and ran_as == [secured["principals"]["copier"]]}
        result["security"] = secured
        if not secured["least_privilege"]:
            result["violations"].append(
                f"least privilege: ACLs {'as planned' if secured['acls_match_plan'] else 'NOT as planned'}, "
                f"refused outside the plan {secured['probes']} (want {PROBE_EXPECT}), copiers ran as "
                f"{secured['copiers_ran_as']}")
    result["eos_ok"] = (result["duplicates"] == 0 and result["losses"] == 0 and result["order_violations"] == 0
                        and result["aborted_visible"] == 0 and result["phantoms"] == 0 and result["offsets_match"]
                        and result["open_txns_left"] == 0 and not result.get("read_anomalies") and not fatal)
    result["ok"] = result["eos_ok"] and (secured is None or secured["least_privilege"])
    return result


def _note_progress(seen: dict[int, tuple[int, float]], stall: dict[int, float], offsets, at: float) -> None:
    """Record, per partition, the longest time its committed offset stood still before it
    moved again (``at``: seconds into the copy)."""
    for tp in offsets:
        off = max(tp.offset, 0)
        last = seen.get(tp.partition)
        if last is None or off > last[0]:
            since = 0.0 if last is None else last[1]
            stall[tp.partition] = max(stall.get(tp.partition, 0.0), at - since)
            seen[tp.partition] = (off, at)


def _longest_gap(times: list[float]) -> float | None:
    """The longest stretch between two consecutive events (None for fewer than two)."""
    ts = sorted(times)
    return round(max(b - a for a, b in zip(ts, ts[1:])), 2) if len(ts) > 1 else None


def launch_cluster(n: int, data: Path, secure: bool = False, group_protocol: str = "classic"):
    """A fresh kaas cluster through the supervisor, on free ports (``kaas cluster --secure``
    with ``secure``; with the copiers' session timeout and heartbeat interval for
    consumer-protocol groups with ``group_protocol="consumer"``)."""
    from kaas.testing import ClusterProcess  # the project's own launcher

    extra = consumer_broker_args() if group_protocol == "consumer" else []
    return ClusterProcess(data, n, secure=secure, extra=extra).start()


def admin_settings(path: Path) -> dict:
    """The admin's security settings from client properties (``key=value``), without
    ``bootstrap.servers`` (the run's bootstrap is given apart)."""
    from kaas.testing import client_settings

    return client_settings(path)



def interrupt_on_sigterm() -> None:
    """Let SIGTERM (``kill``, a CI run cancelled) unwind a harness script as Ctrl-C does,
    through its ``finally`` blocks: what it started is stopped, what it made is removed."""
    def interrupt(_signum, _frame) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupt)

