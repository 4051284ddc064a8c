"""``kaas topics list|describe|create|delete``: topics over the wire protocol, like Kafka's
kafka-topics tool (Metadata, CreateTopics, DeleteTopics, DescribeConfigs)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import NotRequired, TypedDict

import click
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.create_topics.v7.response import CreateTopicsResponse
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.delete_topics.v6.response import DeleteTopicsResponse
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_configs.v4.response import DescribeConfigsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta

from kaas.tools._wire import bootstrap_option, code_name, command_config_option, json_option, open_cluster
from kaas.tools.output import cell, emit, table

TOPIC_RESOURCE = i8(2)
SOURCE_TOPIC = 1  # DescribeConfigs config_source of a per-topic override
# CreateTopics/DeleteTopics: answered once the cluster serves it
ADMIN_TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=30))


class PartitionRow(TypedDict):
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]
    error: str | None


class TopicRow(TypedDict):
    """A topic of a Metadata response; ``describe`` adds its config overrides (or the
    error that kept them)."""

    name: str | None  # (null only for a topic asked by id, which these commands never do)
    topic_id: str | None
    error: str | None
    internal: bool
    partition_count: int
    replication_factor: int
    partitions: list[PartitionRow]
    configs: NotRequired[dict[str, str | None] | None]
    configs_error: NotRequired[str]


def _topic_rows(md: MetadataResponse) -> list[TopicRow]:
    out = []
    for t in md.topics:
        parts = sorted(t.partitions, key=lambda p: p.partition_index)
        out.append(TopicRow(
            name=t.name, topic_id=str(t.topic_id) if t.topic_id else None,
            error=code_name(t.error_code) if t.error_code != ErrorCode.none else None,
            internal=t.is_internal, partition_count=len(parts),
            # as Apache's kafka-topics: the replica count of the first partition
            replication_factor=len(parts[0].replica_nodes) if parts else 0,
            partitions=[PartitionRow(partition=p.partition_index, leader=p.leader_id, leader_epoch=p.leader_epoch,
                                     replicas=list(p.replica_nodes), isr=list(p.isr_nodes),
                                     offline=list(p.offline_replicas),
                                     error=code_name(p.error_code) if p.error_code != ErrorCode.none else None)
                        for p in parts],
        ))
    out.sort(key=lambda r: r["name"] or "")
    return out


def _parse_configs(items: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--config")
        out[key.strip()] = value.strip()
    return out


@click.group("topics")
def topics() -> None:
    """List, describe, create, alter and delete topics (over the wire protocol)."""


@topics.command("list")
@bootstrap_option
@command_config_option
@json_option
def list_(bootstrap: str, command_config: Path | None, as_json: bool) -> None:
    """Every topic with its partition count and topic id."""
    with open_cluster(bootstrap, command_config) as c:
        rows = [{"name": r["name"], "partition_count": r["partition_count"], "topic_id": r["topic_id"]}
                for r in _topic_rows(c.metadata(None))]
    emit(rows, as_json, lambda: table(rows, ["name", "partition_count", "topic_id"]))


@topics.command()
@click.argument("names", nargs=-1, metavar="[TOPIC]...")
@bootstrap_option
@command_config_option
@json_option
def describe(names: tuple[str, ...], bootstrap: str, command_config: Path | None, as_json: bool) -> None:
    """Partitions (leader, leader epoch, replicas, in-sync and offline replicas), topic id,
    replication factor and config overrides of TOPICs (all topics when none is named)."""
    with open_cluster(bootstrap, command_config) as c:
        rows = _topic_rows(c.metadata(list(names) if names else None))
        missing = [r["name"] for r in rows if r["error"]]
        if missing:
            errs = ", ".join(f"{r['name']} ({r['error']})" for r in rows if r["error"])
            raise click.ClickException(f"cannot describe {errs}")
        if rows:
            res: DescribeConfigsResponse = c.call_any(DescribeConfigsRequest(
                resources=tuple(DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=r["name"] or "",
                                                        configuration_keys=None) for r in rows),
                include_synonyms=False, include_documentation=False))
            by_name = {x.resource_name: x for x in res.results}
            for r in rows:
                cfg = by_name.get(r["name"] or "")
                if cfg is None or cfg.error_code != ErrorCode.none:
                    r["configs"] = None
                    r["configs_error"] = code_name(cfg.error_code) if cfg is not None else "NO_ANSWER"
                else:
                    r["configs"] = {e.name: e.value for e in cfg.configs if e.config_source == SOURCE_TOPIC}

    def human() -> list[str]:
        out: list[str] = []
        for r in rows:
            cfg = r.get("configs")
            cfg_text = ",".join(f"{k}={v}" for k, v in sorted(cfg.items())) if cfg else (
                f"({r['configs_error']})" if cfg is None else "")
            out.append(f"Topic: {r['name']}\tTopicId: {r['topic_id']}\tPartitionCount: {r['partition_count']}\t"
                       f"ReplicationFactor: {r['replication_factor']}\tConfigs: {cfg_text}")
            prow = [{"topic": r["name"], **p} for p in r["partitions"]]
            out.append(table(prow, ["topic", "partition", "leader", "leader_epoch", "replicas", "isr", "offline",
                                    "error"]))
            out.append("")
        return out[:-1] if out else ["(no topics)"]

    emit(rows, as_json, human)


@topics.command()
@click.argument("name", metavar="TOPIC")
@click.option("--partitions", type=int, default=-1, show_default="broker's num.partitions",
              help="Number of partitions.")
@click.option("--replication-factor", type=int, default=-1,
              help="Brokers named as replicas (able to lead it), 1..brokers; -1: 1. The bytes are one copy "
                   "on the shared volume.")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="A topic config override (repeatable).")
@click.option("--if-not-exists", is_flag=True, help="Succeed when the topic exists already.")
@click.option("--validate-only", is_flag=True, help="Check the request without creating the topic.")
@bootstrap_option
@command_config_option
@json_option
def create(name: str, partitions: int, replication_factor: int, configs: tuple[str, ...], if_not_exists: bool,
           validate_only: bool, bootstrap: str, command_config: Path | None, as_json: bool) -> None:
    """Create TOPIC (CreateTopics)."""
    cfg = _parse_configs(configs)
    with open_cluster(bootstrap, command_config) as c:
        c.metadata([])
        req = CreateTopicsRequest(
            topics=(CreatableTopic(name=TopicName(name), num_partitions=i32(partitions),
                                   replication_factor=i16(replication_factor),
                                   assignments=(), configs=tuple(CreatableTopicConfig(name=k, value=v)
                                                                 for k, v in cfg.items())),),
            timeout=ADMIN_TIMEOUT, validate_only=validate_only)
        r: CreateTopicsResponse = c.call_controller(req)
    t = r.topics[0]
    if t.error_code == ErrorCode.topic_already_exists and if_not_exists:
        out = {"name": name, "created": False, "exists": True, "topic_id": None, "partitions": None, "configs": cfg}
        emit(out, as_json, lambda: f"Topic {name} exists already.")
        return
    if t.error_code != ErrorCode.none:
        msg = f": {t.error_message}" if t.error_message else ""
        raise click.ClickException(f"cannot create topic {name}: {code_name(t.error_code)}{msg}")
    out = {"name": name, "created": not validate_only, "exists": False,
           "topic_id": str(t.topic_id) if t.topic_id else None, "partitions": t.num_partitions,
           "replication_factor": t.replication_factor, "configs": cfg}
    emit(out, as_json, lambda: (f"Validated topic {name}." if validate_only else
                                f"Created topic {name} ({t.num_partitions} partitions, id {cell(out['topic_id'])})."))


@topics.command()
@click.argument("names", nargs=-1, required=True, metavar="TOPIC...")
@click.option("--if-exists", is_flag=True, help="Succeed for a topic that does not exist.")
@bootstrap_option
@command_config_option
@json_option
def delete(names: tuple[str, ...], if_exists: bool, bootstrap: str, command_config: Path | None, as_json: bool) -> None:
    """Delete TOPICs (DeleteTopics)."""
    with open_cluster(bootstrap, command_config) as c:
        c.metadata([])
        r: DeleteTopicsResponse = c.call_controller(DeleteTopicsRequest(
            topics=tuple(DeleteTopicState(name=TopicName(n), topic_id=None) for n in names), timeout=ADMIN_TIMEOUT))
    rows: list[dict[str, object]] = []
    failed: list[str] = []
    for x in r.responses:
        code = x.error_code
        error = None if code == ErrorCode.none else code_name(code)
        row: dict[str, object] = {"name": x.name, "topic_id": str(x.topic_id) if x.topic_id else None,
                                  "deleted": code == ErrorCode.none, "error": error}
        rows.append(row)
        if code != ErrorCode.none and not (if_exists and code == ErrorCode.unknown_topic_or_partition):
            failed.append(f"{x.name} ({code_name(code)})")
    emit(rows, as_json, lambda: table(rows, ["name", "deleted", "error", "topic_id"]))
    if failed:
        raise click.ClickException(f"cannot delete {', '.join(failed)}")


@topics.command()
@click.argument("name", required=False, metavar="[TOPIC]")
@click.option("--topic", "topic_opt", default=None, help="The topic (as kafka-topics --alter --topic).")
@click.option("--partitions", type=int, default=None, help="The new, larger, number of partitions.")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="A config override to set "
                                                                            "(repeatable).")
@click.option("--delete-config", "delete_configs", multiple=True, metavar="KEY",
              help="A config override to remove (repeatable; it must be set).")
@bootstrap_option
@command_config_option
@json_option
def alter(name: str | None, topic_opt: str | None, partitions: int | None, configs: tuple[str, ...],
          delete_configs: tuple[str, ...], bootstrap: str, command_config: Path | None, as_json: bool) -> None:
    """Add partitions to TOPIC (CreatePartitions) and set or remove its config overrides
    (IncrementalAlterConfigs)."""
    from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
    from kio.schema.create_partitions.v3.response import CreatePartitionsResponse

    from kaas.tools.configs import alter_resource

    topic = name or topic_opt
    if not topic or (name and topic_opt and name != topic_opt):
        raise click.UsageError("name one topic (TOPIC or --topic)")
    if partitions is None and not configs and not delete_configs:
        raise click.UsageError("give --partitions, --config or --delete-config")
    add = _parse_configs(configs)
    with open_cluster(bootstrap, command_config) as c:
        rows = _topic_rows(c.metadata([topic]))
        if not rows or rows[0]["error"]:
            raise click.ClickException(f"Topic '{topic}' does not exist as expected"
                                       + (f" ({rows[0]['error']})" if rows else ""))
        before = rows[0]["partition_count"]
        if partitions is not None and partitions != before:
            r: CreatePartitionsResponse = c.call_controller(CreatePartitionsRequest(
                topics=(CreatePartitionsTopic(name=TopicName(topic), count=i32(partitions), assignments=None),),
                timeout=ADMIN_TIMEOUT, validate_only=False))
            res = r.results[0]
            if res.error_code != ErrorCode.none:
                raise click.ClickException(f"cannot alter topic {topic}: {code_name(res.error_code)}"
                                           + (f": {res.error_message}" if res.error_message else ""))
        if add or delete_configs:
            alter_resource(c, "topics", topic, add, list(delete_configs))
    out = {"name": topic, "partitions_before": before, "partitions": partitions if partitions is not None else before,
           "set": add, "deleted": list(delete_configs)}
    emit(out, as_json, lambda: f"Altered topic {topic}: {before} -> {out['partitions']} partitions"
                               + (f", set {','.join(f'{k}={v}' for k, v in add.items())}" if add else "")
                               + (f", removed {','.join(delete_configs)}" if delete_configs else "") + ".")
