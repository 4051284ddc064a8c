"""Consumer groups and committed offsets with real clients against a real broker process.

Membership (confluent-kafka with eager and cooperative assignors, a SIGKILLed member in a
subprocess, static membership), aiokafka and kafka-python group consumers, committed
offsets across broker restarts (SIGTERM and SIGKILL), the AdminClient group APIs, and a
corrupt offsets file (refused, reported, never rewritten).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from kaas.storage.paths import encode_name
from tests.fixtures import broker_fixture
from tests.kafka import create_topic, uniq

pytestmark = pytest.mark.slow

SESSION_MS = 6000
GROUP_FLAGS = ["--group-initial-rebalance-delay-ms", "300"]
CONSUMER_TIMEOUTS = {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500,
                     "max.poll.interval.ms": 30000}


# --------------------------------------------------------------------------- helpers

gbroker = broker_fixture(scope="module", name="groups", extra=GROUP_FLAGS,
                         doc="One broker for the tests that do not restart it (distinct topics and groups).")
own_broker = broker_fixture(extra=GROUP_FLAGS,
                            doc="A broker of its own, for tests that restart it or edit its data directory.")


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str) -> dict[int, list[int]]:
    """per_partition messages to each partition; returns the offsets given per partition."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
    out: dict[int, list[int]] = {i: [] for i in range(partitions)}

    def cb(err, msg):
        assert err is None, err
        out[msg.partition()].append(msg.offset())

    for i in range(per_partition):
        for part in range(partitions):
            p.produce(topic, key=f"{tag}-{part}-{i}".encode(), value=tag.encode(), partition=part, on_delivery=cb)
    assert p.flush(20) == 0
    assert all(len(v) == per_partition for v in out.values())
    return {k: sorted(v) for k, v in out.items()}


def consumer_conf(bootstrap: str, group: str, **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "enable.partition.eof": False, **CONSUMER_TIMEOUTS, **extra}


class Journal:
    """Every consumption and successful commit of every member, in one global order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seq = itertools.count()
        self.events: list[tuple[int, str, str, int, int]] = []  # (seq, member, kind, partition, offset)

    def add(self, member: str, kind: str, partition: int, offset: int) -> None:
        with self.lock:
            self.events.append((next(self.seq), member, kind, partition, offset))

    def consumed(self, member: str | None = None) -> list[tuple[int, int]]:
        with self.lock:
            return [(p, o) for _, m, k, p, o in self.events if k == "M" and (member is None or m == member)]

    def consumers_of(self, partition: int, offset: int) -> set[str]:
        with self.lock:
            return {m for _, m, k, p, o in self.events if k == "M" and (p, o) == (partition, offset)}

    def check_no_redelivery_past_commit(self) -> int:
        """A message consumed again (by anyone) must lie at or past the last offset the member
        that consumed it before had committed on that partition by then. Returns the number
        of re-deliveries seen."""
        first: dict[tuple[int, int], tuple[int, str]] = {}
        commits: dict[tuple[str, int], list[tuple[int, int]]] = {}
        redelivered = 0
        with self.lock:
            events = list(self.events)
        for seq, member, kind, part, off in events:
            if kind == "C":
                commits.setdefault((member, part), []).append((seq, off))
                continue
            if (part, off) in first:
                redelivered += 1
                _, prev = first[(part, off)]
                done = [o for s, o in commits.get((prev, part), []) if s < seq]
                last = max(done, default=-1)
                assert off >= last, (f"p{part}@{off} consumed by {member} after {prev} had committed {last}")
            else:
                first[(part, off)] = (seq, member)
        return redelivered


class Member:
    """An in-process confluent consumer that commits synchronously after each message."""

    def __init__(self, name: str, journal: Journal, conf: dict, topic: str) -> None:
        self.name = name
        self.journal = journal
        self.c = Consumer(conf)
        self.c.subscribe([topic])
        self.closed = False

    def poll(self, timeout: float = 0.05) -> None:
        for m in self.c.consume(200, timeout):
            if m.error():
                continue
            self.journal.add(self.name, "M", m.partition(), m.offset())
            try:
                self.c.commit(message=m, asynchronous=False)
            except KafkaException:
                continue  # e.g. a rebalance in progress; the message may be redelivered
            self.journal.add(self.name, "C", m.partition(), m.offset() + 1)

    def assigned(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.c.close()


def pump(members, until, timeout: float, what: str, extra=lambda: None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.poll(0.03)
        extra()
        if until():
            return
    raise AssertionError(f"timed out waiting for {what}")


def split_ok(assignments: list[set[int]], partitions: int, each: int | None = None) -> bool:
    union = set().union(*assignments)
    disjoint = sum(len(a) for a in assignments) == len(union)
    sizes = each is None or all(len(a) == each for a in assignments)
    return disjoint and sizes and union == set(range(partitions))


SUBPROCESS_MEMBER = r"""
import sys, time
from confluent_kafka import Consumer, KafkaException
bootstrap, group, topic, strategy, session_ms, skip = sys.argv[1:7]
def out(*a):
    print(*a, flush=True)
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "enable.partition.eof": False,
              "session.timeout.ms": int(session_ms), "heartbeat.interval.ms": 500,
              "max.poll.interval.ms": 30000, "partition.assignment.strategy": strategy})
c.subscribe([topic])
last_assignment = None
consumed = 0
last_msg = 0.0
while True:
    for m in c.consume(200, 0.1):
        if m.error():
            out("ERR", m.error().str().replace(" ", "_"))
            continue
        out("M", m.partition(), m.offset())
        consumed += 1
        last_msg = time.monotonic()
        if m.key().decode().split("-")[-1] == skip:
            continue  # processed, but killed before its commit
        try:
            c.commit(message=m, asynchronous=False)
        except KafkaException as exc:
            out("ERR", str(exc).replace(" ", "_"))
            continue
        out("C", m.partition(), m.offset() + 1)
    a = sorted(tp.partition for tp in c.assignment())
    if a != last_assignment:
        last_assignment = a
        out("ASSIGNMENT", ",".join(map(str, a)) or "-")
    if consumed and time.monotonic() - last_msg > 1.0:
        break
out("IDLE")
time.sleep(600)
"""


class SubprocessMember:
    """A confluent consumer in its own process (so it can be SIGKILLed): it consumes and
    commits synchronously, prints every message and commit, goes IDLE once no message came
    for a second, then sleeps (its heartbeat thread keeps it in the group). Messages whose
    key ends in ``-<skip>`` are consumed but not committed (as if it died just before)."""

    def __init__(self, name: str, journal: Journal, bootstrap: str, group: str, topic: str, strategy: str,
                 skip: str = "none") -> None:
        self.name = name
        self.journal = journal
        self.assignment: set[int] = set()
        self.idle = threading.Event()
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SUBPROCESS_MEMBER, bootstrap, group, topic, strategy, str(SESSION_MS), skip],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
            cwd=str(Path(__file__).resolve().parents[2]))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            self.lines.append(line)
            parts = line.split()
            if not parts:
                continue
            if parts[0] in ("M", "C"):
                self.journal.add(self.name, parts[0], int(parts[1]), int(parts[2]))
            elif parts[0] == "ASSIGNMENT":
                self.assignment = set() if parts[1] == "-" else {int(x) for x in parts[1].split(",")}
            elif parts[0] == "IDLE":
                self.idle.set()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.reader.join(10)  # every line it printed is journaled before anyone else goes on


def all_offsets(per_part: dict[int, list[int]]) -> set[tuple[int, int]]:
    return {(p, o) for p, offs in per_part.items() for o in offs}


# --------------------------------------------------------------------------- 1. membership

@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_three_members_share_leave_and_killed_member(gbroker, strategy):
    bs = gbroker.bootstrap
    topic, group = uniq(f"grp6-{strategy}"), uniq(f"g6-{strategy}")
    create_topic(bs, topic, 6)
    journal = Journal()
    conf = consumer_conf(bs, group, **{"partition.assignment.strategy": strategy})
    a, b, c = (Member(n, journal, conf, topic) for n in ("A", "B", "C"))
    sub = None
    try:
        # -- three members: 2 partitions each, disjoint, covering all 6
        pump([a, b, c], lambda: split_ok([a.assigned(), b.assigned(), c.assigned()], 6, 2), 30, "a 2/2/2 split")
        split1 = {m.name: m.assigned() for m in (a, b, c)}
        batch1 = produce(bs, topic, 6, 10, "b1")
        want1 = all_offsets(batch1)
        pump([a, b, c], lambda: set(journal.consumed()) >= want1, 30, "batch 1")
        consumed = journal.consumed()
        assert sorted(consumed) == sorted(want1), "every message exactly once"
        for m in (a, b, c):
            assert {p for p, _ in journal.consumed(m.name)} == split1[m.name]

        # -- C leaves: A and B take over its partitions and consume new messages on them
        c.close()
        pump([a, b], lambda: split_ok([a.assigned(), b.assigned()], 6, 3), 30, "A+B owning all 6")
        batch2 = produce(bs, topic, 6, 10, "b2")
        want2 = all_offsets(batch2)
        pump([a, b], lambda: set(journal.consumed()) >= want2, 30, "batch 2")
        assert sorted(journal.consumed()) == sorted(want1 | want2), "no duplicates after a clean leave"
        for part in split1["C"]:
            for off in batch2[part]:
                assert journal.consumers_of(part, off) <= {"A", "B"} and journal.consumers_of(part, off)

        # -- a third member in its own process joins, consumes, commits, then is SIGKILLed
        sub = SubprocessMember("S", journal, bs, group, topic, strategy, skip="9")
        pump([a, b], lambda: split_ok([a.assigned(), b.assigned(), sub.assignment], 6, 2), 45,
             "a 2/2/2 split with the subprocess member")
        s_parts = set(sub.assignment)
        batch3 = produce(bs, topic, 6, 10, "b3")
        want3 = all_offsets(batch3)
        pump([a, b], lambda: sub.idle.is_set() and set(journal.consumed()) >= want3, 30,
             "batch 3 consumed and the subprocess idle")
        assert {p for p, _ in journal.consumed("S")} == s_parts
        assert sub.assignment == s_parts

        sub.kill()
        t0 = time.monotonic()
        pump([a, b], lambda: split_ok([a.assigned(), b.assigned()], 6, 3), SESSION_MS / 1000 + 20,
             "A+B taking over the killed member's partitions")
        took = time.monotonic() - t0
        print(f"takeover after SIGKILL: {took:.2f}s")
        # expiry after the session timeout, plus a heartbeat and a rejoin round
        assert took < SESSION_MS / 1000 + 4, f"takeover took {took:.1f}s"
        assert a.assigned() | b.assigned() >= s_parts

        batch4 = produce(bs, topic, 6, 10, "b4")
        want4 = all_offsets(batch4)
        pump([a, b], lambda: set(journal.consumed()) >= want4, 30, "batch 4")
        for part in s_parts:
            for off in batch4[part]:
                assert journal.consumers_of(part, off) <= {"A", "B"} and journal.consumers_of(part, off)

        everything = want1 | want2 | want3 | want4
        assert set(journal.consumed()) == everything
        assert journal.check_no_redelivery_past_commit() == len(s_parts)
        # S committed all but its last message per partition: exactly those come again,
        # from its successors, and nothing else is consumed twice
        uncommitted = {(p, batch3[p][-1]) for p in s_parts}
        assert sorted(journal.consumed()) == sorted(list(everything) + list(uncommitted))
        for p, o in uncommitted:
            assert journal.consumers_of(p, o) - {"S"} and "S" in journal.consumers_of(p, o)
    finally:
        if sub is not None:
            sub.kill()
        for m in (a, b, c):
            m.close()


# --------------------------------------------------------------------------- 2. other clients

def test_aiokafka_group_commit_and_resume(gbroker):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import OffsetAndMetadata as AOM
    from aiokafka.structs import TopicPartition as ATP

    bs = gbroker.bootstrap
    topic, group = uniq("aio-grp"), uniq("aio-g")
    create_topic(bs, topic, 2)
    produce(bs, topic, 2, 10, "aio")

    def new_consumer():
        return AIOKafkaConsumer(topic, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                                auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                                heartbeat_interval_ms=500)

    async def consume(cons, n):
        got = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            for msgs in (await cons.getmany(timeout_ms=300)).values():
                got.extend(msgs)
        return got

    async def main():
        first = new_consumer()
        await first.start()
        try:
            got = await consume(first, 20)
            assert sorted((m.partition, m.offset) for m in got) == [(p, o) for p in range(2) for o in range(10)]
            assert first.assignment() == {ATP(topic, 0), ATP(topic, 1)}
            await first.commit({ATP(topic, 0): AOM(4, "four"), ATP(topic, 1): 7})
            assert await first.committed(ATP(topic, 0)) == 4
            assert await first.committed(ATP(topic, 1)) == 7
        finally:
            await first.stop()
        second = new_consumer()
        await second.start()
        try:
            got = await consume(second, 9)
            for msgs in (await second.getmany(timeout_ms=700)).values():  # and nothing more
                got.extend(msgs)
        finally:
            await second.stop()
        return got

    got = asyncio.run(main())
    assert sorted((m.partition, m.offset) for m in got) == \
        [(0, o) for o in range(4, 10)] + [(1, o) for o in range(7, 10)]

    # the committed offsets are the group's, whoever reads them
    admin = AdminClient({"bootstrap.servers": bs})
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [
        TopicPartition(topic, 0), TopicPartition(topic, 1)])])[group].result(10)
    assert {(tp.partition, tp.offset) for tp in res.topic_partitions} == {(0, 4), (1, 7)}
    # (confluent-kafka-python reads metadata as a C string, so check it with kafka-python)
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KTP
    k = KafkaConsumer(bootstrap_servers=bs, group_id=group)
    try:
        assert k.committed(KTP(topic, 0), metadata=True).metadata == "four"
        assert k.committed(KTP(topic, 1), metadata=True).offset == 7
    finally:
        k.close()


def test_kafka_python_group_commit_and_resume(gbroker):
    from kafka import KafkaConsumer
    from kafka.structs import OffsetAndMetadata as KOM
    from kafka.structs import TopicPartition as KTP

    bs = gbroker.bootstrap
    topic, group = uniq("kp-grp"), uniq("kp-g")
    create_topic(bs, topic, 2)
    produce(bs, topic, 2, 10, "kp")

    def new_consumer():
        return KafkaConsumer(topic, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                             heartbeat_interval_ms=500)

    def consume(cons, n, timeout=30):
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            for recs in cons.poll(timeout_ms=300).values():
                got.extend(recs)
        return got

    first = new_consumer()
    try:
        got = consume(first, 20)
        assert sorted((r.partition, r.offset) for r in got) == [(p, o) for p in range(2) for o in range(10)]
        first.commit({KTP(topic, 0): KOM(3, "three", -1), KTP(topic, 1): KOM(8, "", -1)})
        assert first.committed(KTP(topic, 0)) == 3
        assert first.committed(KTP(topic, 1)) == 8
    finally:
        first.close()

    second = new_consumer()
    try:
        got = consume(second, 9)
        got += consume(second, 100, timeout=1.0)
        assert sorted((r.partition, r.offset) for r in got) == [(0, o) for o in range(3, 10)] + [(1, 8), (1, 9)]
        # consume-and-commit in the group, then a third consumer resumes past it
        second.commit()
    finally:
        second.close()

    third = new_consumer()
    try:
        assert third.committed(KTP(topic, 0)) == 10
        assert third.committed(KTP(topic, 1)) == 10
        assert consume(third, 100, timeout=2.0) == []
    finally:
        third.close()


# --------------------------------------------------------------------------- 3. restarts, admin

@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_committed_offsets_survive_broker_restart(own_broker, how):
    bs = own_broker.bootstrap
    topic, group = "restart-topic", "restart-group"
    create_topic(bs, topic, 3)
    produce(bs, topic, 3, 10, "r")
    committed = {0: 3, 1: 5, 2: 10}

    c = Consumer(consumer_conf(bs, group))
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 30 and time.monotonic() < deadline:
        got += [m for m in c.consume(100, 0.2) if not m.error()]
    assert len(got) == 30
    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in committed.items()], asynchronous=False)
    back = c.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    assert {tp.partition: tp.offset for tp in back} == committed
    c.close()

    if how == "sigterm":
        assert own_broker.stop() == 0
    else:
        own_broker.kill()
    own_broker.start()

    admin = AdminClient({"bootstrap.servers": bs})
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [
        TopicPartition(topic, p) for p in range(3)])])[group].result(10)
    assert {tp.partition: tp.offset for tp in res.topic_partitions} == committed
    listed = admin.list_consumer_groups().result(10)
    assert group in {g.group_id for g in listed.valid}

    c2 = Consumer(consumer_conf(bs, group))
    c2.subscribe([topic])
    got2 = []
    deadline = time.monotonic() + 30
    while len(got2) < 12 and time.monotonic() < deadline:
        got2 += [m for m in c2.consume(100, 0.2) if not m.error()]
    # and nothing more turns up
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        got2 += [m for m in c2.consume(100, 0.2) if not m.error()]
    c2.close()
    assert sorted((m.partition(), m.offset()) for m in got2) == \
        [(0, o) for o in range(3, 10)] + [(1, o) for o in range(5, 10)]


def test_admin_list_describe_delete_and_alter_offsets(gbroker):
    bs = gbroker.bootstrap
    topic, group = uniq("adm-topic"), uniq("adm-group")
    create_topic(bs, topic, 4)
    produce(bs, topic, 4, 5, "adm")
    admin = AdminClient({"bootstrap.servers": bs})
    journal = Journal()
    conf = consumer_conf(bs, group, **{"client.id": "adm-client"})
    m1, m2 = Member("m1", journal, conf, topic), Member("m2", journal, conf, topic)
    try:
        pump([m1, m2], lambda: split_ok([m1.assigned(), m2.assigned()], 4, 2) and len(journal.consumed()) == 20,
             30, "two members, all consumed")

        listed = admin.list_consumer_groups().result(10)
        mine = [g for g in listed.valid if g.group_id == group]
        assert len(mine) == 1 and mine[0].state == ConsumerGroupState.STABLE
        assert not mine[0].is_simple_consumer_group

        desc = admin.describe_consumer_groups([group])[group].result(10)
        assert desc.state == ConsumerGroupState.STABLE
        assert desc.partition_assignor == "range"
        assert not desc.is_simple_consumer_group
        assert len(desc.members) == 2
        by_member = {md.member_id: {(tp.topic, tp.partition) for tp in md.assignment.topic_partitions}
                     for md in desc.members}
        assert sorted(by_member.values(), key=sorted) == sorted(
            [{(topic, p) for p in m.assigned()} for m in (m1, m2)], key=sorted)
        assert {md.member_id for md in desc.members} == {m1.c.memberid(), m2.c.memberid()}
        assert all(md.client_id == "adm-client" and md.host for md in desc.members)

        # a live group cannot be deleted, nor its offsets altered by the admin client
        with pytest.raises(KafkaException) as ei:
            admin.delete_consumer_groups([group])[group].result(10)
        assert ei.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
        refused = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [
            TopicPartition(topic, 0, 1)])])[group].result(10)
        assert [tp.error.code() for tp in refused.topic_partitions] == [KafkaError.UNKNOWN_MEMBER_ID]

        res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [
            TopicPartition(topic, p) for p in range(4)])])[group].result(10)
        assert {tp.partition: tp.offset for tp in res.topic_partitions} == {p: 5 for p in range(4)}
    finally:
        m1.close()
        m2.close()

    # Empty now: alter the offsets, list them, and a new member starts from them
    desc = admin.describe_consumer_groups([group])[group].result(10)
    assert desc.state == ConsumerGroupState.EMPTY and desc.members == []
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [
        TopicPartition(topic, 0, 1), TopicPartition(topic, 2, 4)])])[group].result(10)
    assert all(tp.error is None for tp in altered.topic_partitions)
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [
        TopicPartition(topic, p) for p in range(4)])])[group].result(10)
    assert {tp.partition: tp.offset for tp in res.topic_partitions} == {0: 1, 1: 5, 2: 4, 3: 5}
    listed = admin.list_consumer_groups().result(10)
    mine = [g for g in listed.valid if g.group_id == group]
    assert len(mine) == 1 and mine[0].state == ConsumerGroupState.EMPTY

    j2 = Journal()
    m3 = Member("m3", j2, conf, topic)
    try:
        pump([m3], lambda: len(j2.consumed()) >= 5, 30, "resume from altered offsets")
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            m3.poll(0.1)
    finally:
        m3.close()
    assert sorted(j2.consumed()) == [(0, o) for o in range(1, 5)] + [(2, 4)]

    # Empty again: delete it; its offsets are gone and it is no longer listed
    admin.delete_consumer_groups([group])[group].result(10)
    listed = admin.list_consumer_groups().result(10)
    assert group not in {g.group_id for g in listed.valid}
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [
        TopicPartition(topic, p) for p in range(4)])])[group].result(10)
    assert all(tp.offset < 0 for tp in res.topic_partitions)
    listed = admin.list_consumer_groups().result(10)
    assert group not in {g.group_id for g in listed.valid}, "reading offsets must not resurrect the group"
    with pytest.raises(KafkaException) as ei:
        admin.delete_consumer_groups([group])[group].result(10)
    assert ei.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
    assert not (gbroker.data / "__cluster" / "consumer_offsets" / f"{encode_name(group)}.json").exists()


# --------------------------------------------------------------------------- 4. static membership

def test_static_member_restart_keeps_partitions(gbroker):
    bs = gbroker.bootstrap
    topic, group = uniq("static-topic"), uniq("static-group")
    create_topic(bs, topic, 4)
    journal = Journal()
    events: list[tuple[str, str, frozenset]] = []

    def conf(instance):
        return consumer_conf(bs, group, **{"group.instance.id": instance})

    def watched(name, instance):
        m = Member.__new__(Member)
        m.name, m.journal, m.closed = name, journal, False
        m.c = Consumer(conf(instance))
        m.c.subscribe([topic],
                      on_assign=lambda c, ps: events.append((name, "assign", frozenset(p.partition for p in ps))),
                      on_revoke=lambda c, ps: events.append((name, "revoke", frozenset(p.partition for p in ps))))
        return m

    s1, s2 = watched("s1", "inst-1"), watched("s2", "inst-2")
    s1b = None
    try:
        pump([s1, s2], lambda: split_ok([s1.assigned(), s2.assigned()], 4, 2), 30, "two static members")
        before = {"s1": s1.assigned(), "s2": s2.assigned()}
        produce(bs, topic, 4, 5, "st1")
        pump([s1, s2], lambda: len(journal.consumed()) >= 20, 30, "first batch")
        n_events = len(events)
        old_member_id = s1.c.memberid()

        # restart s1: a static member leaves no LeaveGroup behind and rejoins as itself
        s1.close()
        s1b = watched("s1b", "inst-1")
        pump([s1b, s2], lambda: s1b.assigned() == before["s1"], 15, "the restarted static member")
        assert s1b.c.memberid() != old_member_id
        # hold on past the old incarnation's session timeout: nothing moves
        end = time.monotonic() + SESSION_MS / 1000 + 1.5
        while time.monotonic() < end:
            for m in (s1b, s2):
                m.poll(0.1)
        assert s1b.assigned() == before["s1"] and s2.assigned() == before["s2"]
        later = [e for e in events[n_events:] if e[0] == "s2"]
        assert later == [], f"the other member was rebalanced: {later}"
        assert [e for e in events[n_events:] if e[0] == "s1b"] == [("s1b", "assign", frozenset(before["s1"]))]

        # the restarted member resumes from its committed offsets
        batch = produce(bs, topic, 4, 3, "st2")
        pump([s1b, s2], lambda: set(journal.consumed()) >= all_offsets(batch), 30, "second batch")
        assert {(p, o) for p, o in journal.consumed("s1b")} == {
            (p, o) for p in before["s1"] for o in batch[p]}
        assert sorted(journal.consumed()) == sorted(set(journal.consumed()))

        admin = AdminClient({"bootstrap.servers": bs})  # keep a reference while the future runs
        desc = admin.describe_consumer_groups([group])[group].result(10)
        assert desc.state == ConsumerGroupState.STABLE
        assert sorted(md.group_instance_id for md in desc.members) == ["inst-1", "inst-2"]
        assert s1b.c.memberid() in {md.member_id for md in desc.members}
    finally:
        for m in (s1, s2, s1b):
            if m is not None:
                m.close()


# --------------------------------------------------------------------------- 5. corrupt offsets

@pytest.mark.parametrize("kind", ["garbage", "wrong-shape"])
def test_corrupt_offsets_file_is_refused_not_reset(own_broker, kind):
    bs = own_broker.bootstrap
    topic = "corrupt-topic"
    good, bad = "good-group", "bad/group.é"
    create_topic(bs, topic, 2)
    produce(bs, topic, 2, 5, "x")
    for g, off in ((good, 2), (bad, 3)):
        c = Consumer(consumer_conf(bs, g))
        c.commit(offsets=[TopicPartition(topic, p, off) for p in range(2)], asynchronous=False)
        c.close()
    assert own_broker.stop() == 0

    offsets_dir = own_broker.data / "__cluster" / "consumer_offsets"
    bad_file = offsets_dir / f"{encode_name(bad)}.json"
    assert bad_file.exists() and (offsets_dir / f"{encode_name(good)}.json").exists()
    if kind == "garbage":
        garbage = b'{"format": 1, "group_id": "bad/gr\x00\xff garbage'
    else:  # valid JSON of the wrong shape
        garbage = json.dumps({"format": 1, "group_id": bad, "offsets": [[topic, 0, 3]]}).encode()
    bad_file.write_bytes(garbage)
    stat_before = os.stat(bad_file)
    own_broker.start()
    admin = AdminClient({"bootstrap.servers": bs})

    # OffsetFetch fails for that group, with an error rather than "nothing committed"
    with pytest.raises(KafkaException):
        res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(bad, [
            TopicPartition(topic, p) for p in range(2)])])[bad].result(10)
        errs = [tp.error for tp in res.topic_partitions if tp.error is not None]
        if errs:
            raise KafkaException(errs[0])
    c = Consumer(consumer_conf(bs, bad))
    try:
        with pytest.raises(KafkaException):
            back = c.committed([TopicPartition(topic, p) for p in range(2)], timeout=10)
            errs = [tp.error for tp in back if tp.error is not None]
            if errs:
                raise KafkaException(errs[0])
        # a commit to it is refused too (and must not overwrite the evidence)
        with pytest.raises(KafkaException):
            c.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
        # a member of that group does not silently start from scratch
        c.subscribe([topic])
        end = time.monotonic() + 3
        consumed = []
        while time.monotonic() < end:
            consumed += [m for m in c.consume(100, 0.2) if not m.error()]
        assert consumed == []
        assert c.assignment() == []
    finally:
        c.close()

    # the failure is logged as an error naming the file
    log = own_broker.log_text()
    lines = [ln for ln in log.splitlines() if "corrupt" in ln.lower() and "error" in ln.lower()]
    assert any(str(bad_file) in ln for ln in lines), log[-3000:]

    # other groups keep working
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(good, [
        TopicPartition(topic, p) for p in range(2)])])[good].result(10)
    assert {tp.partition: tp.offset for tp in res.topic_partitions} == {0: 2, 1: 2}
    j = Journal()
    m = Member("good", j, consumer_conf(bs, good), topic)
    try:
        pump([m], lambda: len(j.consumed()) >= 6, 30, "the good group consuming")
    finally:
        m.close()
    assert sorted(j.consumed()) == [(p, o) for p in range(2) for o in range(2, 5)]

    # the corrupt file is left exactly as it was
    assert bad_file.read_bytes() == garbage
    stat_after = os.stat(bad_file)
    assert (stat_after.st_ino, stat_after.st_mtime_ns) == (stat_before.st_ino, stat_before.st_mtime_ns)
    assert own_broker.alive()


def test_a_restarted_coordinator_keeps_the_group_without_a_rebalance(own_broker):
    """The stable membership is on file: after a SIGKILL and restart of its coordinator
    the group carries on (same member, same generation, no revoke or lost assignment), as
    a consumer of Apache Kafka sees across a coordinator failover."""
    bs = own_broker.bootstrap
    topic, group = uniq("keep"), uniq("keep-group")
    create_topic(bs, topic, 2)
    produce(bs, topic, 2, 3, "a")
    events: list[str] = []
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
    c.subscribe([topic], on_assign=lambda _c, ps: events.append(f"assign {len(ps)}"),
                on_revoke=lambda _c, ps: events.append(f"revoke {len(ps)}"),
                on_lost=lambda _c, ps: events.append(f"lost {len(ps)}"))
    admin = AdminClient({"bootstrap.servers": bs})
    try:
        got = 0
        deadline = time.monotonic() + 30
        while got < 6 and time.monotonic() < deadline:
            got += sum(1 for m in c.consume(10, 0.2) if not m.error())
        assert got == 6 and events == ["assign 2"], events
        before = admin.describe_consumer_groups([group])[group].result(10)
        assert before.state == ConsumerGroupState.STABLE

        own_broker.kill()
        own_broker.start()
        produce(bs, topic, 2, 3, "b")
        got = 0
        deadline = time.monotonic() + 30
        while got < 6 and time.monotonic() < deadline:
            got += sum(1 for m in c.consume(10, 0.2) if not m.error())
        end = time.monotonic() + 3  # heartbeats keep going to the restarted coordinator
        while time.monotonic() < end:
            c.poll(0.2)
        assert got == 6
        assert events == ["assign 2"], events  # no rebalance
        admin = AdminClient({"bootstrap.servers": bs})  # the old one backs off its reconnects
        after = admin.describe_consumer_groups([group])[group].result(10)
        assert after.state == ConsumerGroupState.STABLE
        assert [m.member_id for m in after.members] == [m.member_id for m in before.members]
        assert "group_restored" in own_broker.log_path.read_text()
    finally:
        c.close()
    gone = admin.describe_consumer_groups([group])[group].result(10)
    assert gone.state == ConsumerGroupState.EMPTY  # the member left; Empty is on file too
