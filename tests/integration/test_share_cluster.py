"""A share group across a 3-broker kaas cluster: two partitions led by two brokers, the
group's coordinator on the third, and confluent-kafka ``ShareConsumer`` s (explicit
acknowledgement) each bootstrapped through a different broker. The records are shared
among the consumers and each is accepted exactly once; then the coordinator is SIGKILLed
the group is described with its three members at a coordinator again (the one that took it
over, or the restarted one), and goes on consuming what is written next."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from kaas.client import WireClient
from kaas.testing import cluster, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

ARGS = ["--group-initial-rebalance-delay-ms", "0",
        "--group-share-heartbeat-interval-ms", "500", "--group-share-min-heartbeat-interval-ms", "500"]


def _group_on(c, avoid: set[int]) -> str:
    """A group id whose coordinator is a broker outside ``avoid``."""
    for _ in range(64):
        group = f"g-{uuid.uuid4().hex[:8]}"
        if c.coordinator_of(group_id=group).id not in avoid:
            return group
    raise AssertionError(f"no group id coordinated outside brokers {avoid}")


def _describe(c, group: str):
    """The group as ShareGroupDescribe (77) gives it at its coordinator now; None when that
    broker is down or answers an error."""
    b = c.coordinator_of(group_id=group)
    try:
        with WireClient("127.0.0.1", b.port) as w:
            (d,) = w.call(77, 1, {"group_ids": [group], "include_authorized_operations": False}).groups
    except OSError:
        return None
    return d if d.error_code == 0 else None


def _members(c, group: str) -> int | None:
    """The members the group's coordinator counts now."""
    d = _describe(c, group)
    return None if d is None else len(d.members)


def _all_assigned(c, group: str, consumers: list[ShareConsumer]) -> bool:
    """Every consumer is a member of the group at its coordinator, each with partitions
    (the consumers poll meanwhile: their assignments are reconciled as they run)."""
    for sc in consumers:
        sc.poll(0.05)
    d = _describe(c, group)
    return (d is not None and len(d.members) == len(consumers)
            and all(m.assignment.topic_partitions for m in d.members))


def _produce(bootstrap: str, topic: str, tag: str, n: int) -> set[str]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = {f"{tag}-{i}" for i in range(n)}
    for i, v in enumerate(sorted(values)):
        p.produce(topic, v.encode(), partition=i % 2)
    assert p.flush(15) == 0
    return values


def _consume(consumers: list[ShareConsumer], want: set[str], got: dict[str, list[str]],
             accepted: dict[tuple[int, int], int], timeout: float) -> None:
    """Poll every consumer in turn, accepting each record and committing, until every value
    of ``want`` was accepted (answered success)."""
    deadline = time.monotonic() + timeout
    done: set[str] = set()
    while not want <= done and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            msgs = [m for m in c.poll(0.2) if m.error() is None]
            for m in msgs:
                c.acknowledge(m)
            if not msgs:
                continue
            errors = {tp.partition: e for tp, e in c.commit_sync(15).items()}
            for m in msgs:
                if errors.get(m.partition(), "no answer") is None:
                    accepted[(m.partition(), m.offset())] = accepted.get((m.partition(), m.offset()), 0) + 1
                    done.add(m.value().decode())
                    got[f"c{i}"].append(m.value().decode())
    assert want <= done, f"{len(want - done)} records not accepted in {timeout} s"


def test_share_group_across_brokers_survives_its_coordinator():
    with cluster(3, broker_args=ARGS) as c:
        topic = c.create_topic("shared", 2)
        leaders = {c.leader_of(topic, p).id for p in range(2)}
        assert len(leaders) == 2, "the two partitions are led by two brokers"
        group = _group_on(c, leaders)
        coordinator = c.coordinator_of(group_id=group)
        admin = AdminClient(c.client_config())
        res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        assert admin.incremental_alter_configs([res])[res].result(15) is None
        consumers = [ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                                    "share.acknowledgement.mode": "explicit", "reconnect.backoff.max.ms": 500})
                     for b in c.brokers]
        got: dict[str, list[str]] = {f"c{i}": [] for i in range(len(consumers))}
        accepted: dict[tuple[int, int], int] = {}
        try:
            for sc in consumers:
                sc.subscribe([topic])
            # records written before the others joined could all go to the first consumer
            wait_for(lambda: _all_assigned(c, group, consumers), 30, "every consumer assigned partitions")
            first = _produce(c.bootstrap, topic, "before", 600)
            _consume(consumers, first, got, accepted, 30)
            assert sum(1 for vs in got.values() if vs) >= 2, f"shared among the consumers: {got.keys()}"
            c.broker(coordinator).kill()  # the supervisor starts it again; the group moves meanwhile
            wait_for(lambda: _members(c, group) == 3, 30, "the group with its 3 members at a coordinator again")
            second = _produce(c.bootstrap, topic, "after", 300)
            _consume(consumers, second, got, accepted, 45)
        finally:
            for sc in consumers:
                sc.close()
        every = [v for vs in got.values() for v in vs]
        assert sorted(every) == sorted(first | second), "each record accepted exactly once"
        assert set(accepted.values()) == {1}
