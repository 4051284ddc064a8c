"""``kaas get-offsets`` and ``kaas delete-records``, as Apache's kafka-get-offsets
(GetOffsetShell) and kafka-delete-records: ListOffsets and DeleteRecords at each partition's
leader, with the same flags and output lines (``topic:partition:offset``; ``partition:
T-P<TAB>low_watermark: N``), and ``--json``."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import click
from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from kio.schema.delete_records.v2.response import DeleteRecordsResponse
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32, i32Timedelta, i64

from kaas.tools._offsets import leaders, list_offsets
from kaas.tools._wire import (
    RETRIABLE,
    Cluster,
    RetriableError,
    bootstrap_option,
    code_name,
    command_config_option,
    json_option,
    open_cluster,
    retry,
)
from kaas.tools.output import emit

__all__ = ["delete_records", "get_offsets", "parse_time"]

TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4, "latest-tiered": -5}
TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=30))
# Apache's exception names of DeleteRecords errors, as kafka-delete-records prints them
EXCEPTIONS = {ErrorCode.offset_out_of_range: "org.apache.kafka.common.errors.OffsetOutOfRangeException",
              ErrorCode.unknown_topic_or_partition: "org.apache.kafka.common.errors.UnknownTopicOrPartitionException",
              ErrorCode.topic_authorization_failed: "org.apache.kafka.common.errors.TopicAuthorizationException",
              ErrorCode.policy_violation: "org.apache.kafka.common.errors.PolicyViolationException"}


def parse_time(text: str) -> int:
    """``--time``: a name of ``TIMES``, -1..-5, or a timestamp in ms."""
    if text.lower() in TIMES:
        return TIMES[text.lower()]
    try:
        value = int(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a timestamp, -1..-5 or one of {', '.join(TIMES)}",
                                 param_hint="--time") from None
    if value < -5:
        raise click.BadParameter(f"{text}: a negative time must be -1..-5", param_hint="--time")
    return value


Ranges = list[tuple[int, int | None]]


def _partition_set(text: str) -> Ranges | None:
    """GetOffsetShell's partition patterns: ``3``, ``2-5`` (the upper end excluded), ``4-``
    (open), ``-3`` (below 3): [first, last] ranges, last None when open; None for an empty
    text (every partition)."""
    if not text.strip():
        return None
    out: Ranges = []
    for item in text.split(","):
        lo, dash, hi = item.strip().partition("-")
        try:
            if not dash:
                out.append((int(lo), int(lo)))
            else:
                out.append((int(lo) if lo else 0, int(hi) - 1 if hi else None))
        except ValueError:
            raise click.BadParameter(f"{item!r} is not N, N-M, N- or -M", param_hint="--topic-partitions") from None
    return out


def _matches(ranges: Ranges | None, p: int) -> bool:
    return ranges is None or any(lo <= p and (hi is None or p <= hi) for lo, hi in ranges)


def _selected(c: Cluster, topic: str | None, partitions: str, topic_partitions: str,
              exclude_internal: bool) -> list[tuple[str, int]]:
    """The partitions GetOffsetShell's filters select: ``--topic`` a regular expression of
    topic names with ``--partitions``, or ``--topic-partitions`` ``REGEX[:PARTS],...``."""
    if topic_partitions and (topic or partitions):
        raise click.UsageError("--topic-partitions excludes --topic and --partitions")
    specs: list[tuple[re.Pattern[str], Ranges | None]] = []
    try:
        if topic_partitions:
            for item in topic_partitions.split(","):
                pattern, _, parts = item.partition(":")
                specs.append((re.compile(pattern or ".*"), _partition_set(parts)))
        else:
            ids = [x.strip() for x in partitions.split(",") if x.strip()]
            if not all(x.isdigit() for x in ids):
                raise click.BadParameter(f"--partitions expects a comma separated list of numeric partition ids, "
                                         f"but received: {partitions}", param_hint="--partitions")
            specs.append((re.compile(topic or ".*"), [(int(x), int(x)) for x in ids] or None))
    except re.error as exc:
        raise click.BadParameter(f"bad topic pattern: {exc}", param_hint="--topic") from None
    out: list[tuple[str, int]] = []
    for t in c.metadata(None).topics:
        if t.name is None or t.error_code != ErrorCode.none or (exclude_internal and t.is_internal):
            continue
        for p in t.partitions:
            if any(rx.fullmatch(t.name) and _matches(ps, int(p.partition_index)) for rx, ps in specs):
                out.append((t.name, int(p.partition_index)))
    return sorted(out)


@click.command("get-offsets")
@click.option("--topic", default=None, help="A regular expression of the topic names (default: every topic).")
@click.option("--partitions", default="", help="Partition ids, e.g. 0,2,4 (default: all).")
@click.option("--topic-partitions", default="", metavar="REGEX[:PARTS],...",
              help="Topics and partitions together, e.g. t1:0,t2:1-3,t3:4-,t4:-2,logs.* (N-M excludes M, N- is "
                   "open; excludes --topic and --partitions).")
@click.option("--time", "time_", default="latest", show_default=True,
              help="latest (-1), earliest (-2), max-timestamp (-3), earliest-local (-4), latest-tiered (-5), or a "
                   "timestamp in ms: the first offset whose timestamp is at or after it.")
@click.option("--exclude-internal-topics", is_flag=True, help="Leave out internal topics.")
@bootstrap_option
@command_config_option
@json_option
def get_offsets(topic: str | None, partitions: str, topic_partitions: str, time_: str,
                exclude_internal_topics: bool, bootstrap: str, command_config: Path | None, as_json: bool) -> None:
    """Offsets of partitions at a time (ListOffsets): one ``topic:partition:offset`` line each,
    as kafka-get-offsets (a partition without one, e.g. a time past its records, is left out)."""
    spec = parse_time(time_)
    with open_cluster(bootstrap, command_config) as c:
        tps = _selected(c, topic, partitions, topic_partitions, exclude_internal_topics)
        found = list_offsets(c, tps, spec) if tps else {}
    rows = [{"topic": t, "partition": p, "offset": found[(t, p)]} for t, p in tps
            if found.get((t, p)) is not None and found[(t, p)] >= 0]  # type: ignore[operator]
    if rows or as_json:  # (nothing found: no line at all, as Apache)
        emit(rows, as_json, lambda: [f"{r['topic']}:{r['partition']}:{r['offset']}" for r in rows])


def _plan(offset_json_file: Path | None, topic: str | None, partition: int | None,
          offset: int | None) -> list[tuple[str, int, int]]:
    if offset_json_file is not None:
        if topic is not None or partition is not None or offset is not None:
            raise click.UsageError("--offset-json-file excludes --topic, --partition and --offset")
        try:
            doc = json.loads(offset_json_file.read_text())
            return [(str(x["topic"]), int(x["partition"]), int(x["offset"])) for x in doc["partitions"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise click.BadParameter(f"not a delete-records plan ({{\"partitions\": [{{\"topic\", \"partition\", "
                                     f"\"offset\"}}], \"version\": 1}}): {exc}", param_hint="--offset-json-file")
    if topic is None or partition is None or offset is None:
        raise click.UsageError("give --offset-json-file, or --topic, --partition and --offset")
    return [(topic, partition, offset)]


def _delete_at_leaders(c: Cluster, plan: list[tuple[str, int, int]]) -> dict[tuple[str, int], tuple[int, int]]:
    """DeleteRecords of each partition at its leader: (topic, partition) -> (error code, low watermark)."""
    out: dict[tuple[str, int], tuple[int, int]] = {}

    def attempt() -> None:
        led = leaders(c, sorted({t for t, _, _ in plan}))
        by_leader: dict[int, dict[str, list[tuple[int, int]]]] = {}
        for t, p, off in plan:
            if (t, p) in out:
                continue
            leader = led.get((t, p))
            if leader is None:
                out[(t, p)] = (ErrorCode.unknown_topic_or_partition, -1)
                continue
            if leader < 0:
                raise RetriableError(ErrorCode.leader_not_available, f"{t}-{p}")
            by_leader.setdefault(leader, {}).setdefault(t, []).append((p, off))
        retriable = None
        for leader, topics in by_leader.items():
            r: DeleteRecordsResponse = c.call(leader, DeleteRecordsRequest(topics=tuple(
                DeleteRecordsTopic(name=TopicName(t), partitions=tuple(
                    DeleteRecordsPartition(partition_index=i32(p), offset=i64(o)) for p, o in ps))
                for t, ps in topics.items()), timeout=TIMEOUT))
            for rt in r.topics:
                for rp in rt.partitions:
                    if rp.error_code in RETRIABLE:
                        retriable = RetriableError(rp.error_code, f"DeleteRecords {rt.name}-{rp.partition_index}")
                    else:
                        out[(rt.name, int(rp.partition_index))] = (int(rp.error_code), int(rp.low_watermark))
        if retriable is not None:
            raise retriable
    retry(attempt)
    return out


@click.command("delete-records")
@click.option("--offset-json-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help='The plan, as kafka-delete-records: {"partitions": [{"topic": "t", "partition": 0, '
                   '"offset": 10}], "version": 1}; offset -1 is the high watermark.')
@click.option("--topic", default=None, help="One partition's topic (instead of the file).")
@click.option("--partition", type=int, default=None, help="One partition (instead of the file).")
@click.option("--offset", type=int, default=None, help="Delete the records before this offset (-1: all).")
@bootstrap_option
@command_config_option
@json_option
def delete_records(offset_json_file: Path | None, topic: str | None, partition: int | None, offset: int | None,
                   bootstrap: str, command_config: Path | None, as_json: bool) -> None:
    """Delete the records before an offset of partitions (DeleteRecords): their log start
    offset (low watermark) moves up to it."""
    plan = _plan(offset_json_file, topic, partition, offset)
    with open_cluster(bootstrap, command_config) as c:
        result = _delete_at_leaders(c, plan)
    rows = [{"topic": t, "partition": p, "low_watermark": lw if code == ErrorCode.none else None,
             "error": None if code == ErrorCode.none else code_name(code)}
            for (t, p), (code, lw) in sorted(result.items())]

    def human() -> list[str]:
        lines = ["Executing records delete operation", "Records delete operation completed:"]
        for r in rows:
            where = f"partition: {r['topic']}-{r['partition']}"
            if r["error"] is None:
                lines.append(f"{where}\tlow_watermark: {r['low_watermark']}")
            else:
                code = ErrorCode[str(r["error"]).lower()]
                lines.append(f"{where}\terror: {EXCEPTIONS.get(code, r['error'])}")
        return lines

    emit(rows, as_json, human)
    if any(r["error"] for r in rows):
        raise click.exceptions.Exit(1)
