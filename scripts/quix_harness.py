#!/usr/bin/env python3
"""The stream-processor harness: an unmodified quixstreams app, killed, restored from a
compacted changelog.

    python scripts/quix_harness.py run                       # 3 brokers, 6000 messages
    python scripts/quix_harness.py run --messages 2000 --keys 10 --ensure-venv

1. starts a fresh kaas cluster (``--brokers``, with ``--log-cleaner-backoff-ms 500``);
2. starts ``scripts/quix_app.py`` with the quix venv's python (``.venv-quix``, built by
   ``make .venv-quix``: quixstreams pins its own confluent-kafka): an exactly-once
   stateful count per key (``State.get``/``State.set``) whose changelog topic quixstreams
   creates itself, compacted; once it exists the harness lowers its ``segment.bytes``,
   ``segment.ms`` and ``min.cleanable.dirty.ratio`` (IncrementalAlterConfigs) so that the
   broker cleans it while the app runs;
3. writes N keyed messages over K keys (value: the message's sequence number within its key);
4. once the broker has cleaned the changelog (``log_cleaned`` for it, with records removed)
   and the app has committed about ``--kill-at`` of the input, SIGKILLs the app in the
   middle of a transaction, deletes its state directory and starts it again: it must
   restore its counts from the compacted changelog and carry on;
5. once the app's committed offsets reach the input's end, stops it (SIGTERM) and checks
   with read_committed consumers: per key the output counts are exactly 1..n_k in order,
   each with the sequence number of the n-th input message of that key (no duplicate, no
   gap), n_k is the number of input messages with that key, and the changelog's latest
   value per key is that final count, while it holds fewer records than its offsets span
   (the cleaner removed some).

Prints progress, a summary table and one JSON line. Exit status 0 only when everything held.
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from eos_harness import create_topics, interrupt_on_sigterm  # noqa: E402 — retries while the cluster elects

APP = ROOT / "scripts" / "quix_app.py"
DEFAULT_QUIX_PYTHON = ROOT / ".venv-quix" / "bin" / "python"
# Small segments, cleaned as soon as they close: the changelog is compacted within seconds.
CHANGELOG_CONFIGS = {"segment.bytes": "1024", "segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01"}


# ---------------------------------------------------------------------------- the app

class App:
    """The quixstreams app as a child process of its own (quix venv's python)."""

    def __init__(self, python: str, cfg: dict, log_path: Path):
        self.python = python
        self.cfg = cfg
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> App:
        logf = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen([self.python, str(APP), json.dumps(self.cfg)], stdout=logf,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(ROOT))
        finally:
            logf.close()
        return self

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (quixstreams commits its checkpoint and closes), SIGKILL after ``timeout``."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


# ---------------------------------------------------------------------------- phases

def wait_changelog(bootstrap: str, prefix: str, app: App, timeout: float) -> str:
    """The name of the changelog topic quixstreams created (it starts with ``prefix``)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if app.exited() is not None:
            raise click.ClickException(f"the app exited with {app.exited()} before creating its changelog")
        names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)]
        if names:
            return sorted(names)[0]
        time.sleep(0.2)
    raise click.ClickException(f"no changelog topic {prefix}* after {timeout}s")


def alter_changelog(bootstrap: str, topic: str) -> dict[str, str]:
    """Lower the changelog's segment size and dirty ratio; returns its configs as described after."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in CHANGELOG_CONFIGS.items()])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    entries = next(iter(described.values())).result(30)
    return {k: entries[k].value for k in ("cleanup.policy", *CHANGELOG_CONFIGS)}


def seed(bootstrap: str, topic: str, n: int, keys: int, rnd: random.Random) -> dict[str, int]:
    """Write N messages over K keys (each key's value: its next sequence number, from 1);
    returns the number written per key. Raises unless every one was acknowledged."""
    from confluent_kafka import Producer

    acked = [0]

    def on_delivery(err, _msg) -> None:
        if err is None:
            acked[0] += 1

    per_key: dict[str, int] = collections.Counter()
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for _ in range(n):
        key = f"key-{rnd.randrange(keys):03d}"
        per_key[key] += 1
        while True:
            try:
                p.produce(topic, key=key.encode(), value=json.dumps({"seq": per_key[key]}).encode(),
                          on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    if p.flush(120) != 0 or acked[0] != n:
        raise click.ClickException(f"seeding did not complete: {acked[0]}/{n} acknowledged")
    return dict(per_key)


def cleaned_passes(data: Path, topic: str) -> list[dict]:
    """The brokers' ``log_cleaned`` lines (JSON logs) for ``topic``."""
    passes = []
    for path in sorted((data / "run").glob("kaas-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if '"log_cleaned"' not in line or topic not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("event") == "log_cleaned" and rec.get("topic") == topic:
                passes.append(rec)
    return passes


def committed_total(consumer, topic: str, partitions: int) -> int:
    """How many input messages the app's group has committed (all partitions)."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
    except KafkaException:
        return -1
    return sum(max(tp.offset, 0) for tp in got if not tp.error)


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float) -> list:
    """Every record of ``topic`` a read_committed consumer sees, read until its position in
    every partition reaches the high watermark: not to the first end-of-partition, which
    read_committed reports at the last stable offset, short of what a transaction still
    open (the killed app's, until the coordinator aborts it) holds back. Returns
    (partition, offset, key, value) tuples."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{uuid.uuid4()}",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + timeout
        while True:
            msgs = c.consume(1000, 0.5)
            for m in msgs:
                if not m.error():
                    out.append((m.partition(), m.offset(), m.key(), m.value()))
            if msgs:
                continue
            highs = [c.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in tps]
            behind = {tp.partition: (tp.offset, hw) for tp, hw in zip(c.position(tps), highs) if tp.offset < hw}
            if not behind:
                return out
            if time.monotonic() > deadline:
                raise click.ClickException(f"read_committed of {topic} did not reach the high watermark in "
                                           f"{timeout}s: partition: (position, high watermark) {behind}")
    finally:
        c.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4()}"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
    finally:
        c.close()


def verify_output(recs: list, per_key: dict[str, int]) -> dict:
    """Per key: counts exactly 1..n_k in order, each carrying the n-th input's sequence number."""
    seen: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    for _p, _o, k, v in recs:
        doc = json.loads(v)
        seen[k.decode()].append((doc["count"], doc["seq"]))
    duplicates = gaps = disorder = mismatched = wrong_final = 0
    violations: list[str] = []
    for key in sorted(set(per_key) | set(seen)):
        got = seen.get(key, [])
        counts = [c for c, _ in got]
        want = per_key.get(key, 0)
        dup = len(counts) - len(set(counts))
        missing = sorted(set(range(1, want + 1)) - set(counts))
        extra = sorted(set(counts) - set(range(1, want + 1)))
        duplicates += dup
        gaps += len(missing)
        if counts != sorted(counts):
            disorder += 1
        bad_seq = [(c, s) for c, s in got if c != s]
        mismatched += len(bad_seq)
        final = counts[-1] if counts else 0
        if final != want:
            wrong_final += 1
        if dup or missing or extra or bad_seq or counts != sorted(counts) or final != want:
            dups = sorted(c for c, n in collections.Counter(counts).items() if n > 1)
            violations.append(f"{key}: {want} inputs, {len(counts)} outputs, final count {final}; "
                              f"duplicates {dups[:10]} missing {missing[:10]} unexpected {extra[:10]} "
                              f"count!=seq {bad_seq[:5]}{' out of order' if counts != sorted(counts) else ''}")
    return {"output_records": len(recs), "keys_seen": len(seen), "duplicates": duplicates, "gaps": gaps,
            "keys_out_of_order": disorder, "count_seq_mismatches": mismatched,
            "keys_with_wrong_final_count": wrong_final, "output_violations": violations}


def verify_changelog(recs: list, ends: list[int], passes_total: list[dict], per_key: dict[str, int]) -> dict:
    """The changelog after the run: its latest value per key is the key's final count, and
    the cleaner removed records from it."""
    latest: dict[str, int] = {}
    for _p, _o, k, v in recs:
        # quixstreams' changelog key: the message key and the state key, JSON, joined by "|"
        msg_key, _, state_key = k.decode().partition("|")
        if json.loads(state_key) == "count":
            latest[json.loads(msg_key)] = json.loads(v) if v is not None else None
    stale = {k: (latest.get(k), n) for k, n in per_key.items() if latest.get(k) != n}
    removed = sum(int(p.get("records_removed", 0)) for p in passes_total)
    cleaned = {p["partition"] for p in passes_total if p.get("records_removed", 0) > 0}
    return {"changelog_records": len(recs), "changelog_offsets": sum(ends), "changelog_passes": len(passes_total),
            "changelog_partitions_cleaned": f"{len(cleaned)}/{len(ends)}",
            "changelog_records_removed": removed, "changelog_stale_keys": len(stale),
            "changelog_violations": [f"changelog latest for {k}: {got} != final count {want}"
                                     for k, (got, want) in sorted(stale.items())[:10]]}


# ---------------------------------------------------------------------------- the run

def run_harness(cfg: dict, data: Path, work: Path, echo=click.echo) -> dict:
    bootstrap = cfg["bootstrap"]
    rnd = random.Random(cfg["seed"])
    create_topics(bootstrap, {cfg["input"]: cfg["partitions"], cfg["output"]: cfg["partitions"]})
    state_dir = work / "state"
    app_cfg = {"bootstrap": bootstrap, "input": cfg["input"], "output": cfg["output"], "group": cfg["group"],
               "state_dir": str(state_dir), "commit_interval": cfg["commit_interval"], "pace_s": cfg["pace_ms"] / 1000,
               "txn_id": None if cfg["random_txn_id"] else f"{cfg['group']}-app",
               "transaction_timeout_ms": cfg["transaction_timeout_ms"], "loglevel": cfg["app_loglevel"]}
    result: dict = {"fatal": [], "restarts": 0}
    apps = [App(cfg["quix_python"], app_cfg, work / "app-1.log")]
    from confluent_kafka import Consumer

    mon = Consumer({"bootstrap.servers": bootstrap, "group.id": cfg["group"], "enable.auto.commit": False})
    t0 = time.monotonic()
    deadline = t0 + cfg["timeout"]
    try:
        apps[0].start()
        changelog = wait_changelog(bootstrap, f"changelog__{cfg['group']}", apps[0], 60)
        result["changelog_topic"] = changelog
        result["changelog_configs"] = alter_changelog(bootstrap, changelog)
        echo(f"changelog {changelog}: {result['changelog_configs']}")
        per_key = seed(bootstrap, cfg["input"], cfg["messages"], cfg["keys"], rnd)
        echo(f"seeded {cfg['messages']} messages over {len(per_key)} keys in {time.monotonic() - t0:.1f}s")
        n = cfg["messages"]
        killed = False
        last_print = 0.0
        while True:
            now = time.monotonic()
            if now > deadline:
                result["fatal"].append(f"timed out after {cfg['timeout']}s")
                break
            app = apps[-1]
            if app.exited() is not None:
                result["fatal"].append(f"the app exited with {app.exited()} (log: {app.log_path})")
                break
            done = committed_total(mon, cfg["input"], cfg["partitions"])
            passes = cleaned_passes(data, changelog)
            if now - last_print >= 1.0:
                last_print = now
                echo(f"  {now - t0:5.1f}s committed {max(done, 0)}/{n}  changelog cleaned "
                     f"{len(passes)}x ({sum(p['records_removed'] for p in passes)} records removed)")
            if not killed:
                compacted = any(p["records_removed"] > 0 for p in passes)
                if done >= n:
                    result["fatal"].append("the app finished the input before the kill "
                                           f"(changelog compacted: {compacted}); slow it with --pace-ms")
                    break
                if compacted and done >= cfg["kill_at"] * n:
                    app.kill()
                    killed = True
                    result.update({"killed_at_committed": done, "killed_after_s": round(now - t0, 1),
                                   "passes_before_kill": len(passes),
                                   "cleaned_before_kill": sorted({p["partition"] for p in passes
                                                                  if p["records_removed"] > 0}),
                                   "removed_before_kill": sum(p["records_removed"] for p in passes)})
                    state_size = sum(f.stat().st_size for f in state_dir.rglob("*") if f.is_file())
                    shutil.rmtree(state_dir)
                    echo(f"SIGKILLed the app at {done}/{n} committed, after {len(passes)} cleaning passes of "
                         f"the changelog; deleted its state directory ({state_size} bytes); restarting")
                    result["restarts"] += 1
                    apps.append(App(cfg["quix_python"], app_cfg, work / "app-2.log").start())
                    continue
            elif done >= n:
                break
            time.sleep(0.2)
        result["seconds_to_done"] = round(time.monotonic() - t0, 1)
    finally:
        mon.close()
        rcs = [a.stop() for a in apps]
    result["app_exit_codes"] = rcs
    # quixstreams logs 'Recovery successful for <RecoveryPartition "changelog__...[N]">'
    restored = re.findall(r'Recovery successful for <RecoveryPartition "[^"]*\[(\d+)\]">',
                          apps[1].log_text() if len(apps) > 1 else "")
    result["recovered_partitions"] = sorted({int(p) for p in restored})
    if result["fatal"]:
        return result
    out = read_all(bootstrap, cfg["output"], cfg["partitions"], 60)
    result.update(verify_output(out, per_key))
    cl = read_all(bootstrap, changelog, cfg["partitions"], 60)
    result.update(verify_changelog(cl, end_offsets(bootstrap, changelog, cfg["partitions"]),
                                   cleaned_passes(data, changelog), per_key))
    return result


def judge(result: dict, cfg: dict) -> None:
    checks = result["checks"] = []

    def check(name: str, value, good: bool) -> None:
        checks.append((name, value, good))

    check("messages", cfg["messages"], True)
    check("app SIGKILLed and restarted with an empty state dir", result.get("restarts", 0),
          result.get("restarts", 0) == 1)
    if "killed_at_committed" in result:
        check("  committed input when killed", result["killed_at_committed"], True)
        check("  changelog cleaning passes before the kill", result["passes_before_kill"],
              result["passes_before_kill"] >= 1)
        check("  changelog records removed before the kill", result["removed_before_kill"],
              result["removed_before_kill"] > 0)
        check("  changelog partitions cleaned before the kill", result["cleaned_before_kill"], True)
        check("  changelog partitions the restart restored", result["recovered_partitions"],
              bool(result["recovered_partitions"]))
        both = sorted(set(result["cleaned_before_kill"]) & set(result["recovered_partitions"]))
        check("  restored from a partition already cleaned", both, bool(both))
    if "output_records" in result:
        check("output records (read_committed)", result["output_records"], result["output_records"] == cfg["messages"])
        check("duplicates", result["duplicates"], result["duplicates"] == 0)
        check("gaps", result["gaps"], result["gaps"] == 0)
        check("keys out of order", result["keys_out_of_order"], result["keys_out_of_order"] == 0)
        check("count != input sequence number", result["count_seq_mismatches"], result["count_seq_mismatches"] == 0)
        check("keys whose final count != inputs", result["keys_with_wrong_final_count"],
              result["keys_with_wrong_final_count"] == 0)
        check("changelog cleaning passes (whole run)", result["changelog_passes"], result["changelog_passes"] >= 1)
        # informational: a partition whose leader did not apply the altered configs keeps
        # 128 MiB segments and is never cleaned during the run
        check("changelog partitions with records removed", result["changelog_partitions_cleaned"], True)
        check("changelog records removed by the cleaner", result["changelog_records_removed"],
              result["changelog_records_removed"] > 0)
        check("changelog records left / offsets spanned",
              f"{result['changelog_records']}/{result['changelog_offsets']}",
              result["changelog_records"] < result["changelog_offsets"])
        check("changelog keys whose latest != final count", result["changelog_stale_keys"],
              result["changelog_stale_keys"] == 0)
    result["violations"] = result.get("output_violations", []) + result.get("changelog_violations", [])
    result["ok"] = not result["fatal"] and all(good for _, _, good in checks) and "output_records" in result


def print_summary(result: dict, cfg: dict) -> None:
    rows = result["checks"]
    width = max(len(r[0]) for r in rows)
    click.echo("-" * (width + 24))
    for name, value, good in rows:
        click.echo(f"{name:<{width}}  {str(value):>12}  {'ok' if good else 'FAILED'}")
    click.echo("-" * (width + 24))
    for line in result["violations"][:40]:
        click.echo(f"  {line}")
    for line in result["fatal"]:
        click.echo(f"  fatal: {line}")
    click.echo("EXACTLY-ONCE HELD (quixstreams, compacted changelog restore)" if result["ok"]
               else f"GUARANTEE BROKEN (seed {cfg['seed']})")


def build_quix_venv() -> None:
    """``make .venv-quix`` (pip needs the network the first time); fails loudly."""
    proc = subprocess.run(["make", "-C", str(ROOT), ".venv-quix"], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise click.ClickException(f"make .venv-quix failed ({proc.returncode}):\n{proc.stdout[-2000:]}"
                                   f"\n{proc.stderr[-3000:]}")


@click.group()
def cli() -> None:
    """Exactly-once harness with an unmodified quixstreams application on kaas."""


@cli.command()
@click.option("--brokers", type=int, default=3, show_default=True, help="Brokers of the fresh kaas cluster.")
@click.option("--messages", type=int, default=6000, show_default=True)
@click.option("--keys", type=int, default=30, show_default=True)
@click.option("--partitions", type=int, default=3, show_default=True, help="Of the input and output topics.")
@click.option("--pace-ms", type=float, default=2.0, show_default=True,
              help="The app sleeps this long per message, so that the kill lands mid-run.")
@click.option("--commit-interval", type=float, default=0.5, show_default=True,
              help="quixstreams' commit_interval (s): one transaction per checkpoint.")
@click.option("--kill-at", type=float, default=0.5, show_default=True,
              help="SIGKILL the app once it committed this fraction of the input (and the changelog was cleaned).")
@click.option("--random-txn-id", is_flag=True,
              help="Let quixstreams draw a random transactional.id (the killed transaction then ends "
                   "by the coordinator's timeout) instead of a stable one (fenced at restart).")
@click.option("--transaction-timeout-ms", type=int, default=10000, show_default=True)
@click.option("--cleaner-backoff-ms", type=int, default=500, show_default=True, help="--log-cleaner-backoff-ms.")
@click.option("--quix-python", type=click.Path(dir_okay=False), default=str(DEFAULT_QUIX_PYTHON),
              show_default=True, help="Python of a venv with quixstreams.")
@click.option("--ensure-venv", is_flag=True, help="Run `make .venv-quix` first.")
@click.option("--timeout", type=float, default=300, show_default=True)
@click.option("--seed", type=int, default=None, help="Random seed of the key sequence (printed).")
@click.option("--app-loglevel", default="INFO", show_default=True, help="quixstreams' loglevel (app-*.log).")
@click.option("--keep", is_flag=True, help="Keep the data directory and app logs (path printed).")
def run(brokers, messages, keys, partitions, pace_ms, commit_interval, kill_at, random_txn_id,
        transaction_timeout_ms, cleaner_backoff_ms, quix_python, ensure_venv, timeout, seed, app_loglevel,
        keep) -> None:
    """Count per key with quixstreams (exactly-once), kill and restore it from its compacted
    changelog, verify; exit 0 only if every count is exact."""
    if ensure_venv:
        build_quix_venv()
    if not os.access(quix_python, os.X_OK):
        raise click.ClickException(f"{quix_python} not found: run `make .venv-quix` (or pass --ensure-venv)")
    seed = seed if seed is not None else random.randrange(1 << 30)
    from kaas.testing import ClusterProcess  # the project's own launcher

    work = Path(tempfile.mkdtemp(prefix="kaas-quix-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    cluster = ClusterProcess(work / "data", brokers,
                             extra=["--log-cleaner-backoff-ms", str(cleaner_backoff_ms), "--log-json"])
    run_id = uuid.uuid4().hex[:8]
    cfg = {"messages": messages, "keys": keys, "partitions": partitions, "pace_ms": pace_ms,
           "commit_interval": commit_interval, "kill_at": kill_at, "random_txn_id": random_txn_id,
           "transaction_timeout_ms": transaction_timeout_ms, "quix_python": quix_python, "timeout": timeout,
           "seed": seed, "app_loglevel": app_loglevel, "input": f"quix-in-{run_id}", "output": f"quix-out-{run_id}",
           "group": f"quix-{run_id}"}
    ok = False
    try:
        cluster.start()
        cfg["bootstrap"] = cluster.bootstrap
        click.echo(f"quix harness: seed={seed} bootstrap={cluster.bootstrap} work={work}")
        result = run_harness(cfg, work / "data", work)
        judge(result, cfg)
        ok = result["ok"]
    finally:
        cluster.stop()
        if keep or not ok:
            click.echo(f"kept {work} (app logs app-*.log, broker logs data/run/)")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print_summary(result, cfg)
    click.echo(json.dumps({k: v for k, v in result.items()
                           if k not in ("checks", "output_violations", "changelog_violations")}))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    interrupt_on_sigterm()  # stop the app and the cluster on the way out
    cli()
