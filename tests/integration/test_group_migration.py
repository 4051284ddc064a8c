"""KIP-848's online migration with real confluent-kafka consumers on a real broker: a
rolling upgrade of a classic group (cooperative-sticky) to the consumer protocol, one
consumer at a time while records keep arriving, and the rolling downgrade back, with no
record lost or delivered twice (each consumer commits every record before it polls the
next); and ``group.consumer.migration.policy=disabled`` refusing the conversion as Apache.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from kio.schema.errors import ErrorCode as E

from tests.fixtures import broker_fixture
from tests.integration.test_consumer_groups import FLAGS, commit, coordinator_of, describe, heartbeat
from tests.integration.test_tools import human as human_tool
from tests.integration.test_tools import run as run_tool
from tests.kafka import create_topic, uniq

pytestmark = pytest.mark.slow

PARTITIONS = 6
mbroker = broker_fixture(scope="module", name="migration", extra=FLAGS,
                         doc="One broker (bidirectional migration, Kafka 4's default).")
disabled = broker_fixture(scope="module", name="no-migration",
                          extra=[*FLAGS, "--group-consumer-migration-policy", "disabled"],
                          doc="One broker that refuses conversions.")


def classic(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "partition.assignment.strategy": "cooperative-sticky",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})


def modern(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})


class Run:
    """The consumers of one group, polled in turn; every record is committed before the
    consumer that got it polls again, and counted."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.consumers: list[Consumer] = []
        self.seen: dict[bytes, int] = {}
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        self.sent: set[bytes] = set()

    def add(self, c: Consumer) -> None:
        c.subscribe([self.topic])
        self.consumers.append(c)

    def remove(self, c: Consumer) -> None:
        """Close ``c`` (it leaves the group), still committing what it consumed."""
        self.consumers.remove(c)
        c.close()

    def produce(self, n: int) -> None:
        for _ in range(n):
            v = f"r{len(self.sent)}".encode()
            self.producer.produce(self.topic, value=v, partition=len(self.sent) % PARTITIONS)
            self.sent.add(v)
        assert self.producer.flush(20) == 0

    def poll_for(self, seconds: float, produce_every: float = 0.1) -> None:
        """Poll every consumer for ``seconds`` while a record is produced every so often."""
        end = time.monotonic() + seconds
        next_produce = 0.0
        while time.monotonic() < end:
            if time.monotonic() >= next_produce:
                self.produce(1)
                next_produce = time.monotonic() + produce_every
            self._poll_round()

    def drain(self, timeout: float = 40.0) -> None:
        deadline = time.monotonic() + timeout
        while set(self.seen) != self.sent:
            assert time.monotonic() < deadline, f"missing {len(self.sent - set(self.seen))} records"
            self._poll_round()

    def _poll_round(self) -> None:
        for c in list(self.consumers):
            m = c.poll(0.05)
            if m is None or m.error() is not None:
                continue
            self.seen[m.value()] = self.seen.get(m.value(), 0) + 1
            commit(c, m)

    def duplicates(self) -> dict[bytes, int]:
        return {v: n for v, n in self.seen.items() if n > 1}


def group_type(bootstrap: str, group: str) -> str:
    """The group's type in ListGroups v5 at its coordinator."""
    from tests.integration.test_consumer_groups import wire

    _, addr = coordinator_of(bootstrap, group)
    with wire(addr) as w:
        r = w.call(16, 5, {"states_filter": [], "types_filter": []})
    return {g.group_id: g.group_type for g in r.groups}[group]


def member_types(bootstrap: str, group: str) -> list[int]:
    return sorted(int(m.member_type) for m in describe(bootstrap, group).members)


def test_rolling_upgrade_and_downgrade_lose_and_duplicate_nothing(mbroker):
    bs = mbroker.bootstrap
    topic, group = uniq("mig"), uniq("g-mig")
    create_topic(bs, topic, PARTITIONS)
    run = Run(bs, topic, group)
    a, b = classic(bs, group), classic(bs, group)
    run.add(a)
    run.add(b)
    run.produce(60)
    run.poll_for(4)
    assert group_type(bs, group) == "classic"

    # upgrade, one consumer at a time: a consumer-protocol member joins the classic group
    c = modern(bs, group)
    run.add(c)
    run.poll_for(4)
    assert group_type(bs, group) == "consumer"
    assert member_types(bs, group) == [0, 0, 1]  # two classic members, one of the new protocol
    # the operator's view: type, epochs, each member's protocol, target vs current assignment
    listed = {g["group_id"]: g for g in run_tool("groups", "list", "--type", "consumer", "--bootstrap", bs)}
    assert listed[group]["type"] == "consumer"
    d = run_tool("groups", "describe", group, "--bootstrap", bs)
    assert d["group_protocol"] == "consumer" and d["group_epoch"] >= d["assignment_epoch"] >= 1
    assert sorted(m["member_type"] for m in d["members"]) == ["classic", "classic", "consumer"]
    for m in d["members"]:
        assert set(map(tuple, m["pending_revocation"])) == set(map(tuple, m["assignment"])) - set(
            map(tuple, m["target_assignment"]))
    assert "Group epoch" in human_tool("groups", "describe", group, "--bootstrap", bs)
    row = {g["group_id"]: g for g in run_tool("inspect", "cluster", "--data", str(mbroker.data))["groups"]}[group]
    assert (row["type"], row["members"], row["classic_members"]) == ("consumer", 3, 2)  # the state file
    run.remove(a)
    d = modern(bs, group)
    run.add(d)
    run.poll_for(4)
    run.remove(b)
    run.poll_for(4)
    assert member_types(bs, group) == [1, 1]
    g = describe(bs, group)
    assert g.group_state in ("Stable", "Reconciling", "Assigning")
    owned = [tp for m in g.members for t in m.assignment.topic_partitions for tp in t.partitions]
    assert len(owned) == len(set(owned))  # no partition held twice

    # and back: classic members join the consumer group, the last new-protocol one leaves
    e = classic(bs, group)
    run.add(e)
    run.poll_for(4)
    assert member_types(bs, group) == [0, 1, 1]
    run.remove(c)
    run.poll_for(3)
    f = classic(bs, group)
    run.add(f)
    run.remove(d)  # only classic members remain: the group is classic again
    run.poll_for(6)
    assert group_type(bs, group) == "classic"
    run.drain()
    assert run.duplicates() == {}
    assert set(run.seen) == run.sent
    for x in list(run.consumers):
        run.remove(x)


def test_migration_disabled_refuses_a_new_protocol_member(disabled):
    bs = disabled.bootstrap
    topic, group = uniq("mig-off"), uniq("g-off")
    create_topic(bs, topic, 2)
    old = classic(bs, group)
    old.subscribe([topic])
    deadline = time.monotonic() + 30
    while not old.assignment():
        assert time.monotonic() < deadline
        old.poll(0.1)
    _, addr = coordinator_of(bs, group)
    r = heartbeat(addr, group, member_id="m-new", subscribed_topic_names=[topic], topic_partitions=[])
    assert r.error_code == E.group_id_not_found
    old.poll(0.5)
    assert old.assignment()  # the classic group is unharmed
    old.close()
