"""KIP-932 share groups with confluent-kafka's ``ShareConsumer`` against one real kaas
broker: two consumers share one partition's records (each delivered once and accepted),
an explicit release is delivered again, a rejected record never is and a record released
at every delivery is archived at the delivery-count limit, the records of a consumer SIGKILLed mid-batch are
delivered again once their lock ends, and read_committed skips aborted transactions; the
group is listed with type ``share``, described, and refused deletion while it has members.

One broker serves the module; every test has its own topic and group.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kio.schema.errors import ErrorCode as E

from kaas import failpoints
from kaas.client import WireClient
from kaas.testing import wait_for
from tests.fixtures import broker_fixture
from tests.kafka import create_topic, txn_producer, uniq

pytestmark = pytest.mark.slow

FLAGS = ["--group-share-heartbeat-interval-ms", "500", "--group-share-min-heartbeat-interval-ms", "500",
         "--group-share-min-record-lock-duration-ms", "1000"]
sbroker = broker_fixture(scope="module", name="share", extra=FLAGS,
                         doc="One broker for the tests of this module (distinct topics and groups).")


def wire(bootstrap: str) -> WireClient:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    return WireClient(host, int(port))


def group_configs(bootstrap: str, group: str, **configs: str) -> None:
    """Set GROUP configs (``share_auto_offset_reset="earliest"`` -> share.auto.offset.reset)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    assert admin.incremental_alter_configs([res])[res].result(15) is None


def share_consumer(bootstrap: str, group: str, topic: str, **extra: str) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **extra})
    c.subscribe([topic])
    return c


def produce(bootstrap: str, topic: str, n: int, partitions: int = 0) -> list[bytes]:
    """``n`` records, keyless (the sticky partitioner's choice), or spread over ``partitions``."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [f"v{i}".encode() for i in range(n)]
    for i, v in enumerate(values):
        if partitions:
            p.produce(topic, v, partition=i % partitions)
        else:
            p.produce(topic, v)
    assert p.flush(15) == 0
    return values


def drain(consumers: list[ShareConsumer], want: int, timeout: float = 30.0) -> dict[int, list[bytes]]:
    """Poll every consumer in turn (implicit acceptance) until ``want`` records came."""
    got: dict[int, list[bytes]] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout
    while sum(map(len, got.values())) < want and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            for m in c.poll(0.2):
                assert m.error() is None, m.error()
                got[i].append(m.value())
    return got


def test_two_consumers_share_a_partition(sbroker):
    bs, topic, group = sbroker.bootstrap, uniq("sh-two"), uniq("g-two")
    create_topic(bs, topic)
    group_configs(bs, group, share_auto_offset_reset="earliest")
    a, b = share_consumer(bs, group, topic), share_consumer(bs, group, topic)
    try:
        sent = produce(bs, topic, 200)
        got = drain([a, b], len(sent))
        every = got[0] + got[1]
        assert sorted(every) == sorted(sent), "each record delivered exactly once"
        for c in (a, b):
            c.commit_sync(10)
        with wire(bs) as w:  # confluent-kafka 2.16 has no SHARE group type: over the wire
            listed = w.call(16, 5, {"states_filter": [], "types_filter": ["share"]}).groups
            assert [(g.group_id, g.group_type, g.group_state) for g in listed if g.group_id == group] == \
                [(group, "share", "Stable")]
            (d,) = w.call(77, 1, {"group_ids": [group], "include_authorized_operations": False}).groups
            assert (d.error_code, d.group_state, d.assignor_name, len(d.members)) == (E.none, "Stable", "simple", 2)
            assert all([tp.topic_name for tp in m.assignment.topic_partitions] == [topic] for m in d.members)
    finally:
        a.close()
        b.close()


def test_release_is_redelivered_and_delete_refused_while_members(sbroker):
    bs, topic, group = sbroker.bootstrap, uniq("sh-rel"), uniq("g-rel")
    create_topic(bs, topic)
    group_configs(bs, group, share_auto_offset_reset="earliest")
    c = share_consumer(bs, group, topic, **{"share.acknowledgement.mode": "explicit"})
    admin = AdminClient({"bootstrap.servers": bs})
    try:
        produce(bs, topic, 3)
        first: list = []
        wait_for(lambda: first.extend(c.poll(0.5)) or len(first) > 0, 20, "first delivery")
        released = first[0]
        c.acknowledge(released, AcknowledgeType.RELEASE)
        for m in first[1:]:
            c.acknowledge(m)
        c.commit_sync(10)
        again: list = []

        def redelivered() -> bool:
            for m in c.poll(0.5):
                c.acknowledge(m)
                again.append(m)
            return any(m.offset() == released.offset() for m in again)
        wait_for(redelivered, 20, "released record delivered again")
        c.commit_sync(10)
        fut = admin.delete_consumer_groups([group])[group]
        with pytest.raises(Exception) as err:
            fut.result(15)
        assert err.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        c.close()
    wait_for(lambda: admin.delete_consumer_groups([group])[group].exception(15) is None, 20, "deleted once empty")


def test_reject_is_final_and_a_poison_record_is_archived_at_the_limit(sbroker):
    """Explicit acknowledgement: a rejected record is never delivered again; a record
    released at every delivery comes back with delivery counts 1..5 (the broker's
    group.share.delivery.count.limit) and then never again: it is archived, and the share
    partition's start offset moves past it with the rest."""
    bs, topic, group = sbroker.bootstrap, uniq("sh-poison"), uniq("g-poison")
    create_topic(bs, topic)
    group_configs(bs, group, share_auto_offset_reset="earliest")
    rejected, poison = b"v0", b"v1"
    sent = produce(bs, topic, 4)
    c = share_consumer(bs, group, topic, **{"share.acknowledgement.mode": "explicit"})
    deliveries: dict[bytes, list[int]] = {v: [] for v in sent}

    def take(seconds: float, until_all_came: bool) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for m in c.poll(0.3):
                assert m.error() is None, m.error()
                deliveries[m.value()].append(m.delivery_count())
                kind = {rejected: AcknowledgeType.REJECT, poison: AcknowledgeType.RELEASE}.get(
                    m.value(), AcknowledgeType.ACCEPT)
                c.acknowledge(m, kind)
            c.commit_sync(10)
            if until_all_came and len(deliveries[poison]) >= 5 and all(deliveries[v] for v in sent):
                return

    try:
        take(30, until_all_came=True)
        assert deliveries[poison] == [1, 2, 3, 4, 5], deliveries
        take(3, until_all_came=False)  # a while longer: nothing comes back
        assert deliveries == {rejected: [1], poison: [1, 2, 3, 4, 5], b"v2": [1], b"v3": [1]}
    finally:
        c.close()
    with wire(bs) as w:
        body = w.call(90, 0, {"groups": [{"group_id": group,
                                          "topics": [{"topic_name": topic, "partitions": [0]}]}]})
    (part,) = [p for g in body.groups for t in g.topics for p in t.partitions]
    assert (part.error_code, part.start_offset) == (E.none, 4), part


KILLED = textwrap.dedent("""
    import sys, time
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([sys.argv[3]])
    while True:
        got = c.poll(0.5)
        if len(got):
            print(",".join(str(m.offset()) for m in got), flush=True)
            time.sleep(3600)  # holds its records, never acknowledges
""")


def test_killed_consumer_records_come_back_after_the_lock(sbroker):
    bs, topic, group = sbroker.bootstrap, uniq("sh-kill"), uniq("g-kill")
    create_topic(bs, topic)
    group_configs(bs, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="1000")
    sent = produce(bs, topic, 20)
    proc = subprocess.Popen([sys.executable, "-c", KILLED, bs, group, topic], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        held = [int(o) for o in proc.stdout.readline().strip().split(",")]
        assert held
    finally:
        proc.kill()
        proc.wait()
    c = share_consumer(bs, group, topic)
    try:
        got = drain([c], len(sent))
        assert sorted(got[0]) == sorted(sent), "the killed consumer's records delivered again"
    finally:
        c.close()


def test_read_committed_skips_aborted(sbroker):
    bs, topic, group = sbroker.bootstrap, uniq("sh-txn"), uniq("g-txn")
    create_topic(bs, topic)
    group_configs(bs, group, share_auto_offset_reset="earliest", share_isolation_level="read_committed")
    p = txn_producer(bs, uniq("tx"))
    p.init_transactions(15)
    for commit, tag in ((True, b"c1"), (False, b"a1"), (True, b"c2"), (False, b"a2")):
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, tag + b"-%d" % i)
        (p.commit_transaction if commit else p.abort_transaction)(15)
    c = share_consumer(bs, group, topic)
    try:
        got = drain([c], 10)[0]
        extra = drain([c], 1, timeout=2.0)[0]
        assert sorted(got + extra) == sorted([t + b"-%d" % i for t in (b"c1", b"c2") for i in range(5)])
    finally:
        c.close()


def describe_share(bs: str, group: str):
    with wire(bs) as w:
        (d,) = w.call(77, 1, {"group_ids": [group], "include_authorized_operations": False}).groups
    assert d.error_code == E.none, d
    return d


def test_a_lost_heartbeat_answer_keeps_the_members_epoch_and_assignment(sbroker):
    """The answer that moves a member to a new epoch is lost (the failpoint closes the
    connection instead): the consumer comes back with the epoch it had, which is accepted
    as Apache accepts it (the previous epoch); it stays the same member at the group's
    epoch, the group epoch moves for the join alone, and both members go on consuming."""
    bs, topic, group = sbroker.bootstrap, uniq("sh-lost"), uniq("g-lost")
    create_topic(bs, topic, 2)
    group_configs(bs, group, share_auto_offset_reset="earliest")
    run_dir, log = sbroker.data / "run", sbroker.log_path
    a = share_consumer(bs, group, topic)
    b = None
    try:
        first = produce(bs, topic, 20)
        assert sorted(drain([a], len(first))[0]) == sorted(first)
        (ma,) = describe_share(bs, group).members
        epoch = ma.member_epoch
        armed = log.read_text().count("failpoints_armed")
        failpoints.arm(run_dir, sbroker.broker_id, {"share_heartbeat.before_response": {
            "action": "drop", "count": 1, "match": {"member_epoch": epoch, "moved": True}}})
        wait_for(lambda: log.read_text().count("failpoints_armed") > armed, 10, "failpoint armed")
        b = share_consumer(bs, group, topic)  # the group epoch moves: a's next answer is the one lost
        wait_for(lambda: "name=share_heartbeat.before_response" in log.read_text(), 30, "a's answer dropped")
        # a's next heartbeat carries the epoch it had (the one before the answer lost)
        wait_for(lambda: f"member={ma.member_id} member_epoch={epoch}" in log.read_text(), 30, "a's retry")

        def settled() -> bool:
            d = describe_share(bs, group)
            return len(d.members) == 2 and all(m.member_epoch == d.group_epoch for m in d.members)
        wait_for(settled, 30, "both members at the group's epoch")
        d = describe_share(bs, group)
        assert ma.member_id in {m.member_id for m in d.members}
        assert d.group_epoch == epoch + 1, "the join alone moved the group epoch: no rejoin, no churn"
        assert sorted(len(m.assignment.topic_partitions[0].partitions) for m in d.members) == [1, 1]
        assert ma.member_id not in "".join(line for line in log.read_text().splitlines()
                                           if "share_heartbeat_refused" in line), "never fenced"
        more = produce(bs, topic, 40, partitions=2)  # both members' partitions get records
        got = drain([a, b], len(more))
        assert sorted(got[0] + got[1]) == sorted(more) and got[0], "a goes on consuming"
    finally:
        failpoints.disarm(run_dir, sbroker.broker_id)
        a.close()
        if b is not None:
            b.close()


def test_offsets_reset_before_the_first_consumer_are_where_it_starts(sbroker):
    """``kafka-share-groups --reset-offsets --to-earliest`` on a group nobody joined yet
    (Apache 4.2+, KAFKA-19662): AlterShareGroupOffsets makes the share group, and the
    first consumer starts there, though the group's share.auto.offset.reset (latest, the
    default) would have it start at the end."""
    bs, topic, group = sbroker.bootstrap, uniq("sh-pre"), uniq("g-pre")
    create_topic(bs, topic)
    sent = produce(bs, topic, 10)
    with wire(bs) as w:  # what the tool sends once it has the log start (0) from ListOffsets
        r = w.call(91, 0, {"group_id": group, "topics": [
            {"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 0}]}]})
    assert r.error_code == E.none and [p.error_code for t in r.responses for p in t.partitions] == [E.none]
    d = describe_share(bs, group)
    assert (d.group_state, d.group_epoch, d.members) == ("Empty", 0, ())
    c = share_consumer(bs, group, topic)
    try:
        assert sorted(drain([c], len(sent))[0]) == sorted(sent)
    finally:
        c.close()
