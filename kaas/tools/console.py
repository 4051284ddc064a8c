"""``kaas console produce|consume``: records from standard input to a topic and from a topic
to standard output, as Apache's kafka-console-producer and kafka-console-consumer: their
flags (``--topic``, ``--property parse.key=true``, ``--from-beginning``, ``--max-messages``,
``--isolation-level``...) and their line formats (``LineMessageReader``,
``DefaultMessageFormatter``); plus ``--offset`` per partition and ``--from-timestamp``.

The producer sends uncompressed batches without a producer id (not idempotent) to each
partition's leader (Produce v9): a keyed record goes where Apache's default partitioner
puts it (murmur2), the unkeyed records of one batch to one partition in turn. The consumer
reads partitions by assignment (no group), from their leaders (Fetch v12), and prints as it
reads.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v9.response import ProduceResponse
from kio.schema.types import TopicName
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from kaas.tools._console_format import Formatter, LineReader, properties
from kaas.tools._offsets import EARLIEST, LATEST, leaders, list_offsets
from kaas.tools._records import Fetched, Outgoing, decode_batches, encode_batch, partition_for
from kaas.tools._wire import (
    RETRIABLE,
    Cluster,
    F,
    RetriableError,
    bootstrap_option,
    code_name,
    command_config_option,
    json_option,
    open_cluster,
    retry,
)

__all__ = ["console"]

TP = tuple[str, int]
ISOLATION = {"read_uncommitted": 0, "read_committed": 1}


@click.group("console")
def console() -> None:
    """Produce lines of standard input, consume records to standard output."""


def _property_option(apache_name: str) -> Callable[[F], F]:
    """``--property`` and Apache 4.4's name for it (``--reader-property``, ``--formatter-property``)."""
    return click.option(f"--{apache_name}", "--property", "props", multiple=True, metavar="KEY=VALUE",
                        help=f"A {apache_name.split('-')[0]} property, as Apache's (repeatable).")


def _partition_count(c: Cluster, topic: str) -> int:
    md = c.metadata([topic])
    t = md.topics[0]
    if t.error_code != ErrorCode.none:
        raise click.ClickException(f"topic {topic}: {code_name(t.error_code)}")
    return len(t.partitions)


def _send(c: Cluster, topic: str, batches: dict[int, list[Outgoing]], acks: int, timeout_ms: int) -> dict[int, int]:
    """One batch per partition, at each leader; the base offset each got."""
    done: dict[int, int] = {}

    def attempt() -> None:
        led = leaders(c, [topic])
        by_leader: dict[int, list[int]] = {}
        for p in batches:
            if p in done:
                continue
            leader = led.get((topic, p), -1)
            if leader < 0:
                raise RetriableError(ErrorCode.leader_not_available, f"{topic}-{p}")
            by_leader.setdefault(leader, []).append(p)
        retriable = None
        now = int(time.time() * 1000)
        for leader, parts in by_leader.items():
            r: ProduceResponse = c.call(leader, ProduceRequest(
                transactional_id=None, acks=i16(acks), timeout=i32Timedelta.parse(
                    datetime.timedelta(milliseconds=timeout_ms)),
                topic_data=(TopicProduceData(name=TopicName(topic), partition_data=tuple(
                    PartitionProduceData(index=i32(p), records=Records(encode_batch(batches[p], now)))
                    for p in parts)),)))
            for t in r.responses:
                for pr in t.partition_responses:
                    if pr.error_code == ErrorCode.none:
                        done[int(pr.index)] = int(pr.base_offset)
                    elif pr.error_code in RETRIABLE:
                        retriable = RetriableError(pr.error_code, f"Produce {topic}-{pr.index}")
                    else:
                        raise click.ClickException(f"Produce {topic}-{pr.index}: {code_name(pr.error_code)}"
                                                   + (f" ({pr.error_message})" if pr.error_message else ""))
        if retriable is not None:
            raise retriable
    retry(attempt)
    return done


@console.command("produce")
@click.option("--topic", required=True, help="The topic to produce to.")
@click.option("--partition", type=int, default=None, help="Every record to this partition (default: keyed records "
                                                          "by murmur2 of the key, others in turn).")
@_property_option("reader-property")
@click.option("--request-required-acks", "acks", type=click.Choice(["1", "-1", "all"]), default="-1",
              show_default=True, help="acks: the leader's append (1) or its durable write (-1, all).")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=200, show_default=True,
              help="Lines sent in one request.")
@click.option("--timeout", "timeout_ms", type=int, default=1500, show_default=True,
              help="The Produce request's timeout (ms).")
@click.option("--input", "input_", type=click.File("rb"), default="-", help="Read lines from this file "
                                                                            "(default: standard input).")
@bootstrap_option
@command_config_option
@json_option
def produce(topic: str, partition: int | None, props: tuple[str, ...], acks: str, batch_size: int, timeout_ms: int,
            input_: Any, bootstrap: str, command_config: Path | None, as_json: bool) -> None:
    """Send each line of standard input as a record of TOPIC (``--property parse.key=true``,
    ``key.separator``, ``parse.headers=true``, ``headers.delimiter``, ``headers.separator``,
    ``headers.key.separator``, ``null.marker``, ``ignore.error``)."""
    reader = LineReader(properties(props))
    sent: dict[int, list[int]] = {}  # partition -> [first offset, records]
    with open_cluster(bootstrap, command_config) as c:
        count = _partition_count(c, topic)
        if partition is not None and not 0 <= partition < count:
            raise click.ClickException(f"topic {topic} has no partition {partition}")
        turn = 0
        lines = iter(input_)
        while True:
            chunk = [reader.parse(line) for _, line in zip(range(batch_size), lines)]
            if not chunk:
                break
            batches: dict[int, list[Outgoing]] = {}
            for rec in chunk:
                p = partition if partition is not None else (
                    partition_for(rec.key, count) if rec.key is not None else turn % count)
                batches.setdefault(p, []).append(rec)
            turn += 1
            for p, base in _send(c, topic, batches, -1 if acks == "all" else int(acks), timeout_ms).items():
                first, n = sent.get(p, [base, 0])
                sent[p] = [min(first, base), n + len(batches[p])]
    out = {"topic": topic, "records": sum(n for _, n in sent.values()),
           "partitions": [{"partition": p, "first_offset": f, "records": n} for p, (f, n) in sorted(sent.items())]}
    if as_json:
        click.echo(json.dumps(out))


def _start_offsets(c: Cluster, tps: list[TP], offset: str | None, from_beginning: bool,
                   from_timestamp: int | None) -> dict[TP, int]:
    """Where each partition is read from: ``--offset`` (earliest, latest or a number),
    ``--from-timestamp`` (the first offset at or after it; the end when none), else the
    beginning with ``--from-beginning``, else the end."""
    if offset is not None and offset not in ("earliest", "latest"):
        try:
            at = int(offset)
        except ValueError:
            raise click.BadParameter(f"{offset!r} is not earliest, latest or an offset", param_hint="--offset") \
                from None
        return dict.fromkeys(tps, at)
    if from_timestamp is not None:
        found = list_offsets(c, tps, from_timestamp)
        ends = list_offsets(c, tps, LATEST)
        return {tp: o if o is not None and o >= 0 else (ends.get(tp) or 0) for tp, o in found.items()}
    earliest = offset == "earliest" or (offset is None and from_beginning)
    found = list_offsets(c, tps, EARLIEST if earliest else LATEST)
    missing = [f"{t}-{p}" for (t, p), o in found.items() if o is None]
    if missing:
        raise click.ClickException(f"no offsets for {', '.join(missing)}")
    return {tp: int(o) for tp, o in found.items() if o is not None}


def _fetch_round(c: Cluster, positions: dict[TP, int], isolation: int, wait_ms: int) -> list[tuple[TP, Fetched]]:
    """One Fetch per leader of the partitions' positions; the records read, in order per
    partition (positions move past them)."""
    led = leaders(c, sorted({t for t, _ in positions}))
    by_leader: dict[int, list[TP]] = {}
    for tp in sorted(positions):
        by_leader.setdefault(led.get(tp, -1), []).append(tp)
    got: list[tuple[TP, Fetched]] = []
    for leader, tps in by_leader.items():
        if leader < 0:
            time.sleep(0.2)
            continue
        topics: dict[str, list[FetchPartition]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(FetchPartition(partition=i32(p), fetch_offset=i64(positions[(t, p)]),
                                                           partition_max_bytes=i32(1 << 20)))
        r: FetchResponse = c.call(leader, FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=wait_ms)), min_bytes=i32(1),
            max_bytes=i32(8 << 20), isolation_level=i8(isolation), session_epoch=i32(-1),
            topics=tuple(FetchTopic(topic=TopicName(t), partitions=tuple(ps)) for t, ps in topics.items()),
            forgotten_topics_data=()))
        for rt in r.responses:
            for rp in rt.partitions:
                tp = (rt.topic, int(rp.partition_index))
                if rp.error_code in RETRIABLE:
                    continue
                if rp.error_code != ErrorCode.none:
                    raise click.ClickException(f"Fetch {tp[0]}-{tp[1]}: {code_name(rp.error_code)}")
                aborted = [(int(a.producer_id), int(a.first_offset)) for a in rp.aborted_transactions or ()]
                data = bytes(rp.records or b"")
                for rec in decode_batches(data, aborted):
                    if rec.offset >= positions[tp]:
                        got.append((tp, rec))
                ends = [h.next_offset for _, h in _headers(data)]
                if ends:
                    positions[tp] = max(positions[tp], ends[-1])
    return got


def _headers(data: bytes) -> list[Any]:
    from kaas.wire.batch import iter_headers

    return list(iter_headers(data))


@console.command("consume")
@click.option("--topic", required=True, help="The topic to read.")
@click.option("--partition", type=int, default=None, help="Only this partition (default: every partition).")
@click.option("--offset", default=None, help="Where to start: earliest, latest or an offset (needs --partition).")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset (default: the latest).")
@click.option("--from-timestamp", type=int, default=None, metavar="MS",
              help="Start at the first record whose timestamp is at or after MS (epoch milliseconds).")
@click.option("--max-messages", type=int, default=None, help="Stop after this many records.")
@click.option("--timeout-ms", type=int, default=None, help="Stop when no record came for this long.")
@click.option("--isolation-level", type=click.Choice(sorted(ISOLATION)), default="read_uncommitted",
              show_default=True, help="read_committed: only committed transactions' records, up to the last "
                                      "stable offset.")
@_property_option("formatter-property")
@bootstrap_option
@command_config_option
@json_option
def consume(topic: str, partition: int | None, offset: str | None, from_beginning: bool, from_timestamp: int | None,
            max_messages: int | None, timeout_ms: int | None, isolation_level: str, props: tuple[str, ...],
            bootstrap: str, command_config: Path | None, as_json: bool) -> None:
    """Print TOPIC's records (``--property print.key=true``, ``print.timestamp``,
    ``print.partition``, ``print.offset``, ``print.headers``, ``print.value``,
    ``key.separator``, ``line.separator``, ``headers.separator``, ``null.literal``); with
    ``--json`` one JSON array of the records at the end."""
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    if sum([offset is not None, from_beginning, from_timestamp is not None]) > 1:
        raise click.UsageError("give one of --offset, --from-beginning and --from-timestamp")
    fmt = Formatter(properties(props))
    out = sys.stdout.buffer
    taken: list[dict[str, Any]] = []
    n = 0
    with open_cluster(bootstrap, command_config) as c:
        count = _partition_count(c, topic)
        if partition is not None and not 0 <= partition < count:
            raise click.ClickException(f"topic {topic} has no partition {partition}")
        tps = [(topic, partition)] if partition is not None else [(topic, p) for p in range(count)]
        positions = _start_offsets(c, tps, offset, from_beginning, from_timestamp)
        last = time.monotonic()
        while max_messages is None or n < max_messages:
            if timeout_ms is not None and (time.monotonic() - last) * 1000 >= timeout_ms:
                break
            wait = 500 if timeout_ms is None else max(1, min(500, timeout_ms))
            for (t, p), rec in _fetch_round(c, positions, ISOLATION[isolation_level], wait):
                if max_messages is not None and n >= max_messages:
                    break
                n += 1
                last = time.monotonic()
                if as_json:
                    taken.append(fmt.as_dict(t, p, rec))
                else:
                    out.write(fmt.format(p, rec))
                    out.flush()
    if as_json:
        click.echo(json.dumps(taken))
    click.echo(f"Processed a total of {n} messages", err=True)
