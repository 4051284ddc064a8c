"""ACLs on a real 3-broker cluster (``--authorizer --allow-everyone-if-no-acl-found``):
ACLs added through one broker (forwarded to the controller, written to the volume) take
effect on every broker within a second, and so does their removal; real confluent-kafka
clients are allowed and denied by them; ``kaas acls add|list|remove`` drive it all. And a
transaction on a cluster with exactly the ACLs it needs (no allow-everyone).

Every client is ``User:ANONYMOUS`` until the SASL/TLS listeners land, so the ACLs here name
``User:ANONYMOUS`` (and the peer brokers are ANONYMOUS too: the cluster resource has no ACL,
so allow.everyone.if.no.acl.found lets their WriteTxnMarkers and forwarding through).
"""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from kio.schema.metadata.v12.request import MetadataRequest

from kaas.cli import cli
from kaas.client import WireClient
from kaas.domain.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from kaas.storage.acls import AclFile, acls_path
from kaas.testing import ClusterProcess
from tests.kafka import create_topic, read_to_end, txn_producer, uniq, values

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

ANON = "User:ANONYMOUS"


def kaas(*args: str) -> str:
    res = CliRunner().invoke(cli, [str(a) for a in args])
    assert res.exit_code == 0, (args, res.output, res.exception)
    return res.stdout


def visible(port: int, topic: str) -> bool:
    """Whether broker ``port`` lists ``topic`` to ANONYMOUS in an all-topics Metadata."""
    wc = WireClient("127.0.0.1", port, timeout=5)
    try:
        md = wc.call_entity(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                            include_topic_authorized_operations=False))
    finally:
        wc.close()
    return topic in {t.name for t in md.topics}


def wait_all(ports: list[int], topic: str, want: bool, limit: float) -> float:
    """Seconds until every broker agrees ``visible(topic) == want``; fails past ``limit``."""
    t0 = time.monotonic()
    pending = set(ports)
    while pending:
        pending = {p for p in pending if visible(p, topic) != want}
        if pending and time.monotonic() - t0 > limit:
            raise AssertionError(f"brokers {sorted(pending)} still see {topic} visible={not want}")
        time.sleep(0.02)
    return time.monotonic() - t0


def produce_error(bootstrap: str, topic: str) -> KafkaError | None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 10000})
    errors = []
    p.produce(topic, value=b"v", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(15)
    assert errors, "no delivery report"
    return errors[0]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = ClusterProcess(tmp_path_factory.mktemp("acl") / "data", brokers=3,
                       extra=["--authorizer", "--allow-everyone-if-no-acl-found"])
    with c.running():
        yield c


def test_acls_take_effect_on_every_broker(cluster):
    topic = uniq("acl")
    create_topic(cluster.bootstrap, topic)
    ports = cluster.ports
    wait_all(ports, topic, True, 10)
    # added through one broker (the last: forwarded unless it is the controller)
    one = f"127.0.0.1:{ports[-1]}"
    kaas("acls", "add", "--deny-principal", ANON, "--operation", "describe", "--topic", topic, "--bootstrap", one)
    took = wait_all(ports, topic, False, 1.0)
    rows = json.loads(kaas("acls", "list", "--topic", topic, "--bootstrap", f"127.0.0.1:{ports[0]}", "--json"))
    assert rows == [{"resource_type": "TOPIC", "name": topic, "pattern_type": "LITERAL", "principal": ANON,
                     "host": "*", "operation": "DESCRIBE", "permission": "DENY"}]
    kaas("acls", "remove", "--topic", topic, "--principal", ANON, "--bootstrap", f"127.0.0.1:{ports[1]}")
    took_back = wait_all(ports, topic, True, 1.0)
    assert json.loads(kaas("acls", "list", "--topic", topic, "--bootstrap", one, "--json")) == []
    print(f"deny visible everywhere after {took:.3f} s, removal after {took_back:.3f} s")


def test_real_clients_allowed_and_denied(cluster):
    topic, group = uniq("acl-t"), uniq("acl-g")
    bs = cluster.bootstrap
    create_topic(bs, topic)
    assert produce_error(bs, topic) is None  # no ACL names the topic: open to all
    kaas("acls", "add", "--deny-principal", ANON, "--operation", "write", "--topic", topic, "--bootstrap", bs)
    time.sleep(1.0)
    err = produce_error(bs, topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # a consumer without READ on its group (an ACL names the group, for someone else)
    kaas("acls", "add", "--allow-principal", "User:someone", "--operation", "read", "--group", group,
         "--bootstrap", bs)
    time.sleep(1.0)
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 15
        code = None
        while time.monotonic() < deadline and code is None:
            msg = c.poll(0.5)
            if msg is not None and msg.error():
                code = msg.error().code()
        assert code == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        c.close()
    # the removed DENY lets the producer through again
    kaas("acls", "remove", "--topic", topic, "--bootstrap", bs)
    time.sleep(1.0)
    assert produce_error(bs, topic) is None
    # a transactional producer without WRITE on its id cannot init it
    txn_id = uniq("acl-x")
    kaas("acls", "add", "--allow-principal", "User:someone", "--operation", "write", "--transactional-id", txn_id,
         "--bootstrap", bs)
    time.sleep(1.0)
    p = Producer({"bootstrap.servers": bs, "transactional.id": txn_id})
    with pytest.raises(KafkaException) as info:
        p.init_transactions(15)
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # nor abort someone else's transaction through `kaas txn abort`
    res = CliRunner().invoke(cli, ["txn", "abort", txn_id, "--bootstrap", bs, "--timeout", "5"])
    assert res.exit_code != 0 and "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in res.output, res.output


def test_transactions_with_exactly_the_acls_they_need(tmp_path):
    """No allow-everyone, no super user: the ACL file seeded on the (trusted) volume before
    the cluster starts grants ANONYMOUS just what a consume-transform-produce copier and the
    peer brokers (CLUSTER_ACTION for WriteTxnMarkers) need; a 3-partition transaction with
    offsets commits, and a read_committed reader sees it."""
    src, dst, group, txn_id = uniq("in"), uniq("out"), uniq("copier"), uniq("tx")
    lit, pre, allow = PatternType.LITERAL, PatternType.PREFIXED, Permission.ALLOW

    def acl(rt, name, op, pt=lit):
        return AclBinding(rt, name, pt, ANON, "*", op, allow)

    data = tmp_path / "data"
    AclFile(acls_path(data / "__cluster"), fsync=False).write((
        acl(ResourceType.CLUSTER, "kafka-cluster", Operation.CLUSTER_ACTION),  # the peers, ANONYMOUS for now
        acl(ResourceType.TOPIC, src, Operation.ALL), acl(ResourceType.TOPIC, dst, Operation.ALL),
        acl(ResourceType.GROUP, group, Operation.READ), acl(ResourceType.GROUP, "reader-", Operation.READ, pre),
        acl(ResourceType.TRANSACTIONAL_ID, txn_id, Operation.WRITE),
    ))
    with ClusterProcess(data, brokers=3, extra=["--authorizer"]).running() as c:
        bs = c.bootstrap
        create_topic(bs, src, 3)
        create_topic(bs, dst, 3)
        p = Producer({"bootstrap.servers": bs, "acks": "all"})
        for i in range(30):
            p.produce(src, value=str(i).encode(), partition=i % 3)
        assert p.flush(20) == 0
        consumer = Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "isolation.level": "read_committed"})
        tp = txn_producer(bs, txn_id)
        tp.init_transactions(20)
        try:
            consumer.subscribe([src])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < 30 and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None:
                    assert not m.error(), m.error()
                    got.append(m)
            assert len(got) == 30
            tp.begin_transaction()
            for m in got:
                tp.produce(dst, value=m.value(), partition=m.partition())
            tp.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                           consumer.consumer_group_metadata(), 20)
            tp.commit_transaction(20)
        finally:
            consumer.close()
        out = read_to_end(bs, dst, 3, "read_committed")
        assert sorted(int(v) for v in values(out)) == list(range(30))
        # and anything else is denied: a topic no ACL names
        other = uniq("other")
        with pytest.raises(KafkaException):
            create_topic(bs, other)
