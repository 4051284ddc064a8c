"""Apache Kafka 4.4.0's group and transaction tools against a 3-broker kaas cluster:
kafka-consumer-groups (list, describe, --reset-offsets, --delete-offsets, --delete) for a
classic and a consumer-protocol (KIP-848) group, kafka-share-groups (a reset to the
earliest offsets of a share group nobody has joined yet, then a share consumer starting
there; describe, --delete-offsets, --delete) and kafka-transactions (list, describe,
describe-producers, find-hanging, abort), run from the Maven-resolved kafka-tools in one
warm JVM (tests/apache_tools.py); the members are confluent-kafka clients, and each test
checks the cluster's resulting state with them.

They need java, a JDK and mvn: they skip saying so when one is missing, and fail instead
when KAAS_REQUIRE_ALL=1.
"""

from __future__ import annotations

import re

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from kaas.client import WireClient
from kaas.testing import wait_for
from tests.apache_tools import ToolResult, tools
from tests.fixtures import cluster_fixture
from tests.integration.test_share_groups import FLAGS
from tests.kafka import read_to_end, txn_producer, uniq, watermarks

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

cluster = cluster_fixture(3, scope="module", name="apache-group-tools",
                          extra=["--group-initial-rebalance-delay-ms", "0", *FLAGS])


def tool(cluster, name: str, *args: str, ok: bool = True, broker: int = 0) -> ToolResult:
    """Run Apache's ``name`` against ``broker``; assert its exit status is 0 (or not)."""
    r = tools().run(name, *args, bootstrap=f"127.0.0.1:{cluster.ports[broker]}")
    assert (r.returncode == 0) == ok, (name, args, r)
    return r


def table(out: str, first: str = "GROUP") -> list[dict[str, str]]:
    """The rows of the left-aligned table whose header starts with ``first`` (cells cut at
    the header's column starts)."""
    lines = [line for line in out.splitlines() if line.strip()]
    at = next(i for i, line in enumerate(lines) if line.split()[0] == first)
    cols = [(m.start(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", lines[at])]
    rows = []
    for line in lines[at + 1:]:
        if len(line) < cols[-1][0]:
            break
        bounds = [start for start, _ in cols[1:]] + [len(line)]
        rows.append({name: line[start:end].strip() for (start, name), end in zip(cols, bounds, strict=True)})
    return rows


def txn_rows(out: str) -> list[dict[str, str]]:
    """kafka-transactions' tab-separated tables."""
    head, *rows = [[c.strip() for c in line.split("\t")] for line in out.splitlines() if line.strip()]
    return [dict(zip(head, row, strict=False)) for row in rows]


def produce(bs: str, topic: str, partitions: int, per: int) -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for part in range(partitions):
        for i in range(per):
            p.produce(topic, f"{part}-{i}".encode(), partition=part)
    assert p.flush(20) == 0


def committed(bs: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_kafka_consumer_groups(cluster, protocol):
    bs, topic, group = cluster.bootstrap, uniq(f"cg-{protocol}"), uniq(f"g-{protocol}")
    tool(cluster, "kafka-topics", "--create", "--topic", topic, "--partitions", "3")
    produce(bs, topic, 3, 10)
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "group.protocol": protocol,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got: list = []
    try:
        wait_for(lambda: got.extend(m for m in [c.poll(0.3)] if m is not None and not m.error()) or len(got) == 30,
                 timeout=40, what="30 records consumed")
        c.commit(asynchronous=False)

        kind = {"classic": "Classic", "consumer": "Consumer"}[protocol]
        listed = table(tool(cluster, "kafka-consumer-groups", "--list", "--type").stdout)
        assert {"GROUP": group, "TYPE": kind} in listed
        rows = table(tool(cluster, "kafka-consumer-groups", "--describe", "--group", group, broker=1).stdout)
        assert sorted((r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"], r["CONSUMER-ID"])
                      for r in rows) == [(str(p), "10", "10", "0", c.memberid()) for p in range(3)]
        [state] = table(tool(cluster, "kafka-consumer-groups", "--describe", "--group", group, "--state").stdout)
        assert (state["STATE"], state["#MEMBERS"]) == ("Stable", "1"), state
        assert state["ASSIGNMENT-STRATEGY"] == {"classic": "range", "consumer": "uniform"}[protocol]
        [member] = table(tool(cluster, "kafka-consumer-groups", "--describe", "--group", group, "--members",
                              "--verbose", broker=2).stdout)
        assert (member["CONSUMER-ID"], member["#PARTITIONS"]) == (c.memberid(), "3")
        assert member["CURRENT-ASSIGNMENT"] == f"{topic}:0,1,2"
        if protocol == "consumer":  # the KIP-848 member's epochs and target assignment
            assert int(member["CURRENT-EPOCH"]) >= 1 and member["TARGET-ASSIGNMENT"] == f"{topic}:0,1,2"

        r = tool(cluster, "kafka-consumer-groups", "--reset-offsets", "--group", group, "--topic", topic,
                 "--to-earliest", "--execute")
        assert f"Assignments can only be reset if the group '{group}' is inactive" in r.output
        assert committed(bs, group, topic, 3) == {0: 10, 1: 10, 2: 10}
    finally:
        c.close()

    wait_for(lambda: table(tool(cluster, "kafka-consumer-groups", "--describe", "--group", group,
                                "--state").stdout)[0]["STATE"] == "Empty", timeout=15, what="the group empty")
    r = tool(cluster, "kafka-consumer-groups", "--reset-offsets", "--group", group, "--topic", topic,
             "--to-earliest", "--execute")
    assert sorted((row["PARTITION"], row["NEW-OFFSET"]) for row in table(r.stdout)) == [("0", "0"), ("1", "0"),
                                                                                        ("2", "0")]
    assert committed(bs, group, topic, 3) == {0: 0, 1: 0, 2: 0}
    tool(cluster, "kafka-consumer-groups", "--reset-offsets", "--group", group, "--topic", f"{topic}:1",
         "--shift-by", "4", "--execute", broker=1)
    r = tool(cluster, "kafka-consumer-groups", "--reset-offsets", "--group", group, "--topic", f"{topic}:2",
             "--to-offset", "7", "--dry-run")
    assert [(row["PARTITION"], row["NEW-OFFSET"]) for row in table(r.stdout)] == [("2", "7")]
    assert committed(bs, group, topic, 3) == {0: 0, 1: 4, 2: 0}, "--dry-run changes nothing"

    r = tool(cluster, "kafka-consumer-groups", "--delete-offsets", "--group", group, "--topic", f"{topic}:0")
    assert f"Request succeeded for deleting offsets from group {group}." in r.stdout
    assert [(row["PARTITION"], row["STATUS"]) for row in table(r.stdout, "TOPIC")] == [("0", "Successful")]
    assert committed(bs, group, topic, 3) == {0: OFFSET_INVALID, 1: 4, 2: 0}

    r = tool(cluster, "kafka-consumer-groups", "--delete", "--group", group, broker=2)
    assert r.stdout.strip() == f"Deletion of requested consumer groups ('{group}') was successful."
    assert group not in tool(cluster, "kafka-consumer-groups", "--list").stdout.split()
    assert committed(bs, group, topic, 3) == {p: OFFSET_INVALID for p in range(3)}
    # DescribeGroups v6 answers GROUP_ID_NOT_FOUND; Apache 4.4's tool then prints this, status 0
    r = tool(cluster, "kafka-consumer-groups", "--describe", "--group", group)
    assert r.stdout.strip().splitlines()[0] == ("Error: Executing consumer group command failed due to "
                                                "org.apache.kafka.common.errors.GroupIdNotFoundException: "
                                                f"Group {group} not found."), r


def share_offsets(cluster, group: str) -> dict[int, tuple[str, str]]:
    """kafka-share-groups --describe: {partition: (start offset, lag)}."""
    out = tool(cluster, "kafka-share-groups", "--describe", "--group", group, "--offsets").stdout
    if out.strip() == f"Share group '{group}' has no offset information.":
        return {}
    rows = table(out)
    return {int(r["PARTITION"]): (r["START-OFFSET"], r["LAG"]) for r in rows}


def test_kafka_share_groups_reset_before_the_first_member(cluster):
    """A share group nobody has joined: --reset-offsets --to-earliest creates it at offset 0
    (share.auto.offset.reset stays latest), and the first share consumer starts there."""
    bs, topic, group = cluster.bootstrap, uniq("sg"), uniq("g-share")
    tool(cluster, "kafka-topics", "--create", "--topic", topic, "--partitions", "2")
    produce(bs, topic, 2, 10)
    assert group not in tool(cluster, "kafka-share-groups", "--list").stdout.split()

    r = tool(cluster, "kafka-share-groups", "--reset-offsets", "--group", group, "--topic", topic,
             "--to-earliest", "--execute", broker=1)
    assert sorted((row["PARTITION"], row["NEW-OFFSET"]) for row in table(r.stdout)) == [("0", "0"), ("1", "0")]
    assert share_offsets(cluster, group) == {0: ("0", "10"), 1: ("0", "10")}
    assert group in tool(cluster, "kafka-share-groups", "--list", broker=2).stdout.split()
    [state] = table(tool(cluster, "kafka-share-groups", "--describe", "--group", group, "--state").stdout)
    assert (state["STATE"], state["#MEMBERS"]) == ("Empty", "0"), state

    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group})
    c.subscribe([topic])
    got: list = []
    try:
        wait_for(lambda: got.extend(m for m in c.poll(0.5) if not m.error()) or len(got) >= 20, timeout=40,
                 what="20 records delivered")
        assert sorted(m.value() for m in got) == sorted(f"{p}-{i}".encode() for p in range(2) for i in range(10))
        c.poll(0.5)  # acknowledges (implicitly) what the last poll delivered
        [member] = table(tool(cluster, "kafka-share-groups", "--describe", "--group", group, "--members").stdout)
        assert member["ASSIGNMENT"] == f"{topic}:0,1", member
        [state] = table(tool(cluster, "kafka-share-groups", "--describe", "--group", group, "--state").stdout)
        assert (state["STATE"], state["#MEMBERS"]) == ("Stable", "1"), state
        wait_for(lambda: share_offsets(cluster, group) == {0: ("10", "0"), 1: ("10", "0")}, timeout=15,
                 what="every record acknowledged")
        r = tool(cluster, "kafka-share-groups", "--reset-offsets", "--group", group, "--topic", topic,
                 "--to-earliest", "--execute", ok=False)
        assert r.stderr.strip() == f"Share group '{group}' is not empty."
        assert share_offsets(cluster, group)[0] == ("10", "0")
    finally:
        c.close()

    wait_for(lambda: table(tool(cluster, "kafka-share-groups", "--describe", "--group", group,
                                "--state").stdout)[0]["STATE"] == "Empty", timeout=15, what="the group empty")
    tool(cluster, "kafka-share-groups", "--reset-offsets", "--group", group, "--topic", f"{topic}:1",
         "--to-offset", "3", "--execute")
    assert share_offsets(cluster, group) == {0: ("10", "0"), 1: ("3", "7")}
    r = tool(cluster, "kafka-share-groups", "--delete-offsets", "--group", group, "--topic", topic, broker=1)
    assert [(row["TOPIC"], row["STATUS"]) for row in table(r.stdout, "TOPIC")] == [(topic, "Successful")]
    assert share_offsets(cluster, group) == {}
    r = tool(cluster, "kafka-share-groups", "--delete", "--group", group)
    assert r.stdout.strip() == f"Deletion of requested share groups ('{group}') was successful."
    assert group not in tool(cluster, "kafka-share-groups", "--list").stdout.split()


def test_kafka_transactions(cluster):
    bs, topic, txn = cluster.bootstrap, uniq("tx"), uniq("txn-tool")
    tool(cluster, "kafka-topics", "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "3")
    p = txn_producer(bs, txn)
    p.init_transactions(10)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, f"open-{i}".encode(), partition=0)
    assert p.flush(10) == 0

    [listed] = txn_rows(tool(cluster, "kafka-transactions", "list", "--transactional-id-pattern", f"{txn}.*").stdout)
    assert (listed["TransactionalId"], listed["TransactionState"]) == (txn, "Ongoing"), listed
    [d] = txn_rows(tool(cluster, "kafka-transactions", "describe", "--transactional-id", txn, broker=1).stdout)
    assert (d["ProducerId"], d["TransactionState"], d["TopicPartitions"]) == (listed["ProducerId"], "Ongoing",
                                                                             f"{topic}-0"), d
    assert d["CoordinatorId"] == listed["Coordinator"] and int(d["TransactionDurationMs"]) >= 0
    [prod] = txn_rows(tool(cluster, "kafka-transactions", "describe-producers", "--topic", topic,
                           "--partition", "0", broker=2).stdout)
    assert (prod["ProducerId"], prod["LastSequence"], prod["CurrentTransactionStartOffset"]) == (
        listed["ProducerId"], "2", "0"), prod
    # open, but its coordinator knows it: not hanging
    r = tool(cluster, "kafka-transactions", "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert txn_rows(r.stdout) == []
    for broker in range(3):
        r = tool(cluster, "kafka-transactions", "find-hanging", "--broker-id", str(broker))
        assert txn_rows(r.stdout) == []

    # an operator's abort writes the marker: the records are aborted, the LSO moves on
    r = tool(cluster, "kafka-transactions", "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert r.output == ""
    [prod] = txn_rows(tool(cluster, "kafka-transactions", "describe-producers", "--topic", topic,
                           "--partition", "0").stdout)
    assert prod["CurrentTransactionStartOffset"] == "None", prod
    assert watermarks(bs, topic, 0)[1] == 4
    assert read_to_end(bs, topic, 1, "read_committed") == []
    p.abort_transaction(10)
    q = txn_producer(bs, uniq("txn-after"))
    q.init_transactions(10)
    q.begin_transaction()
    q.produce(topic, b"after", partition=0)
    q.commit_transaction(10)
    assert [m.value() for m in read_to_end(bs, topic, 1, "read_committed")] == [b"after"]
    [d] = txn_rows(tool(cluster, "kafka-transactions", "describe", "--transactional-id", txn).stdout)
    assert d["TransactionState"] == "CompleteAbort", d


def test_describe_producers_on_every_replica(cluster):
    """DescribeProducers (what find-hanging --broker-id sends) answers on every replica of a
    partition, as Apache's followers do (a non-leader asks the leader), and refuses with
    NOT_LEADER_OR_FOLLOWER on a broker that is no replica. No JVM needed."""
    bs, rf3, rf1 = cluster.bootstrap, uniq("dp3"), uniq("dp1")
    admin = AdminClient({"bootstrap.servers": bs})
    for topic, rf in ((rf3, 3), (rf1, 1)):
        admin.create_topics([NewTopic(topic, 1, rf)])[topic].result(15)
    p = txn_producer(bs, uniq("txn-dp"))
    p.init_transactions(10)
    p.begin_transaction()
    for topic in (rf3, rf1):
        p.produce(topic, b"a", partition=0)
        p.produce(topic, b"b", partition=0)
    assert p.flush(10) == 0

    def describe(port: int, topic: str):
        with WireClient("127.0.0.1", port) as c:
            r = c.call(61, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
        [part] = r.topics[0].partitions
        return part.error_code, [(a.last_sequence, a.current_txn_start_offset) for a in part.active_producers]

    assert [describe(port, rf3) for port in cluster.ports] == [(ErrorCode.none, [(1, 0)])] * 3
    leader = admin.list_topics(rf1, timeout=10).topics[rf1].partitions[0].leader
    for broker, port in enumerate(cluster.ports):
        want = (ErrorCode.none, [(1, 0)]) if broker == leader else (ErrorCode.not_leader_or_follower, [])
        assert describe(port, rf1) == want, broker
    p.abort_transaction(10)
