"""The everyday ``kaas`` commands of issue 48 against a real 2-broker cluster: topics alter,
configs (topics, brokers, groups, clients, users), groups and share-groups delete and
delete-offsets, get-offsets, delete-records, console produce and consume. Each test checks
the cluster's state after the command as another client (confluent-kafka) sees it, and,
where Apache has the tool, that kaas prints what Apache's 4.4.0 tool prints for the same
state (tests/apache_tools.py; those comparisons skip without java and mvn).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from kaas.cli import cli
from kaas.testing import wait_for
from tests.fixtures import cluster_fixture
from tests.kafka import create_topic, read_to_end, txn_producer, uniq, watermarks

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

cluster = cluster_fixture(2, scope="module", name="ops-cli",
                          extra=["--group-initial-rebalance-delay-ms", "0", "--group-share-heartbeat-interval-ms",
                                 "500", "--group-share-min-heartbeat-interval-ms", "500"],
                          doc="Two brokers for the commands of this module (distinct topics and groups).")


def kaas(*args: str, ok: bool = True, stdin: str | None = None):
    res = CliRunner().invoke(cli, [str(a) for a in args], input=stdin)
    assert (res.exit_code == 0) == ok, (args, res.output, res.exception)
    return res


def kaas_json(*args: str, stdin: str | None = None):
    return json.loads(kaas(*args, "--json", stdin=stdin).stdout)


def apache(cluster, tool: str, *args: str, ok: bool = True) -> str:
    """Apache's ``tool`` against the cluster; its standard output."""
    from tests.apache_tools import tools

    r = tools().run(tool, *args, bootstrap=cluster.bootstrap)
    assert (r.returncode == 0) == ok, (tool, args, r)
    return r.stdout


def topic_config(bs: str, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(15)
    return {k: e.value for k, e in entries.items() if not e.is_default}


def partition_count(bs: str, topic: str) -> int:
    return len(AdminClient({"bootstrap.servers": bs}).list_topics(topic, timeout=10).topics[topic].partitions)


def produce(bs: str, topic: str, per_partition: dict[int, int], timestamp: int = 1_000_000) -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for part, n in per_partition.items():
        for i in range(n):
            p.produce(topic, f"{part}-{i}".encode(), partition=part, timestamp=timestamp + i)
    assert p.flush(20) == 0


def committed(bs: str, group: str, topic: str, parts: list[int]) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in parts], timeout=10)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


def commit(bs: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        c.close()


# --------------------------------------------------------------------------- topics alter, configs


def test_topics_alter_adds_partitions_and_sets_configs(cluster):
    bs, topic = cluster.bootstrap, uniq("alter")
    create_topic(bs, topic, 2)
    out = kaas_json("topics", "alter", "--topic", topic, "--partitions", "5", "--config", "retention.ms=123456",
                    "--bootstrap-server", bs)
    assert (out["partitions_before"], out["partitions"]) == (2, 5)
    assert wait_for(lambda: partition_count(bs, topic) == 5, what="5 partitions")
    assert topic_config(bs, topic)["retention.ms"] == "123456"
    kaas("topics", "alter", topic, "--delete-config", "retention.ms", "--bootstrap-server", bs)
    assert "retention.ms" not in topic_config(bs, topic)
    assert "INVALID_PARTITIONS" in kaas("topics", "alter", topic, "--partitions", "3", "--bootstrap-server", bs,
                                         ok=False).output
    assert "Invalid config(s): retention.ms" in kaas("topics", "alter", topic, "--delete-config", "retention.ms",
                                                      "--bootstrap-server", bs, ok=False).output
    assert "PartitionCount: 5\t" in apache(cluster, "kafka-topics", "--describe", "--topic", topic)
    # librdkafka's tests call bin/kafka-topics.sh --alter: tests/bin's stand-in runs kaas topics alter
    shim = Path(__file__).resolve().parents[1] / "bin" / "kafka-topics.sh"
    r = subprocess.run(["bash", str(shim), "--bootstrap-server", bs, "--alter", "--topic", topic, "--partitions", "6"],
                       env={**os.environ, "KAAS": str(Path(sys.executable).with_name("kaas"))}, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert wait_for(lambda: partition_count(bs, topic) == 6, what="6 partitions")


def test_configs_topics_brokers_groups_as_kafka_configs(cluster):
    bs, topic, group = cluster.bootstrap, uniq("cfg"), uniq("cfg-group")
    create_topic(bs, topic, 1)
    out = kaas("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "topics", "--entity-name", topic,
               "--add-config", "retention.ms=12345,cleanup.policy=[compact,delete]").stdout
    assert out.strip() == f"Completed updating config for topic {topic}."
    assert topic_config(bs, topic)["cleanup.policy"] == "compact,delete"
    args = ("--describe", "--entity-type", "topics", "--entity-name", topic)
    mine, theirs = like_apache(cluster, *args)
    assert mine == theirs, args
    described = kaas_json("configs", "--bootstrap-server", bs, *args)
    assert {e["name"]: e["value"] for e in described[0]["configs"]} == {"retention.ms": "12345",
                                                                       "cleanup.policy": "compact,delete"}
    assert "Invalid config(s): no.such" in kaas("configs", "--bootstrap-server", bs, "--alter", "--topic", topic,
                                                 "--delete-config", "no.such", ok=False).output

    kaas("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "brokers", "--entity-name", "1",
         "--add-config", "log.retention.ms=7200000")
    kaas("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "brokers", "--entity-default",
         "--add-config", "log.cleaner.delete.retention.ms=3600000")
    for args in (("--describe", "--entity-type", "brokers", "--entity-name", "1"),
                 ("--describe", "--entity-type", "brokers", "--entity-default"),
                 ("--describe", "--entity-type", "brokers")):
        mine, theirs = like_apache(cluster, *args)
        assert mine == theirs, args
    assert kaas_json("configs", "--bootstrap-server", bs, "--describe", "--broker", "1")[0]["configs"][0][
        "value"] == "7200000"
    all_lines = kaas("configs", "--bootstrap-server", bs, "--describe", "--all", "--broker", "0").stdout
    assert all_lines.startswith("All configs for broker 0 are:\n") and "\n  broker.id=0 sensitive=false" in all_lines

    kaas("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "groups", "--entity-name", group,
         "--add-config", "consumer.session.timeout.ms=50000")
    admin = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ResourceType.GROUP, group)
    assert admin.describe_configs([res])[res].result(15)["consumer.session.timeout.ms"].value == "50000"
    args = ("--describe", "--entity-type", "groups", "--entity-name", group)
    mine, theirs = like_apache(cluster, *args)
    assert mine == theirs and "consumer.session.timeout.ms=50000" in mine
    kaas("configs", "--bootstrap-server", bs, "--alter", "--group", group, "--delete-config",
         "consumer.session.timeout.ms")
    wait_for(lambda: kaas_json("configs", "--bootstrap-server", bs, *args)[0]["configs"] == [], 15,
             "the group config deleted")


def test_configs_clients_and_users_as_kafka_configs(cluster):
    bs, client, user = cluster.bootstrap, uniq("cli"), uniq("usr")
    out = kaas("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "clients", "--entity-name", client,
               "--add-config", "producer_byte_rate=262144,consumer_byte_rate=10000000").stdout
    assert out.strip() == f"Completed updating config for client {client}."
    kaas("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "users", "--entity-name", user,
         "--entity-type", "clients", "--entity-name", client, "--add-config", "request_percentage=50")
    kaas("configs", "--bootstrap-server", bs, "--alter", "--user-defaults", "--add-config", "producer_byte_rate=1024")
    for args in (("--describe", "--entity-type", "clients", "--entity-name", client),
                 ("--describe", "--entity-type", "users", "--entity-name", user, "--entity-type", "clients",
                  "--entity-name", client),
                 ("--describe", "--entity-type", "users", "--entity-default")):
        mine, theirs = like_apache(cluster, *args)
        assert mine == theirs, args
    assert kaas("configs", "--bootstrap-server", bs, "--describe", "--client", client).stdout.strip() == \
        f"Quota configs for client-id '{client}' are consumer_byte_rate=1.0E7, producer_byte_rate=262144.0"
    # the quotas, as Apache's admin sees them
    got = apache(cluster, "kafka-configs", "--describe", "--entity-type", "clients", "--entity-name", client)
    assert "producer_byte_rate=262144.0" in got
    kaas("configs", "--bootstrap-server", bs, "--alter", "--client", client, "--delete-config", "producer_byte_rate")
    wait_for(lambda: kaas_json("configs", "--bootstrap-server", bs, "--describe", "--client", client)["quotas"] ==
             [{"entity": {"client-id": client}, "configs": {"consumer_byte_rate": 1e7}}], 15,
             "producer_byte_rate deleted")
    assert "Invalid config(s): producer_byte_rate" in kaas(
        "configs", "--bootstrap-server", bs, "--alter", "--client", client, "--delete-config", "producer_byte_rate",
        ok=False).output

    # a user's SCRAM credentials, as kafka-configs sets and shows them
    kaas("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "users", "--entity-name", user,
         "--add-config", "SCRAM-SHA-256=[iterations=8192,password=secret]")
    args = ("--describe", "--entity-type", "users", "--entity-name", user)
    mine, theirs = like_apache(cluster, *args)
    assert mine == theirs
    assert f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-256=iterations=8192" in mine
    kaas("configs", "--bootstrap-server", bs, "--alter", "--user", user, "--delete-config", "SCRAM-SHA-256")
    wait_for(lambda: kaas_json("configs", "--bootstrap-server", bs, *args)["scram"] == [], 15,
             "the SCRAM credential deleted")


# --------------------------------------------------------------------------- groups, share groups


def test_groups_delete_offsets_and_delete(cluster):
    bs, topic, group, other = cluster.bootstrap, uniq("gdel"), uniq("gd"), uniq("gd-apache")
    create_topic(bs, topic, 3)
    produce(bs, topic, {0: 5, 1: 5, 2: 5})
    for g in (group, other):
        commit(bs, g, topic, {0: 3, 1: 4, 2: 5})
    out = kaas_json("groups", "delete-offsets", group, "--topic", f"{topic}:0,2", "--bootstrap-server", bs)
    assert [(p["partition"], p["status"]) for p in out["partitions"]] == [(0, "Successful"), (2, "Successful")]
    assert committed(bs, group, topic, [0, 1, 2]) == {0: -1001, 1: 4, 2: -1001}  # -1001: no committed offset
    mine = kaas("groups", "delete-offsets", group, "--topic", f"{topic}:1", "--bootstrap-server", bs).stdout
    theirs = apache(cluster, "kafka-consumer-groups", "--delete-offsets", "--group", other, "--topic", f"{topic}:1")
    assert mine.split() == theirs.replace(other, group).split()  # the same words (Apache pads its columns)
    assert committed(bs, group, topic, [1]) == {1: -1001}
    nope = uniq("nope")  # an unknown group, an unknown topic: Apache's lines, but a failing exit status
    for args in (("--group", nope, "--topic", topic), ("--group", group, "--topic", nope)):
        mine = kaas("groups", "delete-offsets", args[1], "--topic", args[3], "--bootstrap-server", bs, ok=False).stdout
        assert mine.split() == apache(cluster, "kafka-consumer-groups", "--delete-offsets", *args).split(), args

    out = kaas("groups", "delete", group, "--bootstrap-server", bs).stdout
    assert out == apache(cluster, "kafka-consumer-groups", "--delete", "--group", other).replace(other, group)
    listed = {g["group_id"] for g in kaas_json("groups", "list", "--bootstrap-server", bs)}
    assert group not in listed and other not in listed
    res = kaas("groups", "delete", group, "--bootstrap-server", bs, ok=False)
    assert res.stdout == apache(cluster, "kafka-consumer-groups", "--delete", "--group", group)
    assert f"* Group '{group}' could not be deleted due to: org.apache.kafka.common.errors.GroupIdNotFoundException" \
        in res.stdout

    c = Consumer({"bootstrap.servers": bs, "group.id": group, "session.timeout.ms": 6000})
    c.subscribe([topic])
    try:
        wait_for(lambda: c.poll(0.2) is not None or c.assignment(), timeout=20, what="the member joined")
        res = kaas_json_fail("groups", "delete", group, "--bootstrap-server", bs)
        assert res == [{"group": group, "deleted": False, "error": "NON_EMPTY_GROUP"}]
    finally:
        c.close()


def like_apache(cluster, *args: str) -> tuple[str, str]:
    """``kaas configs`` and Apache's kafka-configs on the same arguments, once they agree
    (each broker reads a change from the shared volume within a poll, so a describe right
    after an alteration may reach a broker that has not yet: docs/compatibility.rst)."""
    bs = cluster.bootstrap
    got: list[tuple[str, str]] = []

    def agree() -> bool:
        got.append((kaas("configs", "--bootstrap-server", bs, *args).stdout, apache(cluster, "kafka-configs", *args)))
        return got[-1][0] == got[-1][1]
    try:
        wait_for(agree, 15, f"kaas configs {' '.join(args)} as Apache's")
    except AssertionError:
        pass
    return got[-1]


def kaas_json_fail(*args: str):
    return json.loads(kaas(*args, "--json", ok=False).stdout)


def share_group_with_state(bs: str, topic: str, group: str) -> None:
    """A share group that read ``topic`` (so it has share-partition state), now empty."""
    admin = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    assert admin.incremental_alter_configs([res])[res].result(15) is None
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group})
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < 3 and time.monotonic() < deadline:
        got += len(c.poll(0.5))
    c.commit_sync(10)
    c.close()
    assert got == 3


def test_share_groups_delete_offsets_and_delete(cluster):
    bs, topic, group, other = cluster.bootstrap, uniq("sdel"), uniq("sd"), uniq("sd-apache")
    create_topic(bs, topic, 1)
    produce(bs, topic, {0: 3})
    for g in (group, other):
        share_group_with_state(bs, topic, g)
    offsets = wait_for(lambda: kaas_json("groups", "describe", group, "--bootstrap-server", bs)["offsets"] or None,
                       timeout=20, what="the share group's state")
    assert [(o["topic"], o["start_offset"]) for o in offsets] == [(topic, 3)]
    out = kaas_json("share-groups", "delete-offsets", group, "--topic", topic, "--bootstrap-server", bs)
    assert out["topics"] == [{"topic": topic, "status": "Successful", "error": None}]
    assert kaas_json("groups", "describe", group, "--bootstrap-server", bs)["offsets"] == []
    mine = kaas("share-groups", "delete-offsets", other, "--topic", topic, "--bootstrap-server", bs).stdout
    assert mine.split() == ["TOPIC", "STATUS", topic, "Successful"]
    assert apache(cluster, "kafka-share-groups", "--describe", "--offsets", "--group", other).count(topic) == 0

    out = kaas("share-groups", "delete", "--group", group, "--bootstrap-server", bs).stdout
    theirs = apache(cluster, "kafka-share-groups", "--delete", "--group", other)
    assert out == theirs.replace(other, group)
    listed = {g["group_id"] for g in kaas_json("groups", "list", "--bootstrap-server", bs)}
    assert group not in listed and other not in listed
    mine = kaas("share-groups", "delete", group, "--bootstrap-server", bs, ok=False).stdout
    assert f"GroupIdNotFoundException: Group '{group}' is not a share group." in mine
    assert mine == apache(cluster, "kafka-share-groups", "--delete", "--group", group)


# --------------------------------------------------------------------------- offsets and records


def test_get_offsets_and_delete_records_as_apaches(cluster, tmp_path):
    bs, topic = cluster.bootstrap, uniq("offs")
    create_topic(bs, topic, 3)
    produce(bs, topic, {0: 10, 1: 20, 2: 5})
    for args in (("--topic", topic), ("--topic", topic, "--time", "-2", "--partitions", "0,1"),
                 ("--topic", topic, "--time", "1000007"), ("--topic", topic, "--time", "max-timestamp"),
                 ("--topic-partitions", f"{topic}:1-"), ("--topic-partitions", f"{topic}:0-2,{topic[:-2]}.*:-1"),
                 ("--topic", topic, "--time", "99999999999")):
        mine = kaas("get-offsets", *args, "--bootstrap-server", bs).stdout
        assert mine == apache(cluster, "kafka-get-offsets", *args), args
    assert kaas_json("get-offsets", "--topic-partitions", f"{topic}:1", "--time", "1000007",
                     "--bootstrap-server", bs) == [{"topic": topic, "partition": 1, "offset": 7}]

    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "offset": 4}, {"topic": topic, "partition": 1, "offset": -1}]}))
    mine = kaas("delete-records", "--offset-json-file", plan, "--bootstrap-server", bs).stdout
    assert mine.splitlines() == ["Executing records delete operation", "Records delete operation completed:",
                                 f"partition: {topic}-0\tlow_watermark: 4", f"partition: {topic}-1\tlow_watermark: 20"]
    assert watermarks(bs, topic, 0) == (4, 10) and watermarks(bs, topic, 1) == (20, 20)
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 6}]}))
    assert apache(cluster, "kafka-delete-records", "--offset-json-file", str(plan)) == \
        kaas("delete-records", "--topic", topic, "--partition", "0", "--offset", "6", "--bootstrap-server", bs).stdout
    assert watermarks(bs, topic, 0) == (6, 10)
    res = kaas("delete-records", "--topic", topic, "--partition", "2", "--offset", "9", "--bootstrap-server", bs,
               ok=False)
    assert f"partition: {topic}-2\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException" in res.stdout
    assert watermarks(bs, topic, 2) == (0, 5)


# --------------------------------------------------------------------------- console


PRINT_ALL = ("print.key=true", "print.partition=true", "print.offset=true", "print.headers=true",
             "print.timestamp=true")


def test_console_produce_keys_headers_and_consume_as_apache(cluster):
    bs, topic = cluster.bootstrap, uniq("console")
    create_topic(bs, topic, 3)
    lines = "".join(f"h1:a{i},h2:b|key-{i}:value {i}\n" for i in range(20)) + "h:x|null:tombstone-key\n"
    out = kaas_json("console", "produce", "--topic", topic, "--property", "parse.key=true", "--property",
                    "key.separator=:", "--property", "parse.headers=true", "--property", "headers.delimiter=|",
                    "--property", "null.marker=null", "--bootstrap-server", bs, stdin=lines)
    assert out["records"] == 21
    got = read_to_end(bs, topic, [0, 1, 2], "read_uncommitted")
    assert len(got) == 21
    by_key = {m.key(): m for m in got}
    assert by_key[b"key-3"].value() == b"value 3" and by_key[b"key-3"].headers() == [("h1", b"a3"), ("h2", b"b")]
    assert by_key[None].value() == b"tombstone-key"
    p = Producer({"bootstrap.servers": bs, "partitioner": "murmur2_random"})  # the Java client's partitioner
    for m in got:
        if m.key() is not None:
            p.produce(topic, b"check", key=m.key())
    assert p.flush(10) == 0
    checks = [m for m in read_to_end(bs, topic, [0, 1, 2], "read_uncommitted") if m.value() == b"check"]
    assert {(m.key(), m.partition()) for m in checks} == {(m.key(), m.partition()) for m in got if m.key()}

    props = [a for kv in PRINT_ALL for a in ("--property", kv)]
    mine = kaas("console", "consume", "--topic", topic, "--partition", "1", "--from-beginning", "--max-messages",
                "100", "--timeout-ms", "3000", *props, "--bootstrap-server", bs).stdout
    theirs = apache(cluster, "kafka-console-consumer", "--topic", topic, "--partition", "1", "--from-beginning",
                    "--max-messages", "100", "--timeout-ms", "5000",
                    *[a.replace("--property", "--formatter-property") for a in props])
    assert mine == theirs and mine.count("\n") == sum(1 for m in got if m.partition() == 1) + \
        sum(1 for m in checks if m.partition() == 1)
    records = kaas_json("console", "consume", "--topic", topic, "--partition", "0", "--offset", "2",
                        "--max-messages", "1", "--bootstrap-server", bs)
    assert [r["offset"] for r in records] == [2]


def test_console_consume_read_committed_and_from_timestamp(cluster):
    bs, topic = cluster.bootstrap, uniq("console-tx")
    create_topic(bs, topic, 1)
    produce(bs, topic, {0: 4}, timestamp=2_000_000)  # offsets 0-3
    tx = txn_producer(bs, uniq("console-txid"))
    tx.init_transactions(20)
    tx.begin_transaction()
    for i in range(3):
        tx.produce(topic, f"aborted-{i}".encode(), partition=0, timestamp=3_000_000)
    tx.flush(10)
    tx.abort_transaction(10)
    tx.begin_transaction()
    tx.produce(topic, b"committed", partition=0, timestamp=4_000_000)
    tx.commit_transaction(10)
    common = ("--topic", topic, "--from-beginning", "--timeout-ms", "2000", "--bootstrap-server", bs)
    values = [r["value"] for r in kaas_json("console", "consume", *common, "--isolation-level", "read_committed")]
    assert values == ["0-0", "0-1", "0-2", "0-3", "committed"]
    values = [r["value"] for r in kaas_json("console", "consume", *common)]
    assert values == ["0-0", "0-1", "0-2", "0-3", "aborted-0", "aborted-1", "aborted-2", "committed"]
    later = kaas_json("console", "consume", "--topic", topic, "--from-timestamp", "2000002", "--timeout-ms", "2000",
                      "--isolation-level", "read_committed", "--bootstrap-server", bs)
    assert [r["value"] for r in later] == ["0-2", "0-3", "committed"]
    assert [r["timestamp"] for r in later] == [2000002, 2000003, 4000000]
