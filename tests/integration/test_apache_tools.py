"""Apache Kafka 4.4.0's command-line tools against a 3-broker kaas cluster: kafka-topics,
kafka-configs, kafka-get-offsets, kafka-delete-records, kafka-acls, the producer and
consumer perf tests (transactional), kafka-log-dirs, kafka-leader-election and
kafka-reassign-partitions, run from the Maven-resolved kafka-tools by their main classes in
one warm JVM (tests/apache_tools.py). Each test checks the tool's exit status, its parsed
output and the cluster's resulting state as another client (confluent-kafka) sees it. The
group and transaction tools are in test_apache_group_tools.py; kafka-features and the
quota side of kafka-configs in test_features_cluster.py.

They need java, a JDK and mvn: they skip saying so when one is missing, and fail instead
when KAAS_REQUIRE_ALL=1.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TypeVar

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)

from kaas.testing import wait_for
from tests.apache_tools import ToolResult, tools
from tests.fixtures import cluster_fixture
from tests.kafka import read_to_end, uniq, watermarks

T = TypeVar("T")

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

cluster = cluster_fixture(3, scope="module", name="apache-tools",
                          extra=["--group-initial-rebalance-delay-ms", "0", "--authorizer",
                                 "--allow-everyone-if-no-acl-found"],
                          doc="Three brokers, the authoriser on (allowing what no ACL names).")

def tool(cluster, name: str, *args: str, ok: bool = True, broker: int = 0) -> ToolResult:
    """Run Apache's ``name`` against ``broker``; assert its exit status is 0 (or not)."""
    r = tools().run(name, *args, bootstrap=f"127.0.0.1:{cluster.ports[broker]}")
    assert (r.returncode == 0) == ok, (name, args, r)
    return r


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for part, n in per_partition.items():
        for i in range(n):
            p.produce(topic, f"{part}-{i}".encode(), partition=part, timestamp=1_000_000 + i)
    assert p.flush(20) == 0


def offsets(out: str) -> dict[int, int]:
    """kafka-get-offsets' ``topic:partition:offset`` lines -> {partition: offset}."""
    return {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"^\S+:(\d+):(-?\d+)$", out, re.M)}


def test_kafka_topics_create_describe_alter_delete(cluster):
    bs, topic = cluster.bootstrap, uniq("tt")
    r = tool(cluster, "kafka-topics", "--create", "--topic", topic, "--partitions", "3",
             "--replication-factor", "3", "--config", "retention.ms=3600000", "--config", "cleanup.policy=delete")
    assert r.stdout.strip() == f"Created topic {topic}."
    r = tool(cluster, "kafka-topics", "--create", "--topic", topic, "--partitions", "1", ok=False, broker=1)
    assert f"Topic '{topic}' already exists." in r.output
    assert topic in tool(cluster, "kafka-topics", "--list", broker=2).stdout.split()

    r = tool(cluster, "kafka-topics", "--describe", "--topic", topic, broker=1)
    head, *rows = r.stdout.strip().splitlines()
    assert re.match(rf"Topic: {topic}\tTopicId: \S{{22}}\tPartitionCount: 3\tReplicationFactor: 3\t"
                    r"Configs: cleanup.policy=delete,retention.ms=3600000$", head), head
    parts = {int(m.group(1)): (int(m.group(2)), m.group(3)) for m in
             (re.search(r"Partition: (\d+)\tLeader: (\d+)\tReplicas: ([\d,]+)\t", row) for row in rows)}
    md = AdminClient({"bootstrap.servers": bs}).list_topics(topic, timeout=10).topics[topic].partitions
    assert parts == {p: (md[p].leader, ",".join(map(str, md[p].replicas))) for p in range(3)}
    assert {leader for leader, _ in parts.values()} == {0, 1, 2}, "the partitions are spread over the brokers"

    r = tool(cluster, "kafka-topics", "--alter", "--topic", topic, "--partitions", "5")
    assert r.stdout == ""
    wait_for(lambda: len(AdminClient({"bootstrap.servers": bs}).list_topics(topic, timeout=10).topics[topic]
                         .partitions) == 5, timeout=10, what="5 partitions")
    r = tool(cluster, "kafka-topics", "--alter", "--topic", topic, "--partitions", "2", ok=False)
    assert f"The topic {topic} currently has 5 partition(s); 2 would not be an increase." in r.output

    r = tool(cluster, "kafka-topics", "--describe", "--under-replicated-partitions", "--unavailable-partitions")
    assert r.stdout.strip() == ""  # every replica is on the shared volume: none is behind
    tool(cluster, "kafka-topics", "--delete", "--topic", topic, broker=2)
    wait_for(lambda: topic not in AdminClient({"bootstrap.servers": bs}).list_topics(timeout=10).topics,
             timeout=10, what=f"{topic} deleted")
    assert topic not in tool(cluster, "kafka-topics", "--list").stdout.split()


def topic_config(bs: str, topic: str) -> dict[str, tuple[str, bool]]:
    res, admin = ConfigResource(ResourceType.TOPIC, topic), AdminClient({"bootstrap.servers": bs})
    entries = admin.describe_configs([res])[res].result(10)
    return {k: (e.value, e.is_default) for k, e in entries.items()}


def test_kafka_configs_topic_and_broker(cluster):
    bs, topic = cluster.bootstrap, uniq("tc")
    tool(cluster, "kafka-topics", "--create", "--topic", topic, "--partitions", "1")
    r = tool(cluster, "kafka-configs", "--alter", "--entity-type", "topics", "--entity-name", topic,
             "--add-config", "retention.ms=12345,max.message.bytes=65536", broker=1)
    assert r.stdout.strip() == f"Completed updating config for topic {topic}."
    conf = topic_config(bs, topic)
    assert conf["retention.ms"] == ("12345", False) and conf["max.message.bytes"] == ("65536", False)
    r = tool(cluster, "kafka-configs", "--describe", "--entity-type", "topics", "--entity-name", topic, broker=2)
    assert r.stdout.splitlines()[0] == f"Dynamic configs for topic {topic} are:"
    assert "  retention.ms=12345 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=12345, " \
           "DEFAULT_CONFIG:log.retention.ms=604800000}" in r.stdout.splitlines()
    tool(cluster, "kafka-configs", "--alter", "--entity-type", "topics", "--entity-name", topic,
         "--delete-config", "retention.ms")
    conf = topic_config(bs, topic)
    assert conf["retention.ms"] == ("604800000", True) and conf["max.message.bytes"] == ("65536", False)
    r = tool(cluster, "kafka-configs", "--alter", "--entity-type", "topics", "--entity-name", topic,
             "--add-config", "no.such.config=1", ok=False)
    assert "no.such.config" in r.output

    r = tool(cluster, "kafka-configs", "--describe", "--all", "--entity-type", "brokers", "--entity-name", "1")
    assert r.stdout.splitlines()[0] == "All configs for broker 1 are:"
    assert re.search(r"^  broker\.id=1 sensitive=false synonyms=\{.*\}$", r.stdout, re.M), r.stdout[:2000]


def test_kafka_get_offsets_and_delete_records(cluster, tmp_path):
    bs, topic = cluster.bootstrap, uniq("to")
    tool(cluster, "kafka-topics", "--create", "--topic", topic, "--partitions", "3")
    produce(bs, topic, {0: 10, 1: 20, 2: 5})
    assert offsets(tool(cluster, "kafka-get-offsets", "--topic", topic).stdout) == {0: 10, 1: 20, 2: 5}
    r = tool(cluster, "kafka-get-offsets", "--topic", topic, "--time", "-2", "--partitions", "0,1", broker=1)
    assert offsets(r.stdout) == {0: 0, 1: 0}
    r = tool(cluster, "kafka-get-offsets", "--topic-partitions", f"{topic}:1", "--time", "1000007", broker=2)
    assert offsets(r.stdout) == {1: 7}  # the first offset whose timestamp is at or after the time
    r = tool(cluster, "kafka-get-offsets", "--topic", topic, "--time", "max-timestamp")
    assert offsets(r.stdout) == {0: 9, 1: 19, 2: 4}

    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "offset": 4}, {"topic": topic, "partition": 1, "offset": 20}]}))
    r = tool(cluster, "kafka-delete-records", "--offset-json-file", str(plan), broker=2)
    assert r.stdout.splitlines()[:2] == ["Executing records delete operation", "Records delete operation completed:"]
    assert sorted(r.stdout.splitlines()[2:]) == [f"partition: {topic}-0\tlow_watermark: 4",
                                                 f"partition: {topic}-1\tlow_watermark: 20"]
    assert watermarks(bs, topic, 0) == (4, 10) and watermarks(bs, topic, 1) == (20, 20)
    assert offsets(tool(cluster, "kafka-get-offsets", "--topic", topic, "--time", "-2").stdout) == {0: 4, 1: 20, 2: 0}
    got = read_to_end(bs, topic, [0, 1], "read_uncommitted")
    assert [(m.partition(), m.offset()) for m in got] == [(0, o) for o in range(4, 10)]

    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 2, "offset": 6}]}))
    r = tool(cluster, "kafka-delete-records", "--offset-json-file", str(plan))
    assert f"partition: {topic}-2\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException" in r.stdout
    assert watermarks(bs, topic, 2) == (0, 5)


def visible(bs: str, topic: str) -> bool:
    """Whether Metadata shows ``topic`` to User:ANONYMOUS (not TOPIC_AUTHORIZATION_FAILED)."""
    t = AdminClient({"bootstrap.servers": bs}).list_topics(topic, timeout=10).topics[topic]
    return t.error is None or t.error.code() != KafkaError.TOPIC_AUTHORIZATION_FAILED


def acls_of(bs: str, topic: str) -> list[tuple[str, str, str, str]]:
    f = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                         AclOperation.ANY, AclPermissionType.ANY)
    admin = AdminClient({"bootstrap.servers": bs})
    got = admin.describe_acls(f).result(10)
    return sorted((b.principal, b.host, b.operation.name, b.permission_type.name) for b in got)


def settled(read: Callable[[], T], want: T, what: str) -> None:
    """``read()`` gives ``want`` within 10 s: a broker answers ACL reads from its own copy of
    the ACL file, reloaded within a second of a change made through another broker (Apache's
    brokers apply ACLs from the metadata log asynchronously too)."""
    wait_for(lambda: read() == want, timeout=10, what=what)
    assert read() == want


def test_kafka_acls_add_list_remove(cluster):
    bs, topic = cluster.bootstrap, uniq("ta")
    tool(cluster, "kafka-topics", "--create", "--topic", topic, "--partitions", "1")
    assert visible(bs, topic)
    r = tool(cluster, "kafka-acls", "--add", "--allow-principal", "User:alice", "--operation", "Read",
             "--operation", "Describe", "--topic", topic, broker=1)
    assert f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`" \
           in r.stdout
    alice = [("User:alice", "*", "DESCRIBE", "ALLOW"), ("User:alice", "*", "READ", "ALLOW")]
    settled(lambda: acls_of(bs, topic), alice, "alice's two ACLs")
    # an ACL now names the topic: ANONYMOUS, allowed by none, no longer sees it (on every broker)
    wait_for(lambda: not visible(bs, topic), timeout=10, what=f"{topic} hidden from User:ANONYMOUS")

    tool(cluster, "kafka-acls", "--add", "--allow-principal", "User:ANONYMOUS", "--operation", "Describe",
         "--topic", topic, "--resource-pattern-type", "literal", broker=2)
    wait_for(lambda: visible(bs, topic), timeout=10, what=f"{topic} described to User:ANONYMOUS")
    def listed() -> list[str]:
        r = tool(cluster, "kafka-acls", "--list", "--topic", topic)
        return sorted(line.strip() for line in r.stdout.splitlines() if line.startswith("\t"))
    settled(listed, ["(principal=User:ANONYMOUS, host=*, operation=DESCRIBE, permissionType=ALLOW)",
                     "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)",
                     "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"], "kafka-acls --list")
    r = tool(cluster, "kafka-acls", "--list", "--principal", "User:alice")
    assert f"name={topic}" in r.stdout and r.stdout.count("principal=User:alice") == 2

    tool(cluster, "kafka-acls", "--remove", "--force", "--allow-principal", "User:alice", "--operation", "Read",
         "--operation", "Describe", "--topic", topic)
    settled(lambda: acls_of(bs, topic), [("User:ANONYMOUS", "*", "DESCRIBE", "ALLOW")], "alice's ACLs removed")
    tool(cluster, "kafka-acls", "--remove", "--force", "--topic", topic, broker=1)
    settled(lambda: acls_of(bs, topic), [], "no ACL left")
    settled(lambda: tool(cluster, "kafka-acls", "--list", "--topic", topic).stdout.count("principal="), 0,
            "kafka-acls --list of no ACL")
    wait_for(lambda: visible(bs, topic), timeout=10, what=f"{topic} visible again")


def committed(bs: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


def test_perf_tests_transactional(cluster):
    """kafka-producer-perf-test with --transactional-id and --transaction-duration-ms commits
    every record exactly once; kafka-consumer-perf-test (read_committed) reads them all in
    a group and commits its position."""
    bs, topic, txn, group, n = cluster.bootstrap, uniq("tp"), uniq("perf-txn"), uniq("perf-g"), 4000
    tool(cluster, "kafka-topics", "--create", "--topic", topic, "--partitions", "3")
    r = tool(cluster, "kafka-producer-perf-test", "--topic", topic, "--num-records", str(n), "--record-size", "100",
             "--throughput", "-1", "--transactional-id", txn, "--transaction-duration-ms", "100",
             "--command-property", "linger.ms=5", broker=1)
    m = re.search(r"^(\d+) records sent, [\d.]+ records/sec .* ([\d.]+) ms avg latency", r.stdout, re.M)
    assert m and int(m.group(1)) == n, r.stdout
    got = read_to_end(bs, topic, 3, "read_committed", timeout=60)
    assert len(got) == n and all(len(msg.value()) == 100 for msg in got)
    ends = [watermarks(bs, topic, p)[1] for p in range(3)]
    assert sum(ends) > n, "commit markers follow the records: more transactions than one"
    r = tool(cluster, "kafka-transactions", "describe", "--transactional-id", txn)
    assert "CompleteCommit" in r.stdout.splitlines()[1]

    r = tool(cluster, "kafka-consumer-perf-test", "--topic", topic, "--num-records", str(n), "--group", group,
             "--timeout", "60000", "--command-property", "isolation.level=read_committed",
             "--command-property", "auto.offset.reset=earliest", broker=2)
    head, row = r.stdout.strip().splitlines()[-2:]
    stats = dict(zip(head.split(", "), row.split(", "), strict=True))
    assert int(stats["data.consumed.in.nMsg"]) == n, r.stdout
    assert float(stats["data.consumed.in.MB"]) == pytest.approx(n * 100 / 1024 / 1024, abs=0.001)
    done = committed(bs, group, topic, 3)
    assert all(n_ - 1 <= done[p] <= ends[p] for p, n_ in enumerate(ends)), (done, ends)


def test_kafka_log_dirs_describe(cluster):
    bs, topic = cluster.bootstrap, uniq("tl")
    tool(cluster, "kafka-topics", "--create", "--topic", topic, "--partitions", "2")
    produce(bs, topic, {0: 10, 1: 1})
    r = tool(cluster, "kafka-log-dirs", "--describe", "--broker-list", "0,1,2", "--topic-list", topic)
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert sorted(b["broker"] for b in doc["brokers"]) == [0, 1, 2]
    sizes = {p["partition"]: p["size"] for b in doc["brokers"] for d in b["logDirs"] for p in d["partitions"]}
    assert set(sizes) == {f"{topic}-0", f"{topic}-1"} and sizes[f"{topic}-0"] > sizes[f"{topic}-1"] > 0


def test_kafka_leader_election_preferred(cluster):
    topic = uniq("te")
    tool(cluster, "kafka-topics", "--create", "--topic", topic, "--partitions", "3", "--replication-factor", "3")
    r = tool(cluster, "kafka-leader-election", "--election-type", "preferred", "--topic", topic, "--partition", "1")
    assert f"Valid replica already elected for partitions {topic}-1" in r.stdout
    # every partition asked, every leader alive: as Apache's controller, kaas lists only the
    # partitions that needed an election, so the tool has nothing to print (and exits 0)
    r = tool(cluster, "kafka-leader-election", "--election-type", "unclean", "--all-topic-partitions")
    assert r.stdout.strip() == "", r


def test_kafka_reassign_partitions_execute_verify_list(cluster, tmp_path):
    bs, topic = cluster.bootstrap, uniq("tr")
    tool(cluster, "kafka-topics", "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "2")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2, 1]}]}))
    r = tool(cluster, "kafka-reassign-partitions", "--execute", "--reassignment-json-file", str(plan))
    assert "Successfully started partition reassignment" in r.stdout

    def verified() -> ToolResult | None:
        r = tool(cluster, "kafka-reassign-partitions", "--verify", "--reassignment-json-file", str(plan))
        return r if "is completed" in r.stdout else None

    r = wait_for(verified, timeout=20, what="reassignment completed")
    # once complete, --verify clears the replication throttles: IncrementalAlterConfigs DELETEs
    # on every broker and on the topic, which kaas accepts (nothing was set) as Apache does
    assert "Clearing broker-level throttles" in r.stdout and "Clearing topic-level throttles" in r.stdout, r
    md = AdminClient({"bootstrap.servers": bs}).list_topics(topic, timeout=10).topics[topic].partitions[0]
    assert md.replicas == [2, 1]
    assert "No partition reassignments found." in tool(cluster, "kafka-reassign-partitions", "--list").stdout


def test_tool_against_unknown_topic_fails_cleanly(cluster):
    """A tool's error from kaas reaches the user as Apache's own message, exit status 1."""
    topic = uniq("missing")
    r = tool(cluster, "kafka-topics", "--describe", "--topic", topic, ok=False)
    assert f"Topic '{topic}' does not exist as expected" in r.output
    r = tool(cluster, "kafka-get-offsets", "--topic", topic, ok=False)
    assert "Could not match any topic-partitions with the specified filters" in r.output
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        topic_config(cluster.bootstrap, topic)


def test_tool_prompt_reads_end_of_input(cluster):
    """A tool that asks for confirmation (kafka-acls --remove without --force) reads end of
    input, not the runner's commands, and removes nothing; the next command still runs."""
    bs, topic = cluster.bootstrap, uniq("tq")
    tool(cluster, "kafka-acls", "--add", "--allow-principal", "User:bob", "--operation", "Write", "--topic", topic)
    r = tool(cluster, "kafka-acls", "--remove", "--allow-principal", "User:bob", "--operation", "Write",
             "--topic", topic, ok=False)
    assert "Are you sure you want to remove ACLs" in r.stdout, r
    assert acls_of(bs, topic) == [("User:bob", "*", "WRITE", "ALLOW")]
    tool(cluster, "kafka-acls", "--remove", "--force", "--topic", topic)
    settled(lambda: acls_of(bs, topic), [], "no ACL left")
